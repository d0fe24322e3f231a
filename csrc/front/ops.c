/* ops.c -- what each request of the kernel becomes: the ops table of the session.
 *
 * Every op runs on one of libfuse's C worker threads (session.c): it answers forgets itself,
 * and what answers.c, names.c, writes.c, creates.c and unlinks.c can answer -- a leased directory's
 * attributes, a name a leased complete directory does not hold, the flush of a quiet handle
 * or of a file kept by its write delegation, a create or an unlink in a directory the mount
 * creates ahead in --, and copies every other request into a record for Python
 * (bridge.c), then returns -- the request stays open until Python answers it from its
 * thread through the reply_* functions (replies.c), which libfuse allows from any thread.
 * No op touches Python.
 *
 * The ops registered are those the pyfuse3 front end serves (readdirplus only, no plain
 * readdir: the kernel then always asks for readdirplus); an op not registered gets ENOSYS
 * from libfuse, as with pyfuse3.
 */
#include "front.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct pvf_front *front_of(fuse_req_t fr)
{
    return fuse_req_userdata(fr);
}

/* A record with room for the given strings and bytes; ENOMEM answered here on failure. */
static struct pvf_req *req_new(fuse_req_t fr, int op, size_t tail)
{
    struct pvf_req *r = pvf_req_new(fr, op, tail);

    if (r == NULL) {
        struct pvf_front *f = front_of(fr);
        pthread_mutex_lock(&f->lock);
        f->c.enomem++;
        pthread_mutex_unlock(&f->lock);
        fuse_reply_err(fr, ENOMEM);
    }
    return r;
}

static void queue(fuse_req_t fr, struct pvf_req *r)
{
    pvf_enqueue(front_of(fr), r);
}

/* A write or size change of r->ino goes to Python: until it is answered, no read of the
 * file is answered from the arena (serve.c). */
static void counted(fuse_req_t fr, struct pvf_req *r)
{
    pvf_mods_begin(front_of(fr), r->ino);
    r->counted = 1;
}

/* A request naming one entry: (ino, name). */
static void named(fuse_req_t fr, int op, fuse_ino_t ino, const char *name)
{
    size_t n = strlen(name), at = 0;
    struct pvf_req *r = req_new(fr, op, n + 1);

    if (r == NULL)
        return;
    r->ino = ino;
    r->name = pvf_req_put(r, &at, name, n);
    queue(fr, r);
}

/* A request about an inode or a handle only. */
static struct pvf_req *plain(fuse_req_t fr, int op, fuse_ino_t ino,
                             const struct fuse_file_info *fi)
{
    struct pvf_req *r = req_new(fr, op, 0);

    if (r == NULL)
        return NULL;
    r->ino = ino;
    if (fi != NULL) {
        r->fh = fi->fh;
        r->has_fh = 1;
        r->flags = (uint32_t)fi->flags;
    }
    return r;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    struct pvf_front *f = userdata;

    /* As the pyfuse3 front end: readdirplus always, never the kernel's choice of plain. */
    conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
    if (f->want_export && (conn->capable & FUSE_CAP_EXPORT_SUPPORT))
        conn->want |= FUSE_CAP_EXPORT_SUPPORT;
    if (f->want_writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
        conn->want |= FUSE_CAP_WRITEBACK_CACHE;
    if (f->want_acl && (conn->capable & FUSE_CAP_POSIX_ACL))
        conn->want |= FUSE_CAP_POSIX_ACL;
    /* 1 MiB requests: libfuse asks the kernel for max_pages from max_write. */
    if (f->max_write > 0)
        conn->max_write = f->max_write;
}

/* A name a leased, complete directory does not hold is answered here (names.c). */
static void op_lookup(fuse_req_t fr, fuse_ino_t parent, const char *name)
{
    struct pvf_front *f = front_of(fr);   /* (fr is gone once answered) */
    struct fuse_entry_param e;

    if (pvf_names_missing(f, parent, name))
        pvf_counted_reply(f, fuse_reply_err(fr, ENOENT));
    else if (pvf_names_found(f, parent, name, &e))
        pvf_counted_reply(f, fuse_reply_entry(fr, &e));
    else
        named(fr, PVF_LOOKUP, parent, name);
}

static void op_forget_multi(fuse_req_t fr, size_t count, struct fuse_forget_data *forgets)
{
    struct pvf_front *f = front_of(fr);

    for (size_t i = 0; i < count; i++) {
        pvf_unwritten(f, forgets[i].ino);
        pvf_forget(f, forgets[i].ino, forgets[i].nlookup);
    }
    fuse_reply_none(fr);
}

/* The kernel sends a forget when it evicts the inode (no handle holds it then). */
static void op_forget(fuse_req_t fr, fuse_ino_t ino, uint64_t nlookup)
{
    struct fuse_forget_data one = { .ino = ino, .nlookup = nlookup };

    op_forget_multi(fr, 1, &one);
}

/* A leased directory's attributes are answered here (answers.c); the rest by Python. */
static void op_getattr(fuse_req_t fr, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pvf_front *f = front_of(fr);   /* (fr is gone once answered) */
    struct pvf_req *r;
    struct stat st;
    double timeout;

    if (pvf_dir_answer(f, ino, &st, &timeout))
        pvf_counted_reply(f, fuse_reply_attr(fr, &st, timeout));
    else if ((r = plain(fr, PVF_GETATTR, ino, fi)) != NULL)
        queue(fr, r);
}

static int64_t ns_of(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

static void op_setattr(fuse_req_t fr, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    struct pvf_req *r;
    struct timespec now = { 0, 0 };
    uint32_t set = 0;

    pvf_unlinkable_drop(front_of(fr), ino);   /* (unlinks.c: a size or mode may change) */
    r = plain(fr, PVF_SETATTR, ino, fi);
    if (r == NULL)
        return;
    if ((to_set & (FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW))
        && clock_gettime(CLOCK_REALTIME, &now) != 0) {
        pvf_req_free(r);
        fuse_reply_err(fr, errno);
        return;
    }
    r->flags = 0;
    if (to_set & FUSE_SET_ATTR_MODE)
        set |= PVF_SET_MODE;
    if (to_set & FUSE_SET_ATTR_UID)
        set |= PVF_SET_UID;
    if (to_set & FUSE_SET_ATTR_GID)
        set |= PVF_SET_GID;
    if (to_set & FUSE_SET_ATTR_SIZE) {
        set |= PVF_SET_SIZE;
        pvf_written(front_of(fr), ino);   /* its flushes go to Python now (writes.c) */
    }
    if (to_set & FUSE_SET_ATTR_CTIME)
        set |= PVF_SET_CTIME;
    if (to_set & FUSE_SET_ATTR_ATIME) {
        set |= PVF_SET_ATIME;
        r->atime_ns = ns_of(&attr->st_atim);
    } else if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
        set |= PVF_SET_ATIME;
        r->atime_ns = ns_of(&now);
    }
    if (to_set & FUSE_SET_ATTR_MTIME) {
        set |= PVF_SET_MTIME;
        r->mtime_ns = ns_of(&attr->st_mtim);
    } else if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
        set |= PVF_SET_MTIME;
        r->mtime_ns = ns_of(&now);
    }
    r->flags = set;
    r->mode = attr->st_mode;
    r->uid_set = attr->st_uid;
    r->gid_set = attr->st_gid;
    r->size_set = attr->st_size;
    if (set & PVF_SET_SIZE)
        counted(fr, r);
    queue(fr, r);
}

static void op_readlink(fuse_req_t fr, fuse_ino_t ino)
{
    struct pvf_req *r = plain(fr, PVF_READLINK, ino, NULL);

    if (r != NULL)
        queue(fr, r);
}

static void op_mknod(fuse_req_t fr, fuse_ino_t parent, const char *name, mode_t mode,
                     dev_t rdev)
{
    size_t n = strlen(name), at = 0;
    struct pvf_req *r = req_new(fr, PVF_MKNOD, n + 1);

    if (r == NULL)
        return;
    r->ino = parent;
    r->name = pvf_req_put(r, &at, name, n);
    r->mode = mode;
    r->rdev = rdev;
    queue(fr, r);
}

static void op_mkdir(fuse_req_t fr, fuse_ino_t parent, const char *name, mode_t mode)
{
    size_t n = strlen(name), at = 0;
    struct pvf_req *r = req_new(fr, PVF_MKDIR, n + 1);

    if (r == NULL)
        return;
    r->ino = parent;
    r->name = pvf_req_put(r, &at, name, n);
    r->mode = (mode & ~(mode_t)S_IFMT) | S_IFDIR;   /* the kernel leaves the type out */
    queue(fr, r);
}

static void op_unlink(fuse_req_t fr, fuse_ino_t parent, const char *name)
{
    if (pvf_unlink_here(front_of(fr), fr, parent, name))
        return;
    named(fr, PVF_UNLINK, parent, name);
}

static void op_rmdir(fuse_req_t fr, fuse_ino_t parent, const char *name)
{
    named(fr, PVF_RMDIR, parent, name);
}

static void op_symlink(fuse_req_t fr, const char *link, fuse_ino_t parent, const char *name)
{
    size_t n = strlen(name), m = strlen(link), at = 0;
    struct pvf_req *r = req_new(fr, PVF_SYMLINK, n + m + 2);

    if (r == NULL)
        return;
    r->ino = parent;
    r->name = pvf_req_put(r, &at, name, n);
    r->name2 = pvf_req_put(r, &at, link, m);
    queue(fr, r);
}

static void op_rename(fuse_req_t fr, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
    size_t n = strlen(name), m = strlen(newname), at = 0;
    struct pvf_req *r = req_new(fr, PVF_RENAME, n + m + 2);

    if (r == NULL)
        return;
    r->ino = parent;
    r->ino2 = newparent;
    r->name = pvf_req_put(r, &at, name, n);
    r->name2 = pvf_req_put(r, &at, newname, m);
    r->flags = flags;
    queue(fr, r);
}

static void op_link(fuse_req_t fr, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    size_t n = strlen(newname), at = 0;
    struct pvf_req *r = req_new(fr, PVF_LINK, n + 1);

    if (r == NULL)
        return;
    r->ino = ino;
    r->ino2 = newparent;
    r->name = pvf_req_put(r, &at, newname, n);
    queue(fr, r);
}

static void op_open(fuse_req_t fr, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pvf_req *r;

    pvf_unlinkable_drop(front_of(fr), ino);   /* (unlinks.c: before Python opens it) */
    r = plain(fr, PVF_OPEN, ino, fi);
    if (r == NULL)
        return;
    if (fi->flags & O_TRUNC)
        counted(fr, r);   /* (the kernel's atomic O_TRUNC: a size change) */
    queue(fr, r);
}

/* A read of blocks Python published is answered from the arena (serve.c): one writev of
 * the cached bytes to /dev/fuse, the file pinned meanwhile. A stream-sized read of a file
 * Python marked is answered from the I/O daemons (streams.c), pinned likewise. */
static void op_read(fuse_req_t fr, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    struct pvf_front *f = front_of(fr);
    struct iovec iov[PVF_SERVE_IOV];
    struct pvf_served *pin;
    struct pvf_fetched got;
    struct pvf_req *r;
    int n;

    if (off >= 0 && pvf_serve_take(f, ino, (uint64_t)off, size, iov, &n, &pin)) {
        pvf_counted_reply(f, fuse_reply_iov(fr, iov, n));
        pvf_serve_unpin(f, pin);
        return;
    }
    if (off >= 0 && pvf_stream_fetch(f, ino, (uint64_t)off, size, &got)) {
        pvf_counted_reply(f, fuse_reply_buf(fr, got.buf, got.n));
        pvf_stream_done(f, &got);
        return;
    }
    r = plain(fr, PVF_READ, ino, fi);
    if (r == NULL)
        return;
    r->size = size;
    r->off = off;
    queue(fr, r);
}

static void op_write(fuse_req_t fr, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    /* The bytes in a block of their own, which Python takes over as they are (a WriteData,
     * pyrequest.c): this worker's copy is the only one the mount makes of them. */
    struct pvf_req *r = req_new(fr, PVF_WRITE, 0);

    if (r == NULL)
        return;
    r->owned = malloc(size > 0 ? size : 1);
    if (r->owned == NULL) {
        struct pvf_front *f = front_of(fr);

        pvf_req_free(r);
        pthread_mutex_lock(&f->lock);
        f->c.enomem++;
        pthread_mutex_unlock(&f->lock);
        fuse_reply_err(fr, ENOMEM);
        return;
    }
    memcpy(r->owned, buf, size);
    /* before Python applies it: the flush after it goes to Python (unless Python marks
     * the file kept again once it is written, writes.c) */
    pvf_written(front_of(fr), ino);
    r->ino = ino;
    r->fh = fi->fh;
    r->has_fh = 1;
    r->flags = (uint32_t)fi->flags;
    r->off = off;
    r->data = r->owned;
    r->len = size;
    if (pvf_behind_take(front_of(fr), fi->fh, ino, size)) {
        /* answered here once queued (writes.c): Python applies it before anything after */
        r->op = PVF_WROTE;
        r->fr = NULL;
        queue(fr, r);
        fuse_reply_write(fr, size);
        return;
    }
    counted(fr, r);
    queue(fr, r);
}

static void op_handle(fuse_req_t fr, int op, fuse_ino_t ino, struct fuse_file_info *fi,
                      uint32_t flags)
{
    struct pvf_req *r = plain(fr, op, ino, fi);

    if (r == NULL)
        return;
    r->flags = flags;
    queue(fr, r);
}

/* Wait (at most BEHIND_WAIT_NS) until Python applied every write answered here so far. */
#define BEHIND_WAIT_NS 500000000L

static void behind_wait(struct pvf_front *f)
{
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);   /* (the condition variable's clock) */
    until.tv_nsec += BEHIND_WAIT_NS;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&f->lock);
    for (uint64_t taken = f->behind_taken;
         f->behind_done < taken && f->behind_max > 0 && !f->closing;)
        if (pthread_cond_timedwait(&f->idle, &f->lock, &until) != 0)
            break;
    pthread_mutex_unlock(&f->lock);
}

/* A handle Python marked quiet, or any handle of a file whose close its write delegation
 * keeps, has nothing to write back at close (writes.c says when): its flush is answered
 * here, without a trip through Python. A handle whose writes were answered here waits for
 * Python to apply them first (briefly, bounded): Python keeps the file when it applies its
 * write, so the flush needs no trip either -- and through Python it would wait for the
 * same (fuse/cfront.py serves nothing before the writes answered before it). */
static void op_flush(fuse_req_t fr, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pvf_front *f = front_of(fr);

    if (pvf_behind_has(f, fi->fh, 0))
        behind_wait(f);
    if (pvf_flush_here(f, fi->fh, ino)) {
        fuse_reply_err(fr, 0);
        return;
    }
    op_handle(fr, PVF_FLUSH, ino, fi, 0);
}

/* The handle goes: forget its mark before Python may hand its number out again. */
static void op_release(fuse_req_t fr, fuse_ino_t ino, struct fuse_file_info *fi)
{
    pvf_quiet_has(front_of(fr), fi->fh, 1);
    pvf_releasing(front_of(fr), ino);
    pvf_behind_has(front_of(fr), fi->fh, 1);
    op_handle(fr, PVF_RELEASE, ino, fi, 0);
}

static void op_fsync(fuse_req_t fr, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    op_handle(fr, PVF_FSYNC, ino, fi, datasync != 0);
}

static void op_opendir(fuse_req_t fr, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pvf_req *r = plain(fr, PVF_OPENDIR, ino, fi);

    if (r != NULL)
        queue(fr, r);
}

static void op_readdirplus(fuse_req_t fr, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
    struct pvf_req *r = plain(fr, PVF_READDIRPLUS, ino, fi);

    if (r == NULL)
        return;
    r->size = size;
    r->off = off;
    queue(fr, r);
}

static void op_releasedir(fuse_req_t fr, fuse_ino_t ino, struct fuse_file_info *fi)
{
    op_handle(fr, PVF_RELEASEDIR, ino, fi, 0);
}

static void op_fsyncdir(fuse_req_t fr, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    op_handle(fr, PVF_FSYNCDIR, ino, fi, datasync != 0);
}

static void op_statfs(fuse_req_t fr, fuse_ino_t ino)
{
    struct pvf_req *r = plain(fr, PVF_STATFS, ino, NULL);

    if (r != NULL)
        queue(fr, r);
}

static void op_setxattr(fuse_req_t fr, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
    size_t n = strlen(name), at = 0;
    struct pvf_req *r = req_new(fr, PVF_SETXATTR, n + size + 2);

    if (r == NULL)
        return;
    r->ino = ino;
    r->name = pvf_req_put(r, &at, name, n);
    r->data = pvf_req_put(r, &at, value, size);
    r->len = size;
    r->flags = (uint32_t)flags;
    queue(fr, r);
}

static void op_getxattr(fuse_req_t fr, fuse_ino_t ino, const char *name, size_t size)
{
    size_t n = strlen(name), at = 0;
    struct pvf_req *r;

    /* the probe before each write(2), while Python's cache says none (answers.c) */
    if (strcmp(name, "security.capability") == 0 && pvf_caps_answer(front_of(fr), ino)) {
        fuse_reply_err(fr, ENODATA);
        return;
    }
    r = req_new(fr, PVF_GETXATTR, n + 1);
    if (r == NULL)
        return;
    r->ino = ino;
    r->name = pvf_req_put(r, &at, name, n);
    r->size = size;
    queue(fr, r);
}

static void op_listxattr(fuse_req_t fr, fuse_ino_t ino, size_t size)
{
    struct pvf_req *r = plain(fr, PVF_LISTXATTR, ino, NULL);

    if (r == NULL)
        return;
    r->size = size;
    queue(fr, r);
}

static void op_removexattr(fuse_req_t fr, fuse_ino_t ino, const char *name)
{
    named(fr, PVF_REMOVEXATTR, ino, name);
}

static void op_access(fuse_req_t fr, fuse_ino_t ino, int mask)
{
    struct pvf_req *r = plain(fr, PVF_ACCESS, ino, NULL);

    if (r == NULL)
        return;
    r->flags = (uint32_t)mask;
    queue(fr, r);
}

/* A create in a directory the mount creates ahead in is answered here (creates.c). */
static void op_create(fuse_req_t fr, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    size_t n = strlen(name), at = 0;
    struct pvf_req *r;

    if (pvf_create_here(front_of(fr), fr, parent, name, mode, fi))
        return;
    r = req_new(fr, PVF_CREATE, n + 1);
    if (r == NULL)
        return;
    r->ino = parent;
    r->name = pvf_req_put(r, &at, name, n);
    r->mode = mode;
    r->flags = (uint32_t)fi->flags;
    queue(fr, r);
}

/* The ops table of the session (session.c); const: no state of its own. */
const struct fuse_lowlevel_ops pvf_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .readlink = op_readlink,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .flush = op_flush,
    .release = op_release,
    .fsync = op_fsync,
    .opendir = op_opendir,
    .readdirplus = op_readdirplus,
    .releasedir = op_releasedir,
    .fsyncdir = op_fsyncdir,
    .statfs = op_statfs,
    .setxattr = op_setxattr,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .removexattr = op_removexattr,
    .access = op_access,
    .create = op_create,
};
