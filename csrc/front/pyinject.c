/* pyinject.c -- the test bridge's _inject: fake requests of one op queued from a C thread,
 * as a libfuse worker would queue them, on a Session made without a mount point (their
 * replies are kept by the Request, replies.c). Only tests call it.
 */
#include "pyfront.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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
        if (in->op == PVF_WRITE || in->op == PVF_WROTE) {   /* as op_write: a block apart */
            r->owned = malloc(in->dlen > 0 ? in->dlen : 1);
            if (r->owned == NULL) {
                pvf_req_free(r);
                in->failed = 1;
                return NULL;
            }
            memcpy(r->owned, in->data, in->dlen);
            r->data = r->owned;
        }
        r->fr = (fuse_req_t)r;   /* fake: a non-NULL handle libfuse never sees */
        r->uid = 1000;
        r->gid = 1000;
        r->pid = 4242;
        r->umask = 022;
        pvf_enqueue(in->f, r);
    }
    return NULL;
}

PyObject *pvf_py_inject(SessionObject *self, PyObject *args, PyObject *kwargs)
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
    if (err != 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (in.failed)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}
