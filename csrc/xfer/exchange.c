/* exchange.c -- one request per I/O daemon connection, all of a call's at once.
 *
 * Send a frame head (prefix + msgpack header), for writes the bulk gathered straight from the
 * caller's buffer with sendmsg(2), then receive the reply frame, its bulk scattered straight
 * into the caller's buffer with recvmsg(2) (thesis §3.2.2: the client merges the daemons'
 * streams without extra copies). All requests run at once over poll(2) under one deadline;
 * one failing request does not stop the others.
 *
 * Per daemon and request the exchange makes one sendmsg (more only when the socket buffer
 * fills), one recv for the reply's prefix, header and a read's first bulk bytes together,
 * and recvmsg calls for the rest of the bulk, beside one poll(2) per wake-up for all of
 * them; every call says MSG_DONTWAIT, so no socket's mode is changed (issue 30, thirty-eighth
 * session: a 1 MiB write over four daemons makes 10.5 system calls instead of 32, a read 14
 * instead of 37, strace -c).
 *
 * A pipelined write (stripe.c: stripe_send) sends its request without waiting (nowait) and
 * reads the reply the connection owes from the one before (exact: no byte past that
 * reply's end is taken), both in the same poll loop.
 *
 * Plain C on purpose: the sync client runs it with the GIL released (transfer.c, stripe.c),
 * libfuse's worker threads run it with no Python at all (front/streams.c).
 */
#define _GNU_SOURCE
#include "xfer.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#define PV_IOV_BATCH 1024             /* IOV_MAX on Linux */

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

/* Advance one request until it would block or is done. Never blocks. */
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
                r->ph = r->nowait ? PH_DONE : PH_PREFIX;
                return;
            }
            mh.msg_iov = r->out + r->out_i;
            mh.msg_iovlen = r->nout - r->out_i;
            if (mh.msg_iovlen > PV_IOV_BATCH)
                mh.msg_iovlen = PV_IOV_BATCH;
            n = sendmsg(r->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
            break;
        case PH_PREFIX:
            n = recv(r->fd, r->prefix + r->pdone,
                     (r->exact ? PV_PREFIX_LEN : sizeof(r->prefix)) - r->pdone, MSG_DONTWAIT);
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

void pv_xreq_release(struct xreq *r)
{
    free(r->out);
    free(r->in);
    free(r->hdr);
    r->out = r->in = NULL;
    r->hdr = NULL;
}

int64_t pv_deadline(double timeout)
{
    return now_ns() + (timeout >= 1e9 ? (int64_t)1e18 : (int64_t)(timeout * 1e9));
}

/* The poll loop. Every socket call says MSG_DONTWAIT, so a socket's own mode (blocking or
 * not) is never changed: no fcntl(2) round per socket and call. */
int pv_xreq_run(struct xreq *reqs, size_t n, struct pollfd *pfds, size_t *map,
                int64_t deadline, int (*on_signal)(void *), void *arg)
{
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
            return 0;
        now = now_ns();
        if (now >= deadline) {
            for (size_t k = 0; k < np; k++)
                req_fail(&reqs[map[k]], ETIMEDOUT);
            return 0;
        }
        ms = (deadline - now + 999999) / 1000000;
        pr = poll(pfds, (nfds_t)np, ms > INT_MAX ? INT_MAX : (int)ms);
        if (pr < 0) {
            int err = errno, rc;
            if (err == EINTR) {
                if (on_signal != NULL && (rc = on_signal(arg)) != 0)
                    return rc;
                continue;
            }
            for (size_t k = 0; k < np; k++)
                req_fail(&reqs[map[k]], err);
            return 0;
        }
        for (size_t k = 0; k < np; k++) {
            if (pfds[k].revents & POLLNVAL)
                req_fail(&reqs[map[k]], EBADF);
            else if (pfds[k].revents != 0)
                req_step(&reqs[map[k]]);  /* POLLERR/POLLHUP: the syscall reports it */
        }
    }
}
