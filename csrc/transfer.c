/* transfer.c -- pvfs._native.transfer(): ready-made frames through the exchange.
 *
 * transfer() takes the requests ready-made (frame heads and segment lists built by Python)
 * and runs them through xfer/exchange.c with the GIL released. stripe_transfer() (stripe.c)
 * builds its requests itself from a striped file's I/O description and runs them through
 * the same exchange (pv_xreq_exchange, here).
 */
#include "transfer.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

const char pv_transfer_doc[] =
"transfer(requests, timeout) -> list[tuple[int, bytes | None]]\n\n"
"Run request/reply exchanges on several sockets at once, without the GIL.\n\n"
"Args:\n"
"    requests: list of (sock_fd, head, buf, segs, direction). head is a full frame prefix\n"
"        and header; segs packs little-endian int64 (buf_offset, length) pairs. direction 1\n"
"        (write) sends the bulk gathered from buf at segs after head; direction 0 (read)\n"
"        receives a reply bulk of exactly sum(lengths) bytes into buf at segs.\n"
"    timeout: seconds for the whole call.\n\n"
"Returns:\n"
"    Per request (0, reply_header_bytes) or (errno, None): ETIMEDOUT, ECONNRESET, EPIPE,\n"
"    EPROTO for a bad reply frame.\n\n"
"Raises:\n"
"    ValueError, TypeError: malformed requests (checked before any I/O).";

/* The buffer views a parsed request holds (the exchange itself is plain C). */
struct views {
    Py_buffer head, buf;              /* .obj == NULL when not held */
};

/* Parse and check one request tuple; v holds its buffer views. -1 with an exception set. */
static int req_parse(struct xreq *r, struct views *v, PyObject *item)
{
    PyObject *head, *buf, *segs;
    Py_buffer sv = { 0 };
    const unsigned char *p;
    size_t nseg, k = 0;
    int rc = -1;

    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "request must be a tuple (sock_fd, head, buf, segs, direction)");
        return -1;
    }
    if (!PyArg_ParseTuple(item, "iOOOi", &r->fd, &head, &buf, &segs, &r->dir))
        return -1;
    if (r->fd < 0 || (r->dir != 0 && r->dir != 1)) {
        PyErr_Format(PyExc_ValueError, "bad sock_fd %d or direction %d", r->fd, r->dir);
        return -1;
    }
    if (PyObject_GetBuffer(head, &v->head, PyBUF_SIMPLE) < 0)
        goto not_buffer;
    if (buf != Py_None
        && PyObject_GetBuffer(buf, &v->buf, r->dir == 0 ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        goto not_buffer;
    if (PyObject_GetBuffer(segs, &sv, PyBUF_SIMPLE) < 0)
        goto not_buffer;
    if (sv.len % 16 != 0) {
        PyErr_SetString(PyExc_ValueError, "segs must be packed int64 (offset, length) pairs");
        goto out;
    }
    nseg = (size_t)sv.len / 16;
    r->out = calloc(nseg + 1, sizeof(struct iovec));
    r->in = calloc(nseg + 1, sizeof(struct iovec));
    if (r->out == NULL || r->in == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    if (v->head.len > 0) {
        r->out[0].iov_base = v->head.buf;
        r->out[0].iov_len = (size_t)v->head.len;
        r->nout = 1;
    }
    p = sv.buf;
    for (k = 0; k < nseg; k++) {
        int64_t off = (int64_t)le64(p + 16 * k), len = (int64_t)le64(p + 16 * k + 8);
        int64_t blen = v->buf.obj != NULL ? (int64_t)v->buf.len : 0;
        if (off < 0 || len < 0 || off > blen || len > blen - off) {
            PyErr_Format(PyExc_ValueError, "segment %zd (%lld, %lld) outside a buffer of %lld"
                         " bytes", (Py_ssize_t)k, (long long)off, (long long)len,
                         (long long)blen);
            goto out;
        }
        if (len == 0)
            continue;
        r->seg_total += (uint64_t)len;
        if (r->dir == 1) {
            r->out[r->nout].iov_base = (char *)v->buf.buf + off;
            r->out[r->nout++].iov_len = (size_t)len;
        } else {
            r->in[r->nin].iov_base = (char *)v->buf.buf + off;
            r->in[r->nin++].iov_len = (size_t)len;
        }
    }
    rc = 0;
    goto out;

not_buffer:
    /* BufferError for a read-only or non-contiguous buffer: a wrong type of argument. */
    if (PyErr_ExceptionMatches(PyExc_BufferError)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, r->dir == 0 && buf != Py_None
                        ? "head, segs must be bytes-like; buf a writable contiguous buffer"
                        : "head, buf and segs must be bytes-like");
    }
out:
    if (sv.obj != NULL)
        PyBuffer_Release(&sv);
    return rc;
}

static void views_release(struct views *v)
{
    if (v->head.obj != NULL)
        PyBuffer_Release(&v->head);
    if (v->buf.obj != NULL)
        PyBuffer_Release(&v->buf);
}

struct gil {
    PyThreadState *save;
};

/* poll(2) was interrupted: let Python run its signal handlers; KeyboardInterrupt ends the
 * call (-1, the exception set). */
static int check_signals(void *arg)
{
    struct gil *g = arg;
    int rc;

    PyEval_RestoreThread(g->save);
    rc = PyErr_CheckSignals();
    g->save = PyEval_SaveThread();
    return rc;
}

/* Run the exchange of n requests under one deadline, the GIL released. -1 if a signal
 * handler raised (exception set). */
int pv_xreq_exchange(struct xreq *reqs, size_t n, struct pollfd *pfds, size_t *map,
                     double timeout)
{
    struct gil g;
    int rc;

    g.save = PyEval_SaveThread();
    rc = pv_xreq_run(reqs, n, pfds, map, pv_deadline(timeout), check_signals, &g);
    PyEval_RestoreThread(g.save);
    return rc;
}

PyObject *pv_py_transfer(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "requests", "timeout", NULL };
    PyObject *reqlist, *seq = NULL, *out = NULL;
    double timeout;
    struct xreq *reqs = NULL;
    struct views *views = NULL;
    struct pollfd *pfds = NULL;
    size_t *map = NULL, n = 0, i;
    (void)module;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Od:transfer", kwlist, &reqlist, &timeout))
        return NULL;
    if (!(timeout >= 0.0) || isnan(timeout))
        return PyErr_Format(PyExc_ValueError, "timeout must be >= 0");
    seq = PySequence_Fast(reqlist, "requests must be a list of tuples");
    if (seq == NULL)
        return NULL;
    n = (size_t)PySequence_Fast_GET_SIZE(seq);
    reqs = PyMem_Calloc(n ? n : 1, sizeof(*reqs));
    views = PyMem_Calloc(n ? n : 1, sizeof(*views));
    pfds = PyMem_Calloc(n ? n : 1, sizeof(*pfds));
    map = PyMem_Calloc(n ? n : 1, sizeof(*map));
    if (reqs == NULL || views == NULL || pfds == NULL || map == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (i = 0; i < n; i++) {
        if (req_parse(&reqs[i], &views[i], PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i)) < 0)
            goto out;
        for (size_t k = 0; k < i; k++) {
            if (reqs[k].fd == reqs[i].fd) {
                PyErr_Format(PyExc_ValueError, "sock_fd %d appears twice", reqs[i].fd);
                goto out;
            }
        }
    }
    if (pv_xreq_exchange(reqs, n, pfds, map, timeout) < 0)
        goto out;
    out = PyList_New((Py_ssize_t)n);
    for (i = 0; out != NULL && i < n; i++) {
        PyObject *t = reqs[i].err != 0
            ? Py_BuildValue("(iO)", reqs[i].err, Py_None)
            : Py_BuildValue("(iy#)", 0, reqs[i].hdr, (Py_ssize_t)reqs[i].hlen);
        if (t == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, (Py_ssize_t)i, t);
    }
out:
    for (i = 0; reqs != NULL && views != NULL && i < n; i++) {
        pv_xreq_release(&reqs[i]);
        views_release(&views[i]);
    }
    PyMem_Free(reqs);
    PyMem_Free(views);
    PyMem_Free(pfds);
    PyMem_Free(map);
    Py_XDECREF(seq);
    return out;
}
