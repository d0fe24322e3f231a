/* pyrequest.c -- the Request and DirBuf types: what Python holds of one kernel request.
 *
 *   Request   one request Python must answer: op, uid, gid, pid, umask, args. Answered by
 *             exactly one reply_* call (replies.c); one dropped unanswered is answered EIO
 *             when collected, so the kernel never waits forever.
 *   DirBuf    readdirplus's buffer: readdir_reply() adds an entry, reply_dir() sends it.
 *
 * A drained record (bridge.c) becomes a Request here, its arguments decoded by op into the
 * tuple the handlers take. Separate from pysession.c, which drains the records, and from
 * replies.c, which answers them: this unit only says what a request is and how one ends.
 */
#include "pyfront.h"

#include <errno.h>
#include <pthread.h>

#define PVF_DIRBUF_MAX (1 << 20)

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
        fuse_req_t fr = pvf_inflight_take(&self->session->f, self->r);
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

PyType_Spec pvf_py_request_spec = {
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

PyType_Spec pvf_py_dirbuf_spec = {
    .name = "pvfs._fusefront.DirBuf",
    .basicsize = sizeof(DirBufObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = DirBuf_slots,
};

/* ------------------------------------------------------------- WriteData */
static void WriteData_dealloc(WriteDataObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);

    free(self->buf);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int WriteData_getbuffer(WriteDataObject *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->buf, self->len, 1, flags);
}

static PyObject *WriteData_get_frozen(WriteDataObject *self, void *c)
{
    (void)self;
    (void)c;
    Py_RETURN_TRUE;
}

static PyGetSetDef WriteData_getset[] = {
    { "frozen", (getter)WriteData_get_frozen, NULL,
      "True: nobody changes these bytes, so a view of them may be kept as they are", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot WriteData_slots[] = {
    { Py_tp_dealloc, WriteData_dealloc },
    { Py_tp_getset, WriteData_getset },
    { Py_bf_getbuffer, WriteData_getbuffer },
    { Py_tp_doc, "A write's bytes, handed over by the worker that received them." },
    { 0, NULL },
};

PyType_Spec pvf_py_writedata_spec = {
    .name = "pvfs._fusefront.WriteData",
    .basicsize = sizeof(WriteDataObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = WriteData_slots,
};

/* A write's bytes for Python: a read-only memoryview of the block the worker filled, taken
 * from the record (no copy; freed with the last view), or a copy where the record holds
 * them in its tail (requests the tests inject). */
static PyObject *write_data(fstate *st, struct pvf_req *r)
{
    WriteDataObject *w;
    PyObject *view;

    if (r->owned == NULL)
        return PyBytes_FromStringAndSize(r->data, (Py_ssize_t)r->len);
    w = PyObject_New(WriteDataObject, st->writedata_type);
    if (w == NULL)
        return NULL;
    w->buf = r->owned;
    w->len = (Py_ssize_t)r->len;
    r->owned = NULL;
    r->data = NULL;
    view = PyMemoryView_FromObject((PyObject *)w);
    Py_DECREF(w);
    return view;
}

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

/* ---------------------------------------------------------------- a record as a Request */
/* The arguments the handler of the record's op takes, as a tuple. */
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
    case PVF_WROTE:
        return Py_BuildValue("(KLN)", (unsigned long long)r->fh, (long long)r->off,
                             write_data(st, r));
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
    case PVF_CREATED:   /* (parent, name, mode, flags, ino, fh, now_ns, perm, gid) */
        return Py_BuildValue("(KyIIKKLII)", (unsigned long long)r->ino, r->name, r->mode,
                             r->flags, (unsigned long long)r->ino2, (unsigned long long)r->fh,
                             (long long)r->off, r->uid_set, r->gid_set);
    case PVF_UNLINKED:  /* (parent, name, ino, now_ns) */
        return Py_BuildValue("(KyKL)", (unsigned long long)r->ino, r->name,
                             (unsigned long long)r->ino2, (long long)r->off);
    default:
        return PyErr_Format(PyExc_SystemError, "unknown op %d", r->op);
    }
}

PyObject *pvf_py_request_wrap(SessionObject *session, fstate *st, struct pvf_req *r, int fake)
{
    RequestObject *req = PyObject_New(RequestObject, st->request_type);

    if (req == NULL) {   /* no object to answer it when it goes: answer the kernel here */
        if (!fake && r->fr != NULL)
            fuse_reply_err(r->fr, ENOMEM);
        pvf_req_free(r);
        return NULL;
    }
    req->r = r;
    req->session = (SessionObject *)Py_NewRef(session);
    req->reply = NULL;
    req->fake = fake;
    req->args = request_args(st, r);
    r->next = r->prev = NULL;
    pvf_inflight_add(&session->f, r);
    if (req->args == NULL) {   /* answered ENOMEM (or EIO) by the caller's error path */
        Py_DECREF(req);
        return NULL;
    }
    return (PyObject *)req;
}
