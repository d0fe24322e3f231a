/* streams.c -- stream-sized reads the C workers answer from the I/O daemons themselves.
 *
 * A sequential reader's requests (the kernel's read-ahead: 128 KiB to 1 MiB) are too large
 * for the block cache, which streams them past its blocks (src/pvfs/cache/_stream.py). One
 * at a time they are latency-bound, and Python's thread was half of each one's time
 * (docs/benchmarks.md, forty-first session). So for a file Python *marks* (`stream_mark`:
 * its stripe, the read header up to its I/O description, the size it answers with), a
 * worker answers such a read itself: it splits it over the share ranks, runs the exchange
 * on connections of its own (xfer/: the sync client's C) and replies from the buffer the
 * daemons' bytes were received into. Python opened and authenticated those connections and
 * handed them over (`stream_give`); a worker takes one per daemon for the exchange and puts
 * it back after a whole reply.
 *
 * Why such an answer is the one Python would give (docs/cache.md, step 5): Python marks a
 * file only when a read of it would lay nothing over the servers' bytes -- no dirty block,
 * no queued stream data, no write or truncation of it in progress, no bypass bit -- and the
 * mark lives in serve.c's record, under serve.c's rule: every change of the file drops the
 * record first (and waits for the replies in flight: a fetch holds the file pinned until
 * its reply is sent), a worker queueing a write or size change stops it, and a read past
 * the size goes to Python. Within the size, the daemons' zeros past a short stripe file
 * are what Python answers too (it pads its read to the size it knows).
 *
 * Anything else goes to Python as before, which has the retry and failover rules: no
 * connection free to some daemon, a failed or timed-out exchange (its connections closed),
 * an error reply.
 */
#define _GNU_SOURCE
#include "front.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xfer/xfer.h"

/* The connections of the daemons, the reads this large at least answered here, and the
 * seconds one exchange may take. -1 with errno (EINVAL: set already or bad arguments). */
int pvf_stream_setup(struct pvf_front *f, size_t niods, size_t min_read, double timeout)
{
    struct pvf_conns *conns;

    if (niods == 0 || niods > PV_MAX_PCOUNT || min_read == 0 || !(timeout > 0)) {
        errno = EINVAL;
        return -1;
    }
    conns = calloc(niods, sizeof(*conns));
    if (conns == NULL)
        return -1;
    pthread_mutex_lock(&f->lock);
    if (f->conns != NULL) {
        pthread_mutex_unlock(&f->lock);
        free(conns);
        errno = EINVAL;
        return -1;
    }
    f->conns = conns;
    f->nconns = niods;
    f->stream_min = min_read;
    f->stream_timeout = timeout;
    pthread_mutex_unlock(&f->lock);
    return 0;
}

static int conns_push_locked(struct pvf_conns *c, int fd)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 4;
        int *fds = realloc(c->fds, cap * sizeof(int));
        if (fds == NULL)
            return -1;
        c->fds = fds;
        c->cap = cap;
    }
    c->fds[c->n++] = fd;
    return 0;
}

/* fd, a connection to daemon iod, is the workers' now (closed by them). -1 with errno:
 * EINVAL (no setup, no such daemon), ENOMEM (then the caller still owns it). */
int pvf_stream_give(struct pvf_front *f, size_t iod, int fd)
{
    int rc = -1;

    pthread_mutex_lock(&f->lock);
    if (f->conns == NULL || iod >= f->nconns || fd < 0)
        errno = EINVAL;
    else if ((rc = conns_push_locked(&f->conns[iod], fd)) < 0)
        errno = ENOMEM;
    pthread_mutex_unlock(&f->lock);
    return rc;
}

/* The idle connections to daemon iod. */
size_t pvf_stream_conns(struct pvf_front *f, size_t iod)
{
    size_t n;

    pthread_mutex_lock(&f->lock);
    n = f->conns != NULL && iod < f->nconns ? f->conns[iod].n : 0;
    pthread_mutex_unlock(&f->lock);
    return n;
}

/* Python: stream-sized reads of ino within size are answered from the daemons, rank r of
 * its stripe (unit ssize, pcount ranks) on daemon iods[r], each read's header head[0..hlen)
 * followed by its description. 1 marked, 0 refused (serve.c's rule: a change of it in
 * flight; no arena or no setup), -1 with errno (ENOMEM, EINVAL). */
int pvf_stream_mark(struct pvf_front *f, uint64_t ino, uint64_t size, uint64_t ssize,
                    const unsigned *iods, size_t pcount, const void *head, size_t hlen)
{
    struct pvf_stripe *st;
    struct pvf_served *s;

    if (pcount == 0 || pcount > PV_MAX_PCOUNT || ssize == 0 || ssize > PV_MAX_SSIZE ||
        hlen == 0 || hlen > PV_MAX_HEADER - 64) {
        errno = EINVAL;
        return -1;
    }
    st = calloc(1, sizeof(*st) + pcount * sizeof(unsigned));
    if (st == NULL || (st->head = malloc(hlen)) == NULL) {
        free(st);
        errno = ENOMEM;
        return -1;
    }
    memcpy(st->head, head, hlen);
    memcpy(st->iods, iods, pcount * sizeof(unsigned));
    st->hlen = hlen;
    st->ssize = ssize;
    st->pcount = pcount;
    pthread_mutex_lock(&f->lock);
    for (size_t r = 0; r < pcount; r++) {
        if (f->conns == NULL || iods[r] >= f->nconns) {
            pthread_mutex_unlock(&f->lock);
            free(st->head);
            free(st);
            errno = f->conns == NULL ? 0 : EINVAL;
            return f->conns == NULL ? 0 : -1;
        }
    }
    s = pvf_served_open_locked(f, ino);
    if (s == NULL) {
        int err = errno;
        pthread_mutex_unlock(&f->lock);
        free(st->head);
        free(st);
        errno = err;
        return err == ENOMEM ? -1 : 0;
    }
    if (s->stripe != NULL)
        free(s->stripe->head);
    free(s->stripe);
    s->stripe = st;
    s->size = size;
    s->live = 1;
    pthread_mutex_unlock(&f->lock);
    return 1;
}

/* msgpack: ["r", [off, len]] as the daemons read an I/O description (layout/describe.py
 * Regions.to_wire), both numbers uint64. Returns its length (23). */
static size_t put_desc(unsigned char *p, uint64_t off, uint64_t len)
{
    size_t at = 0;

    p[at++] = 0x92;
    p[at++] = 0xa1;
    p[at++] = 'r';
    p[at++] = 0x92;
    for (int k = 0; k < 2; k++) {
        uint64_t v = k == 0 ? off : len;
        p[at++] = 0xcf;
        for (int i = 7; i >= 0; i--)
            p[at++] = (unsigned char)(v >> (8 * i));
    }
    return at;
}

/* Whether a reply header names an error (its key "err", a msgpack fixstr). A value holding
 * those bytes is taken for one too: the read then goes to Python, which decodes it. */
static int names_error(const char *hdr, size_t n)
{
    return n >= 4 && memmem(hdr, n, "\xa3" "err", 4) != NULL;
}

/* One stream read's exchange, the file pinned and the connections taken. */
struct fetch {
    const struct pvf_stripe *st;
    uint64_t off;
    size_t n;
    int *fds;                     /* per rank: the connection taken, or -1 */
    struct rankio *rk;
    struct xreq *reqs;
    struct pollfd *pfds;
    size_t *map, nreq;
    unsigned char *head;
    char *buf;
};

/* Under the lock: one connection per rank the read touches, or none at all (0). */
static int take_conns_locked(struct pvf_front *f, struct fetch *x)
{
    const struct pvf_stripe *st = x->st;
    uint64_t first = x->off / st->ssize, last = (x->off + x->n - 1) / st->ssize;
    size_t pc = st->pcount;

    for (size_t r = 0; r < pc; r++)
        x->fds[r] = -1;
    for (uint64_t u = first; u <= last && u < first + pc; u++) {
        size_t r = (size_t)(u % pc);
        struct pvf_conns *c = &f->conns[st->iods[r]];
        if (c->n == 0) {
            for (size_t q = 0; q < pc; q++)
                if (x->fds[q] >= 0)
                    (void)conns_push_locked(&f->conns[st->iods[q]], x->fds[q]);
            return 0;             /* (put back where they came from: no allocation) */
        }
        x->fds[r] = c->fds[--c->n];
    }
    return 1;
}

/* Under the lock: the connections back after the exchange; one whose exchange failed is
 * closed (a reply may be half read). */
static void put_conns_locked(struct pvf_front *f, struct fetch *x)
{
    size_t k = 0;

    for (size_t r = 0; r < x->st->pcount; r++) {
        int ok;
        if (x->fds[r] < 0)
            continue;
        ok = x->reqs != NULL && k < x->nreq && x->reqs[k].fd == x->fds[r] &&
             x->reqs[k].err == 0;
        if (x->reqs != NULL && k < x->nreq && x->reqs[k].fd == x->fds[r])
            k++;
        if (!ok || conns_push_locked(&f->conns[x->st->iods[r]], x->fds[r]) < 0)
            close(x->fds[r]);
    }
}

/* Build and run the exchange; 1 if every daemon sent its whole share. */
static int exchange(struct pvf_front *f, struct fetch *x)
{
    const struct pvf_stripe *st = x->st;
    size_t pc = st->pcount, hl = st->hlen;
    unsigned char reg[16];
    struct split sp;

    x->head = malloc(hl + 32);
    x->buf = malloc(x->n);
    x->rk = calloc(pc, sizeof(*x->rk));
    x->reqs = calloc(pc, sizeof(*x->reqs));
    x->pfds = calloc(pc, sizeof(*x->pfds));
    x->map = calloc(pc, sizeof(*x->map));
    if (x->head == NULL || x->buf == NULL || x->rk == NULL || x->reqs == NULL ||
        x->pfds == NULL || x->map == NULL)
        return 0;
    memcpy(x->head, st->head, hl);
    hl += put_desc(x->head + hl, x->off, x->n);
    put_le64(reg, x->off);
    put_le64(reg + 8, x->n);
    sp = (struct split){ reg, 1, st->ssize, pc, NULL };
    pv_split_walk(&sp, x->rk);
    for (size_t r = 0; r < pc; r++) {
        if (x->rk[r].npiece == 0)
            continue;
        if (pv_rank_request(&x->reqs[x->nreq++], &x->rk[r], x->fds[r], 0, x->head, hl) < 0)
            return 0;
    }
    sp.base = x->buf;
    pv_split_walk(&sp, x->rk);
    pv_xreq_run(x->reqs, x->nreq, x->pfds, x->map, pv_deadline(f->stream_timeout), NULL, NULL);
    for (size_t k = 0; k < x->nreq; k++) {
        const struct xreq *q = &x->reqs[k];
        if (q->err != 0 || q->blen != q->seg_total || names_error(q->hdr, q->hlen))
            return 0;
    }
    return 1;
}

static void fetch_release(struct fetch *x)
{
    for (size_t k = 0; x->reqs != NULL && k < x->nreq; k++)
        pv_xreq_release(&x->reqs[k]);
    free(x->fds);
    free(x->rk);
    free(x->reqs);
    free(x->pfds);
    free(x->map);
    free(x->head);
}

/* A read of ino answered from the daemons: 1 with its bytes in got (the file pinned until
 * pvf_stream_done), or 0 (Python's: not marked, not stream-sized, past the size, no
 * connection free, the exchange failed). */
int pvf_stream_fetch(struct pvf_front *f, uint64_t ino, uint64_t off, size_t size,
                     struct pvf_fetched *got)
{
    struct fetch x;
    struct pvf_served *s;
    int ok;

    memset(&x, 0, sizeof(x));
    pthread_mutex_lock(&f->lock);
    if (f->stream_min == 0 || size < f->stream_min || size > f->serve_max ||
        (s = pvf_served_live_locked(f, ino)) == NULL || s->stripe == NULL || off >= s->size) {
        pthread_mutex_unlock(&f->lock);
        return 0;
    }
    x.st = s->stripe;
    x.off = off;
    x.n = size < s->size - off ? size : (size_t)(s->size - off);
    x.fds = malloc(x.st->pcount * sizeof(int));
    if (x.fds == NULL || !take_conns_locked(f, &x)) {
        if (x.fds != NULL)
            f->c.stream_no_conn++;
        pthread_mutex_unlock(&f->lock);
        free(x.fds);
        return 0;
    }
    s->pins++;                    /* the record, its stripe, until the reply is sent */
    pthread_mutex_unlock(&f->lock);

    ok = exchange(f, &x);

    pthread_mutex_lock(&f->lock);
    put_conns_locked(f, &x);
    if (ok) {
        f->c.streams_here++;
        f->c.stream_bytes_here += x.n;
    } else {
        f->c.stream_failed++;
        if (--s->pins == 0)
            pthread_cond_broadcast(&f->idle);
    }
    pthread_mutex_unlock(&f->lock);
    fetch_release(&x);
    if (!ok) {
        free(x.buf);
        return 0;
    }
    got->buf = x.buf;
    got->n = x.n;
    got->pin = s;
    return 1;
}

/* The fetched read was answered (or dropped): its buffer freed, the file unpinned. */
void pvf_stream_done(struct pvf_front *f, struct pvf_fetched *got)
{
    free(got->buf);
    got->buf = NULL;
    pvf_serve_unpin(f, got->pin);
}

/* The session ends: every connection closed. */
void pvf_stream_free(struct pvf_front *f)
{
    for (size_t i = 0; f->conns != NULL && i < f->nconns; i++) {
        for (size_t k = 0; k < f->conns[i].n; k++)
            close(f->conns[i].fds[k]);
        free(f->conns[i].fds);
    }
    free(f->conns);
    f->conns = NULL;
    f->nconns = 0;
    f->stream_min = 0;
}
