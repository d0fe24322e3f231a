/* split.c -- a striped file's regions split over its share ranks, one request per rank.
 *
 * The stripe math of layout/intersect.py in C: rank r holds units u with u % pcount == r,
 * unit u at local offset (u // pcount) * ssize (layout/stripe.py). Two passes over the
 * regions: the first counts each rank's pieces, the second (after pv_rank_request made each
 * touched rank's request) fills their iovecs into the caller's buffer. Only decides which
 * bytes go to which daemon and frames them; exchange.c moves them.
 */
#include "xfer.h"

#include <stdlib.h>
#include <string.h>

/* Each piece goes to its rank, merged with the rank's previous piece when the two touch in
 * the buffer. */
void pv_split_walk(const struct split *sp, struct rankio *rk)
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

int pv_rank_request(struct xreq *x, struct rankio *r, int fd, int dir, const void *head,
                    size_t hlen)
{
    x->fd = fd;
    x->dir = dir;
    x->seg_total = r->total;
    x->reach = r->reach;
    memcpy(x->sprefix, "PV01", 4);
    put_le32(x->sprefix + 4, (uint32_t)hlen);
    put_le64(x->sprefix + 8, dir == 1 ? r->total : 0);
    x->out = calloc(dir == 1 ? r->npiece + 2 : 2, sizeof(struct iovec));
    x->in = calloc(dir == 1 ? 1 : r->npiece, sizeof(struct iovec));
    if (x->out == NULL || x->in == NULL)
        return -1;
    x->out[0].iov_base = x->sprefix;
    x->out[0].iov_len = PV_PREFIX_LEN;
    x->out[1].iov_base = (void *)head;
    x->out[1].iov_len = hlen;
    x->nout = dir == 1 ? r->npiece + 2 : 2;
    x->nin = dir == 1 ? 0 : r->npiece;
    r->iov = dir == 1 ? x->out + 2 : x->in;
    r->npiece = 0;                    /* pass 2 counts again as it fills */
    r->total = r->reach = r->bufend = 0;
    return 0;
}
