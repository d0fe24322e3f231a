/* unlinks.c -- unlinks answered by the C workers, in directories the mount creates ahead in.
 *
 * Under the manager's lease a mount that is a directory's one creator also answers an unlink
 * there itself and sends it in the same batches as its creates (fuse/creates.py's `unlink`,
 * fuse/removals.py says when). Python answered each one: a trip through its loop per file,
 * most of what `rm` of an empty file cost the mount. Now a worker answers it when Python
 * would have answered it ahead without asking anyone, and queues a record (PVF_UNLINKED)
 * that Python applies as it drains it -- the same unlink queued for the manager, the lease
 * tables and caches as if Python had answered -- before any request drained with or after it.
 *
 * What Python would check, and where each check is here:
 * - the directory: created in ahead (`create_dirs`: Python turns it off, under this lock
 *   and with the records applied, before it changes anything that decides it -- a recall,
 *   the session's end, a refused create, numbers taken back: creates.c), its names complete
 *   and mirrored (names.c), its attributes mirrored (answers.c), the session not over;
 * - the name: there, naming a file (the kernel checked the caller may remove it and that it
 *   is no directory: default_permissions);
 * - the file: no handle of this mount holds it and nothing of it waits to be written back.
 *   Python alone knows that, at the moment a release leaves the file closed and clean: it
 *   then says so (pvf_release_done) and the file is *unlinkable* here. Any request that could
 *   change it -- an open (the only way to new writes), a setattr -- takes the mark away when
 *   it arrives, before Python can act on it. A release marks only if no open of the file
 *   arrived since that release did (`releasing`): an open queued behind the release, not yet
 *   served when Python's release ends, leaves the file unmarked.
 * A worker takes the mark away when it answers, so a file goes once.
 *
 * The directory's attributes here are the workers' while such changes wait for Python (the
 * same `pending` as creates': an unlink's new times and size are made here as Python makes
 * them, with the time the record carries); the file's attributes kept here go with it.
 */
#include "front.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define UNLINKABLE_MAX (1u << 18)   /* marks kept at most: past it, all are dropped */

/* ------------------------------------------------------------------ what Python says */
/* The kernel sends the release of a handle of `ino` (before Python sees it). */
void pvf_releasing(struct pvf_front *f, uint64_t ino)
{
    pthread_mutex_lock(&f->lock);
    if (f->releasing.n >= UNLINKABLE_MAX)
        pvf_set_clear(&f->releasing);
    pvf_set_add(&f->releasing, ino);    /* (no room: the release marks nothing) */
    pthread_mutex_unlock(&f->lock);
}

/* A request that may open or change `ino` arrived: it is no longer unlinkable here, and a
 * release before it marks nothing. */
void pvf_unlinkable_drop(struct pvf_front *f, uint64_t ino)
{
    pthread_mutex_lock(&f->lock);
    if (f->unlinkable.n > 0)
        pvf_set_has(&f->unlinkable, ino, 1);
    if (f->releasing.n > 0)
        pvf_set_has(&f->releasing, ino, 1);
    pthread_mutex_unlock(&f->lock);
}

/* Python finished a release of `ino`; `closed_clean`: no handle of it is left and nothing of
 * it is dirty (fuse/removals.py's test). 1: marked unlinkable. */
int pvf_release_done(struct pvf_front *f, uint64_t ino, int closed_clean)
{
    int marked = 0;

    pthread_mutex_lock(&f->lock);
    if (pvf_set_has(&f->releasing, ino, 1) && closed_clean) {
        if (f->unlinkable.n >= UNLINKABLE_MAX)
            pvf_set_clear(&f->unlinkable);
        marked = pvf_set_add(&f->unlinkable, ino) == 0;
    }
    pthread_mutex_unlock(&f->lock);
    return marked;
}

void pvf_unlinks_free(struct pvf_front *f)
{
    pvf_set_free(&f->unlinkable);
    pvf_set_free(&f->releasing);
}

/* ------------------------------------------------------------------ one unlink */
/* Everything an unlink here needs, checked and changed under the lock; 0: not here. */
static int take_locked(struct pvf_front *f, struct pvf_req *r, size_t len, void *unused)
{
    struct pvf_dirattr *slot;
    uint64_t victim;
    size_t entries;
    struct timespec now;

    (void)unused;
    if (pvf_lease_left(f) <= 0.0 || f->unlinkable.n == 0 ||
        !pvf_set_has(&f->create_dirs, r->ino, 0))
        return 0;
    slot = pvf_dir_slot_locked(f, r->ino);
    if (slot == NULL || !S_ISDIR(slot->st.st_mode) ||
        !pvf_names_get_locked(f, r->ino, r->name, len, &victim, &entries) ||
        !pvf_set_has(&f->unlinkable, victim, 1))
        return 0;
    if (pvf_names_put_locked(f, r->ino, r->name, len, 0) < 0)
        return 0;   /* (the names table forgot the directory: Python answers for it) */
    pvf_dir_drop_locked(f, victim);     /* the file's attributes kept here */
    r->ino2 = victim;
    clock_gettime(CLOCK_REALTIME, &now);
    r->off = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    slot->st.st_mtim = slot->st.st_ctim = now;
    slot->st.st_size = pvf_dir_size(entries - 1);
    slot->st.st_blocks = (slot->st.st_size + 511) / 512;
    slot->pending++;
    f->c.unlinked_here++;
    return 1;
}

/* Make the unlink here if it can be (1: answered, its record queued), else 0. uid/gid: the
 * caller's (the kernel's request carries them). Also the test bridge's way in. */
int pvf_unlink_try(struct pvf_front *f, fuse_req_t fr, uid_t uid, gid_t gid, uint64_t parent,
                   const char *name)
{
    size_t len = strlen(name);

    if (f->unlinkable.n == 0 || !pvf_plain_name(name, len))
        return 0;   /* (an unlocked peek: the decision is made under the lock) */
    return pvf_queue_answered(f, fr, PVF_UNLINKED, uid, gid, parent, name, len, take_locked,
                              NULL);
}

/* An unlink answered here (1), or 0: the caller queues it for Python. The reply goes after
 * the record is queued, so every later request about the directory reaches Python after it. */
int pvf_unlink_here(struct pvf_front *f, fuse_req_t fr, uint64_t parent, const char *name)
{
    if (!pvf_unlink_try(f, fr, 0, 0, parent, name))
        return 0;
    pvf_counted_reply(f, fuse_reply_err(fr, 0));
    return 1;
}
