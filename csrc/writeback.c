/* writeback.c -- the emulated disk's write-back: dirty pages, the flusher, fsync, throttling.
 *
 * Linux does not write a write(2)'s bytes to the disk when it returns: the pages become dirty
 * in the page cache and the flusher writes them back later. Until 2026-11-27 the model wrote
 * through (every write paid positioning and transfer at once), which no I/O daemon of the
 * thesis' or the caching paper's era did. Now, all in model time (no timer thread, no clock):
 *   - A write makes its pages dirty and returns; it waits only for the write of a dirty page
 *     the LRU evicts to make room for it, or when the dirty pages pass dirty_ratio of the
 *     cache (balance_dirty_pages): then until the flusher has brought them back under it.
 *   - The flusher starts when more than dirty_background_ratio of the cache is dirty (and goes
 *     on until it is not), or when the oldest dirty page is dirty_expire old (then it writes
 *     the pages that old). It writes in passes: the eligible dirty pages sorted by disk
 *     address, taken from the head's position onwards and then from the lowest (C-SCAN), one
 *     run of contiguous dirty pages (at most PV_WB_RUN bytes, a block-layer request) per
 *     step, so a sequential dirty run goes out as one transfer at no positioning cost.
 *   - Its steps take the one head like any access. Without a timer it runs lazily: every
 *     call into the model first issues the steps the flusher would have started by then
 *     (pv_disk__flush_due), each at its own start time, so a read arriving while a step is
 *     on the disk queues behind it, and one arriving before the next step starts goes first.
 *   - fsync waits until the file's dirty pages are written (queued behind what the head
 *     already does) and for write-backs of its pages still on the disk; dropping the cache
 *     writes every dirty page back first (sync; echo 3 > drop_caches).
 * Not modelled: the 5 s wake-up of Linux's periodic flusher (expired pages go out when they
 * expire), per-inode ordering of the flusher's lists, the read of a partially written page
 * that is not cached (a write never reads), and throttling below dirty_ratio.
 */
#include <limits.h>
#include <stdlib.h>

#include "native.h"

#define PV_WB_RUN ((uint64_t)(512 << 10) / PV_DISK_PAGE)    /* max_sectors_kb = 512 */

static int by_addr(const void *a, const void *b)
{
    int64_t x = ((const struct pv_disk_wb *)a)->addr, y = ((const struct pv_disk_wb *)b)->addr;
    return (x > y) - (x < y);
}

/* A new pass: the dirty pages of `ino` (PV_DISK_ALL: any) dirtied at or before `cutoff`,
 * sorted by disk address, starting at the first at or after the head. */
static void sweep_build(struct pv_disk *d, uint64_t ino, int64_t cutoff)
{
    size_t n = 0, k = 0;

    /* The dirty list is in the order pages became dirty: the expired ones are a prefix. */
    for (uint32_t i = d->dirty_head; i != PV_DISK_NIL; i = d->pages[i].dnext) {
        struct pv_disk_page *e = &d->pages[i];
        if (e->dirty_at > cutoff)
            break;
        if (ino != PV_DISK_ALL && e->ino != ino)
            continue;
        d->sweep[n].addr = pv_disk_addr(d, e->ino, (int64_t)e->pg * PV_DISK_PAGE);
        d->sweep[n].ino = e->ino;
        d->sweep[n].pg = e->pg;
        n++;
    }
    qsort(d->sweep, n, sizeof(*d->sweep), by_addr);
    while (k < n && d->sweep[k].addr < d->head)
        k++;
    d->sweep_len = n;
    d->sweep_at = n > 0 ? k % n : 0;
    d->sweep_left = n;
}

/* The page the sweep is at, if still dirty (else PV_DISK_NIL); the sweep moves past it. */
static uint32_t sweep_next(struct pv_disk *d, uint64_t *ino, uint64_t *pg)
{
    struct pv_disk_wb *w = &d->sweep[d->sweep_at];
    uint32_t i = pv_disk__find(d, w->ino, w->pg);

    *ino = w->ino;
    *pg = w->pg;
    d->sweep_at = (d->sweep_at + 1) % d->sweep_len;
    d->sweep_left--;
    return i != PV_DISK_NIL && d->pages[i].dirty ? i : PV_DISK_NIL;
}

/* One step of the pass from `at` on: the next run of contiguous dirty pages, one transfer.
 * Returns the pages written, 0 when the pass is over. */
static uint64_t sweep_step(struct pv_disk *d, int64_t at)
{
    uint64_t ino, pg, ino2, pg2, n;
    uint32_t i;

    while (d->sweep_left > 0) {
        if ((i = sweep_next(d, &ino, &pg)) == PV_DISK_NIL)
            continue;             /* written, evicted or forgotten since the pass began */
        pv_disk__clean(d, i);
        for (n = 1; n < PV_WB_RUN && d->sweep_left > 0; n++) {
            struct pv_disk_wb *w = &d->sweep[d->sweep_at];
            if (w->ino != ino || w->pg != pg + n)
                break;
            if ((i = sweep_next(d, &ino2, &pg2)) == PV_DISK_NIL)
                break;
            pv_disk__clean(d, i);
        }
        (void)pv_disk__charge(d, ino, (int64_t)pg * PV_DISK_PAGE, (int64_t)n * PV_DISK_PAGE,
                              true, at);
        return n;
    }
    return 0;
}

/* When the flusher's next step would start (INT64_MAX: it has nothing to do); *bg: a
 * background pass (else one of expired pages). */
static int64_t flusher_due(struct pv_disk *d, bool *bg)
{
    int64_t due;

    if (d->ndirty == 0)
        return INT64_MAX;
    *bg = d->ndirty > d->bg_pages;
    due = *bg ? d->bg_since : d->pages[d->dirty_head].dirty_at + d->p.dirty_expire_ns;
    return due > d->free_at ? due : d->free_at;
}

/* The flusher's steps: those due by `now`, or (throttle) as many as bring the dirty pages
 * back under the limit, whenever they start. */
static void flusher_run(struct pv_disk *d, int64_t now, bool throttle)
{
    bool bg = false, fresh;
    int64_t start;

    for (;;) {
        start = flusher_due(d, &bg);
        if (start == INT64_MAX || (throttle ? d->ndirty <= d->limit_pages : start > now))
            return;
        fresh = d->sweep_left == 0 || d->sweep_bg != bg;
        if (fresh) {
            sweep_build(d, PV_DISK_ALL, bg ? INT64_MAX : start - d->p.dirty_expire_ns);
            d->sweep_bg = bg;
        }
        if (sweep_step(d, start) == 0) {
            d->sweep_left = 0;
            if (fresh)
                return;           /* nothing eligible (cannot happen; no endless loop) */
        }
    }
}

void pv_disk__flush_due(struct pv_disk *d, int64_t now)
{
    flusher_run(d, now, false);
}

int64_t pv_disk_write(struct pv_disk *d, uint64_t ino, int64_t off, int64_t len, int64_t now,
                      int64_t *done)
{
    int64_t end = off + len, wait = now;
    uint64_t first = (uint64_t)off / PV_DISK_PAGE, pg;
    size_t k = 0;

    pthread_mutex_lock(&d->lock);
    pv_disk__flush_due(d, now);
    if (len > 0 && d->npages == 0) {
        /* No page cache at all: the write goes to the disk and the writer waits. */
        wait = pv_disk__charge(d, ino, off, len, true, now);
    } else if (len > 0) {
        for (pg = first; (int64_t)(pg * PV_DISK_PAGE) < end; pg++)
            k += pv_disk__find(d, ino, pg) == PV_DISK_NIL;
        if ((wait = pv_disk__room(d, k, now)) < now)
            wait = now;
        for (pg = first; (int64_t)(pg * PV_DISK_PAGE) < end; pg++)
            pv_disk__dirty(d, pv_disk__insert(d, ino, pg, -1, now, &wait), now);
        if (d->ndirty > d->limit_pages) {
            /* balance_dirty_pages: the writer waits for the flusher. */
            flusher_run(d, now, true);
            if (d->wb_end > wait)
                wait = d->wb_end;
        }
    }
    pthread_mutex_unlock(&d->lock);
    if (done != NULL)
        *done = wait;
    return wait - now;
}

/* When the write-backs of `ino`'s pages still on the disk at `now` end (now if none). */
static int64_t in_flight(const struct pv_disk *d, uint64_t ino, int64_t now)
{
    int64_t until = now;
    size_t oldest = d->recent_at;

    if (ino == PV_DISK_ALL || d->recent[oldest].end > now)
        return d->wb_end > now ? d->wb_end : now;   /* more than remembered: the last one */
    for (size_t r = 0; r < PV_DISK_RECENT; r++)
        if (d->recent[r].ino == ino && d->recent[r].end > until)
            until = d->recent[r].end;
    return until;
}

static int64_t sync_locked(struct pv_disk *d, uint64_t ino, int64_t now)
{
    int64_t done;
    uint64_t n = 0, k;

    pv_disk__flush_due(d, now);
    done = in_flight(d, ino, now);
    /* The file's own pass, from the head on; the flusher's pass is begun again after it. */
    sweep_build(d, ino, INT64_MAX);
    while ((k = sweep_step(d, now)) > 0)
        n += k;
    d->sweep_left = 0;
    return n > 0 && d->wb_end > done ? d->wb_end : done;
}

int64_t pv_disk_sync(struct pv_disk *d, uint64_t ino, int64_t now)
{
    int64_t done;

    pthread_mutex_lock(&d->lock);
    done = sync_locked(d, ino, now);
    pthread_mutex_unlock(&d->lock);
    return done;
}

int64_t pv_disk_drop(struct pv_disk *d, int64_t now)
{
    int64_t done;

    pthread_mutex_lock(&d->lock);
    done = sync_locked(d, PV_DISK_ALL, now);
    pv_disk__empty(d);
    pthread_mutex_unlock(&d->lock);
    return done;
}

void pv_disk_forget(struct pv_disk *d, uint64_t ino)
{
    pthread_mutex_lock(&d->lock);
    for (uint32_t i = d->dirty_head, next; i != PV_DISK_NIL; i = next) {
        next = d->pages[i].dnext;
        if (d->pages[i].ino == ino)
            pv_disk__clean(d, i);
    }
    pthread_mutex_unlock(&d->lock);
}
