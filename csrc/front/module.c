/* module.c -- pvfs._fusefront: the Python side of the libfuse3 front end.
 *
 *   Session   one mount's session: mount(), fileno() (an eventfd, readable when requests
 *             wait), drain() -> ([Request], [(ino, nlookup)]), the kernel notifications,
 *             close(). Session() without a mount point is a bridge alone, for tests:
 *             _inject() queues fake requests from a C thread and their replies are kept.
 *   Request   one request Python must answer: op, uid, gid, pid, umask, args. Answered by
 *             exactly one reply_* call; a second raises ValueError, and one dropped
 *             unanswered is answered EIO when collected (the kernel never waits forever).
 *   DirBuf    readdirplus's buffer: readdir_reply() adds an entry, reply_dir() sends it.
 *
 * The reply functions take pyfuse3's plain data classes (EntryAttributes, FileInfo,
 * StatvfsData) or anything with the same attribute names; they run on the Python thread
 * with the GIL, released around large data replies and every notification.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "front.h"

#define PVF_BIG_REPLY (64 * 1024)   /* data replies this large leave the GIL to others */
#define PVF_DIRBUF_MAX (1 << 20)

typedef struct {
    PyTypeObject *session_type, *request_type, *dirbuf_type;
    PyObject *n_ino, *n_generation, *n_entry_timeout, *n_attr_timeout, *n_mode, *n_nlink,
        *n_uid, *n_gid, *n_rdev, *n_size, *n_blksize, *n_blocks, *n_atime, *n_mtime, *n_ctime,
        *n_fh, *n_direct_io, *n_keep_cache, *n_nonseekable, *n_bsize, *n_frsize,
        *n_fblocks, *n_bfree, *n_bavail, *n_files, *n_ffree, *n_favail, *n_namemax;
} fstate;

typedef struct {
    PyObject_HEAD
    struct pvf_front f;
    int ready;      /* pvf_bridge_init done */
    int closed;
} SessionObject;

typedef struct {
    PyObject_HEAD
    struct pvf_req *r;
    SessionObject *session;
    PyObject *args;
    PyObject *reply;    /* fake requests: what the reply would have sent */
    int fake;
} RequestObject;

typedef struct {
    PyObject_HEAD
    char *buf;
    size_t size, used;
    Py_ssize_t entries;
} DirBufObject;

static fstate *state_of_type(PyTypeObject *tp)
{
    return PyType_GetModuleState(tp);
}

/* ---------------------------------------------------------------- attribute conversion */
static int get_u64(PyObject *obj, PyObject *name, uint64_t *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    unsigned long long x;

    if (v == NULL)
        return -1;
    x = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = x;
    return 0;
}

static int get_i64(PyObject *obj, PyObject *name, int64_t *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    long long x;

    if (v == NULL)
        return -1;
    x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *out = x;
    return 0;
}

static int get_double(PyObject *obj, PyObject *name, double *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    double x;

    if (v == NULL)
        return -1;
    x = PyFloat_AsDouble(v);
    Py_DECREF(v);
    if (x == -1.0 && PyErr_Occurred())
        return -1;
    if (!(x >= 0.0) || isinf(x)) {
        PyErr_SetString(PyExc_ValueError, "timeouts must be finite and >= 0");
        return -1;
    }
    *out = x;
    return 0;
}

static int get_bool(PyObject *obj, PyObject *name, int *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    int x;

    if (v == NULL)
        return -1;
    x = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (x < 0)
        return -1;
    *out = x;
    return 0;
}

static void set_ts(struct timespec *ts, int64_t ns)
{
    int64_t s = ns / 1000000000, rem = ns % 1000000000;

    if (rem < 0) {   /* before 1970: floor, with a positive tv_nsec */
        rem += 1000000000;
        s -= 1;
    }
    ts->tv_sec = (time_t)s;
    ts->tv_nsec = (long)rem;
}

/* An EntryAttributes (or look-alike) as libfuse's entry parameter. */
static int fill_entry(fstate *st, PyObject *obj, struct fuse_entry_param *e)
{
    uint64_t ino, gen, mode, nlink, uid, gid, rdev, blksize, blocks;
    int64_t size, at, mt, ct;

    memset(e, 0, sizeof(*e));
    if (get_u64(obj, st->n_ino, &ino) < 0 || get_u64(obj, st->n_generation, &gen) < 0
        || get_double(obj, st->n_entry_timeout, &e->entry_timeout) < 0
        || get_double(obj, st->n_attr_timeout, &e->attr_timeout) < 0
        || get_u64(obj, st->n_mode, &mode) < 0 || get_u64(obj, st->n_nlink, &nlink) < 0
        || get_u64(obj, st->n_uid, &uid) < 0 || get_u64(obj, st->n_gid, &gid) < 0
        || get_u64(obj, st->n_rdev, &rdev) < 0 || get_i64(obj, st->n_size, &size) < 0
        || get_u64(obj, st->n_blksize, &blksize) < 0
        || get_u64(obj, st->n_blocks, &blocks) < 0 || get_i64(obj, st->n_atime, &at) < 0
        || get_i64(obj, st->n_mtime, &mt) < 0 || get_i64(obj, st->n_ctime, &ct) < 0)
        return -1;
    if (mode > 0xffffffffu || uid > 0xffffffffu || gid > 0xffffffffu || size < 0) {
        PyErr_SetString(PyExc_ValueError, "entry attribute out of range");
        return -1;
    }
    e->ino = ino;
    e->generation = gen;
    e->attr.st_ino = ino;
    e->attr.st_mode = (mode_t)mode;
    e->attr.st_nlink = (nlink_t)nlink;
    e->attr.st_uid = (uid_t)uid;
    e->attr.st_gid = (gid_t)gid;
    e->attr.st_rdev = (dev_t)rdev;
    e->attr.st_size = (off_t)size;
    e->attr.st_blksize = (blksize_t)blksize;
    e->attr.st_blocks = (blkcnt_t)blocks;
    set_ts(&e->attr.st_atim, at);
    set_ts(&e->attr.st_mtim, mt);
    set_ts(&e->attr.st_ctim, ct);
    return 0;
}

static int fill_file_info(fstate *st, PyObject *obj, struct fuse_file_info *fi)
{
    int direct, keep, nonseek;

    memset(fi, 0, sizeof(*fi));
    if (PyLong_Check(obj)) {   /* opendir's handlers return the fh alone */
        fi->fh = PyLong_AsUnsignedLongLong(obj);
        return fi->fh == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
    }
    if (get_u64(obj, st->n_fh, &fi->fh) < 0 || get_bool(obj, st->n_direct_io, &direct) < 0
        || get_bool(obj, st->n_keep_cache, &keep) < 0
        || get_bool(obj, st->n_nonseekable, &nonseek) < 0)
        return -1;
    fi->direct_io = (unsigned)direct;
    fi->keep_cache = (unsigned)keep;
    fi->nonseekable = (unsigned)nonseek;
    return 0;
}

static PyObject *entry_tuple(const struct fuse_entry_param *e)
{
    return Py_BuildValue("KKddIKIIKLKKLLL", (unsigned long long)e->ino,
                         (unsigned long long)e->generation, e->entry_timeout, e->attr_timeout,
                         (unsigned)e->attr.st_mode, (unsigned long long)e->attr.st_nlink,
                         (unsigned)e->attr.st_uid, (unsigned)e->attr.st_gid,
                         (unsigned long long)e->attr.st_rdev, (long long)e->attr.st_size,
                         (unsigned long long)e->attr.st_blksize,
                         (unsigned long long)e->attr.st_blocks,
                         (long long)e->attr.st_atim.tv_sec * 1000000000 + e->attr.st_atim.tv_nsec,
                         (long long)e->attr.st_mtim.tv_sec * 1000000000 + e->attr.st_mtim.tv_nsec,
                         (long long)e->attr.st_ctim.tv_sec * 1000000000 + e->attr.st_ctim.tv_nsec);
}

/* ---------------------------------------------------------------- Request */
static PyObject *Request_get_op(RequestObject *self, void *c)
{
    (void)c;
    return PyLong_FromLong(self->r->op);
}

static PyObject *Request_get_uid(RequestObject *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(self->r->uid);
}

static PyObject *Request_get_gid(RequestObject *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(self->r->gid);
}

static PyObject *Request_get_pid(RequestObject *self, void *c)
{
    (void)c;
    return PyLong_FromLong(self->r->pid);
}

static PyObject *Request_get_umask(RequestObject *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(self->r->umask);
}

static PyObject *Request_get_args(RequestObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->args);
}

static PyObject *Request_get_answered(RequestObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->r->fr == NULL);
}

static PyObject *Request_get_reply(RequestObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->reply != NULL ? self->reply : Py_None);
}

static PyGetSetDef Request_getset[] = {
    { "op", (getter)Request_get_op, NULL, "the operation (OP_*)", NULL },
    { "uid", (getter)Request_get_uid, NULL, "the caller's uid", NULL },
    { "gid", (getter)Request_get_gid, NULL, "the caller's gid", NULL },
    { "pid", (getter)Request_get_pid, NULL, "the caller's pid", NULL },
    { "umask", (getter)Request_get_umask, NULL, "the caller's umask", NULL },
    { "args", (getter)Request_get_args, NULL, "the operation's arguments (a tuple)", NULL },
    { "answered", (getter)Request_get_answered, NULL, "whether a reply was sent", NULL },
    { "reply", (getter)Request_get_reply, NULL,
      "a fake request's reply as (kind, ...); None for real ones", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static void Request_dealloc(RequestObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);

    if (self->r != NULL) {
        fuse_req_t fr = pvf_inflight_take(self->r);
        if (fr != NULL && !self->fake) {
            pthread_mutex_lock(&self->session->f.lock);
            self->session->f.c.unanswered++;
            pthread_mutex_unlock(&self->session->f.lock);
            fuse_reply_err(fr, EIO);
        }
        pvf_req_free(self->r);
    }
    Py_XDECREF(self->args);
    Py_XDECREF(self->reply);
    Py_XDECREF(self->session);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyType_Slot Request_slots[] = {
    { Py_tp_dealloc, Request_dealloc },
    { Py_tp_getset, Request_getset },
    { Py_tp_doc, "A request of the kernel that Python answers (see reply_*)." },
    { 0, NULL },
};

static PyType_Spec Request_spec = {
    .name = "pvfs._fusefront.Request",
    .basicsize = sizeof(RequestObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Request_slots,
};

/* ---------------------------------------------------------------- DirBuf */
static void DirBuf_dealloc(DirBufObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);

    PyMem_Free(self->buf);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *DirBuf_get_used(DirBufObject *self, void *c)
{
    (void)c;
    return PyLong_FromSize_t(self->used);
}

static PyObject *DirBuf_get_entries(DirBufObject *self, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(self->entries);
}

static PyGetSetDef DirBuf_getset[] = {
    { "used", (getter)DirBuf_get_used, NULL, "bytes filled", NULL },
    { "entries", (getter)DirBuf_get_entries, NULL, "entries added", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot DirBuf_slots[] = {
    { Py_tp_dealloc, DirBuf_dealloc },
    { Py_tp_getset, DirBuf_getset },
    { Py_tp_doc, "A readdirplus reply being filled (the token of readdir handlers)." },
    { 0, NULL },
};

static PyType_Spec DirBuf_spec = {
    .name = "pvfs._fusefront.DirBuf",
    .basicsize = sizeof(DirBufObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = DirBuf_slots,
};

static PyObject *dirbuf_new(fstate *st, size_t size)
{
    DirBufObject *d = PyObject_New(DirBufObject, st->dirbuf_type);

    if (d == NULL)
        return NULL;
    if (size > PVF_DIRBUF_MAX)
        size = PVF_DIRBUF_MAX;
    d->size = size;
    d->used = 0;
    d->entries = 0;
    d->buf = PyMem_Malloc(size > 0 ? size : 1);
    if (d->buf == NULL) {
        Py_DECREF(d);
        return PyErr_NoMemory();
    }
    return (PyObject *)d;
}

/* ---------------------------------------------------------------- replies */
/* The request's fuse_req_t, taken off the in-flight list (NULL + ValueError if answered
 * already or not a Request). *fake says whether to keep the reply instead of sending it. */
static fuse_req_t take(PyObject *module, PyObject *obj, RequestObject **req)
{
    fstate *st = PyModule_GetState(module);
    RequestObject *self;
    fuse_req_t fr;

    if (!PyObject_TypeCheck(obj, st->request_type)) {
        PyErr_Format(PyExc_TypeError, "expected a Request, not %.100s", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    self = (RequestObject *)obj;
    fr = pvf_inflight_take(self->r);
    if (fr == NULL) {
        PyErr_SetString(PyExc_ValueError, "the request was answered already");
        return NULL;
    }
    *req = self;
    return fr;
}

/* Check a request can be answered, without taking it (conversions come first, so a bad
 * argument leaves the request open for the caller's error reply). */
static RequestObject *peek(PyObject *module, PyObject *obj)
{
    fstate *st = PyModule_GetState(module);

    if (!PyObject_TypeCheck(obj, st->request_type)) {
        PyErr_Format(PyExc_TypeError, "expected a Request, not %.100s", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (((RequestObject *)obj)->r->fr == NULL) {
        PyErr_SetString(PyExc_ValueError, "the request was answered already");
        return NULL;
    }
    return (RequestObject *)obj;
}

static PyObject *done(RequestObject *req, int ret, PyObject *fake_reply)
{
    if (req->fake) {
        if (fake_reply == NULL)
            return NULL;
        Py_XSETREF(req->reply, fake_reply);
    } else {
        Py_XDECREF(fake_reply);
        pvf_counted_reply(&req->session->f, ret);
    }
    Py_RETURN_NONE;
}

static PyObject *py_reply_err(PyObject *module, PyObject *args)
{
    PyObject *obj;
    RequestObject *req = NULL;
    fuse_req_t fr;
    int code;

    if (!PyArg_ParseTuple(args, "Oi:reply_err", &obj, &code))
        return NULL;
    if (code < 0 || code > 4095)
        return PyErr_Format(PyExc_ValueError, "errno must be 0..4095, not %d", code);
    if ((fr = take(module, obj, &req)) == NULL)
        return NULL;
    if (req->fake)
        return done(req, 0, Py_BuildValue("(si)", "err", code));
    return done(req, fuse_reply_err(fr, code), NULL);
}

static PyObject *py_reply_none(PyObject *module, PyObject *obj)
{
    RequestObject *req = NULL;
    fuse_req_t fr = take(module, obj, &req);

    if (fr == NULL)
        return NULL;
    if (req->fake)
        return done(req, 0, Py_BuildValue("(s)", "none"));
    fuse_reply_none(fr);
    return done(req, 0, NULL);
}

static PyObject *py_reply_entry(PyObject *module, PyObject *args)
{
    fstate *st = PyModule_GetState(module);
    PyObject *obj, *entry;
    RequestObject *req = NULL;
    struct fuse_entry_param e;
    fuse_req_t fr;

    if (!PyArg_ParseTuple(args, "OO:reply_entry", &obj, &entry))
        return NULL;
    if (peek(module, obj) == NULL || fill_entry(st, entry, &e) < 0)
        return NULL;
    fr = take(module, obj, &req);
    if (req->fake)
        return done(req, 0, Py_BuildValue("(sN)", "entry", entry_tuple(&e)));
    return done(req, fuse_reply_entry(fr, &e), NULL);
}

static PyObject *py_reply_attr(PyObject *module, PyObject *args)
{
    fstate *st = PyModule_GetState(module);
    PyObject *obj, *entry;
    RequestObject *req = NULL;
    struct fuse_entry_param e;
    fuse_req_t fr;

    if (!PyArg_ParseTuple(args, "OO:reply_attr", &obj, &entry))
        return NULL;
    if (peek(module, obj) == NULL || fill_entry(st, entry, &e) < 0)
        return NULL;
    fr = take(module, obj, &req);
    if (req->fake)
        return done(req, 0, Py_BuildValue("(sN)", "attr", entry_tuple(&e)));
    return done(req, fuse_reply_attr(fr, &e.attr, e.attr_timeout), NULL);
}

static PyObject *py_reply_open(PyObject *module, PyObject *args)
{
    fstate *st = PyModule_GetState(module);
    PyObject *obj, *info;
    RequestObject *req = NULL;
    struct fuse_file_info fi;
    fuse_req_t fr;

    if (!PyArg_ParseTuple(args, "OO:reply_open", &obj, &info))
        return NULL;
    if (peek(module, obj) == NULL || fill_file_info(st, info, &fi) < 0)
        return NULL;
    fr = take(module, obj, &req);
    if (req->fake)
        return done(req, 0, Py_BuildValue("(sKiii)", "open", (unsigned long long)fi.fh,
                                          fi.direct_io, fi.keep_cache, fi.nonseekable));
    return done(req, fuse_reply_open(fr, &fi), NULL);
}

static PyObject *py_reply_create(PyObject *module, PyObject *args)
{
    fstate *st = PyModule_GetState(module);
    PyObject *obj, *entry, *info;
    RequestObject *req = NULL;
    struct fuse_entry_param e;
    struct fuse_file_info fi;
    fuse_req_t fr;

    if (!PyArg_ParseTuple(args, "OOO:reply_create", &obj, &entry, &info))
        return NULL;
    if (peek(module, obj) == NULL || fill_entry(st, entry, &e) < 0
        || fill_file_info(st, info, &fi) < 0)
        return NULL;
    fr = take(module, obj, &req);
    if (req->fake)
        return done(req, 0, Py_BuildValue("(sNKiii)", "create", entry_tuple(&e),
                                          (unsigned long long)fi.fh, fi.direct_io,
                                          fi.keep_cache, fi.nonseekable));
    return done(req, fuse_reply_create(fr, &e, &fi), NULL);
}

static PyObject *py_reply_data(PyObject *module, PyObject *args)
{
    PyObject *obj;
    RequestObject *req = NULL;
    Py_buffer view;
    fuse_req_t fr;
    int ret;

    if (!PyArg_ParseTuple(args, "Oy*:reply_data", &obj, &view))
        return NULL;
    fr = take(module, obj, &req);
    if (fr == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (req->fake) {
        PyObject *copy = PyBytes_FromStringAndSize(view.buf, view.len);
        PyBuffer_Release(&view);
        return done(req, 0, copy == NULL ? NULL : Py_BuildValue("(sN)", "data", copy));
    }
    if (view.len >= PVF_BIG_REPLY) {
        Py_BEGIN_ALLOW_THREADS
        ret = fuse_reply_buf(fr, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        ret = fuse_reply_buf(fr, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return done(req, ret, NULL);
}

static PyObject *py_reply_write(PyObject *module, PyObject *args)
{
    PyObject *obj;
    RequestObject *req = NULL;
    unsigned long long count;
    fuse_req_t fr;

    if (!PyArg_ParseTuple(args, "OK:reply_write", &obj, &count))
        return NULL;
    if ((fr = take(module, obj, &req)) == NULL)
        return NULL;
    if (req->fake)
        return done(req, 0, Py_BuildValue("(sK)", "write", count));
    return done(req, fuse_reply_write(fr, (size_t)count), NULL);
}

static PyObject *py_reply_statfs(PyObject *module, PyObject *args)
{
    fstate *st = PyModule_GetState(module);
    PyObject *obj, *s;
    RequestObject *req = NULL;
    struct statvfs v;
    uint64_t bsize, frsize, blocks, bfree, bavail, files, ffree, favail, namemax;
    fuse_req_t fr;

    if (!PyArg_ParseTuple(args, "OO:reply_statfs", &obj, &s))
        return NULL;
    if (peek(module, obj) == NULL || get_u64(s, st->n_bsize, &bsize) < 0
        || get_u64(s, st->n_frsize, &frsize) < 0 || get_u64(s, st->n_fblocks, &blocks) < 0
        || get_u64(s, st->n_bfree, &bfree) < 0 || get_u64(s, st->n_bavail, &bavail) < 0
        || get_u64(s, st->n_files, &files) < 0 || get_u64(s, st->n_ffree, &ffree) < 0
        || get_u64(s, st->n_favail, &favail) < 0 || get_u64(s, st->n_namemax, &namemax) < 0)
        return NULL;
    memset(&v, 0, sizeof(v));
    v.f_bsize = bsize;
    v.f_frsize = frsize;
    v.f_blocks = blocks;
    v.f_bfree = bfree;
    v.f_bavail = bavail;
    v.f_files = files;
    v.f_ffree = ffree;
    v.f_favail = favail;
    v.f_namemax = namemax;
    fr = take(module, obj, &req);
    if (req->fake)
        return done(req, 0, Py_BuildValue("(sKKKKKKKKK)", "statfs", bsize, frsize, blocks,
                                          bfree, bavail, files, ffree, favail, namemax));
    return done(req, fuse_reply_statfs(fr, &v), NULL);
}

static PyObject *py_reply_xattr(PyObject *module, PyObject *args)
{
    PyObject *obj;
    RequestObject *req = NULL;
    unsigned long long size;
    fuse_req_t fr;

    if (!PyArg_ParseTuple(args, "OK:reply_xattr", &obj, &size))
        return NULL;
    if ((fr = take(module, obj, &req)) == NULL)
        return NULL;
    if (req->fake)
        return done(req, 0, Py_BuildValue("(sK)", "xattr", size));
    return done(req, fuse_reply_xattr(fr, (size_t)size), NULL);
}

static PyObject *py_reply_readlink(PyObject *module, PyObject *args)
{
    PyObject *obj;
    RequestObject *req = NULL;
    const char *target;
    Py_ssize_t n;
    fuse_req_t fr;

    if (!PyArg_ParseTuple(args, "Oy#:reply_readlink", &obj, &target, &n))
        return NULL;
    if (peek(module, obj) == NULL)
        return NULL;
    if ((size_t)n != strlen(target))
        return PyErr_Format(PyExc_ValueError, "a link target has no NUL bytes");
    fr = take(module, obj, &req);
    if (req->fake)
        return done(req, 0, Py_BuildValue("(sy#)", "readlink", target, n));
    return done(req, fuse_reply_readlink(fr, target), NULL);
}

static PyObject *py_reply_dir(PyObject *module, PyObject *args)
{
    fstate *st = PyModule_GetState(module);
    PyObject *obj, *tok;
    RequestObject *req = NULL;
    DirBufObject *d;
    fuse_req_t fr;

    if (!PyArg_ParseTuple(args, "OO!:reply_dir", &obj, st->dirbuf_type, &tok))
        return NULL;
    d = (DirBufObject *)tok;
    if ((fr = take(module, obj, &req)) == NULL)
        return NULL;
    if (req->fake)
        return done(req, 0, Py_BuildValue("(sny#)", "dir", d->entries, d->buf,
                                          (Py_ssize_t)d->used));
    return done(req, fuse_reply_buf(fr, d->buf, d->used), NULL);
}

static PyObject *py_readdir_reply(PyObject *module, PyObject *args)
{
    fstate *st = PyModule_GetState(module);
    PyObject *tok, *entry;
    const char *name;
    Py_ssize_t n;
    long long off;
    struct fuse_entry_param e;
    DirBufObject *d;
    size_t need;

    if (!PyArg_ParseTuple(args, "O!y#OL:readdir_reply", st->dirbuf_type, &tok, &name, &n,
                          &entry, &off))
        return NULL;
    d = (DirBufObject *)tok;
    if (n == 0 || (size_t)n != strlen(name))
        return PyErr_Format(PyExc_ValueError, "a name is not empty and has no NUL bytes");
    if (fill_entry(st, entry, &e) < 0)
        return NULL;
    need = fuse_add_direntry_plus(NULL, d->buf + d->used, d->size - d->used, name, &e, off);
    if (need > d->size - d->used)
        Py_RETURN_FALSE;   /* full: libfuse wrote nothing; the entry comes next time */
    d->used += need;
    d->entries++;
    Py_RETURN_TRUE;
}

/* ---------------------------------------------------------------- Session */
static PyObject *raise_errno(int code, const char *what)
{
    PyObject *msg = PyUnicode_FromFormat("%s: %s", what, strerror(code));
    PyObject *exc;

    if (msg == NULL)
        return NULL;
    exc = PyObject_CallFunction(PyExc_OSError, "iO", code, msg);
    Py_DECREF(msg);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static PyObject *Session_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "mountpoint", "options", "writeback_cache", "export_support",
                              "posix_acl", "max_threads", "max_write", NULL };
    PyObject *mountpoint = Py_None, *options = NULL, *seq = NULL;
    int wb = 0, exp = 1, acl = 0;
    unsigned max_threads = 4, max_write = 1u << 20;
    SessionObject *self;
    char **argv = NULL;
    Py_ssize_t nopt = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO$pppII:Session", kwlist, &mountpoint,
                                     &options, &wb, &exp, &acl, &max_threads, &max_write))
        return NULL;
    if (max_threads < 1 || max_threads > 256)
        return PyErr_Format(PyExc_ValueError, "max_threads must be 1..256");
    if (max_write < 4096 || max_write > (1u << 24))
        return PyErr_Format(PyExc_ValueError, "max_write must be 4 KiB..16 MiB");
    if (mountpoint != Py_None && !PyUnicode_Check(mountpoint))
        return PyErr_Format(PyExc_TypeError, "mountpoint must be a str or None");
    if (options != NULL) {
        seq = PySequence_Fast(options, "options must be a sequence of str");
        if (seq == NULL)
            return NULL;
        nopt = PySequence_Fast_GET_SIZE(seq);
    }
    self = (SessionObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        goto err;
    if (pvf_bridge_init(&self->f) < 0) {
        raise_errno(errno, "eventfd");
        goto err;
    }
    self->ready = 1;
    self->f.max_threads = max_threads;
    self->f.max_write = max_write;
    self->f.want_writeback = (unsigned)wb;
    self->f.want_export = (unsigned)exp;
    self->f.want_acl = (unsigned)acl;
    if (mountpoint != Py_None) {
        /* argv: "pvfs" ["-o", "a,b,..."] -- libfuse parses the mount options itself */
        PyObject *joined = NULL, *comma = PyUnicode_FromString(",");
        int rc;
        if (comma == NULL)
            goto err;
        if (nopt > 0)
            joined = PyUnicode_Join(comma, seq);
        Py_DECREF(comma);
        if (nopt > 0 && joined == NULL)
            goto err;
        argv = PyMem_Calloc(4, sizeof(char *));
        if (argv == NULL) {
            Py_XDECREF(joined);
            PyErr_NoMemory();
            goto err;
        }
        argv[0] = "pvfs";
        if (joined != NULL) {
            argv[1] = "-o";
            argv[2] = (char *)PyUnicode_AsUTF8(joined);
            if (argv[2] == NULL) {
                Py_DECREF(joined);
                goto err;
            }
        }
        rc = pvf_session_new(&self->f, joined != NULL ? 3 : 1, argv);
        Py_XDECREF(joined);
        if (rc < 0) {
            PyErr_SetString(PyExc_ValueError, "libfuse refused the session's options");
            goto err;
        }
    }
    PyMem_Free(argv);
    Py_XDECREF(seq);
    return (PyObject *)self;
err:
    PyMem_Free(argv);
    Py_XDECREF(seq);
    Py_XDECREF(self);
    return NULL;
}

static int check_open(SessionObject *self)
{
    if (self->closed) {
        PyErr_SetString(PyExc_ValueError, "the session is closed");
        return -1;
    }
    return 0;
}

static PyObject *Session_mount(SessionObject *self, PyObject *args)
{
    const char *mountpoint;
    int rc, saved = 0;

    if (!PyArg_ParseTuple(args, "s:mount", &mountpoint))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    if (self->f.se == NULL)
        return PyErr_Format(PyExc_ValueError, "a bridge without a session cannot mount");
    if (self->f.mounted || self->f.thread_started)
        return PyErr_Format(PyExc_ValueError, "mounted already");
    Py_BEGIN_ALLOW_THREADS
    rc = pvf_session_mount(&self->f, mountpoint);
    if (rc == 0) {
        rc = pvf_session_start(&self->f);
        saved = errno;
        if (rc != 0)
            pvf_session_stop(&self->f);
    } else {
        saved = errno;
    }
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return raise_errno(saved, "mount");
    Py_RETURN_NONE;
}

static PyObject *Session_fileno(SessionObject *self, PyObject *ignored)
{
    (void)ignored;
    if (check_open(self) < 0)
        return NULL;
    return PyLong_FromLong(self->f.efd);
}

static PyObject *request_args(fstate *st, struct pvf_req *r)
{
    PyObject *fh;

    switch (r->op) {
    case PVF_LOOKUP:
    case PVF_UNLINK:
    case PVF_RMDIR:
    case PVF_REMOVEXATTR:
        return Py_BuildValue("(Ky)", (unsigned long long)r->ino, r->name);
    case PVF_GETATTR:
        if (!r->has_fh)
            return Py_BuildValue("(KO)", (unsigned long long)r->ino, Py_None);
        return Py_BuildValue("(KK)", (unsigned long long)r->ino, (unsigned long long)r->fh);
    case PVF_SETATTR:
        fh = r->has_fh ? PyLong_FromUnsignedLongLong(r->fh) : Py_NewRef(Py_None);
        if (fh == NULL)
            return NULL;
        return Py_BuildValue("(KNIIIILLL)", (unsigned long long)r->ino, fh, r->flags, r->mode,
                             r->uid_set, r->gid_set, (long long)r->size_set,
                             (long long)r->atime_ns, (long long)r->mtime_ns);
    case PVF_READLINK:
    case PVF_STATFS:
        return Py_BuildValue("(K)", (unsigned long long)r->ino);
    case PVF_MKNOD:
        return Py_BuildValue("(KyIK)", (unsigned long long)r->ino, r->name, r->mode,
                             (unsigned long long)r->rdev);
    case PVF_MKDIR:
        return Py_BuildValue("(KyI)", (unsigned long long)r->ino, r->name, r->mode);
    case PVF_SYMLINK:
        return Py_BuildValue("(Kyy)", (unsigned long long)r->ino, r->name, r->name2);
    case PVF_RENAME:
        return Py_BuildValue("(KyKyI)", (unsigned long long)r->ino, r->name,
                             (unsigned long long)r->ino2, r->name2, r->flags);
    case PVF_LINK:
        return Py_BuildValue("(KKy)", (unsigned long long)r->ino, (unsigned long long)r->ino2,
                             r->name);
    case PVF_OPEN:
    case PVF_OPENDIR:
        return Py_BuildValue("(KI)", (unsigned long long)r->ino, r->flags);
    case PVF_READ:
        return Py_BuildValue("(KLK)", (unsigned long long)r->fh, (long long)r->off,
                             (unsigned long long)r->size);
    case PVF_WRITE:
        return Py_BuildValue("(KLy#)", (unsigned long long)r->fh, (long long)r->off, r->data,
                             (Py_ssize_t)r->len);
    case PVF_FLUSH:
    case PVF_RELEASE:
    case PVF_RELEASEDIR:
        return Py_BuildValue("(K)", (unsigned long long)r->fh);
    case PVF_FSYNC:
    case PVF_FSYNCDIR:
        return Py_BuildValue("(KO)", (unsigned long long)r->fh, r->flags ? Py_True : Py_False);
    case PVF_READDIRPLUS:
        return Py_BuildValue("(KLN)", (unsigned long long)r->fh, (long long)r->off,
                             dirbuf_new(st, (size_t)r->size));
    case PVF_SETXATTR:
        return Py_BuildValue("(Kyy#I)", (unsigned long long)r->ino, r->name, r->data,
                             (Py_ssize_t)r->len, r->flags);
    case PVF_GETXATTR:
        return Py_BuildValue("(KyK)", (unsigned long long)r->ino, r->name,
                             (unsigned long long)r->size);
    case PVF_LISTXATTR:
        return Py_BuildValue("(KK)", (unsigned long long)r->ino, (unsigned long long)r->size);
    case PVF_ACCESS:
        return Py_BuildValue("(KI)", (unsigned long long)r->ino, r->flags);
    case PVF_CREATE:
        return Py_BuildValue("(KyII)", (unsigned long long)r->ino, r->name, r->mode, r->flags);
    default:
        return PyErr_Format(PyExc_SystemError, "unknown op %d", r->op);
    }
}

static PyObject *wrap_request(SessionObject *self, fstate *st, struct pvf_req *r, int fake)
{
    RequestObject *req = PyObject_New(RequestObject, st->request_type);

    if (req == NULL)
        return NULL;
    req->r = r;
    req->session = (SessionObject *)Py_NewRef(self);
    req->reply = NULL;
    req->fake = fake;
    req->args = request_args(st, r);
    r->next = r->prev = NULL;
    pvf_inflight_add(&self->f, r);
    if (req->args == NULL) {   /* answered ENOMEM (or EIO) by the caller's error path */
        Py_DECREF(req);
        return NULL;
    }
    return (PyObject *)req;
}

static PyObject *Session_drain(SessionObject *self, PyObject *ignored)
{
    fstate *st = state_of_type(Py_TYPE(self));
    PyObject *reqs = NULL, *forgets = NULL;
    struct pvf_req *r, *next;
    uint64_t *fl = NULL;
    size_t nf = 0;

    (void)ignored;
    if (check_open(self) < 0)
        return NULL;
    pvf_drain_wakeup(&self->f);
    r = pvf_take_all(&self->f, &fl, &nf);
    reqs = PyList_New(0);
    forgets = PyList_New((Py_ssize_t)nf);
    if (reqs == NULL || forgets == NULL)
        goto fail;
    for (size_t i = 0; i < nf; i++) {
        PyObject *pair = Py_BuildValue("(KK)", (unsigned long long)fl[2 * i],
                                       (unsigned long long)fl[2 * i + 1]);
        if (pair == NULL)
            goto fail;
        PyList_SET_ITEM(forgets, (Py_ssize_t)i, pair);
    }
    free(fl);
    fl = NULL;
    for (; r != NULL; r = next) {
        PyObject *req;
        next = r->next;
        /* a record whose object fails is answered by the object's dealloc (EIO) */
        req = wrap_request(self, st, r, r->fr == (fuse_req_t)r);
        if (req == NULL) {
            r = next;
            goto fail;
        }
        if (PyList_Append(reqs, req) < 0) {
            Py_DECREF(req);
            r = next;
            goto fail;
        }
        Py_DECREF(req);
    }
    return Py_BuildValue("(NN)", reqs, forgets);
fail:
    free(fl);
    /* the rest of the batch stays in flight as objects so nothing is lost: answer EIO */
    for (; r != NULL; r = next) {
        next = r->next;
        if (r->fr != NULL && r->fr != (fuse_req_t)r)
            fuse_reply_err(r->fr, EIO);
        pvf_req_free(r);
    }
    Py_XDECREF(reqs);
    Py_XDECREF(forgets);
    return NULL;
}

static PyObject *Session_get_ended(SessionObject *self, void *c)
{
    int done;

    (void)c;
    pthread_mutex_lock(&self->f.lock);
    done = self->f.loop_done;
    pthread_mutex_unlock(&self->f.lock);
    return PyBool_FromLong(done || self->closed);
}

static PyObject *Session_stats(SessionObject *self, PyObject *ignored)
{
    struct pvf_counters c;
    Py_ssize_t inflight = 0;

    (void)ignored;
    pthread_mutex_lock(&self->f.lock);
    c = self->f.c;
    pthread_mutex_unlock(&self->f.lock);
    if (self->ready) {
        for (struct pvf_req *r = self->f.inflight.next; r != &self->f.inflight; r = r->next)
            inflight++;
    }
    return Py_BuildValue("{sKsKsKsKsKsKsKsnsn}", "queued", c.queued, "forgets", c.forgets,
                         "wakeups", c.wakeups, "reply_failures", c.reply_failures,
                         "unanswered", c.unanswered, "enomem", c.enomem,
                         "quiet_flushes", c.quiet_flushes, "inflight", inflight,
                         "quiet_handles", (Py_ssize_t)self->f.quiet.n);
}

static PyObject *Session_invalidate_inode(SessionObject *self, PyObject *args)
{
    unsigned long long ino;
    int attr_only = 0, ret;

    if (!PyArg_ParseTuple(args, "K|p:invalidate_inode", &ino, &attr_only))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    ret = pvf_notify_inval_inode(&self->f, ino, attr_only);
    Py_END_ALLOW_THREADS
    if (ret < 0)
        return raise_errno(-ret, "invalidate_inode");
    Py_RETURN_NONE;
}

static PyObject *Session_invalidate_entry(SessionObject *self, PyObject *args)
{
    unsigned long long parent;
    const char *name;
    Py_ssize_t n;
    int ret;

    if (!PyArg_ParseTuple(args, "Ky#:invalidate_entry", &parent, &name, &n))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    if (n == 0 || (size_t)n != strlen(name))
        return PyErr_Format(PyExc_ValueError, "a name is not empty and has no NUL bytes");
    Py_BEGIN_ALLOW_THREADS
    ret = pvf_notify_inval_entry(&self->f, parent, name, (size_t)n);
    Py_END_ALLOW_THREADS
    if (ret < 0)
        return raise_errno(-ret, "invalidate_entry");
    Py_RETURN_NONE;
}

static PyObject *Session_quiet(SessionObject *self, PyObject *args)
{
    unsigned long long fh;

    if (!PyArg_ParseTuple(args, "K:quiet", &fh))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    if (pvf_quiet_add(&self->f, fh) < 0)
        return errno == ENOMEM ? PyErr_NoMemory() : PyErr_Format(PyExc_ValueError, "bad fh");
    Py_RETURN_NONE;
}

static PyObject *Session_is_quiet(SessionObject *self, PyObject *args)
{
    unsigned long long fh;
    int remove = 0;

    if (!PyArg_ParseTuple(args, "K|p:is_quiet", &fh, &remove))
        return NULL;
    return PyBool_FromLong(pvf_quiet_has(&self->f, fh, remove));
}

/* Answer what is left (queued, or in flight in Python) so no request outlives the session. */
static void answer_leftovers(SessionObject *self)
{
    uint64_t *fl = NULL;
    size_t nf = 0;
    struct pvf_req *r = pvf_take_all(&self->f, &fl, &nf), *next;

    free(fl);
    for (; r != NULL; r = next) {
        next = r->next;
        if (r->fr != NULL && r->fr != (fuse_req_t)r)
            fuse_reply_err(r->fr, ENODEV);
        pvf_req_free(r);
    }
    while (self->f.inflight.next != &self->f.inflight) {
        r = self->f.inflight.next;
        fuse_req_t fr = pvf_inflight_take(r);   /* its Request object frees the record */
        if (fr != NULL && fr != (fuse_req_t)r)
            fuse_reply_err(fr, ENODEV);
    }
}

static PyObject *Session_close(SessionObject *self, PyObject *ignored)
{
    (void)ignored;
    if (self->closed || !self->ready)
        Py_RETURN_NONE;
    self->closed = 1;
    Py_BEGIN_ALLOW_THREADS
    pvf_session_stop(&self->f);
    pvf_close_wait_notifiers(&self->f);
    Py_END_ALLOW_THREADS
    answer_leftovers(self);
    pvf_session_destroy(&self->f);
    Py_RETURN_NONE;
}

/* Test hook: n fake requests of one op queued from a C thread, as a worker would. */
struct inject {
    struct pvf_front *f;
    int op, n;
    uint64_t ino, size;
    int64_t off;
    const char *name, *data;
    size_t nlen, dlen;
    int failed;
};

static void *inject_main(void *arg)
{
    struct inject *in = arg;

    for (int i = 0; i < in->n; i++) {
        size_t at = 0;
        struct pvf_req *r = pvf_req_new(NULL, in->op, in->nlen + in->dlen + 2);
        if (r == NULL) {
            in->failed = 1;
            return NULL;
        }
        r->ino = r->fh = in->ino;
        r->ino2 = in->ino + 1;
        r->has_fh = 1;
        r->size = in->size;
        r->off = in->off + i;
        r->name = r->name2 = pvf_req_put(r, &at, in->name, in->nlen);
        r->data = pvf_req_put(r, &at, in->data, in->dlen);
        r->len = in->dlen;
        r->fr = (fuse_req_t)r;   /* fake: a non-NULL handle libfuse never sees */
        r->uid = 1000;
        r->gid = 1000;
        r->pid = 4242;
        r->umask = 022;
        pvf_enqueue(in->f, r);
    }
    return NULL;
}

static PyObject *Session_inject(SessionObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "op", "n", "ino", "name", "data", "off", "size", NULL };
    struct inject in;
    Py_buffer name = { 0 }, data = { 0 };
    unsigned long long ino = 1, size = 0;
    long long off = 0;
    pthread_t t;
    int err;

    memset(&in, 0, sizeof(in));
    in.n = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "i|iKy*y*LK:_inject", kwlist, &in.op, &in.n,
                                     &ino, &name, &data, &off, &size))
        return NULL;
    if (in.op < 1 || in.op >= PVF_NOPS || in.n < 0 || self->f.se != NULL || self->closed) {
        PyBuffer_Release(&name);
        PyBuffer_Release(&data);
        return PyErr_Format(PyExc_ValueError, "_inject: a valid op, on an open test bridge");
    }
    in.f = &self->f;
    in.ino = ino;
    in.size = size;
    in.off = off;
    in.name = name.buf != NULL ? name.buf : "";
    in.nlen = (size_t)name.len;
    in.data = data.buf != NULL ? data.buf : "";
    in.dlen = (size_t)data.len;
    Py_BEGIN_ALLOW_THREADS
    err = pthread_create(&t, NULL, inject_main, &in);
    if (err == 0)
        pthread_join(t, NULL);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&name);
    PyBuffer_Release(&data);
    if (err != 0)
        return raise_errno(err, "pthread_create");
    if (in.failed)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static void Session_dealloc(SessionObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject *r;

    if (self->ready) {
        r = Session_close(self, NULL);
        Py_XDECREF(r);
        pvf_bridge_fini(&self->f);
    }
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Session_methods[] = {
    { "mount", (PyCFunction)Session_mount, METH_VARARGS,
      "mount(mountpoint): mount and start the loop's worker threads" },
    { "fileno", (PyCFunction)Session_fileno, METH_NOARGS,
      "the eventfd that is readable when requests wait (trio.lowlevel.wait_readable)" },
    { "drain", (PyCFunction)Session_drain, METH_NOARGS,
      "drain() -> ([Request], [(ino, nlookup)]): every queued request and the forgets "
      "answered in C since the last drain" },
    { "stats", (PyCFunction)Session_stats, METH_NOARGS, "the bridge's counters (a dict)" },
    { "invalidate_inode", (PyCFunction)Session_invalidate_inode, METH_VARARGS,
      "invalidate_inode(ino, attr_only=False): drop the kernel's attributes (and pages)" },
    { "invalidate_entry", (PyCFunction)Session_invalidate_entry, METH_VARARGS,
      "invalidate_entry(parent, name): drop the kernel's entry of a name" },
    { "quiet", (PyCFunction)Session_quiet, METH_VARARGS,
      "quiet(fh): this handle's flush needs nothing; answered in C until its release" },
    { "is_quiet", (PyCFunction)Session_is_quiet, METH_VARARGS,
      "is_quiet(fh, remove=False): whether fh is marked (tests)" },
    { "close", (PyCFunction)Session_close, METH_NOARGS,
      "unmount, stop the loop, answer what is left ENODEV, free the session" },
    { "_inject", (PyCFunction)(void (*)(void))Session_inject, METH_VARARGS | METH_KEYWORDS,
      "tests: queue n fake requests of op from a C thread (bridge without a session)" },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef Session_getset[] = {
    { "ended", (getter)Session_get_ended, NULL, "the loop returned (or the session closed)",
      NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot Session_slots[] = {
    { Py_tp_new, Session_new },
    { Py_tp_dealloc, Session_dealloc },
    { Py_tp_methods, Session_methods },
    { Py_tp_getset, Session_getset },
    { Py_tp_doc, "Session(mountpoint=None, options=(), *, writeback_cache=False, "
                 "export_support=True, posix_acl=False, max_threads=4, max_write=1 MiB)" },
    { 0, NULL },
};

static PyType_Spec Session_spec = {
    .name = "pvfs._fusefront.Session",
    .basicsize = sizeof(SessionObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Session_slots,
};

/* ---------------------------------------------------------------- module */
static PyMethodDef module_methods[] = {
    { "reply_err", py_reply_err, METH_VARARGS, "reply_err(req, errno) (0: success)" },
    { "reply_none", py_reply_none, METH_O, "reply_none(req)" },
    { "reply_entry", py_reply_entry, METH_VARARGS, "reply_entry(req, EntryAttributes)" },
    { "reply_attr", py_reply_attr, METH_VARARGS,
      "reply_attr(req, EntryAttributes): its attributes, for its attr_timeout" },
    { "reply_open", py_reply_open, METH_VARARGS, "reply_open(req, FileInfo or fh)" },
    { "reply_create", py_reply_create, METH_VARARGS,
      "reply_create(req, EntryAttributes, FileInfo)" },
    { "reply_data", py_reply_data, METH_VARARGS, "reply_data(req, bytes-like)" },
    { "reply_buf", py_reply_data, METH_VARARGS, "reply_buf(req, bytes-like): = reply_data" },
    { "reply_write", py_reply_write, METH_VARARGS, "reply_write(req, count)" },
    { "reply_statfs", py_reply_statfs, METH_VARARGS, "reply_statfs(req, StatvfsData)" },
    { "reply_xattr", py_reply_xattr, METH_VARARGS, "reply_xattr(req, size)" },
    { "reply_readlink", py_reply_readlink, METH_VARARGS, "reply_readlink(req, target)" },
    { "reply_dir", py_reply_dir, METH_VARARGS, "reply_dir(req, DirBuf)" },
    { "readdir_reply", py_readdir_reply, METH_VARARGS,
      "readdir_reply(token, name, EntryAttributes, next_offset) -> bool: add an entry "
      "(False: the buffer is full, the entry was not added)" },
    { NULL, NULL, 0, NULL },
};

static int intern(PyObject **slot, const char *s)
{
    *slot = PyUnicode_InternFromString(s);
    return *slot == NULL ? -1 : 0;
}

static int module_exec(PyObject *m)
{
    fstate *st = PyModule_GetState(m);
    static const struct { const char *name; int value; } ops[] = {
        { "OP_LOOKUP", PVF_LOOKUP }, { "OP_GETATTR", PVF_GETATTR },
        { "OP_SETATTR", PVF_SETATTR }, { "OP_READLINK", PVF_READLINK },
        { "OP_MKNOD", PVF_MKNOD }, { "OP_MKDIR", PVF_MKDIR }, { "OP_UNLINK", PVF_UNLINK },
        { "OP_RMDIR", PVF_RMDIR }, { "OP_SYMLINK", PVF_SYMLINK }, { "OP_RENAME", PVF_RENAME },
        { "OP_LINK", PVF_LINK }, { "OP_OPEN", PVF_OPEN }, { "OP_READ", PVF_READ },
        { "OP_WRITE", PVF_WRITE }, { "OP_FLUSH", PVF_FLUSH }, { "OP_RELEASE", PVF_RELEASE },
        { "OP_FSYNC", PVF_FSYNC }, { "OP_OPENDIR", PVF_OPENDIR },
        { "OP_READDIRPLUS", PVF_READDIRPLUS }, { "OP_RELEASEDIR", PVF_RELEASEDIR },
        { "OP_FSYNCDIR", PVF_FSYNCDIR }, { "OP_STATFS", PVF_STATFS },
        { "OP_SETXATTR", PVF_SETXATTR }, { "OP_GETXATTR", PVF_GETXATTR },
        { "OP_LISTXATTR", PVF_LISTXATTR }, { "OP_REMOVEXATTR", PVF_REMOVEXATTR },
        { "OP_ACCESS", PVF_ACCESS }, { "OP_CREATE", PVF_CREATE },
        { "SET_MODE", PVF_SET_MODE }, { "SET_UID", PVF_SET_UID }, { "SET_GID", PVF_SET_GID },
        { "SET_SIZE", PVF_SET_SIZE }, { "SET_ATIME", PVF_SET_ATIME },
        { "SET_MTIME", PVF_SET_MTIME }, { "SET_CTIME", PVF_SET_CTIME },
        { "FUSE_VERSION", FUSE_VERSION },
    };

    if (intern(&st->n_ino, "st_ino") < 0 || intern(&st->n_generation, "generation") < 0
        || intern(&st->n_entry_timeout, "entry_timeout") < 0
        || intern(&st->n_attr_timeout, "attr_timeout") < 0 || intern(&st->n_mode, "st_mode") < 0
        || intern(&st->n_nlink, "st_nlink") < 0 || intern(&st->n_uid, "st_uid") < 0
        || intern(&st->n_gid, "st_gid") < 0 || intern(&st->n_rdev, "st_rdev") < 0
        || intern(&st->n_size, "st_size") < 0 || intern(&st->n_blksize, "st_blksize") < 0
        || intern(&st->n_blocks, "st_blocks") < 0 || intern(&st->n_atime, "st_atime_ns") < 0
        || intern(&st->n_mtime, "st_mtime_ns") < 0 || intern(&st->n_ctime, "st_ctime_ns") < 0
        || intern(&st->n_fh, "fh") < 0 || intern(&st->n_direct_io, "direct_io") < 0
        || intern(&st->n_keep_cache, "keep_cache") < 0
        || intern(&st->n_nonseekable, "nonseekable") < 0 || intern(&st->n_bsize, "f_bsize") < 0
        || intern(&st->n_frsize, "f_frsize") < 0 || intern(&st->n_fblocks, "f_blocks") < 0
        || intern(&st->n_bfree, "f_bfree") < 0 || intern(&st->n_bavail, "f_bavail") < 0
        || intern(&st->n_files, "f_files") < 0 || intern(&st->n_ffree, "f_ffree") < 0
        || intern(&st->n_favail, "f_favail") < 0 || intern(&st->n_namemax, "f_namemax") < 0)
        return -1;
    st->session_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Session_spec, NULL);
    st->request_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Request_spec, NULL);
    st->dirbuf_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &DirBuf_spec, NULL);
    if (st->session_type == NULL || st->request_type == NULL || st->dirbuf_type == NULL)
        return -1;
    if (PyModule_AddType(m, st->session_type) < 0 || PyModule_AddType(m, st->request_type) < 0
        || PyModule_AddType(m, st->dirbuf_type) < 0)
        return -1;
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        if (PyModule_AddIntConstant(m, ops[i].name, ops[i].value) < 0)
            return -1;
    }
    return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    fstate *st = PyModule_GetState(m);

    Py_VISIT(st->session_type);
    Py_VISIT(st->request_type);
    Py_VISIT(st->dirbuf_type);
    return 0;
}

static int module_clear(PyObject *m)
{
    fstate *st = PyModule_GetState(m);

    Py_CLEAR(st->session_type);
    Py_CLEAR(st->request_type);
    Py_CLEAR(st->dirbuf_type);
    Py_CLEAR(st->n_ino);
    Py_CLEAR(st->n_generation);
    Py_CLEAR(st->n_entry_timeout);
    Py_CLEAR(st->n_attr_timeout);
    Py_CLEAR(st->n_mode);
    Py_CLEAR(st->n_nlink);
    Py_CLEAR(st->n_uid);
    Py_CLEAR(st->n_gid);
    Py_CLEAR(st->n_rdev);
    Py_CLEAR(st->n_size);
    Py_CLEAR(st->n_blksize);
    Py_CLEAR(st->n_blocks);
    Py_CLEAR(st->n_atime);
    Py_CLEAR(st->n_mtime);
    Py_CLEAR(st->n_ctime);
    Py_CLEAR(st->n_fh);
    Py_CLEAR(st->n_direct_io);
    Py_CLEAR(st->n_keep_cache);
    Py_CLEAR(st->n_nonseekable);
    Py_CLEAR(st->n_bsize);
    Py_CLEAR(st->n_frsize);
    Py_CLEAR(st->n_fblocks);
    Py_CLEAR(st->n_bfree);
    Py_CLEAR(st->n_bavail);
    Py_CLEAR(st->n_files);
    Py_CLEAR(st->n_ffree);
    Py_CLEAR(st->n_favail);
    Py_CLEAR(st->n_namemax);
    return 0;
}

static void module_free(void *m)
{
    module_clear((PyObject *)m);
}

static PyModuleDef_Slot module_slots[] = {
    { Py_mod_exec, module_exec },
    { 0, NULL },
};

static struct PyModuleDef fusefront_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pvfs._fusefront",
    .m_doc = "The mount's libfuse3 low-level front end (docs/mount.md, \"C front end\").",
    .m_size = sizeof(fstate),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__fusefront(void)
{
    return PyModuleDef_Init(&fusefront_module);
}
