/* replies.c -- the module's functions: reply_* answers a Request, readdir_reply fills a DirBuf.
 *
 * Each reply converts its arguments first (convert.c), so a bad argument raises and leaves
 * the request open for the caller's error reply; then it takes the request off the in-flight
 * list -- exactly once: a second reply raises ValueError -- and sends libfuse's reply, or,
 * for a fake request of the test bridge, keeps what it would have sent. Runs on the Python
 * thread with the GIL, released around large data replies. The replies are one unit because
 * they share that protocol (take, peek, done); what a request is lives in pyrequest.c.
 */
#include "pyfront.h"

#include <string.h>

#define PVF_BIG_REPLY (64 * 1024)   /* data replies this large leave the GIL to others */

/* The request's fuse_req_t, taken off the in-flight list (NULL + ValueError if answered
 * already or not a Request); *req the Request, whose ``fake`` says whether to keep the
 * reply instead of sending it (done). */
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
    fr = pvf_inflight_take(&self->session->f, self->r);
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

/* The reply's end: a fake request keeps fake_reply (NULL: building it failed, the exception
 * stands); a real one counts libfuse's result ret. */
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
    if (peek(module, obj) == NULL || pvf_py_fill_entry(st, entry, &e) < 0)
        return NULL;
    fr = take(module, obj, &req);
    if (req->fake)
        return done(req, 0, Py_BuildValue("(sN)", "entry", pvf_py_entry_tuple(&e)));
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
    if (peek(module, obj) == NULL || pvf_py_fill_entry(st, entry, &e) < 0)
        return NULL;
    fr = take(module, obj, &req);
    if (req->fake)
        return done(req, 0, Py_BuildValue("(sN)", "attr", pvf_py_entry_tuple(&e)));
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
    if (peek(module, obj) == NULL || pvf_py_fill_file_info(st, info, &fi) < 0)
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
    if (peek(module, obj) == NULL || pvf_py_fill_entry(st, entry, &e) < 0
        || pvf_py_fill_file_info(st, info, &fi) < 0)
        return NULL;
    fr = take(module, obj, &req);
    if (req->fake)
        return done(req, 0, Py_BuildValue("(sNKiii)", "create", pvf_py_entry_tuple(&e),
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
    if (peek(module, obj) == NULL || pvf_py_get_u64(s, st->n_bsize, &bsize) < 0
        || pvf_py_get_u64(s, st->n_frsize, &frsize) < 0
        || pvf_py_get_u64(s, st->n_fblocks, &blocks) < 0
        || pvf_py_get_u64(s, st->n_bfree, &bfree) < 0
        || pvf_py_get_u64(s, st->n_bavail, &bavail) < 0
        || pvf_py_get_u64(s, st->n_files, &files) < 0
        || pvf_py_get_u64(s, st->n_ffree, &ffree) < 0
        || pvf_py_get_u64(s, st->n_favail, &favail) < 0
        || pvf_py_get_u64(s, st->n_namemax, &namemax) < 0)
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
    if (pvf_py_fill_entry(st, entry, &e) < 0)
        return NULL;
    need = fuse_add_direntry_plus(NULL, d->buf + d->used, d->size - d->used, name, &e, off);
    if (need > d->size - d->used)
        Py_RETURN_FALSE;   /* full: libfuse wrote nothing; the entry comes next time */
    d->used += need;
    d->entries++;
    Py_RETURN_TRUE;
}

/* The module's functions (module.c's PyModuleDef lists this table). */
PyMethodDef pvf_py_reply_methods[] = {
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
