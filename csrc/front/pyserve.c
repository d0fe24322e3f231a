/* pyserve.c -- the Session methods that keep serve.c's state: the arena the block cache's
 * buffers live in (and warm.c's faulting of it ahead), the blocks Python publishes and
 * drops, the inodes read in C since Python last asked, and the test hooks that ask what a
 * worker would answer.
 */
#include "pyfront.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* serve_arena(buffer, block_size, max_read): the arena (an anonymous mmap the cache carves
 * its blocks from), held until the session closes. */
PyObject *pvf_py_serve_arena(SessionObject *self, PyObject *args)
{
    PyObject *obj;
    Py_ssize_t bs, max_read;

    if (!PyArg_ParseTuple(args, "Onn:serve_arena", &obj, &bs, &max_read))
        return NULL;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    if (self->has_arena)
        return PyErr_Format(PyExc_ValueError, "the session has an arena already");
    if (bs <= 0 || max_read < 0)
        return PyErr_Format(PyExc_ValueError, "bad block size or max_read");
    if (PyObject_GetBuffer(obj, &self->arena, PyBUF_SIMPLE) < 0)
        return NULL;
    if (pvf_serve_setup(&self->f, self->arena.buf, (size_t)self->arena.len, (size_t)bs,
                        (size_t)max_read) < 0) {
        PyBuffer_Release(&self->arena);
        return PyErr_Format(PyExc_ValueError,
                            "the arena must be whole blocks of a power-of-two size");
    }
    self->has_arena = 1;
    /* (a thread that cannot start: the pages are faulted in by the cache's writes instead) */
    (void)pvf_warm_start(&self->f.warm, self->arena.buf, (size_t)self->arena.len);
    Py_RETURN_NONE;
}

/* warm(upto): the arena's first upto bytes are faulted in, in the background (warm.c). */
PyObject *pvf_py_warm(SessionObject *self, PyObject *args)
{
    Py_ssize_t upto;

    if (!PyArg_ParseTuple(args, "n:warm", &upto))
        return NULL;
    if (!self->has_arena)
        return PyErr_Format(PyExc_ValueError, "no arena (serve_arena first)");
    if (upto > 0)
        pvf_warm_to(&self->f.warm, (size_t)upto);
    Py_RETURN_NONE;
}

/* Session_close, once no worker runs: serving ends, the arena is let go. */
void pvf_py_arena_release(SessionObject *self)
{
    if (!self->has_arena)
        return;
    Py_BEGIN_ALLOW_THREADS
    pvf_warm_stop(&self->f.warm);
    Py_END_ALLOW_THREADS
    pthread_mutex_lock(&self->f.lock);
    self->f.serve_max = 0;
    self->f.arena = NULL;
    pthread_mutex_unlock(&self->f.lock);
    PyBuffer_Release(&self->arena);
    self->has_arena = 0;
}

/* publish(ino, size, first, blocks) -> bool: blocks (arena buffers of one block each) are
 * blocks first.. of ino; reads ending within size are answered from them. */
PyObject *pvf_py_publish(SessionObject *self, PyObject *args)
{
    unsigned long long ino, size, first;
    PyObject *seq, *fast;
    const char **ptrs;
    Py_ssize_t n;
    int ret;

    if (!PyArg_ParseTuple(args, "KKKO:publish", &ino, &size, &first, &seq))
        return NULL;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    if (!self->has_arena)
        return PyErr_Format(PyExc_ValueError, "no arena (serve_arena first)");
    fast = PySequence_Fast(seq, "publish: blocks must be a sequence");
    if (fast == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    ptrs = malloc((size_t)(n > 0 ? n : 1) * sizeof(*ptrs));
    if (ptrs == NULL) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_buffer b;
        int ok;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, i), &b, PyBUF_SIMPLE) < 0)
            goto fail;
        ok = (size_t)b.len == self->f.block_size && pvf_serve_in_arena(&self->f, b.buf);
        ptrs[i] = b.buf;
        PyBuffer_Release(&b);   /* (the arena itself stays mapped: the session holds it) */
        if (!ok) {
            PyErr_Format(PyExc_ValueError, "publish: block %zd is not a block of the arena", i);
            goto fail;
        }
    }
    ret = pvf_serve_publish(&self->f, ino, size, first, (size_t)n, ptrs);
    free(ptrs);
    Py_DECREF(fast);
    if (ret < 0)
        return PyErr_NoMemory();
    return PyBool_FromLong(ret);
fail:
    free(ptrs);
    Py_DECREF(fast);
    return NULL;
}

/* serve_drop(ino): nothing of it is answered in C, and no worker replies from its blocks,
 * when this returns (it may wait for a reply being sent, or a stream read's exchange with
 * the daemons: the GIL is let go meanwhile). */
PyObject *pvf_py_serve_drop(SessionObject *self, PyObject *args)
{
    unsigned long long ino;

    if (!PyArg_ParseTuple(args, "K:serve_drop", &ino))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    pvf_serve_drop(&self->f, ino);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* serve_recent() -> [ino]: files read in C since the last call. */
PyObject *pvf_py_serve_recent(SessionObject *self, PyObject *ignored)
{
    size_t n;
    uint64_t *inos = pvf_serve_recent(&self->f, &n);
    PyObject *out = PyList_New((Py_ssize_t)n);

    (void)ignored;
    for (size_t i = 0; out != NULL && i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(inos[i]);
        if (v == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    free(inos);
    return out;
}

/* Test hook: _read_here(ino, off, size) -> bytes a worker would answer, or None. */
PyObject *pvf_py_read_here(SessionObject *self, PyObject *args)
{
    unsigned long long ino, off, size;
    struct iovec iov[PVF_SERVE_IOV];
    struct pvf_served *pin;
    PyObject *out;
    char *p;
    int n;

    if (!PyArg_ParseTuple(args, "KKK:_read_here", &ino, &off, &size))
        return NULL;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    if (!pvf_serve_take(&self->f, ino, off, size, iov, &n, &pin))
        Py_RETURN_NONE;
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (out != NULL) {
        p = PyBytes_AS_STRING(out);
        for (int i = 0; i < n; i++) {
            memcpy(p, iov[i].iov_base, iov[i].iov_len);
            p += iov[i].iov_len;
        }
    }
    pvf_serve_unpin(&self->f, pin);
    return out;
}

/* Test hook: _queued(ino, True) as a worker queueing a write or size change of ino for
 * Python does; _queued(ino, False) as its answer does. */
PyObject *pvf_py_queued(SessionObject *self, PyObject *args)
{
    unsigned long long ino;
    int begin;

    if (!PyArg_ParseTuple(args, "Kp:_queued", &ino, &begin))
        return NULL;
    if (begin) {
        pvf_written(&self->f, ino);
        pvf_mods_begin(&self->f, ino);
    } else {
        pvf_mods_end(&self->f, ino);
    }
    Py_RETURN_NONE;
}
