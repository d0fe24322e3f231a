/* diskaccess.c -- one access charged to the emulated disk (disk.c has the model).
 *
 * A read charges the head for the pages it misses, after the write-back the flusher would
 * have started by then (writeback.c, the lazy catch-up), and makes them resident, ready when
 * the read is done; a write is writeback.c's (its pages become dirty). It sits above both
 * because it needs both: the page cache and head of disk.c, the flusher of writeback.c.
 */
#include "native.h"

int64_t pv_disk_access(struct pv_disk *d, uint64_t ino, int64_t off, int64_t len, bool write,
                       int64_t now, int64_t *done, int64_t *end_out)
{
    int64_t end = off + len, head_free, cost, unused = 0;
    uint64_t pg, first;

    if (write) {
        int64_t wait = pv_disk_write(d, ino, off, len, now, done);
        if (end_out != NULL)
            *end_out = off + len;
        return wait;
    }
    pthread_mutex_lock(&d->lock);
    /* The write-back the flusher would have started by now goes first. */
    pv_disk__flush_due(d, now);
    if (len > 0) {
        /* A read brings in only what is not cached: from the first missing page to the next
         * cached one, one contiguous request (Linux's read-ahead skips present pages the
         * same way). Charging the whole read-ahead window again made a job that missed one
         * page re-read, at full transfer time, the 120 KiB its neighbours had just read. */
        pg = (uint64_t)off / PV_DISK_PAGE;
        while ((int64_t)(pg * PV_DISK_PAGE) < end && pv_disk__find(d, ino, pg) != PV_DISK_NIL)
            pg++;
        if ((int64_t)(pg * PV_DISK_PAGE) >= end) {
            /* All cached: no disk access, done when the last page still on its way is. */
            int64_t ready = now;
            for (pg = (uint64_t)off / PV_DISK_PAGE; (int64_t)(pg * PV_DISK_PAGE) < end; pg++) {
                uint32_t i = pv_disk__find(d, ino, pg);
                if (d->pages[i].ready_at > ready)
                    ready = d->pages[i].ready_at;
            }
            pthread_mutex_unlock(&d->lock);
            if (done != NULL)
                *done = ready;
            if (end_out != NULL)
                *end_out = end;
            return 0;
        }
        first = pg;
        while ((int64_t)(pg * PV_DISK_PAGE) < end && pv_disk__find(d, ino, pg) == PV_DISK_NIL)
            pg++;
        if ((int64_t)(first * PV_DISK_PAGE) > off)
            off = (int64_t)(first * PV_DISK_PAGE);
        if ((int64_t)(pg * PV_DISK_PAGE) < end)
            end = (int64_t)(pg * PV_DISK_PAGE);
        len = end - off;
        /* Frames for the pages first: dirty victims are written before the read. */
        (void)pv_disk__room(d, (size_t)(pg - first), now);
    }
    head_free = d->free_at > now ? d->free_at : now;
    (void)pv_disk__charge(d, ino, off, len, false, now);
    /* A read's pages arrive when it is done. */
    for (pg = (uint64_t)off / PV_DISK_PAGE; (int64_t)(pg * PV_DISK_PAGE) < off + len; pg++)
        (void)pv_disk__insert(d, ino, pg, d->free_at, now, &unused);
    if (done != NULL)
        *done = d->free_at;
    if (end_out != NULL)
        *end_out = off + len;
    cost = d->free_at - head_free;
    pthread_mutex_unlock(&d->lock);
    return cost;
}
