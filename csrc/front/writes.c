/* writes.c -- what the C workers answer about this node's writes to open files, from marks
 * the Python side sets here.
 *
 * Three kinds, all under the front's lock:
 *
 * - Flushes that need nothing. A read-only handle's (marked by Python: nothing is written
 *   through it), and a writable handle's whose inode no write or truncation passed since
 *   the kernel learned it: the workers note each inode a write or a size change names
 *   (`written`), and a flush of a writable quiet handle of such an inode goes to Python.
 *   The kernel's own write-back of mmap'ed pages may use any writable handle of the inode,
 *   so the test is on the inode, not the handle. An inode leaves `written` when the kernel
 *   forgets it.
 *
 * - Flushes of files the mount holds by write delegation (fuse/delegations.py) and would
 *   keep past their close: Python's flush then returns at once (`keeps()`: the data go with
 *   the flusher, an fsync or a recall; a write-back error parks for the next fsync), so each
 *   close(2) of an mdtest-hard file cost a trip through Python for nothing. Python marks the
 *   inode (`kept`) when a write of it is done and `keeps()` would hold it (held here after a
 *   write, size <= FILE_BYTES_MAX, the lease session valid, under the files' bound); a flush
 *   of any handle of a marked inode is answered here while the session's end (the same
 *   CLOCK_MONOTONIC deadline as Python's `LeaseCache.valid()`) is ahead.
 *
 *   Why C never answers a flush Python would have to act on: the mark means "Python's flush
 *   would return at once now". Python sets it only in a step (no await) where `keeps()`
 *   holds, and takes it away -- under this lock -- BEFORE every change that could make
 *   `keeps()` false takes effect: the file leaves `held` -- in one place, `_pop`, which
 *   drops the mark first -- when its write-back begins (the flusher's, a gathered one,
 *   `keeps()`' oldest, a recall's: before `writing` is told and the recall answered; `end()`
 *   before this mount truncates it, opens it O_TRUNC or renames over it; fsync), when
 *   `dropped()` or a refused create forgets it; the session ends (all dropped before
 *   `held` is cleared and before the deadline mirrored here is set to 0); the files' bound
 *   would be reached (all dropped). The other inputs of `keeps()` are guarded here: the
 *   deadline is checked by the worker itself (time alone ends the session), and the size
 *   grows only by a write or a setattr of the size (fallocate and copy_file_range are not
 *   registered), whose op drops the mark (`pvf_written`) before the request is queued, so
 *   before Python can apply it; Python marks again after the write only if it still fits.
 *   A worker reading the mark under the lock at instant t thus answers exactly as Python's
 *   flush would at t. The one interleaving that escapes it: write A marks while write B of
 *   the same inode, from another thread, is still unanswered (its op dropped the mark before
 *   A's handler set it). A flush then is concurrent with B -- the kernel writes its own
 *   dirty pages (mmap, writeback_cache) and waits for their answers before it sends a
 *   flush, so B is another thread's write(2) -- and may be ordered before B, when `keeps()`
 *   held; the release, always Python's, decides the close's write-back anew. `testing_lose_close_writes` (whose flush throws data away) never marks.
 *   A forget drops the mark too (no handle is left).
 *
 * - Writes of handles Python marked `behind` (fuse/cfront.py says which: writable, not
 *   O_SYNC/O_DSYNC nor user.pvfs.sync, coherence=none, no global caches, not direct_io): the
 *   worker copies the bytes into the record as for any write, queues it as PVF_WROTE and
 *   answers the kernel itself once it is queued -- the write is then behind, as the block
 *   cache's write-back already is. Python applies the records in their order, and serves
 *   nothing drained after one before it is applied, so every request that follows the
 *   write(2) -- a read, getattr, fsync, flush, truncation -- sees it; an error applying one
 *   parks on the file as a write-back error (reported by its next fsync or close). The bytes
 *   answered and not yet applied are bounded (`behind_max`): past it a write waits for
 *   Python as before, which throttles the writer to Python's pace. Until every write
 *   answered here is applied, the inodes they name (`behind_inos`) have no attributes
 *   answered here (answers.c): a mirror Python made in between could be older than one.
 *
 * A write or a size change of an inode, as a worker queues it, ends what was answered for it
 * here and the attributes answers.c keeps of it (pvf_written). Each mark is a key of a u64
 * set (answers.c): a handle's number + 1, or an inode.
 */
#include "front.h"

#include <errno.h>
#include <string.h>

/* ------------------------------------------------------------------ flushes */
int pvf_quiet_add(struct pvf_front *f, uint64_t fh, int writable)
{
    int ret;

    if (fh + 1 == 0) {   /* fh 2^64-1: not kept (its flush goes to Python) */
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&f->lock);
    ret = pvf_set_add(writable ? &f->quiet_rw : &f->quiet, fh + 1);
    pthread_mutex_unlock(&f->lock);
    if (ret < 0)
        errno = ENOMEM;
    return ret;
}

int pvf_quiet_has(struct pvf_front *f, uint64_t fh, int remove)
{
    int found;

    pthread_mutex_lock(&f->lock);
    found = pvf_set_has(&f->quiet, fh + 1, remove);
    if (!found || remove)
        found |= pvf_set_has(&f->quiet_rw, fh + 1, remove);
    pthread_mutex_unlock(&f->lock);
    return found;
}

int pvf_flush_here(struct pvf_front *f, uint64_t fh, uint64_t ino)
{
    int here;

    pthread_mutex_lock(&f->lock);
    here = pvf_set_has(&f->quiet, fh + 1, 0) ||
           (pvf_set_has(&f->quiet_rw, fh + 1, 0) && !pvf_set_has(&f->written, ino, 0));
    if (here) {
        f->c.quiet_flushes++;
    } else if (pvf_set_has(&f->kept, ino, 0) && pvf_lease_left(f) > 0.0) {
        f->c.kept_flushes++;
        here = 1;
    }
    pthread_mutex_unlock(&f->lock);
    return here;
}

/* A file held by delegation whose close Python would keep (see above); -1 on ENOMEM (then
 * not marked: its flushes go to Python). */
int pvf_kept_mark(struct pvf_front *f, uint64_t ino)
{
    int ret;

    pthread_mutex_lock(&f->lock);
    ret = pvf_set_add(&f->kept, ino);
    pthread_mutex_unlock(&f->lock);
    return ret;
}

/* Its flushes go to Python again (before its delegation ends or changes). */
void pvf_kept_unmark(struct pvf_front *f, uint64_t ino)
{
    pthread_mutex_lock(&f->lock);
    pvf_set_has(&f->kept, ino, 1);
    pthread_mutex_unlock(&f->lock);
}

void pvf_kept_clear(struct pvf_front *f)
{
    pthread_mutex_lock(&f->lock);
    if (f->kept.slots != NULL)
        memset(f->kept.slots, 0, f->kept.cap * sizeof(uint64_t));
    f->kept.n = 0;
    pthread_mutex_unlock(&f->lock);
}

/* A write or a size change of ino is about to be queued: before Python can apply it, its
 * flushes stop being quiet and stop being kept (Python marks it again if it still fits),
 * and its reads stop being answered from the arena (serve.c). */
void pvf_written(struct pvf_front *f, uint64_t ino)
{
    struct pvf_dirattr *slot;

    pthread_mutex_lock(&f->lock);
    pvf_set_has(&f->kept, ino, 1);
    pvf_serve_stop_locked(f, ino);   /* its reads are Python's until it publishes anew */
    slot = pvf_dir_slot_locked(f, ino);
    if (slot != NULL && S_ISREG(slot->st.st_mode))
        pvf_dir_drop_locked(f, ino);   /* its size and times are Python's to say again */
    if (pvf_set_add(&f->written, ino) < 0 && f->quiet_rw.n > 0) {
        /* no room to note it: then no writable handle is quiet any more */
        memset(f->quiet_rw.slots, 0, f->quiet_rw.cap * sizeof(uint64_t));
        f->quiet_rw.n = 0;
    }
    pthread_mutex_unlock(&f->lock);
}

void pvf_unwritten(struct pvf_front *f, uint64_t ino)
{
    pthread_mutex_lock(&f->lock);
    pvf_set_has(&f->written, ino, 1);
    pvf_set_has(&f->kept, ino, 1);
    pthread_mutex_unlock(&f->lock);
}

/* ------------------------------------------------------------------ writes behind */
int pvf_behind_add(struct pvf_front *f, uint64_t fh)
{
    int ret;

    if (fh + 1 == 0) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&f->lock);
    ret = pvf_set_add(&f->behind, fh + 1);
    pthread_mutex_unlock(&f->lock);
    if (ret < 0)
        errno = ENOMEM;
    return ret;
}

int pvf_behind_has(struct pvf_front *f, uint64_t fh, int remove)
{
    int found;

    pthread_mutex_lock(&f->lock);
    found = pvf_set_has(&f->behind, fh + 1, remove);
    pthread_mutex_unlock(&f->lock);
    return found;
}

/* Whether a write of len bytes of ino through fh is answered here: fh is marked and the
 * bytes fit under the bound (then counted, and ino noted, until Python applies them). */
int pvf_behind_take(struct pvf_front *f, uint64_t fh, uint64_t ino, size_t len)
{
    int here = 0;

    pthread_mutex_lock(&f->lock);
    if (f->behind.n > 0 && pvf_set_has(&f->behind, fh + 1, 0)) {
        if (f->behind_bytes + len > f->behind_max) {
            f->c.behind_full++;
        } else if (pvf_set_add(&f->behind_inos, ino) == 0) {   /* (no room: Python's) */
            f->behind_bytes += len;
            f->behind_taken++;
            f->c.wrote_here++;
            here = 1;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return here;
}

/* Under the lock: whether a write of ino answered here may not be applied yet. Its
 * attributes kept here (answers.c) may then be from before it -- Python can mirror them
 * between the write's answer and its application (a create's record applied, a lease
 * entry changed) -- so a getattr or lookup answered from them could tell the kernel a
 * size older than a write(2) that returned: it would shrink the file's i_size. */
int pvf_behind_pending_locked(struct pvf_front *f, uint64_t ino)
{
    return f->behind_inos.n > 0 && pvf_set_has(&f->behind_inos, ino, 0);
}

void pvf_behind_applied(struct pvf_front *f, uint64_t bytes)
{
    pthread_mutex_lock(&f->lock);
    f->behind_bytes = bytes > f->behind_bytes ? 0 : f->behind_bytes - bytes;
    f->behind_done++;
    if (f->behind_done >= f->behind_taken)   /* every one applied: no inode waits */
        pvf_set_clear(&f->behind_inos);
    pthread_cond_broadcast(&f->idle);   /* a flush may wait for it (ops.c) */
    pthread_mutex_unlock(&f->lock);
}
