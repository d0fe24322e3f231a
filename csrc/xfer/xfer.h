/* xfer.h -- the client's exchange with the I/O daemons, in plain C: no Python in it.
 *
 * Built into both extensions (setup.py): pvfs._native wraps it for Python (transfer.c,
 * stripe.c: the sync client's data path), pvfs._fusefront runs it on libfuse's worker threads
 * (front/streams.c: the stream reads the C workers answer from the daemons, issue 30).
 *   exchange.c  one request per connection: its frame sent, its reply read back; all of a
 *               call's requests at once over poll(2) under one deadline
 *   split.c     a striped file's regions split over its share ranks: one request per rank
 *               touched, its bytes at their places in the caller's buffer
 */
#ifndef PVFS_XFER_H
#define PVFS_XFER_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define PV_PREFIX_LEN 16
#define PV_MAX_HEADER (1u << 20)
/* The reply's first recv takes up to this much past the prefix: the header, and for a read
 * the first bulk bytes (copied into place), in the same call. */
#define PV_STAGE_LEN 240

#define PV_MAX_OFFSET ((uint64_t)1 << 62)   /* layout/describe.py MAX_OFFSET */
#define PV_MAX_PCOUNT 4096                  /* layout/stripe.py MAX_PCOUNT */
#define PV_MAX_SSIZE ((uint64_t)1 << 30)    /* layout/stripe.py MAX_SSIZE */

enum phase { PH_SEND, PH_PREFIX, PH_HEADER, PH_BULK, PH_DONE };

/* One frame sent on one I/O daemon connection and its reply read back. The iovecs and the
 * reply header are the request's own (pv_xreq_release frees them); the bytes they point at
 * are the caller's. */
struct xreq {
    int fd, dir;                      /* dir: 1 write (bulk sent), 0 read (bulk received) */
    /* A pipelined write (stripe.c: stripe_send): nowait -- done once sent, its reply left
     * on the connection for a later call; exact -- reads only its own reply (prefix, then
     * header), since the reply of the request sent after it may follow it. */
    int nowait, exact;
    struct iovec *out;                /* head + (write) bulk segments */
    size_t nout, out_i;
    struct iovec *in;                 /* (read) bulk segments */
    size_t nin, in_i;
    uint64_t seg_total;
    enum phase ph;
    int err;
    unsigned char sprefix[PV_PREFIX_LEN];   /* split.c: the prefix this request sends */
    uint64_t reach;                   /* split.c: end of its last byte in the share */
    unsigned char prefix[PV_PREFIX_LEN + PV_STAGE_LEN];   /* the reply's first bytes */
    size_t pdone;
    char *hdr;
    uint32_t hlen;
    size_t hdone;
    uint64_t blen, bdone;
};

static inline uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* exchange.c */
int64_t pv_deadline(double timeout);    /* CLOCK_MONOTONIC ns, timeout seconds from now */
/* Run n requests to their end or the deadline; each request's result is its err (0 or an
 * errno) and, on success, its reply header (hdr, hlen). pfds and map have room for n.
 * When poll(2) is interrupted, on_signal(arg) is called (may be NULL): a nonzero return
 * ends the call with that value; 0 when every request ended. */
int pv_xreq_run(struct xreq *reqs, size_t n, struct pollfd *pfds, size_t *map,
                int64_t deadline, int (*on_signal)(void *), void *arg);
void pv_xreq_release(struct xreq *r);   /* its iovecs and reply header */

/* split.c: one share rank's part of a request while it is split */
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

/* Walk the regions unit by unit; pass 1 (sp->base NULL) counts each rank's pieces, pass 2
 * fills their iovecs (after pv_rank_request made room). */
void pv_split_walk(const struct split *sp, struct rankio *rk);
/* Make the request of one touched rank after pass 1: its prefix, then head, then (write)
 * its pieces. head must outlive the request. -1 on ENOMEM. */
int pv_rank_request(struct xreq *x, struct rankio *r, int fd, int dir, const void *head,
                    size_t hlen);

#endif
