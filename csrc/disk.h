/* disk.h -- the emulated disk of pvfs._native (disk.c, writeback.c, diskaccess.c).
 *
 * A timing model of one disk (seeks, rotation, transfer rates) with a page cache in front of
 * it, its dirty pages written back by a flusher; the I/O daemon's engine charges its jobs'
 * accesses to it when the daemon runs with an emulated disk (docs/native.md). Part of
 * native.h, which includes it; apart only to keep each header short.
 */
#ifndef PVFS_DISK_H
#define PVFS_DISK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pv_err;

/* disk.c: an emulated disk (timing model + page cache); see disk.c for the model. */
#define PV_DISK_PAGE ((int64_t)4096)
#define PV_DISK_NIL ((uint32_t)0xFFFFFFFF)   /* no page: ends the hash, LRU and dirty lists */

struct pv_disk_params {
    double read_bps, write_bps;   /* media transfer rates, bytes per second */
    int64_t seek_min_ns;          /* shortest seek (track to track) */
    int64_t seek_max_ns;          /* full-stroke seek */
    int64_t rot_ns;               /* one revolution; a repositioning waits half of it */
    int64_t span;                 /* bytes under the full stroke */
    int64_t cache_bytes;          /* page cache in front of the disk */
    int64_t readahead;            /* bytes read on a miss, at least */
    double dirty_bg_ratio;        /* the flusher starts above this fraction of the cache dirty */
    double dirty_ratio;           /* writers are throttled above this fraction */
    int64_t dirty_expire_ns;      /* a page dirty this long is written back */
};

struct pv_disk_page {
    uint64_t ino, pg;
    int64_t ready_at;             /* CLOCK_MONOTONIC ns when the read bringing it in is done */
    int64_t dirty_at;             /* when it became dirty (if dirty) */
    uint32_t hnext, prev, next;   /* hash chain (or free list), LRU list (indices into pages) */
    uint32_t dprev, dnext;        /* dirty list, oldest first (if dirty) */
    bool dirty;
};

/* One entry of the flusher's sweep: a dirty page and its disk address. */
struct pv_disk_wb {
    int64_t addr;
    uint64_t ino, pg;
};

#define PV_DISK_ALL UINT64_MAX    /* pv_disk_sync: every file */
#define PV_DISK_RECENT 16         /* write-backs remembered for fsync (see writeback.c) */

struct pv_disk {
    struct pv_disk_params p;
    pthread_mutex_t lock;         /* everything below but the counters */
    int64_t head;                 /* disk address where the last access ended */
    int64_t free_at;              /* CLOCK_MONOTONIC ns when the head is free again */
    struct pv_disk_page *pages;
    uint32_t *buckets;
    size_t npages, nbuckets, used, nfree;
    uint32_t lru_head, lru_tail, free_head;
    /* write-back (writeback.c) */
    uint32_t dirty_head, dirty_tail;
    size_t ndirty, bg_pages, limit_pages;
    int64_t bg_since;             /* when ndirty last rose above bg_pages */
    struct pv_disk_wb *sweep;     /* the flusher's pass, sorted by address */
    size_t sweep_len, sweep_at, sweep_left;
    bool sweep_bg;                /* the pass is a background one (else: expired pages) */
    int64_t wb_end;               /* when the last write-back charged ends */
    struct { uint64_t ino; int64_t end; } recent[PV_DISK_RECENT];
    size_t recent_at;
    _Atomic int64_t accesses, busy_ns, miss_bytes, hit_bytes, write_bytes;
};

/* disk.c: the model's state -- the page cache (hash, LRU, dirty list) and the head. */
int pv_disk_init(struct pv_disk *d, const struct pv_disk_params *p, struct pv_err *err);
void pv_disk_fini(struct pv_disk *d);
/* Bytes resident and read in by `now` from off on, contiguously, up to len; a use (LRU) of
 * those pages. When none is but the page at off is on its way in (a miss still in flight),
 * *ready_at is when the run of resident pages from off (up to len) will all be there and
 * *ready_end where that run ends; otherwise *ready_at is 0. */
int64_t pv_disk_resident(struct pv_disk *d, uint64_t ino, int64_t off, int64_t len, int64_t now,
                         int64_t *ready_at, int64_t *ready_end);
/* Bytes of [off, off+len) resident anywhere in the range, in flight or not; no side effects. */
int64_t pv_disk_cached(struct pv_disk *d, uint64_t ino, int64_t off, int64_t len);
int64_t pv_disk_addr(const struct pv_disk *d, uint64_t ino, int64_t off);
int64_t pv_disk_position_ns(const struct pv_disk *d, int64_t from, int64_t to, bool write);

/* disk.c, for writeback.c and diskaccess.c: d->lock held. */
uint32_t pv_disk__find(struct pv_disk *d, uint64_t ino, uint64_t pg);
/* Page (ino, pg) resident and most recently used (ready_at < 0: keep a resident page's);
 * a dirty victim is written first and *wait raised to when that is done. */
uint32_t pv_disk__insert(struct pv_disk *d, uint64_t ino, uint64_t pg, int64_t ready_at,
                         int64_t now, int64_t *wait);
/* Free k slots ahead of an access (dirty victims written first); when that is done, or 0. */
int64_t pv_disk__room(struct pv_disk *d, size_t k, int64_t now);
/* One media access queued on the head from `at` on; returns when it ends. */
int64_t pv_disk__charge(struct pv_disk *d, uint64_t ino, int64_t off, int64_t len, bool write,
                        int64_t at);
void pv_disk__dirty(struct pv_disk *d, uint32_t i, int64_t now);
void pv_disk__clean(struct pv_disk *d, uint32_t i);
void pv_disk__empty(struct pv_disk *d);

/* writeback.c: dirty pages, the flusher, fsync. A write makes its pages dirty and returns
 * the writer's wait (0 unless dirty victims had to be written or the dirty limit throttled
 * it), *done when it may go on. */
int64_t pv_disk_write(struct pv_disk *d, uint64_t ino, int64_t off, int64_t len, int64_t now,
                      int64_t *done);
/* Write back the file's (PV_DISK_ALL: every) dirty pages; when they are all on the disk. */
int64_t pv_disk_sync(struct pv_disk *d, uint64_t ino, int64_t now);
/* Write back every dirty page, then empty the cache; when the write-back is done. */
int64_t pv_disk_drop(struct pv_disk *d, int64_t now);
/* The file is gone: its dirty pages are discarded, never written. */
void pv_disk_forget(struct pv_disk *d, uint64_t ino);
/* The flusher's write-back due by `now` (the lazy catch-up, see writeback.c); d->lock held. */
void pv_disk__flush_due(struct pv_disk *d, int64_t now);

/* diskaccess.c: charge a media read: returns its service time and sets *done to when it
 * completes, queued behind the accesses before it (a read of pages already on their way in:
 * when the last of them arrives); its pages become resident, ready at *done. *end_out (may be
 * NULL): where the bytes this access read (or found cached) from off on stop. write: the same
 * as pv_disk_write (returns the writer's wait). */
int64_t pv_disk_access(struct pv_disk *d, uint64_t ino, int64_t off, int64_t len, bool write,
                       int64_t now, int64_t *done, int64_t *end_out);

#endif
