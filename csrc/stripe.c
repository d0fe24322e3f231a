/* stripe.c -- pvfs._native.stripe_transfer(): one read or write of a striped file.
 *
 * It takes Python's arguments, splits the I/O description over the share ranks
 * (xfer/split.c: the stripe math of layout/intersect.py, each daemon's prefix around one
 * shared header) and runs the exchange (xfer/exchange.c, the GIL released) -- one call per
 * request, no per-daemon Python work (issue 30).
 */
#include "transfer.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>


const char pv_stripe_transfer_doc[] =
"stripe_transfer(socks, head, buf, regions, ssize, direction, timeout, sent=False)\n"
"    -> list[tuple[int, bytes | None, int] | None]\n\n"
"One read or write of a striped file: split it over the share ranks, frame and run it.\n\n"
"Args:\n"
"    socks: one entry per share rank (its length is the stripe's pcount): the socket fd of\n"
"        the daemon holding that share, or -1/None for a rank the request does not touch.\n"
"    head: the msgpack header every daemon gets; each rank's frame prefix is built here\n"
"        (bulk length: the rank's stream length for a write, 0 for a read).\n"
"    buf: the caller's buffer, at least the regions' total length (writable for a read);\n"
"        the regions' bytes are its first bytes, in order.\n"
"    regions: packed little-endian int64 (file offset, length) pairs, in buffer order.\n"
"    ssize: the stripe unit; rank r holds units u with u % pcount == r, unit u at local\n"
"        offset (u // pcount) * ssize (layout/stripe.py).\n"
"    direction: 1 write (each rank's bytes gathered from buf), 0 read (scattered into it).\n"
"    timeout: seconds for the whole call.\n"
"    sent: a read's requests went out before (client/pipeline.py's read-ahead): only their\n"
"        replies are received, each exactly (the next request's reply may follow it).\n\n"
"Returns:\n"
"    Per rank: None if the request does not touch it, else (0, reply_header_bytes, reach)\n"
"    or (errno, None, reach); reach is the end of the rank's last byte in its stripe file.\n\n"
"Raises:\n"
"    ValueError, TypeError: malformed arguments, or no socket for a touched rank (checked\n"
"    before any I/O).";

/* Check the regions against the buffer's length. -1 with ValueError set. */
static int regions_check(const Py_buffer *rv, Py_ssize_t buflen, size_t *nreg)
{
    const unsigned char *p = rv->buf;
    uint64_t total = 0;

    if (rv->len % 16 != 0) {
        PyErr_SetString(PyExc_ValueError, "regions must be packed int64 (offset, length) pairs");
        return -1;
    }
    *nreg = (size_t)rv->len / 16;
    for (size_t k = 0; k < *nreg; k++) {
        uint64_t off = le64(p + 16 * k), len = le64(p + 16 * k + 8);
        if (off >= PV_MAX_OFFSET || len > PV_MAX_OFFSET - off) {
            PyErr_Format(PyExc_ValueError, "region %zd (%lld, %lld) out of range",
                         (Py_ssize_t)k, (long long)off, (long long)len);
            return -1;
        }
        total += len;
        if (total > (uint64_t)buflen) {
            PyErr_Format(PyExc_ValueError, "the regions need more than the buffer's %zd bytes",
                         buflen);
            return -1;
        }
    }
    return 0;
}

/* The socket of every touched rank (rk[r].npiece > 0): an fd, once. -1 with an exception. */
static int socks_check(PyObject *seq, const struct rankio *rk, size_t pc, int *fds)
{
    for (size_t r = 0; r < pc; r++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)r);
        long fd = -1;

        if (o != Py_None) {
            fd = PyLong_AsLong(o);
            if (fd == -1 && PyErr_Occurred())
                return -1;
        }
        fds[r] = fd < 0 || fd > INT_MAX ? -1 : (int)fd;
        if (rk[r].npiece == 0)
            continue;
        if (fds[r] < 0) {
            PyErr_Format(PyExc_ValueError, "no socket for rank %zd, which the request touches",
                         (Py_ssize_t)r);
            return -1;
        }
        for (size_t q = 0; q < r; q++) {
            if (rk[q].npiece > 0 && fds[q] == fds[r]) {
                PyErr_Format(PyExc_ValueError, "sock_fd %d appears twice", fds[r]);
                return -1;
            }
        }
    }
    return 0;
}

/* Per rank: None, or (err, reply header or None, reach). NULL with an exception set. */
static PyObject *stripe_results(const struct xreq *reqs, const int *slot, size_t pc)
{
    PyObject *out = PyList_New((Py_ssize_t)pc);

    for (size_t r = 0; out != NULL && r < pc; r++) {
        const struct xreq *x = slot[r] < 0 ? NULL : &reqs[slot[r]];
        PyObject *t;

        if (x == NULL)
            t = Py_NewRef(Py_None);
        else if (x->err != 0)
            t = Py_BuildValue("(iOK)", x->err, Py_None, (unsigned long long)x->reach);
        else
            t = Py_BuildValue("(iy#K)", 0, x->hdr, (Py_ssize_t)x->hlen,
                              (unsigned long long)x->reach);
        if (t == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, (Py_ssize_t)r, t);
    }
    return out;
}

struct stripe_call {
    PyObject *socks;                  /* the fast sequence of sockets */
    Py_buffer head, buf, regions;
    struct split sp;
    struct rankio *rk;
    int *fds, *slot;                  /* per rank: its fd; its request's index or -1 */
    struct xreq *reqs;
    struct pollfd *pfds;
    size_t *map, n;
};

/* Take the arguments' buffers and check them; -1 with an exception set. */
static int stripe_parse(struct stripe_call *c, PyObject *socks, PyObject *head, PyObject *buf,
                        PyObject *regions, long long ssize, int dir)
{
    if (dir != 0 && dir != 1) {
        PyErr_Format(PyExc_ValueError, "bad direction %d", dir);
        return -1;
    }
    c->socks = PySequence_Fast(socks, "socks must be a sequence of socket fds");
    if (c->socks == NULL)
        return -1;
    c->sp.pc = (uint64_t)PySequence_Fast_GET_SIZE(c->socks);
    if (c->sp.pc < 1 || c->sp.pc > PV_MAX_PCOUNT || ssize < 1 || (uint64_t)ssize > PV_MAX_SSIZE) {
        PyErr_Format(PyExc_ValueError, "bad stripe: %zd ranks, unit %lld",
                     (Py_ssize_t)c->sp.pc, ssize);
        return -1;
    }
    c->sp.ssize = (uint64_t)ssize;
    if (PyObject_GetBuffer(head, &c->head, PyBUF_SIMPLE) < 0
        || PyObject_GetBuffer(regions, &c->regions, PyBUF_SIMPLE) < 0
        || PyObject_GetBuffer(buf, &c->buf, dir == 0 ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) {
        if (PyErr_ExceptionMatches(PyExc_BufferError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, dir == 0
                            ? "head, regions must be bytes-like; buf a writable contiguous buffer"
                            : "head, buf and regions must be bytes-like");
        }
        return -1;
    }
    if (c->head.len < 1 || (uint64_t)c->head.len > PV_MAX_HEADER) {
        PyErr_Format(PyExc_ValueError, "header of %zd bytes", c->head.len);
        return -1;
    }
    c->sp.regions = c->regions.buf;
    return regions_check(&c->regions, c->buf.len, &c->sp.nreg);
}

/* Split the request over the ranks and make one request per touched rank. -1 with an
 * exception set. */
static int stripe_plan(struct stripe_call *c, int dir)
{
    size_t pc = (size_t)c->sp.pc;

    c->rk = PyMem_Calloc(pc, sizeof(*c->rk));
    c->fds = PyMem_Calloc(pc, sizeof(*c->fds));
    c->slot = PyMem_Calloc(pc, sizeof(*c->slot));
    /* room for a pipelined write's owed replies too (stripe_send): two per rank */
    c->reqs = PyMem_Calloc(2 * pc, sizeof(*c->reqs));
    c->pfds = PyMem_Calloc(2 * pc, sizeof(*c->pfds));
    c->map = PyMem_Calloc(2 * pc, sizeof(*c->map));
    if (c->rk == NULL || c->fds == NULL || c->slot == NULL || c->reqs == NULL
        || c->pfds == NULL || c->map == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    pv_split_walk(&c->sp, c->rk);        /* pass 1: count */
    if (socks_check(c->socks, c->rk, pc, c->fds) < 0)
        return -1;
    for (size_t r = 0; r < pc; r++) {
        c->slot[r] = -1;
        if (c->rk[r].npiece == 0)
            continue;
        c->slot[r] = (int)c->n;
        if (pv_rank_request(&c->reqs[c->n++], &c->rk[r], c->fds[r], dir, c->head.buf,
                            (size_t)c->head.len) < 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    c->sp.base = c->buf.buf;
    pv_split_walk(&c->sp, c->rk);        /* pass 2: fill */
    return 0;
}

static void stripe_release(struct stripe_call *c)
{
    for (size_t i = 0; c->reqs != NULL && i < c->n; i++)
        pv_xreq_release(&c->reqs[i]);
    if (c->head.obj != NULL)
        PyBuffer_Release(&c->head);
    if (c->buf.obj != NULL)
        PyBuffer_Release(&c->buf);
    if (c->regions.obj != NULL)
        PyBuffer_Release(&c->regions);
    PyMem_Free(c->rk);
    PyMem_Free(c->fds);
    PyMem_Free(c->slot);
    PyMem_Free(c->reqs);
    PyMem_Free(c->pfds);
    PyMem_Free(c->map);
    Py_XDECREF(c->socks);
}

PyObject *pv_py_stripe_transfer(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "socks", "head", "buf", "regions", "ssize", "direction",
                              "timeout", "sent", NULL };
    PyObject *socks, *head, *buf, *regions, *out = NULL;
    struct stripe_call c;
    long long ssize;
    double timeout;
    int dir, sent = 0;
    (void)module;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOLid|p:stripe_transfer", kwlist, &socks,
                                     &head, &buf, &regions, &ssize, &dir, &timeout, &sent))
        return NULL;
    if (!(timeout >= 0.0) || isnan(timeout))
        return PyErr_Format(PyExc_ValueError, "timeout must be >= 0");
    if (sent && dir != 0)
        return PyErr_Format(PyExc_ValueError, "only a read's replies can be taken alone");
    memset(&c, 0, sizeof(c));
    if (stripe_parse(&c, socks, head, buf, regions, ssize, dir) == 0
        && stripe_plan(&c, dir) == 0) {
        for (size_t i = 0; sent && i < c.n; i++) {
            c.reqs[i].out_i = c.reqs[i].nout;     /* sent before: only its reply, exactly */
            c.reqs[i].exact = 1;
        }
        if (pv_xreq_exchange(c.reqs, c.n, c.pfds, c.map, timeout) == 0)
            out = stripe_results(c.reqs, c.slot, (size_t)c.sp.pc);
    }
    stripe_release(&c);
    return out;
}


/* ------------------------------------------------------------------ pipelined writes */

const char pv_stripe_send_doc[] =
"stripe_send(socks, head, buf, regions, ssize, owed, timeout)\n"
"    -> tuple[list[tuple[int, int] | None], list[tuple[int, bytes | None] | None]]\n\n"
"A pipelined write of a striped file (client/pipeline.py): the write's request is sent\n"
"to every rank it touches as stripe_transfer(direction=1) would, but its replies are not\n"
"read: each connection owes its reply to a later call. In the same poll loop the reply\n"
"each rank's connection owes from the write before (owed[r] true) is read -- only that\n"
"reply: the next may follow it on the connection. With no regions, only the owed replies\n"
"are read (settling the pipe).\n\n"
"Args:\n"
"    socks, head, buf, regions, ssize, timeout: as stripe_transfer's (buf is not written).\n"
"    owed: one truth value per rank: whether socks[r] owes a reply.\n\n"
"Returns:\n"
"    (sent, replies): per rank, sent[r] is None if the write does not touch it, else\n"
"    (err, reach); replies[r] is None if nothing was owed, else (0, reply header bytes) or\n"
"    (errno, None).";

/* The owed replies: one exact read-only request per rank that owes one. -1 with an
 * exception set. */
static int owed_plan(struct stripe_call *c, PyObject *owed, int *oslot)
{
    size_t pc = (size_t)c->sp.pc;
    PyObject *seq = PySequence_Fast(owed, "owed must be a sequence of truth values");

    if (seq == NULL)
        return -1;
    if ((size_t)PySequence_Fast_GET_SIZE(seq) != pc) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "owed has %zd entries for %zd ranks",
                     PySequence_Fast_GET_SIZE(seq), (Py_ssize_t)pc);
        return -1;
    }
    for (size_t r = 0; r < pc; r++) {
        int t = PyObject_IsTrue(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)r));
        struct xreq *x;

        oslot[r] = -1;
        if (t < 0) {
            Py_DECREF(seq);
            return -1;
        }
        if (!t)
            continue;
        if (c->fds[r] < 0) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "rank %zd owes a reply but has no socket",
                         (Py_ssize_t)r);
            return -1;
        }
        oslot[r] = (int)c->n;
        x = &c->reqs[c->n++];
        x->fd = c->fds[r];
        x->dir = 1;
        x->exact = 1;
        x->ph = PH_SEND;              /* nothing to send: straight to the reply */
    }
    Py_DECREF(seq);
    return 0;
}

/* (sent, replies) as stripe_send's doc says. NULL with an exception set. */
static PyObject *send_results(const struct stripe_call *c, const int *oslot)
{
    size_t pc = (size_t)c->sp.pc;
    PyObject *sent = PyList_New((Py_ssize_t)pc), *replies = PyList_New((Py_ssize_t)pc);

    for (size_t r = 0; sent != NULL && replies != NULL && r < pc; r++) {
        const struct xreq *x = c->slot[r] < 0 ? NULL : &c->reqs[c->slot[r]];
        const struct xreq *o = oslot[r] < 0 ? NULL : &c->reqs[oslot[r]];
        PyObject *a, *b;

        a = x == NULL ? Py_NewRef(Py_None)
            : Py_BuildValue("(iK)", x->err, (unsigned long long)x->reach);
        if (o == NULL)
            b = Py_NewRef(Py_None);
        else if (o->err != 0)
            b = Py_BuildValue("(iO)", o->err, Py_None);
        else
            b = Py_BuildValue("(iy#)", 0, o->hdr, (Py_ssize_t)o->hlen);
        if (a == NULL || b == NULL) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            Py_CLEAR(sent);
            break;
        }
        PyList_SET_ITEM(sent, (Py_ssize_t)r, a);
        PyList_SET_ITEM(replies, (Py_ssize_t)r, b);
    }
    if (sent == NULL || replies == NULL) {
        Py_XDECREF(sent);
        Py_XDECREF(replies);
        return NULL;
    }
    return Py_BuildValue("(NN)", sent, replies);
}

PyObject *pv_py_stripe_send(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "socks", "head", "buf", "regions", "ssize", "owed", "timeout",
                              NULL };
    PyObject *socks, *head, *buf, *regions, *owed, *out = NULL;
    struct stripe_call c;
    long long ssize;
    double timeout;
    int *oslot = NULL;
    (void)module;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOLOd:stripe_send", kwlist, &socks,
                                     &head, &buf, &regions, &ssize, &owed, &timeout))
        return NULL;
    if (!(timeout >= 0.0) || isnan(timeout))
        return PyErr_Format(PyExc_ValueError, "timeout must be >= 0");
    memset(&c, 0, sizeof(c));
    if (stripe_parse(&c, socks, head, buf, regions, ssize, 1) == 0
        && stripe_plan(&c, 1) == 0) {  /* (socks_check took every rank's fd) */
        for (size_t i = 0; i < c.n; i++)
            c.reqs[i].nowait = 1;
        oslot = PyMem_Calloc((size_t)c.sp.pc, sizeof(*oslot));
        if (oslot == NULL)
            PyErr_NoMemory();
        else if (owed_plan(&c, owed, oslot) == 0
                 && pv_xreq_exchange(c.reqs, c.n, c.pfds, c.map, timeout) == 0)
            out = send_results(&c, oslot);
    }
    PyMem_Free(oslot);
    stripe_release(&c);
    return out;
}
