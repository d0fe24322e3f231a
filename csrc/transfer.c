/* transfer.c -- the client's scatter/gather: pvfs._native.transfer() and stripe_transfer().
 *
 * One request per I/O daemon connection: send a frame head (prefix + msgpack header), for
 * writes the bulk gathered straight from the user's buffer with sendmsg(2), then receive the
 * reply frame, its bulk scattered straight into the user's buffer with recvmsg(2) (thesis
 * §3.2.2: the client merges the daemons' streams without extra copies). All requests run at
 * once over poll(2) with the GIL released, under one deadline; one failing request does not
 * stop the others.
 *
 * transfer() takes the requests ready-made (frame heads and segment lists built by Python);
 * stripe_transfer() is one read or write of a striped file: it splits the I/O description
 * over the share ranks itself (the stripe math of layout/intersect.py), builds each daemon's
 * prefix around one shared header, and runs the exchange -- one call per request, no
 * per-daemon Python work (issue 30).
 */
#define _GNU_SOURCE
#include "pvpy.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#define PV_PREFIX_LEN 16
#define PV_MAX_HEADER (1u << 20)
#define PV_IOV_BATCH 1024             /* IOV_MAX on Linux */

enum phase { PH_SEND, PH_PREFIX, PH_HEADER, PH_BULK, PH_DONE };

struct xreq {
    int fd, dir;
    int old_flags;                    /* O_ flags to restore, -1 when left alone */
    Py_buffer head, buf;              /* .obj == NULL when not held */
    struct iovec *out;                /* head + (write) bulk segments */
    size_t nout, out_i;
    struct iovec *in;                 /* (read) bulk segments */
    size_t nin, in_i;
    uint64_t seg_total;
    enum phase ph;
    int err;
    unsigned char sprefix[PV_PREFIX_LEN];   /* stripe_transfer: the prefix this request sends */
    uint64_t reach;                   /* stripe_transfer: end of its last byte in the share */
    unsigned char prefix[PV_PREFIX_LEN];
    size_t pdone;
    char *hdr;
    uint32_t hlen;
    size_t hdone;
    uint64_t blen, bdone;
};

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

static int64_t now_ns(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Consume n bytes from the front of iov[*i..]; the iovecs are ours to modify. */
static void iov_advance(struct iovec *iov, size_t niov, size_t *i, size_t n)
{
    while (n > 0 && *i < niov) {
        if (n >= iov[*i].iov_len) {
            n -= iov[*i].iov_len;
            (*i)++;
        } else {
            iov[*i].iov_base = (char *)iov[*i].iov_base + n;
            iov[*i].iov_len -= n;
            n = 0;
        }
    }
    while (*i < niov && iov[*i].iov_len == 0)
        (*i)++;
}

static void req_fail(struct xreq *r, int err)
{
    r->err = err;
    r->ph = PH_DONE;
}

/* Check the reply prefix: magic, header length, and a bulk this request can take. */
static void got_prefix(struct xreq *r)
{
    r->hlen = le32(r->prefix + 4);
    r->blen = le64(r->prefix + 8);
    if (memcmp(r->prefix, "PV01", 4) != 0 || r->hlen == 0 || r->hlen > PV_MAX_HEADER
        || (r->blen != 0 && !(r->dir == 0 && r->blen == r->seg_total))) {
        req_fail(r, EPROTO);
        return;
    }
    r->hdr = malloc(r->hlen);
    if (r->hdr == NULL) {
        req_fail(r, ENOMEM);
        return;
    }
    r->ph = PH_HEADER;
}

/* Advance one request until it would block or is done. Runs without the GIL. */
static void req_step(struct xreq *r)
{
    while (r->ph != PH_DONE) {
        ssize_t n;
        struct msghdr mh;

        memset(&mh, 0, sizeof(mh));
        switch (r->ph) {
        case PH_SEND:
            if (r->out_i == r->nout) {
                r->ph = PH_PREFIX;
                continue;
            }
            mh.msg_iov = r->out + r->out_i;
            mh.msg_iovlen = r->nout - r->out_i;
            if (mh.msg_iovlen > PV_IOV_BATCH)
                mh.msg_iovlen = PV_IOV_BATCH;
            n = sendmsg(r->fd, &mh, MSG_NOSIGNAL);
            break;
        case PH_PREFIX:
            n = recv(r->fd, r->prefix + r->pdone, PV_PREFIX_LEN - r->pdone, 0);
            break;
        case PH_HEADER:
            n = recv(r->fd, r->hdr + r->hdone, r->hlen - r->hdone, 0);
            break;
        default:
            mh.msg_iov = r->in + r->in_i;
            mh.msg_iovlen = r->nin - r->in_i;
            if (mh.msg_iovlen > PV_IOV_BATCH)
                mh.msg_iovlen = PV_IOV_BATCH;
            n = recvmsg(r->fd, &mh, 0);
            break;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                req_fail(r, errno);
            return;
        }
        if (n == 0 && r->ph != PH_SEND) {
            req_fail(r, ECONNRESET);          /* the peer closed before the reply ended */
            return;
        }
        switch (r->ph) {
        case PH_SEND:
            iov_advance(r->out, r->nout, &r->out_i, (size_t)n);
            break;
        case PH_PREFIX:
            r->pdone += (size_t)n;
            if (r->pdone == PV_PREFIX_LEN)
                got_prefix(r);
            break;
        case PH_HEADER:
            r->hdone += (size_t)n;
            if (r->hdone == r->hlen)
                r->ph = r->blen != 0 ? PH_BULK : PH_DONE;
            break;
        default:
            iov_advance(r->in, r->nin, &r->in_i, (size_t)n);
            r->bdone += (uint64_t)n;
            if (r->bdone == r->blen)
                r->ph = PH_DONE;
            break;
        }
    }
}

/* Parse and check one request tuple; holds the buffer views. -1 with an exception set. */
static int req_parse(struct xreq *r, PyObject *item)
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
    if (PyObject_GetBuffer(head, &r->head, PyBUF_SIMPLE) < 0)
        goto not_buffer;
    if (buf != Py_None
        && PyObject_GetBuffer(buf, &r->buf, r->dir == 0 ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        goto not_buffer;
    if (PyObject_GetBuffer(segs, &sv, PyBUF_SIMPLE) < 0)
        goto not_buffer;
    if (sv.len % 16 != 0) {
        PyErr_SetString(PyExc_ValueError, "segs must be packed int64 (offset, length) pairs");
        goto out;
    }
    nseg = (size_t)sv.len / 16;
    r->out = PyMem_Calloc(nseg + 1, sizeof(struct iovec));
    r->in = PyMem_Calloc(nseg + 1, sizeof(struct iovec));
    if (r->out == NULL || r->in == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    if (r->head.len > 0) {
        r->out[0].iov_base = r->head.buf;
        r->out[0].iov_len = (size_t)r->head.len;
        r->nout = 1;
    }
    p = sv.buf;
    for (k = 0; k < nseg; k++) {
        int64_t off = (int64_t)le64(p + 16 * k), len = (int64_t)le64(p + 16 * k + 8);
        int64_t blen = r->buf.obj != NULL ? (int64_t)r->buf.len : 0;
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
            r->out[r->nout].iov_base = (char *)r->buf.buf + off;
            r->out[r->nout++].iov_len = (size_t)len;
        } else {
            r->in[r->nin].iov_base = (char *)r->buf.buf + off;
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

static void req_release(struct xreq *r)
{
    if (r->head.obj != NULL)
        PyBuffer_Release(&r->head);
    if (r->buf.obj != NULL)
        PyBuffer_Release(&r->buf);
    PyMem_Free(r->out);
    PyMem_Free(r->in);
    free(r->hdr);
}

/* The poll loop, GIL released. Returns -1 if a signal handler raised (exception set). */
static int run(struct xreq *reqs, size_t n, struct pollfd *pfds, size_t *map,
               int64_t deadline)
{
    int rc = 0;

    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < n; i++)
        req_step(&reqs[i]);           /* optimistic first pass: sockets are usually ready */
    for (;;) {
        size_t np = 0;
        int64_t now, ms;
        int pr;

        for (size_t i = 0; i < n; i++) {
            if (reqs[i].ph == PH_DONE)
                continue;
            pfds[np].fd = reqs[i].fd;
            pfds[np].events = reqs[i].ph == PH_SEND ? POLLOUT : POLLIN;
            pfds[np].revents = 0;
            map[np++] = i;
        }
        if (np == 0)
            break;
        now = now_ns();
        if (now >= deadline) {
            for (size_t k = 0; k < np; k++)
                req_fail(&reqs[map[k]], ETIMEDOUT);
            break;
        }
        ms = (deadline - now + 999999) / 1000000;
        pr = poll(pfds, (nfds_t)np, ms > INT_MAX ? INT_MAX : (int)ms);
        if (pr < 0) {
            int err = errno;
            if (err == EINTR) {
                /* Let Python run its signal handlers; KeyboardInterrupt ends the call. */
                Py_BLOCK_THREADS
                rc = PyErr_CheckSignals();
                Py_UNBLOCK_THREADS
                if (rc < 0)
                    break;
                continue;
            }
            for (size_t k = 0; k < np; k++)
                req_fail(&reqs[map[k]], err);
            break;
        }
        for (size_t k = 0; k < np; k++) {
            if (pfds[k].revents & POLLNVAL)
                req_fail(&reqs[map[k]], EBADF);
            else if (pfds[k].revents != 0)
                req_step(&reqs[map[k]]);  /* POLLERR/POLLHUP: the syscall reports it */
        }
    }
    Py_END_ALLOW_THREADS
    return rc;
}

/* Run the exchange of n parsed requests: their sockets non-blocking for the call (blocking
 * ones get their mode back after it; a failure to restore leaves them usable), then the
 * poll loop under one deadline. -1 if a signal handler raised (exception set). */
static int exchange(struct xreq *reqs, size_t n, struct pollfd *pfds, size_t *map,
                    double timeout)
{
    int64_t deadline;
    int rc;

    for (size_t i = 0; i < n; i++) {
        int fl = fcntl(reqs[i].fd, F_GETFL);
        if (fl < 0) {
            req_fail(&reqs[i], errno);
            continue;
        }
        if (!(fl & O_NONBLOCK)) {
            if (fcntl(reqs[i].fd, F_SETFL, fl | O_NONBLOCK) < 0) {
                req_fail(&reqs[i], errno);
                continue;
            }
            reqs[i].old_flags = fl;
        }
    }
    deadline = now_ns() + (timeout >= 1e9 ? (int64_t)1e18 : (int64_t)(timeout * 1e9));
    rc = run(reqs, n, pfds, map, deadline);
    for (size_t i = 0; i < n; i++) {
        if (reqs[i].old_flags >= 0)
            (void)fcntl(reqs[i].fd, F_SETFL, reqs[i].old_flags);
        reqs[i].old_flags = -1;
    }
    return rc;
}


PyObject *pv_py_transfer(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "requests", "timeout", NULL };
    PyObject *reqlist, *seq = NULL, *out = NULL;
    double timeout;
    struct xreq *reqs = NULL;
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
    pfds = PyMem_Calloc(n ? n : 1, sizeof(*pfds));
    map = PyMem_Calloc(n ? n : 1, sizeof(*map));
    if (reqs == NULL || pfds == NULL || map == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (i = 0; i < n; i++)
        reqs[i].old_flags = -1;
    for (i = 0; i < n; i++) {
        if (req_parse(&reqs[i], PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i)) < 0)
            goto out;
        for (size_t k = 0; k < i; k++) {
            if (reqs[k].fd == reqs[i].fd) {
                PyErr_Format(PyExc_ValueError, "sock_fd %d appears twice", reqs[i].fd);
                goto out;
            }
        }
    }
    if (exchange(reqs, n, pfds, map, timeout) < 0)
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
    for (i = 0; reqs != NULL && i < n; i++)
        req_release(&reqs[i]);
    PyMem_Free(reqs);
    PyMem_Free(pfds);
    PyMem_Free(map);
    Py_XDECREF(seq);
    return out;
}

/* ---------------------------------------------------------------- stripe_transfer */

#define PV_MAX_OFFSET ((uint64_t)1 << 62)   /* layout/describe.py MAX_OFFSET */
#define PV_MAX_PCOUNT 4096                  /* layout/stripe.py MAX_PCOUNT */
#define PV_MAX_SSIZE ((uint64_t)1 << 30)    /* layout/stripe.py MAX_SSIZE */

const char pv_stripe_transfer_doc[] =
"stripe_transfer(socks, head, buf, regions, ssize, direction, timeout)\n"
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
"    timeout: seconds for the whole call.\n\n"
"Returns:\n"
"    Per rank: None if the request does not touch it, else (0, reply_header_bytes, reach)\n"
"    or (errno, None, reach); reach is the end of the rank's last byte in its stripe file.\n\n"
"Raises:\n"
"    ValueError, TypeError: malformed arguments, or no socket for a touched rank (checked\n"
"    before any I/O).";

/* One share rank's part of the request while it is split. */
struct rankio {
    size_t npiece;                    /* pass 1 counts its pieces, pass 2 fills iov */
    uint64_t total, reach, bufend;    /* stream length, local end, buffer end of last piece */
    struct iovec *iov;                /* pass 2: where its pieces go */
};

struct split {
    const unsigned char *regions;     /* packed LE int64 (file offset, length) pairs */
    size_t nreg;
    uint64_t ssize, pc;
    char *base;                       /* the buffer: pass 2 fills iovecs into it, NULL in 1 */
};

/* Walk the regions unit by unit (layout/intersect.py split): each piece goes to its rank,
 * merged with the rank's previous piece when the two touch in the buffer. */
static void split_walk(const struct split *sp, struct rankio *rk)
{
    uint64_t b = 0;

    for (size_t k = 0; k < sp->nreg; k++) {
        uint64_t pos = le64(sp->regions + 16 * k), end = pos + le64(sp->regions + 16 * k + 8);

        while (pos < end) {
            uint64_t unit = pos / sp->ssize, within = pos % sp->ssize;
            uint64_t n = sp->ssize - within < end - pos ? sp->ssize - within : end - pos;
            uint64_t local = unit / sp->pc * sp->ssize + within;
            struct rankio *r = &rk[unit % sp->pc];

            if (r->npiece > 0 && r->bufend == b) {
                if (sp->base != NULL)
                    r->iov[r->npiece - 1].iov_len += (size_t)n;
            } else {
                if (sp->base != NULL) {
                    r->iov[r->npiece].iov_base = sp->base + b;
                    r->iov[r->npiece].iov_len = (size_t)n;
                }
                r->npiece++;
            }
            r->total += n;
            r->bufend = b + n;
            if (local + n > r->reach)
                r->reach = local + n;
            pos += n;
            b += n;
        }
    }
}

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

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Make the request of one touched rank: its prefix, then head, then (write) its pieces; the
 * pieces' iovecs are filled by split_walk's second pass. -1 on ENOMEM. */
static int rank_request(struct xreq *x, struct rankio *r, int fd, int dir, const Py_buffer *head)
{
    x->fd = fd;
    x->dir = dir;
    x->old_flags = -1;
    x->seg_total = r->total;
    x->reach = r->reach;
    memcpy(x->sprefix, "PV01", 4);
    put_le32(x->sprefix + 4, (uint32_t)head->len);
    put_le64(x->sprefix + 8, dir == 1 ? r->total : 0);
    x->out = PyMem_Calloc(dir == 1 ? r->npiece + 2 : 2, sizeof(struct iovec));
    x->in = PyMem_Calloc(dir == 1 ? 1 : r->npiece, sizeof(struct iovec));
    if (x->out == NULL || x->in == NULL)
        return -1;
    x->out[0].iov_base = x->sprefix;
    x->out[0].iov_len = PV_PREFIX_LEN;
    x->out[1].iov_base = head->buf;
    x->out[1].iov_len = (size_t)head->len;
    x->nout = dir == 1 ? r->npiece + 2 : 2;
    x->nin = dir == 1 ? 0 : r->npiece;
    r->iov = dir == 1 ? x->out + 2 : x->in;
    r->npiece = 0;                    /* pass 2 counts again as it fills */
    r->total = r->reach = r->bufend = 0;
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
    c->reqs = PyMem_Calloc(pc, sizeof(*c->reqs));
    c->pfds = PyMem_Calloc(pc, sizeof(*c->pfds));
    c->map = PyMem_Calloc(pc, sizeof(*c->map));
    if (c->rk == NULL || c->fds == NULL || c->slot == NULL || c->reqs == NULL
        || c->pfds == NULL || c->map == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    split_walk(&c->sp, c->rk);        /* pass 1: count */
    if (socks_check(c->socks, c->rk, pc, c->fds) < 0)
        return -1;
    for (size_t r = 0; r < pc; r++) {
        c->slot[r] = -1;
        if (c->rk[r].npiece == 0)
            continue;
        c->slot[r] = (int)c->n;
        if (rank_request(&c->reqs[c->n++], &c->rk[r], c->fds[r], dir, &c->head) < 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    c->sp.base = c->buf.buf;
    split_walk(&c->sp, c->rk);        /* pass 2: fill */
    return 0;
}

static void stripe_release(struct stripe_call *c)
{
    for (size_t i = 0; c->reqs != NULL && i < c->n; i++)
        req_release(&c->reqs[i]);
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
                              "timeout", NULL };
    PyObject *socks, *head, *buf, *regions, *out = NULL;
    struct stripe_call c;
    long long ssize;
    double timeout;
    int dir;
    (void)module;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOLid:stripe_transfer", kwlist, &socks,
                                     &head, &buf, &regions, &ssize, &dir, &timeout))
        return NULL;
    if (!(timeout >= 0.0) || isnan(timeout))
        return PyErr_Format(PyExc_ValueError, "timeout must be >= 0");
    memset(&c, 0, sizeof(c));
    if (stripe_parse(&c, socks, head, buf, regions, ssize, dir) == 0
        && stripe_plan(&c, dir) == 0
        && exchange(c.reqs, c.n, c.pfds, c.map, timeout) == 0)
        out = stripe_results(c.reqs, c.slot, (size_t)c.sp.pc);
    stripe_release(&c);
    return out;
}
