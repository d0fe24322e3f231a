/* creates.c -- files created by the C workers, in directories the mount creates ahead in.
 *
 * Under the manager's lease a mount that is a directory's one creator answers a create there
 * itself and sends it in a batch later (fuse/creates.py). Python still answered each one: a
 * trip through its loop per file. Now Python lends the workers what such a create needs --
 * which directories it creates ahead in (`create_dirs`), inode numbers the manager delegated
 * (`numbers`) -- and a worker answers the create from that and from what the mirrors already
 * hold: the directory's attributes (answers.c: its mode and group decide the new file's),
 * its names (names.c: complete, the name not there). It takes the next number and a handle
 * of its own range, puts the name into the names table and the directory's new times and
 * size into its attributes, queues a record for Python (PVF_CREATED: Python makes the same
 * create its own -- the batch to the manager, the lease tables, the open handle -- and never
 * replies), and replies to the kernel after the record is queued, so every later request
 * about the file reaches Python after it.
 *
 * What keeps the two sides equal:
 * - Python applies CREATED records as it drains them, before it serves any request drained
 *   with or after them (fuse/cfront.py), so a request never finds the file unknown.
 * - A change Python makes on its own (a recall, the session's end, a refused create, numbers
 *   taken back) first turns the directory off here -- under this lock, where a worker checks
 *   and queues in one hold -- and then drains: no create of the old state is left behind.
 *   Changes the kernel asks for (unlink, rename, setattr, mkdir in that directory) cannot
 *   overlap a create there: the kernel holds the directory's lock for each.
 * - The directory's attributes here are the workers' while any of their creates there is not
 *   yet applied by Python (`pending`): Python's mirror of them is then an older state and is
 *   not taken; when the last is applied, Python's are taken (pvf_created_done), a
 *   difference counted (`created_mismatch`, 0 in the tests).
 * Anything a worker cannot decide as Python would -- a name that is not plain ASCII, O_SYNC,
 * a caller allowed only through a supplementary group, a setgid directory whose group is not
 * the caller's -- goes to Python as before.
 */
#include "front.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PVF_DIR_BLOCK 4096   /* pvfs.protocol.inodes.DIR_BLOCK */

/* pvfs.protocol.inodes.dir_size: a directory's st_size with `entries` names. */
off_t pvf_dir_size(size_t entries)
{
    return (off_t)PVF_DIR_BLOCK * (off_t)(1 + (entries + 2) / 128);
}

void pvf_create_settings(struct pvf_front *f, double entry_floor, uint64_t first_fh,
                         double caps_ttl, int behind)
{
    pthread_mutex_lock(&f->lock);
    f->entry_floor = entry_floor;
    f->caps_new_ttl = caps_ttl;
    f->create_behind = behind;
    if (f->next_fh < first_fh)
        f->next_fh = first_fh;
    pthread_mutex_unlock(&f->lock);
}

int pvf_create_dir(struct pvf_front *f, uint64_t parent, int on)
{
    int ret = 0;

    pthread_mutex_lock(&f->lock);
    if (on)
        ret = pvf_set_add(&f->create_dirs, parent);
    else
        pvf_set_has(&f->create_dirs, parent, 1);
    pthread_mutex_unlock(&f->lock);
    if (ret < 0)
        errno = ENOMEM;
    return ret;
}

void pvf_create_dirs_off(struct pvf_front *f)
{
    pthread_mutex_lock(&f->lock);
    if (f->create_dirs.slots != NULL)
        memset(f->create_dirs.slots, 0, f->create_dirs.cap * sizeof(uint64_t));
    f->create_dirs.n = 0;
    pthread_mutex_unlock(&f->lock);
}

int pvf_numbers_lend(struct pvf_front *f, const uint64_t *inos, size_t n)
{
    int ret = 0;

    pthread_mutex_lock(&f->lock);
    if (f->nnumbers + n > f->capnumbers) {
        size_t cap = f->capnumbers ? f->capnumbers : 64;
        uint64_t *v;
        while (cap < f->nnumbers + n)
            cap *= 2;
        v = realloc(f->numbers, cap * sizeof(uint64_t));
        if (v == NULL) {
            ret = -1;
            goto out;
        }
        f->numbers = v;
        f->capnumbers = cap;
    }
    if (n > 0)   /* (f->numbers is NULL before the first: memcpy wants a pointer) */
        memcpy(f->numbers + f->nnumbers, inos, n * sizeof(uint64_t));
    f->nnumbers += n;
out:
    pthread_mutex_unlock(&f->lock);
    if (ret < 0)
        errno = ENOMEM;
    return ret;
}

/* Every number not used yet, back to the caller (malloc'ed, *n of them; NULL if none). */
uint64_t *pvf_numbers_take(struct pvf_front *f, size_t *n)
{
    uint64_t *v = NULL;

    pthread_mutex_lock(&f->lock);
    *n = f->nnumbers;
    if (f->nnumbers > 0) {
        v = malloc(f->nnumbers * sizeof(uint64_t));
        if (v != NULL) {
            memcpy(v, f->numbers, f->nnumbers * sizeof(uint64_t));
            f->nnumbers = 0;
        } else {
            *n = 0;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return v;
}

size_t pvf_numbers_left(struct pvf_front *f)
{
    size_t n;

    pthread_mutex_lock(&f->lock);
    n = f->nnumbers;
    pthread_mutex_unlock(&f->lock);
    return n;
}

void pvf_numbers_free(struct pvf_front *f)
{
    free(f->numbers);
    f->numbers = NULL;
    f->nnumbers = f->capnumbers = 0;
    pvf_set_free(&f->create_dirs);
}

/* ------------------------------------------------------------------ one create */
/* A name the workers may make or remove: not ".", "..", nor longer than the manager takes,
 * plain ASCII (Python decides anything else). */
int pvf_plain_name(const char *name, size_t len)
{
    if (len == 0 || len > PVF_NAME_MAX || (name[0] == '.' && (len == 1 ||
                                                               (len == 2 && name[1] == '.'))))
        return 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)name[i] >= 0x80 || name[i] == '/')
            return 0;
    return 1;
}

/* Whether uid/gid may make a name in the directory without any supplementary group: then
 * the manager's check, whatever groups it gets, agrees. */
static int may_make(const struct stat *dir, uid_t uid, gid_t gid)
{
    mode_t m = dir->st_mode, want;

    if (uid == 0)
        return 1;
    if (uid == dir->st_uid)
        want = S_IWUSR | S_IXUSR;
    else if (gid == dir->st_gid)
        want = S_IWGRP | S_IXGRP;
    else
        want = S_IWOTH | S_IXOTH;
    return (m & want) == want;
}

static double timeout_of(double floor, double left)
{
    return floor == 0.0 ? 0.0 : (left > floor ? left : floor);
}

/* The new file's mode and group as pvfs.protocol.inodes.new_owner gives them; -1: Python
 * decides (a setgid directory's group, not the caller's, with S_ISGID asked). */
static int new_owner(const struct stat *dir, mode_t mode, uid_t uid, gid_t gid,
                     mode_t *perm, gid_t *group)
{
    *perm = mode & 07777;
    *group = gid;
    if (!(dir->st_mode & S_ISGID))
        return 0;
    *group = dir->st_gid;
    if ((*perm & S_ISGID) && uid != 0 && dir->st_gid != gid)
        return -1;
    return 0;
}

/* What a create asks for besides its name: the record's mode and flags, and where its reply
 * goes; and, made, the mount's settings for its file as they were in that hold of the lock. */
struct create_ask {
    mode_t mode;
    int flags;
    struct fuse_entry_param *e;
    uint64_t *fh;
    double caps_ttl;    /* f->caps_new_ttl */
    int behind;         /* f->create_behind, for a writable handle */
};

/* Everything a create here needs, checked and taken under the lock; 0: not here. */
static int take_locked(struct pvf_front *f, struct pvf_req *r, size_t len, void *arg)
{
    struct create_ask *ask = arg;
    struct fuse_entry_param *e = ask->e;
    int writable = (ask->flags & O_ACCMODE) != O_RDONLY;
    struct pvf_dirattr *slot;
    size_t entries;
    mode_t perm;
    gid_t group;
    double left = pvf_lease_left(f);
    struct timespec now;

    r->mode = ask->mode;
    r->flags = (uint32_t)ask->flags;
    if (left <= 0.0 || f->nnumbers == 0 || !pvf_set_has(&f->create_dirs, r->ino, 0))
        return 0;
    slot = pvf_dir_slot_locked(f, r->ino);
    if (slot == NULL || !S_ISDIR(slot->st.st_mode) || !may_make(&slot->st, r->uid, r->gid) ||
        new_owner(&slot->st, r->mode, r->uid, r->gid, &perm, &group) < 0 ||
        !pvf_names_can_make_locked(f, r->ino, r->name, len, &entries))
        return 0;
    if (pvf_set_add(writable ? &f->quiet_rw : &f->quiet, f->next_fh + 1) < 0)
        return 0;
    if (pvf_names_put_locked(f, r->ino, r->name, len, f->numbers[f->nnumbers - 1]) < 0) {
        pvf_set_has(writable ? &f->quiet_rw : &f->quiet, f->next_fh + 1, 1);
        return 0;   /* (the names table forgot the directory: Python answers for it) */
    }
    r->ino2 = f->numbers[--f->nnumbers];
    /* a number may come back from a create and unlink never sent: a new file now, not
     * the old one Python may have marked closed and clean (unlinks.c) */
    pvf_set_has(&f->unlinkable, r->ino2, 1);
    pvf_set_has(&f->releasing, r->ino2, 1);
    r->uid_set = perm;      /* (the record's: the file's permission bits and group) */
    r->gid_set = group;
    r->fh = *ask->fh = f->next_fh++;
    clock_gettime(CLOCK_REALTIME, &now);
    r->off = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    /* the directory: new times and size (its blocks from the size, as Python's entry) */
    slot->st.st_mtim = slot->st.st_ctim = now;
    slot->st.st_size = pvf_dir_size(entries + 1);
    slot->st.st_blocks = (slot->st.st_size + 511) / 512;
    slot->pending++;
    memset(e, 0, sizeof(*e));
    e->ino = r->ino2;
    e->generation = 0;
    e->entry_timeout = timeout_of(f->entry_floor, left);
    e->attr_timeout = timeout_of(f->attr_floor, left);
    e->attr.st_ino = r->ino2;
    e->attr.st_mode = S_IFREG | perm;
    e->attr.st_nlink = 1;
    e->attr.st_uid = r->uid;
    e->attr.st_gid = group;
    e->attr.st_blksize = 1 << 20;
    e->attr.st_atim = e->attr.st_mtim = e->attr.st_ctim = now;
    f->c.created_here++;
    ask->caps_ttl = f->caps_new_ttl;
    ask->behind = f->create_behind && writable;
    return 1;
}

/* Make the create here if it can be (1: e and *fh are the reply, its record queued), else
 * 0. uid/gid: the caller's. Also the test bridge's way in (no kernel request). */
int pvf_create_try(struct pvf_front *f, fuse_req_t fr, uid_t uid, gid_t gid, uint64_t parent,
                   const char *name, mode_t mode, int flags, struct fuse_entry_param *e,
                   uint64_t *fh)
{
    size_t len = strlen(name);
    struct create_ask ask = { .mode = mode, .flags = flags, .e = e, .fh = fh };

    if (f->nnumbers == 0 || !pvf_plain_name(name, len) || (flags & (O_SYNC | O_DSYNC)))
        return 0;   /* (an unlocked peek: the decision is made under the lock) */
    if (!pvf_queue_answered(f, fr, PVF_CREATED, uid, gid, parent, name, len, take_locked,
                            &ask))
        return 0;
    /* Before the reply, so before any request about the file: a file made here has no
     * security.capability (nothing inherits one), so the kernel's probe before each write(2)
     * is answered here (Python learns the same when it applies the record); and its
     * handle's writes are write-behind, as Python marks a handle of a file it creates
     * (fuse/cfront.py: _mark_behind). Neither is needed for correctness: a failure to
     * mark leaves the request to Python. */
    if (ask.caps_ttl > 0.0) {
        struct timespec mono;
        clock_gettime(CLOCK_MONOTONIC, &mono);
        (void)pvf_caps_none(f, e->ino, (double)mono.tv_sec + mono.tv_nsec * 1e-9 + ask.caps_ttl);
    }
    if (ask.behind)
        (void)pvf_behind_add(f, *fh);
    return 1;
}

/* A create answered here (1), or 0: the caller queues it for Python. */
int pvf_create_here(struct pvf_front *f, fuse_req_t fr, uint64_t parent, const char *name,
                    mode_t mode, const struct fuse_file_info *fi)
{
    struct fuse_entry_param e;
    struct fuse_file_info out;
    uint64_t fh = 0;

    if (!pvf_create_try(f, fr, 0, 0, parent, name, mode, fi->flags, &e, &fh))
        return 0;
    memset(&out, 0, sizeof(out));
    out.flags = fi->flags;
    out.fh = fh;
    out.keep_cache = 1;
    pvf_counted_reply(f, fuse_reply_create(fr, &e, &out));
    return 1;
}

/* Python applied a create made here in `parent`: with the last of them, its attributes of
 * the directory are taken again (st NULL: it has none). */
void pvf_created_done(struct pvf_front *f, uint64_t parent, const struct stat *st)
{
    struct pvf_dirattr *slot;

    pthread_mutex_lock(&f->lock);
    slot = pvf_dir_slot_locked(f, parent);
    if (slot != NULL && slot->pending > 0 && --slot->pending == 0 && st != NULL) {
        const struct stat *c = &slot->st;
        if (c->st_mode != st->st_mode || c->st_nlink != st->st_nlink ||
            c->st_uid != st->st_uid || c->st_gid != st->st_gid ||
            c->st_size != st->st_size || c->st_blocks != st->st_blocks ||
            c->st_mtim.tv_sec != st->st_mtim.tv_sec ||
            c->st_mtim.tv_nsec != st->st_mtim.tv_nsec ||
            c->st_ctim.tv_sec != st->st_ctim.tv_sec ||
            c->st_ctim.tv_nsec != st->st_ctim.tv_nsec)
            f->c.created_mismatch++;
        slot->st = *st;
    }
    pthread_mutex_unlock(&f->lock);
}
