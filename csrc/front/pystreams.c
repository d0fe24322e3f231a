/* pystreams.c -- the Session methods that keep streams.c's state: the setup, the
 * connections Python hands over, the files it marks, and the test hook that asks what a
 * worker would answer from the daemons.
 */
#include "pyfront.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* stream_setup(niods, min_read, timeout) */
PyObject *pvf_py_stream_setup(SessionObject *self, PyObject *args)
{
    Py_ssize_t niods, min_read;
    double timeout;

    if (!PyArg_ParseTuple(args, "nnd:stream_setup", &niods, &min_read, &timeout))
        return NULL;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    if (niods <= 0 || min_read <= 0 ||
        pvf_stream_setup(&self->f, (size_t)niods, (size_t)min_read, timeout) < 0) {
        if (errno == ENOMEM)
            return PyErr_NoMemory();
        return PyErr_Format(PyExc_ValueError, "stream_setup: bad arguments or set already");
    }
    Py_RETURN_NONE;
}

/* stream_give(iod, fd): the fd is the workers' on return. */
PyObject *pvf_py_stream_give(SessionObject *self, PyObject *args)
{
    Py_ssize_t iod;
    int fd;

    if (!PyArg_ParseTuple(args, "ni:stream_give", &iod, &fd))
        return NULL;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    if (iod < 0 || pvf_stream_give(&self->f, (size_t)iod, fd) < 0) {
        if (errno == ENOMEM)
            return PyErr_NoMemory();
        return PyErr_Format(PyExc_ValueError, "stream_give: no daemon %zd or bad fd %d "
                            "(stream_setup first)", iod, fd);
    }
    Py_RETURN_NONE;
}

/* stream_conns(iod) -> int */
PyObject *pvf_py_stream_conns(SessionObject *self, PyObject *args)
{
    Py_ssize_t iod;

    if (!PyArg_ParseTuple(args, "n:stream_conns", &iod))
        return NULL;
    return PyLong_FromSize_t(iod < 0 ? 0 : pvf_stream_conns(&self->f, (size_t)iod));
}

/* stream_mark(ino, size, ssize, iods, head) -> bool */
PyObject *pvf_py_stream_mark(SessionObject *self, PyObject *args)
{
    unsigned long long ino, size, ssize;
    PyObject *iodlist, *seq;
    Py_buffer head;
    unsigned *iods;
    Py_ssize_t n;
    int ret;

    if (!PyArg_ParseTuple(args, "KKKOy*:stream_mark", &ino, &size, &ssize, &iodlist, &head))
        return NULL;
    if (pvf_py_check_open(self) < 0) {
        PyBuffer_Release(&head);
        return NULL;
    }
    seq = PySequence_Fast(iodlist, "iods must be a sequence of daemon numbers");
    if (seq == NULL) {
        PyBuffer_Release(&head);
        return NULL;
    }
    n = PySequence_Fast_GET_SIZE(seq);
    iods = PyMem_Calloc(n ? (size_t)n : 1, sizeof(unsigned));
    if (iods == NULL) {
        Py_DECREF(seq);
        PyBuffer_Release(&head);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred())
            goto fail;
        if (v < 0 || v > (1L << 20)) {
            PyErr_Format(PyExc_ValueError, "bad daemon number %ld", v);
            goto fail;
        }
        iods[i] = (unsigned)v;
    }
    ret = pvf_stream_mark(&self->f, ino, size, ssize, iods, (size_t)n, head.buf,
                          (size_t)head.len);
    PyMem_Free(iods);
    Py_DECREF(seq);
    PyBuffer_Release(&head);
    if (ret < 0) {
        if (errno == ENOMEM)
            return PyErr_NoMemory();
        return PyErr_Format(PyExc_ValueError, "stream_mark: bad stripe, daemon or header");
    }
    return PyBool_FromLong(ret);
fail:
    PyMem_Free(iods);
    Py_DECREF(seq);
    PyBuffer_Release(&head);
    return NULL;
}

/* Test hook: _stream_here(ino, off, size) -> bytes a worker would answer, or None. */
PyObject *pvf_py_stream_here(SessionObject *self, PyObject *args)
{
    unsigned long long ino, off, size;
    struct pvf_fetched got;
    PyObject *out;
    int ok;

    if (!PyArg_ParseTuple(args, "KKK:_stream_here", &ino, &off, &size))
        return NULL;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    ok = pvf_stream_fetch(&self->f, ino, off, (size_t)size, &got);
    Py_END_ALLOW_THREADS
    if (!ok)
        Py_RETURN_NONE;
    out = PyBytes_FromStringAndSize(got.buf, (Py_ssize_t)got.n);
    Py_BEGIN_ALLOW_THREADS
    pvf_stream_done(&self->f, &got);
    Py_END_ALLOW_THREADS
    return out;
}
