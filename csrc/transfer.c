/* transfer.c -- the client's scatter/gather exchange, and pvfs._native.transfer().
 *
 * One request per I/O daemon connection: send a frame head (prefix + msgpack header), for
 * writes the bulk gathered straight from the user's buffer with sendmsg(2), then receive the
 * reply frame, its bulk scattered straight into the user's buffer with recvmsg(2) (thesis
 * §3.2.2: the client merges the daemons' streams without extra copies). All requests run at
 * once over poll(2) with the GIL released, under one deadline; one failing request does not
 * stop the others.
 *
 * Per daemon and request the exchange makes one sendmsg (more only when the socket buffer
 * fills), one recv for the reply's prefix, header and a read's first bulk bytes together,
 * and recvmsg calls for the rest of the bulk, beside one poll(2) per wake-up for all of
 * them; every call says MSG_DONTWAIT, so no socket's mode is changed (issue 30, thirty-eighth
 * session: with datapath.py's poll per pooled connection gone too, a 1 MiB write over four
 * daemons makes 10.5 system calls instead of 32, a read 14 instead of 37, strace -c).
 *
 * transfer() takes the requests ready-made (frame heads and segment lists built by Python).
 * stripe_transfer() builds them itself from a striped file's I/O description and runs them
 * through the same exchange (pv_xreq_exchange); its stripe math lives in stripe.c.
 */
#define _GNU_SOURCE
#include "transfer.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#define PV_IOV_BATCH 1024             /* IOV_MAX on Linux */

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

/* Copy n bytes taken with the reply's header into the read's bulk iovecs, in order. */
static void bulk_fill(struct xreq *r, const unsigned char *p, size_t n)
{
    while (n > 0 && r->in_i < r->nin) {
        size_t k = n < r->in[r->in_i].iov_len ? n : r->in[r->in_i].iov_len;

        memcpy(r->in[r->in_i].iov_base, p, k);
        p += k;
        n -= k;
        r->bdone += (uint64_t)k;
        iov_advance(r->in, r->nin, &r->in_i, k);
    }
}

/* The reply's first recv holds the whole prefix (r->prefix[0..pdone)): check it, then move
 * what came after it into the header and, for a read, the bulk. Anything past the frame's
 * end is a bad reply: one request is in flight on a connection. */
static void got_stage(struct xreq *r)
{
    size_t at = PV_PREFIX_LEN, avail, k;

    got_prefix(r);
    if (r->ph == PH_DONE)
        return;
    avail = r->pdone - at;
    k = avail < r->hlen ? avail : r->hlen;
    memcpy(r->hdr, r->prefix + at, k);
    r->hdone = k;
    at += k;
    avail -= k;
    if (r->hdone < r->hlen)
        return;                       /* PH_HEADER: the rest of a long header */
    if ((uint64_t)avail > r->blen) {
        req_fail(r, EPROTO);
        return;
    }
    r->ph = r->blen != 0 ? PH_BULK : PH_DONE;
    bulk_fill(r, r->prefix + at, avail);
    if (r->ph == PH_BULK && r->bdone == r->blen)
        r->ph = PH_DONE;
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
                /* Sent: the reply cannot be there yet, so no recv that would only say
                 * EAGAIN -- poll says when it is. */
                r->ph = PH_PREFIX;
                return;
            }
            mh.msg_iov = r->out + r->out_i;
            mh.msg_iovlen = r->nout - r->out_i;
            if (mh.msg_iovlen > PV_IOV_BATCH)
                mh.msg_iovlen = PV_IOV_BATCH;
            n = sendmsg(r->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
            break;
        case PH_PREFIX:
            n = recv(r->fd, r->prefix + r->pdone, sizeof(r->prefix) - r->pdone, MSG_DONTWAIT);
            break;
        case PH_HEADER:
            n = recv(r->fd, r->hdr + r->hdone, r->hlen - r->hdone, MSG_DONTWAIT);
            break;
        default:
            mh.msg_iov = r->in + r->in_i;
            mh.msg_iovlen = r->nin - r->in_i;
            if (mh.msg_iovlen > PV_IOV_BATCH)
                mh.msg_iovlen = PV_IOV_BATCH;
            n = recvmsg(r->fd, &mh, MSG_DONTWAIT);
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
            if (r->pdone >= PV_PREFIX_LEN)
                got_stage(r);
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

void pv_xreq_release(struct xreq *r)
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

/* Run the exchange of n parsed requests: the poll loop under one deadline. Every socket
 * call says MSG_DONTWAIT, so a socket's own mode (blocking or not) is never changed: no
 * fcntl(2) round per socket and call. -1 if a signal handler raised (exception set). */
int pv_xreq_exchange(struct xreq *reqs, size_t n, struct pollfd *pfds, size_t *map,
                     double timeout)
{
    int64_t deadline = now_ns() + (timeout >= 1e9 ? (int64_t)1e18 : (int64_t)(timeout * 1e9));

    return run(reqs, n, pfds, map, deadline);
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
    for (i = 0; reqs != NULL && i < n; i++)
        pv_xreq_release(&reqs[i]);
    PyMem_Free(reqs);
    PyMem_Free(pfds);
    PyMem_Free(map);
    Py_XDECREF(seq);
    return out;
}
