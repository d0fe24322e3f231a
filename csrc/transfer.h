/* transfer.h -- the client's exchange (transfer.c), as stripe.c builds on it.
 *
 * A request (struct xreq) is one frame sent on one I/O daemon connection and its reply read
 * back: transfer() fills requests from Python's ready-made tuples, stripe_transfer() (stripe.c)
 * from the split of a striped read or write; both hand them to pv_xreq_exchange. Private to
 * those two units, which hold Python buffers in it.
 */
#ifndef PVFS_TRANSFER_H
#define PVFS_TRANSFER_H

#include "pvpy.h"

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define PV_PREFIX_LEN 16
#define PV_MAX_HEADER (1u << 20)
/* The reply's first recv takes up to this much past the prefix: the header, and for a read
 * the first bulk bytes (copied into place), in the same call. */
#define PV_STAGE_LEN 240

enum phase { PH_SEND, PH_PREFIX, PH_HEADER, PH_BULK, PH_DONE };

struct xreq {
    int fd, dir;
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

/* Run the exchange of n requests at once, the GIL released, under one deadline; each
 * request's result is its err (0, or an errno) and, on success, its reply header (hdr,
 * hlen). pfds and map have room for n. -1 if a signal handler raised (exception set). */
int pv_xreq_exchange(struct xreq *reqs, size_t n, struct pollfd *pfds, size_t *map,
                     double timeout);
/* Release what a request holds: its buffer views, iovecs, reply header. */
void pv_xreq_release(struct xreq *r);

#endif
