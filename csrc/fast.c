/* fast.c -- the fast path: a read or write header made a job by the engine itself.
 *
 * A frame header the loop has read (conn.c) is offered here before it is posted to Python.
 * The common request -- a "read" or "write" of a region list on a stripe file Python has
 * opened and granted, no size promise to keep, nothing unusual in the header -- becomes a
 * job at once: the header parsed (fastwire.c: a small msgpack reader that knows only the
 * fields of such a request), the description intersected with this daemon's share (layout/intersect.py's
 * pieces_for_rank), the acknowledgement or reply built. Everything else is declined and goes
 * to Python as before: any other operation, a field this reader does not know (hint,
 * mtime_ns) or whose value it does not accept, an error of any kind (Python answers it with
 * its message), a file without a grant (a miss: Python opens it in a worker thread), a write
 * to a file whose size the manager keeps. The reader only ever accepts, never refuses, so a
 * request it declines is answered exactly as before.
 *
 * Grants. Python grants an inode after serving a request on its cached descriptor: the
 * engine keeps a dup of that descriptor, and whether writes may go by (Python's SizeWatch
 * promised nothing for the file). Before it promises to report a file's changes
 * (sizewatch.py, watch) Python blocks the grant's writes and learns how many are in flight;
 * a promise is refused while one is. A descriptor unlinked behind the cache ends the job
 * before a byte moves (PV_ERR_STALE): the grant goes, and the frame is posted to Python after
 * all. Python revokes the grant of a file it forgets (unlink). All of it under f->lock,
 * taken by the loop twice per fast job and by Python's calls.
 *
 * Records. A finished fast job leaves a record (pv_fast_rec) in a ring Python drains into its
 * workload statistics and metrics now and then (pv_fast_take); the ring half full wakes it.
 * A full ring declines, so no request goes uncounted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "native.h"

#define FAST_BUCKETS 512
#define FAST_MAX_GRANTS 256           /* dup'd descriptors held at most */
#define FAST_MAX_PIECES 65536         /* an intersection longer than this goes to Python */
#define FAST_RING 4096
#define FAST_MAX_PCOUNT 4096
#define FAST_MIN_SSIZE 512
#define FAST_MAX_SSIZE ((int64_t)1 << 30)

/* -- the share: layout/intersect.py's pieces_for_rank ----------------------------------- */

/* This daemon's share rank of the request's stripe, or -1 (Python refuses such a stripe). */
static int64_t share_rank(const struct pv_fast_req *rq, int index, int niods)
{
    int64_t rank;

    if (rq->pcount < 1 || rq->pcount > FAST_MAX_PCOUNT || rq->pcount > niods
        || rq->base >= niods || rq->ssize < FAST_MIN_SSIZE || rq->ssize > FAST_MAX_SSIZE)
        return -1;
    rank = ((int64_t)index - rq->base) % niods;
    if (rank < 0)
        rank += niods;
    return rank < rq->pcount ? rank : -1;
}

/* The pieces (buf, local, len) in stream order, contiguous ones merged; their count, or -1
 * when there are more than FAST_MAX_PIECES or no memory. */
static ssize_t intersect(const struct pv_fast_req *rq, int64_t rank, struct pv_fast_piece **out)
{
    int64_t ss = rq->ssize, pc = rq->pcount, buf = 0;
    size_t n = 0, cap = 16;
    struct pv_fast_piece *p = malloc(cap * sizeof(*p));

    if (p == NULL)
        return -1;
    for (size_t r = 0; r < rq->nregions; r++) {
        int64_t off = rq->regions[2 * r], len = rq->regions[2 * r + 1], end = off + len;
        int64_t unit = off / ss;

        unit += ((rank - unit) % pc + pc) % pc;
        for (;; unit += pc) {
            int64_t start = unit * ss > off ? unit * ss : off;
            int64_t stop = (unit + 1) * ss < end ? (unit + 1) * ss : end;
            int64_t b, local;

            if (start >= end)
                break;
            b = buf + (start - off);
            local = (unit / pc) * ss + (start - unit * ss);
            if (n > 0 && p[n - 1].buf + p[n - 1].len == b
                && p[n - 1].local + p[n - 1].len == local) {
                p[n - 1].len += stop - start;
                continue;
            }
            if (n == FAST_MAX_PIECES)
                goto fail;
            if (n == cap) {
                struct pv_fast_piece *q = realloc(p, 2 * cap * sizeof(*p));
                if (q == NULL)
                    goto fail;
                p = q;
                cap *= 2;
            }
            p[n++] = (struct pv_fast_piece){ b, local, stop - start };
        }
        buf += len;
    }
    *out = p;
    return (ssize_t)n;
fail:
    free(p);
    return -1;
}

/* -- grants --------------------------------------------------------------------------- */

int pv_fast_init(struct pv_fast *f, struct pv_err *err)
{
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->lock, NULL);
    f->buckets = calloc(FAST_BUCKETS, sizeof(*f->buckets));
    f->ring = calloc(FAST_RING, sizeof(*f->ring));
    if (f->buckets == NULL || f->ring == NULL) {
        free(f->buckets);
        free(f->ring);
        f->buckets = NULL;
        f->ring = NULL;
        return pv_fail(err, ENOMEM, "out of memory");
    }
    return 0;
}

static void entry_close(struct pv_fast_entry *g)
{
    /* A dup we own; its close has nothing to report. */
    (void)close(g->fd);
    free(g);
}

void pv_fast_fini(struct pv_fast *f)
{
    if (f->buckets != NULL) {
        for (size_t b = 0; b < FAST_BUCKETS; b++) {
            struct pv_fast_entry *g, *next;
            for (g = f->buckets[b]; g != NULL; g = next) {
                next = g->hnext;
                entry_close(g);
            }
        }
    }
    free(f->buckets);
    free(f->ring);
    f->buckets = NULL;
    f->ring = NULL;
    pthread_mutex_destroy(&f->lock);
}

static struct pv_fast_entry **slot_of(struct pv_fast *f, uint64_t ino)
{
    struct pv_fast_entry **s = &f->buckets[ino % FAST_BUCKETS];

    while (*s != NULL && (*s)->ino != ino)
        s = &(*s)->hnext;
    return s;
}

/* Out of the table (f->lock held); the caller closes it when this returns true (no job
 * holds it), else the last job does. */
static bool entry_unlink(struct pv_fast *f, struct pv_fast_entry **s)
{
    struct pv_fast_entry *g = *s;

    *s = g->hnext;
    g->hnext = NULL;
    g->dead = true;
    f->ngrants--;
    return g->refs == 0;
}

/* The least recently used grant no job holds (f->lock held), or NULL. */
static struct pv_fast_entry **oldest_idle(struct pv_fast *f)
{
    struct pv_fast_entry **best = NULL;

    for (size_t b = 0; b < FAST_BUCKETS; b++) {
        for (struct pv_fast_entry **s = &f->buckets[b]; *s != NULL; s = &(*s)->hnext) {
            if ((*s)->refs == 0 && (best == NULL || (*s)->used < (*best)->used))
                best = s;
        }
    }
    return best;
}

/* Grant ino on a dup of fd (Python's cached descriptor): 1 granted (or updated), 0 not (no
 * room), -1 with err. write: writes may go by (no size promise for the file). */
int pv_fast_grant(struct pv_fast *f, uint64_t ino, int fd, bool write, struct pv_err *err)
{
    struct pv_fast_entry **s, *g, *old = NULL, *evicted = NULL;
    int dupfd;

    pthread_mutex_lock(&f->lock);
    s = slot_of(f, ino);
    if (*s != NULL && (*s)->src_fd == fd) {
        (*s)->write_ok = write;
        pthread_mutex_unlock(&f->lock);
        return 1;
    }
    pthread_mutex_unlock(&f->lock);
    dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dupfd < 0)
        return pv_err_sys(err, "dup");
    g = calloc(1, sizeof(*g));
    if (g == NULL) {
        (void)close(dupfd);
        return pv_fail(err, ENOMEM, "out of memory");
    }
    g->ino = ino;
    g->fd = dupfd;
    g->src_fd = fd;
    g->write_ok = write;
    pthread_mutex_lock(&f->lock);
    s = slot_of(f, ino);
    if (*s != NULL) {
        struct pv_fast_entry *prev = *s;
        if (prev->src_fd == fd) {     /* granted meanwhile by another thread */
            prev->write_ok = write;
            pthread_mutex_unlock(&f->lock);
            entry_close(g);
            return 1;
        }
        /* Python reopened the file: the grant follows its new descriptor. */
        if (entry_unlink(f, s))
            old = prev;
    }
    if (f->ngrants >= FAST_MAX_GRANTS) {
        struct pv_fast_entry **o = oldest_idle(f);
        if (o != NULL) {
            struct pv_fast_entry *victim = *o;
            if (entry_unlink(f, o))
                evicted = victim;
        }
    }
    if (f->ngrants >= FAST_MAX_GRANTS) {
        pthread_mutex_unlock(&f->lock);
        entry_close(g);
        if (evicted != NULL)
            entry_close(evicted);
        return 0;
    }
    g->used = ++f->clock;
    g->hnext = f->buckets[ino % FAST_BUCKETS];
    f->buckets[ino % FAST_BUCKETS] = g;
    f->ngrants++;
    pthread_mutex_unlock(&f->lock);
    if (old != NULL)
        entry_close(old);
    if (evicted != NULL)
        entry_close(evicted);
    return 1;
}

/* Python forgets ino's descriptor (unlink): the grant goes; its dup is closed now, or by the
 * last job that holds it. */
void pv_fast_revoke(struct pv_fast *f, uint64_t ino)
{
    struct pv_fast_entry **s, *g = NULL;

    pthread_mutex_lock(&f->lock);
    s = slot_of(f, ino);
    if (*s != NULL) {
        struct pv_fast_entry *prev = *s;
        if (entry_unlink(f, s))
            g = prev;
    }
    pthread_mutex_unlock(&f->lock);
    if (g != NULL)
        entry_close(g);
}

/* No more writes of ino go by (ino 0: of any file); the writes in flight now, which Python's
 * SizeWatch must wait out before it promises anything. */
int64_t pv_fast_block_writes(struct pv_fast *f, uint64_t ino)
{
    int64_t n = 0;

    pthread_mutex_lock(&f->lock);
    if (ino != 0) {
        struct pv_fast_entry *g = *slot_of(f, ino);
        if (g != NULL) {
            g->write_ok = false;
            n = g->writes;
        }
    } else {
        for (size_t b = 0; b < FAST_BUCKETS; b++) {
            for (struct pv_fast_entry *g = f->buckets[b]; g != NULL; g = g->hnext) {
                g->write_ok = false;
                n += g->writes;
            }
        }
    }
    pthread_mutex_unlock(&f->lock);
    return n;
}

void pv_fast_set(struct pv_fast *f, bool enabled, int index, int niods)
{
    pthread_mutex_lock(&f->lock);
    f->enabled = enabled && niods > 0 && index >= 0 && index < niods;
    f->index = index;
    f->niods = niods;
    pthread_mutex_unlock(&f->lock);
}

/* A job's reference on g ends (write: one write fewer in flight), without a record: a job
 * that never ran (made, then refused), or stale: its descriptor is unusable, the grant goes. */
static void release(struct pv_fast *f, bool write, struct pv_fast_entry *g, bool stale)
{
    bool close_it;

    g->refs--;
    if (write)
        g->writes--;
    if (stale && !g->dead) {
        struct pv_fast_entry **s = slot_of(f, g->ino);
        if (*s == g)
            (void)entry_unlink(f, s);
    }
    close_it = g->dead && g->refs == 0;
    pthread_mutex_unlock(&f->lock);
    if (close_it)
        entry_close(g);
}

/* -- jobs ----------------------------------------------------------------------------- */

/* The job's bookkeeping for its record: regions, lowest and highest byte, logical bytes,
 * as data.py's _begin computes them. */
static void request_span(const struct pv_fast_req *rq, struct pv_job *j)
{
    int64_t lo = INT64_MAX, hi = 0, total = 0;

    for (size_t r = 0; r < rq->nregions; r++) {
        int64_t o = rq->regions[2 * r], n = rq->regions[2 * r + 1];
        if (o < lo)
            lo = o;
        if (o + n > hi)
            hi = o + n;
        total += n;
    }
    j->fast_regions = (int64_t)rq->nregions;
    j->fast_lo = rq->nregions ? lo : 0;
    j->fast_hi = hi;
    j->fast_logical = total;
}

/* The job of a granted request on sock, or NULL with ->declined counted: the frame goes to
 * Python. Takes a reference on the grant (and counts a write in flight). */
static struct pv_job *make_job(const struct pv_fast_req *rq,
                               const struct pv_fast_piece *p, size_t n, int64_t nbytes, int sock,
                               struct pv_fast_entry *g)
{
    unsigned char reply[64];
    int64_t size_at = -1;
    size_t rlen;
    struct pv_err err;
    struct pv_job *j;

    if (rq->op == PV_OP_READ)
        rlen = pv_fast_read_ack(reply, (uint64_t)nbytes, &size_at);
    else
        rlen = pv_fast_write_reply(reply, (uint64_t)nbytes);
    j = pv_job_new(0, sock, g->fd, rq->op, NULL, 0,
                   rq->op == PV_OP_READ ? reply : NULL, rq->op == PV_OP_READ ? rlen : 0,
                   rq->op == PV_OP_WRITE ? reply : NULL, rq->op == PV_OP_WRITE ? rlen : 0,
                   rq->ino, &err);
    if (j == NULL)
        return NULL;
    free(j->acc);
    j->acc = malloc(n * sizeof(*j->acc));
    if (j->acc == NULL) {
        pv_job_free(j);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        j->acc[i] = (struct pv_access){ PV_ACC_FILE, p[i].local, p[i].len };
    j->nacc = n;
    j->size_at = size_at;
    j->check = true;
    j->own = true;
    j->fast = g;
    j->fast_want = nbytes;
    request_span(rq, j);
    return j;
}

void pv_fast_plan_free(struct pv_fast_plan *pl)
{
    pv_fast_req_free(&pl->rq);
    free(pl->pieces);
    pl->pieces = NULL;
}

/* A header as this daemon (index of niods) would serve it: parsed, its share's pieces, its
 * stream length. 0, or -1: declined (Python's), nothing to free. */
int pv_fast_plan(const void *hdr, size_t len, uint64_t bulk_len, int index, int niods,
                 struct pv_fast_plan *pl)
{
    int64_t rank;
    ssize_t n;

    memset(pl, 0, sizeof(*pl));
    if (pv_fast_parse(hdr, len, &pl->rq) < 0)
        return -1;
    rank = share_rank(&pl->rq, index, niods);
    if (rank < 0 || (pl->rq.op == PV_OP_READ && bulk_len != 0)
        || (n = intersect(&pl->rq, rank, &pl->pieces)) < 0)
        goto declined;
    pl->npieces = (size_t)n;
    for (ssize_t i = 0; i < n; i++)
        pl->nbytes += pl->pieces[i].len;
    /* Nothing to move, or a write whose bulk is not its stream: Python answers those. */
    if (pl->nbytes == 0 || (pl->rq.op == PV_OP_WRITE && (uint64_t)pl->nbytes != bulk_len))
        goto declined;
    return 0;
declined:
    pv_fast_plan_free(pl);
    return -1;
}

struct pv_job *pv_fast_take(struct pv_fast *f, int sock, const void *hdr, size_t len,
                            uint64_t bulk_len)
{
    struct pv_fast_plan pl;
    struct pv_fast_entry *g;
    struct pv_job *j = NULL;
    bool enabled, write;
    int index, niods;

    pthread_mutex_lock(&f->lock);
    /* Room in the ring for this job's record and every other in flight. */
    enabled = f->enabled && f->ring_len + f->inflight < FAST_RING;
    index = f->index;
    niods = f->niods;
    pthread_mutex_unlock(&f->lock);
    if (!enabled || pv_fast_plan(hdr, len, bulk_len, index, niods, &pl) < 0)
        goto counted;
    write = pl.rq.op == PV_OP_WRITE;
    pthread_mutex_lock(&f->lock);
    g = *slot_of(f, pl.rq.ino);
    if (g != NULL && (!write || g->write_ok)) {
        g->refs++;
        g->used = ++f->clock;
        if (write)
            g->writes++;
    } else {
        g = NULL;
    }
    pthread_mutex_unlock(&f->lock);
    if (g != NULL) {
        j = make_job(&pl.rq, pl.pieces, pl.npieces, pl.nbytes, sock, g);
        if (j == NULL) {
            pthread_mutex_lock(&f->lock);
            release(f, write, g, false);      /* unlocks */
        }
    }
    pv_fast_plan_free(&pl);
counted:
    pthread_mutex_lock(&f->lock);
    if (j != NULL) {
        f->n_jobs++;
        f->inflight++;
    } else {
        f->n_declined++;
    }
    pthread_mutex_unlock(&f->lock);
    return j;
}

/* A fast job ended: its reference on the grant goes and, unless stale (Python serves the
 * request after all), its record joins the ring. True when Python should be woken to drain
 * the ring (half full). */
bool pv_fast_end(struct pv_fast *f, const struct pv_job *j)
{
    struct pv_fast_rec *r;
    bool wake = false;

    pthread_mutex_lock(&f->lock);
    f->inflight--;
    if (!j->stale) {
        /* pv_fast_take() makes a job only while the ring has room for every job in flight. */
        r = &f->ring[(f->ring_head + f->ring_len) % FAST_RING];
        f->ring_len++;
        *r = (struct pv_fast_rec){
            .ino = j->inode, .op = j->op, .err = j->err, .nbytes = j->nbytes,
            .want = j->fast_want, .regions = j->fast_regions, .lo = j->fast_lo,
            .hi = j->fast_hi, .logical = j->fast_logical, .t_submit = j->t_submit,
            .t_start = j->t_start, .t_done = j->t_done,
        };
        wake = f->ring_len == FAST_RING / 2;
    }
    release(f, j->op == PV_OP_WRITE, j->fast, j->stale);    /* unlocks */
    return wake;
}

/* Take up to max records (oldest first) into out; how many. */
size_t pv_fast_records(struct pv_fast *f, struct pv_fast_rec *out, size_t max)
{
    size_t n;

    pthread_mutex_lock(&f->lock);
    n = f->ring_len < max ? f->ring_len : max;
    for (size_t i = 0; i < n; i++)
        out[i] = f->ring[(f->ring_head + i) % FAST_RING];
    f->ring_head = (f->ring_head + n) % FAST_RING;
    f->ring_len -= n;
    pthread_mutex_unlock(&f->lock);
    return n;
}

void pv_fast_counts(struct pv_fast *f, struct pv_fast_counts *c)
{
    pthread_mutex_lock(&f->lock);
    c->enabled = f->enabled;
    c->grants = (int64_t)f->ngrants;
    c->jobs = f->n_jobs;
    c->declined = f->n_declined;
    c->pending = (int64_t)f->ring_len;
    pthread_mutex_unlock(&f->lock);
}
