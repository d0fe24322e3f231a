/* disk.c -- an emulated disk: a deterministic timing model with a page cache in front.
 *
 * The thesis' results come from a disk-bound regime (a 4.2 MB/s IDE disk, 56 MB of page
 * cache) that a machine whose files all sit in RAM never shows. Storage kind "emulated"
 * (SPEC §2) keeps the real files but charges every access that misses this model's cache the
 * time the modelled disk would take, inside the engine's data path (stream.c): a read that
 * misses makes its job wait for the disk, and the scheduling policies see that wait exactly
 * as they would a real disk's.
 *
 * The model, all of it deterministic (no clocks, no randomness):
 *   - Disk addresses: a file's bytes are contiguous on disk from a base address derived from
 *     its inode number (a multiplicative hash, so different files sit apart).
 *   - Positioning: 0 when the access starts where the head stopped. A short forward gap is
 *     read through (gap / rate) when that is cheaper than seeking, as a disk with track
 *     read-ahead does. Otherwise seek + half a revolution, where the seek grows with the
 *     square root of the distance (Ruemmler & Wilkes' short-seek curve):
 *         seek(d) = seek_min + (seek_max - seek_min) * sqrt(min(d, span) / span)
 *     For two uniformly random positions E[sqrt(d/span)] = 8/15, so the average seek is
 *     seek_min + 8/15 (seek_max - seek_min).
 *   - Transfer: bytes / rate (read or write rate).
 *   - Cache: an LRU of pages (PV_DISK_PAGE bytes) keyed by (inode, page), at most cache_bytes;
 *     a miss reads at least `readahead` bytes (Linux reads ahead likewise) into it, but only
 *     pages not cached yet: the read stops at the first cached page. A page a miss brings in
 *     is resident at once (no second read of it is started) but ready only when that miss is
 *     done: a reader that finds it on its way waits for it, as Linux's readers wait on a
 *     locked page.
 *   - Writes are written back later, as Linux's page cache does (writeback.c): a write's
 *     pages become dirty and the writer goes on; a background flusher writes them to the
 *     disk in address order. A dirty page the LRU evicts is written first.
 *   - Queueing: one head. An access starts when the previous one finished (free_at), so
 *     concurrent jobs wait for each other as they would for one spindle; the flusher's
 *     write-backs take the same head.
 *
 * All state is under d->lock: the engine's thread charges accesses while Python threads ask
 * what is resident (the reactive selector's cached fraction) or drop the cache.
 *
 * This unit holds the model's state and its primitives (the page cache, the dirty list, the
 * head); writeback.c writes dirty pages back with them, and diskaccess.c charges an access,
 * which needs both (native.h, "Units").
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"

static uint64_t page_hash(uint64_t ino, uint64_t pg)
{
    uint64_t h = ino * 0x9E3779B97F4A7C15ULL ^ (pg + 0x632BE59BD9B4E019ULL + (ino << 6));
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 32);
}

int pv_disk_init(struct pv_disk *d, const struct pv_disk_params *p, struct pv_err *err)
{
    size_t nb = 1;

    memset(d, 0, sizeof(*d));
    if (!(p->read_bps > 0) || !(p->write_bps > 0) || p->seek_min_ns < 0
        || p->seek_max_ns < p->seek_min_ns || p->rot_ns < 0 || p->span <= 0
        || p->cache_bytes < 0 || p->readahead < 0 || !(p->dirty_bg_ratio >= 0)
        || !(p->dirty_ratio >= 0) || p->dirty_bg_ratio > 1 || p->dirty_ratio > 1
        || p->dirty_expire_ns < 0) {
        pv_misuse(err, EINVAL, "disk parameters out of range");
        return -1;
    }
    d->p = *p;
    d->npages = (size_t)(p->cache_bytes / PV_DISK_PAGE);
    if (d->npages >= PV_DISK_NIL) {
        pv_misuse(err, EINVAL, "disk cache too large");
        return -1;
    }
    while (nb < 2 * d->npages)
        nb <<= 1;
    d->nbuckets = nb;
    d->pages = calloc(d->npages ? d->npages : 1, sizeof(*d->pages));
    d->buckets = malloc(nb * sizeof(*d->buckets));
    d->sweep = malloc((d->npages ? d->npages : 1) * sizeof(*d->sweep));
    if (d->pages == NULL || d->buckets == NULL || d->sweep == NULL) {
        free(d->pages);
        free(d->buckets);
        free(d->sweep);
        pv_fail(err, ENOMEM, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < nb; i++)
        d->buckets[i] = PV_DISK_NIL;
    d->lru_head = d->lru_tail = d->free_head = PV_DISK_NIL;
    d->dirty_head = d->dirty_tail = PV_DISK_NIL;
    /* Linux's thresholds (dirty_background_ratio, dirty_ratio) are fractions of the memory
     * pages may use; the model's memory is its cache. */
    d->bg_pages = (size_t)((double)d->npages * p->dirty_bg_ratio);
    d->limit_pages = (size_t)((double)d->npages * p->dirty_ratio);
    if (d->limit_pages < d->bg_pages)
        d->limit_pages = d->bg_pages;
    pthread_mutex_init(&d->lock, NULL);
    return 0;
}

void pv_disk_fini(struct pv_disk *d)
{
    free(d->pages);
    free(d->buckets);
    free(d->sweep);
    d->pages = NULL;
    d->buckets = NULL;
    d->sweep = NULL;
    pthread_mutex_destroy(&d->lock);
}

/* ---- the page cache: chained hash + LRU list, entries preallocated, indices not pointers */

static uint32_t *bucket_of(struct pv_disk *d, uint64_t ino, uint64_t pg)
{
    return &d->buckets[page_hash(ino, pg) & (d->nbuckets - 1)];
}

uint32_t pv_disk__find(struct pv_disk *d, uint64_t ino, uint64_t pg)
{
    uint32_t i = *bucket_of(d, ino, pg);
    while (i != PV_DISK_NIL && (d->pages[i].ino != ino || d->pages[i].pg != pg))
        i = d->pages[i].hnext;
    return i;
}

static void lru_unlink(struct pv_disk *d, uint32_t i)
{
    struct pv_disk_page *e = &d->pages[i];
    if (e->prev != PV_DISK_NIL)
        d->pages[e->prev].next = e->next;
    else
        d->lru_head = e->next;
    if (e->next != PV_DISK_NIL)
        d->pages[e->next].prev = e->prev;
    else
        d->lru_tail = e->prev;
}

static void lru_push(struct pv_disk *d, uint32_t i)
{
    struct pv_disk_page *e = &d->pages[i];
    e->prev = PV_DISK_NIL;
    e->next = d->lru_head;
    if (d->lru_head != PV_DISK_NIL)
        d->pages[d->lru_head].prev = i;
    d->lru_head = i;
    if (d->lru_tail == PV_DISK_NIL)
        d->lru_tail = i;
}

static void hash_unlink(struct pv_disk *d, uint32_t i)
{
    uint32_t *at = bucket_of(d, d->pages[i].ino, d->pages[i].pg);
    while (*at != i)
        at = &d->pages[*at].hnext;
    *at = d->pages[i].hnext;
}

/* The dirty list, oldest first: the page cache's record of what writeback.c must write. */
void pv_disk__dirty(struct pv_disk *d, uint32_t i, int64_t now)
{
    struct pv_disk_page *e = &d->pages[i];

    if (e->dirty)
        return;                   /* Linux keeps the time a page first became dirty, too */
    e->dirty = true;
    e->dirty_at = now;
    e->dnext = PV_DISK_NIL;
    e->dprev = d->dirty_tail;
    if (d->dirty_tail != PV_DISK_NIL)
        d->pages[d->dirty_tail].dnext = i;
    else
        d->dirty_head = i;
    d->dirty_tail = i;
    if (++d->ndirty == d->bg_pages + 1)
        d->bg_since = now;
}

void pv_disk__clean(struct pv_disk *d, uint32_t i)
{
    struct pv_disk_page *e = &d->pages[i];

    if (!e->dirty)
        return;
    if (e->dprev != PV_DISK_NIL)
        d->pages[e->dprev].dnext = e->dnext;
    else
        d->dirty_head = e->dnext;
    if (e->dnext != PV_DISK_NIL)
        d->pages[e->dnext].dprev = e->dprev;
    else
        d->dirty_tail = e->dprev;
    e->dirty = false;
    d->ndirty--;
}

/* Take page i out of the cache onto the free list; a dirty page is written first (Linux's
 * reclaim writes a dirty page before it frees it), *wait raised to when that is done. */
static void evict(struct pv_disk *d, uint32_t i, int64_t now, int64_t *wait)
{
    if (d->pages[i].dirty) {
        int64_t end = pv_disk__charge(d, d->pages[i].ino,
                                      (int64_t)d->pages[i].pg * PV_DISK_PAGE, PV_DISK_PAGE,
                                      true, now);
        pv_disk__clean(d, i);
        if (end > *wait)
            *wait = end;
    }
    lru_unlink(d, i);
    hash_unlink(d, i);
    d->pages[i].hnext = d->free_head;
    d->free_head = i;
    d->nfree++;
}

int64_t pv_disk__room(struct pv_disk *d, size_t k, int64_t now)
{
    int64_t wait = 0;

    while (d->npages - d->used + d->nfree < k && d->lru_tail != PV_DISK_NIL)
        evict(d, d->lru_tail, now, &wait);
    return wait;
}

uint32_t pv_disk__insert(struct pv_disk *d, uint64_t ino, uint64_t pg, int64_t ready_at,
                         int64_t now, int64_t *wait)
{
    uint32_t i, *b;

    if (d->npages == 0)
        return PV_DISK_NIL;
    i = pv_disk__find(d, ino, pg);
    if (i != PV_DISK_NIL) {
        if (ready_at >= 0)
            d->pages[i].ready_at = ready_at;
        lru_unlink(d, i);
        lru_push(d, i);
        return i;
    }
    if (d->used < d->npages) {
        i = (uint32_t)d->used++;
    } else {
        /* Full: the least recently used page makes room (unless room was made ahead). */
        if (d->free_head == PV_DISK_NIL)
            evict(d, d->lru_tail, now, wait);
        i = d->free_head;
        d->free_head = d->pages[i].hnext;
        d->nfree--;
    }
    memset(&d->pages[i], 0, sizeof(d->pages[i]));
    d->pages[i].ino = ino;
    d->pages[i].pg = pg;
    d->pages[i].ready_at = ready_at > 0 ? ready_at : 0;
    b = bucket_of(d, ino, pg);
    d->pages[i].hnext = *b;
    *b = i;
    lru_push(d, i);
    return i;
}

int64_t pv_disk_resident(struct pv_disk *d, uint64_t ino, int64_t off, int64_t len, int64_t now,
                         int64_t *ready_at, int64_t *ready_end)
{
    int64_t got = 0, until = 0;

    pthread_mutex_lock(&d->lock);
    while (got < len) {
        uint64_t pg = (uint64_t)(off + got) / PV_DISK_PAGE;
        uint32_t i = pv_disk__find(d, ino, pg);
        if (i == PV_DISK_NIL)
            break;
        if (d->pages[i].ready_at > now) {
            if (got > 0)
                break;                  /* send what is there; the rest is waited for next */
            /* Still on its way: the run of resident pages from here will all be there when
             * the last of their reads is done. */
            for (;;) {
                if (d->pages[i].ready_at > until)
                    until = d->pages[i].ready_at;
                got = (int64_t)(pg + 1) * PV_DISK_PAGE - off;
                if (got >= len)
                    break;
                pg++;
                if ((i = pv_disk__find(d, ino, pg)) == PV_DISK_NIL)
                    break;
            }
            break;
        }
        /* A hit is a use: it keeps the page young. */
        lru_unlink(d, i);
        lru_push(d, i);
        got = (int64_t)(pg + 1) * PV_DISK_PAGE - off;
    }
    pthread_mutex_unlock(&d->lock);
    if (got > len)
        got = len;
    if (got > 0)
        atomic_fetch_add(&d->hit_bytes, got);
    *ready_at = until;
    *ready_end = off + got;
    return until > 0 ? 0 : got;
}

int64_t pv_disk_cached(struct pv_disk *d, uint64_t ino, int64_t off, int64_t len)
{
    int64_t n = 0;

    if (len <= 0)
        return 0;
    pthread_mutex_lock(&d->lock);
    for (uint64_t pg = (uint64_t)off / PV_DISK_PAGE;
         (int64_t)(pg * PV_DISK_PAGE) < off + len; pg++) {
        int64_t lo = (int64_t)pg * PV_DISK_PAGE, hi = lo + PV_DISK_PAGE;
        if (pv_disk__find(d, ino, pg) == PV_DISK_NIL)
            continue;
        /* Count only the part of the page inside [off, off+len). */
        n += (hi < off + len ? hi : off + len) - (lo > off ? lo : off);
    }
    pthread_mutex_unlock(&d->lock);
    return n;
}

/* Empty the cache; its dirty pages were written back (pv_disk_drop). */
void pv_disk__empty(struct pv_disk *d)
{
    for (size_t i = 0; i < d->nbuckets; i++)
        d->buckets[i] = PV_DISK_NIL;
    d->used = d->nfree = 0;
    d->lru_head = d->lru_tail = d->free_head = PV_DISK_NIL;
    d->dirty_head = d->dirty_tail = PV_DISK_NIL;
    d->ndirty = 0;
    d->sweep_left = 0;
}

/* ---- the timing model */

int64_t pv_disk_addr(const struct pv_disk *d, uint64_t ino, int64_t off)
{
    /* Files start at hashed places in the first half of the span, so distinct files are
     * usually far apart but a file never runs off the modelled platter too soon. */
    uint64_t h = (ino * 0x9E3779B97F4A7C15ULL) >> 16;
    int64_t half = d->p.span / 2 > 0 ? d->p.span / 2 : 1;
    int64_t base = (int64_t)(h % (uint64_t)half);
    base -= base % PV_DISK_PAGE;
    return base + off;
}

int64_t pv_disk_position_ns(const struct pv_disk *d, int64_t from, int64_t to, bool write)
{
    double rate = write ? d->p.write_bps : d->p.read_bps;
    int64_t dist = to >= from ? to - from : from - to;
    double frac, seek, through;

    if (dist == 0)
        return 0;
    frac = dist >= d->p.span ? 1.0 : (double)dist / (double)d->p.span;
    seek = (double)d->p.seek_min_ns + (double)(d->p.seek_max_ns - d->p.seek_min_ns) * sqrt(frac)
           + (double)d->p.rot_ns / 2.0;
    /* Forward and close: reading through the gap beats waiting for a seek and a turn. */
    through = to > from ? (double)dist * 1e9 / rate : seek;
    return (int64_t)llround(through < seek ? through : seek);
}

int64_t pv_disk__charge(struct pv_disk *d, uint64_t ino, int64_t off, int64_t len, bool write,
                        int64_t at)
{
    double rate = write ? d->p.write_bps : d->p.read_bps;
    int64_t to = pv_disk_addr(d, ino, off), cost, start;

    cost = pv_disk_position_ns(d, d->head, to, write) + (int64_t)llround((double)len * 1e9 / rate);
    d->head = to + len;
    /* One head: this access starts when the one before it has finished. */
    start = at > d->free_at ? at : d->free_at;
    d->free_at = start + cost;
    if (write) {
        d->wb_end = d->free_at;
        d->recent[d->recent_at].ino = ino;
        d->recent[d->recent_at].end = d->free_at;
        d->recent_at = (d->recent_at + 1) % PV_DISK_RECENT;
    }
    atomic_fetch_add(&d->busy_ns, cost);
    atomic_fetch_add(write ? &d->write_bytes : &d->miss_bytes, len);
    atomic_fetch_add(&d->accesses, 1);
    return d->free_at;
}
