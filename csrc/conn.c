/* conn.c -- attached connections: the engine reads their frame headers between jobs.
 *
 * A Python task per client connection that waits for the next frame header costs more CPU
 * per request than the engine spends moving a MiB. An attached connection is the engine's
 * instead: while no job runs on it, the loop reads the 16-byte prefix and then exactly
 * header_len bytes -- never more: the bulk stays in the socket for the job -- posts a FRAME
 * event and stops reading until Python submits a job on the socket. When that job succeeds
 * the loop reads the next header at once, in the same turn; when it fails on the socket the
 * connection is closed (CLOSED event) and forgotten.
 *
 * Header reading is not a job and no policy schedules it: a connection is served in the turn
 * it became readable, at most PV_CONN_BATCH connections per turn, so that a flood of headers
 * delays the next job turn by a bounded amount.
 *
 * Registration, one epoll entry per fd:
 *   READING  EPOLLIN | EPOLLONESHOT, data = the tagged conn. It fires once; the loop reads
 *            until EAGAIN and re-arms. A header that completes leaves it disarmed, so the
 *            bulk arriving behind the header wakes nobody while Python builds the job.
 *   WAIT     disarmed (EPOLLONESHOT alone; a late HUP/ERR is ignored in this state).
 *   JOB      the job's own edge-triggered registration (data = the job), set with
 *            EPOLL_CTL_MOD and switched back when the job ends.
 *
 * A connection whose header has begun must complete it within idle_timeout (ETIMEDOUT); one
 * idle between frames never times out. Headers are read straight into pooled records that
 * events() gives back (pv_records_release), so a warm engine does no malloc per frame.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "native.h"

#define PV_CONN_BATCH 64              /* connections served per turn, at most */
#define PV_REC_POOL 1024              /* spare records kept for reuse */
#define PV_REC_KEEP 4096              /* a spare record keeps a buffer up to this size */

enum { READ_AGAIN, READ_FRAME, READ_CLOSED };

static const unsigned char magic[4] = { 'P', 'V', '0', '1' };

/* -- records ----------------------------------------------------------------------------- */

/* A record able to hold len header bytes, or NULL when out of memory. Spares come from the
 * loop's cache, refilled in one go from what events() gave back. */
static struct pv_record *rec_get(struct pv_engine *e, size_t len)
{
    struct pv_record *r;

    if (e->rec_cache == NULL) {
        pthread_mutex_lock(&e->lock);
        e->rec_cache = e->rec_free;
        e->rec_free = NULL;
        e->nrec_free = 0;
        pthread_mutex_unlock(&e->lock);
    }
    r = e->rec_cache;
    if (r != NULL)
        e->rec_cache = (struct pv_record *)r->ev.next;
    else if ((r = calloc(1, sizeof(*r))) == NULL)
        return NULL;
    if (r->cap < len) {
        char *d = realloc(r->data, len);
        if (d == NULL) {
            free(r->data);
            free(r);
            return NULL;
        }
        r->data = d;
        r->cap = len;
    }
    r->ev.kind = PV_EV_FRAME;
    r->len = len;
    return r;
}

static void rec_put(struct pv_engine *e, struct pv_record *r)
{
    r->ev.next = (struct pv_event *)e->rec_cache;
    e->rec_cache = r;
}

static void rec_free(struct pv_record *r)
{
    free(r->data);
    free(r);
}

/* events() is done with these FRAME records: keep up to PV_REC_POOL of them for the loop. */
void pv_records_release(struct pv_engine *e, struct pv_record *list)
{
    struct pv_record *r, *next;

    for (r = list; r != NULL; r = (struct pv_record *)r->ev.next) {
        /* A rare huge header must not pin its buffer in the pool. */
        if (r->cap > PV_REC_KEEP) {
            free(r->data);
            r->data = NULL;
            r->cap = 0;
        }
    }
    pthread_mutex_lock(&e->lock);
    for (r = list; r != NULL && e->nrec_free < PV_REC_POOL; r = next) {
        next = (struct pv_record *)r->ev.next;
        r->ev.next = (struct pv_event *)e->rec_free;
        e->rec_free = r;
        e->nrec_free++;
    }
    pthread_mutex_unlock(&e->lock);
    for (; r != NULL; r = next) {
        next = (struct pv_record *)r->ev.next;
        rec_free(r);
    }
}

/* Free an event nobody will take (engine teardown). */
void pv_event_free(struct pv_event *ev)
{
    switch (ev->kind) {
    case PV_EV_JOB:
        pv_job_free(pv_container_of(ev, struct pv_job, ev));
        break;
    case PV_EV_ATTACH:
    case PV_EV_CLOSED:
        free(ev);                     /* the pv_conn; it holds no record any more */
        break;
    case PV_EV_FRAME:
        rec_free((struct pv_record *)ev);
        break;
    case PV_EV_DETACH:
        break;                        /* on its caller's stack */
    }
}

/* -- the table and the connection's life ------------------------------------------------- */

static struct pv_conn *conn_get(const struct pv_engine *e, int fd)
{
    return fd >= 0 && (size_t)fd < e->conn_fd_len ? e->conn_fd[fd] : NULL;
}

/* Enter c in the table of attached connections by fd. */
static int conn_put(struct pv_engine *e, struct pv_conn *c, struct pv_err *err)
{
    if ((size_t)c->fd >= e->conn_fd_len) {
        size_t n = e->conn_fd_len ? e->conn_fd_len : 256;
        struct pv_conn **t;

        while (n <= (size_t)c->fd)
            n *= 2;
        t = realloc(e->conn_fd, n * sizeof(*t));
        if (t == NULL)
            return pv_fail(err, ENOMEM, "out of memory");
        memset(t + e->conn_fd_len, 0, (n - e->conn_fd_len) * sizeof(*t));
        e->conn_fd = t;
        e->conn_fd_len = n;
    }
    if (e->conn_fd[c->fd] != NULL)
        return pv_fail(err, EEXIST, "fd %d is attached already", c->fd);
    e->conn_fd[c->fd] = c;
    atomic_fetch_add(&e->n_attached, 1);
    return 0;
}

static uintptr_t conn_tag(struct pv_conn *c)
{
    return (uintptr_t)c | PV_TAG_CONN;
}

/* Out of every loop structure; the caller frees c or posts it as CLOSED. */
static void conn_forget(struct pv_engine *e, struct pv_conn *c)
{
    struct pv_err ignored;

    /* EBADF/ENOENT: the fd was closed or never added; either way it is out of the set. */
    (void)pv_epoll_set(e, EPOLL_CTL_DEL, c->fd, 0, 0, &ignored);
    e->conn_fd[c->fd] = NULL;
    atomic_fetch_sub(&e->n_attached, 1);
    if (pv_ring_linked(&c->ready))
        pv_ring_del(&c->ready);
    if (pv_ring_linked(&c->partial))
        pv_ring_del(&c->partial);
    if (c->rec != NULL)
        rec_put(e, c->rec);
    c->rec = NULL;
    c->job = NULL;
}

/* Tell Python the connection ended, with the errno `code` (0: the peer hung up). */
static void post_closed(struct pv_engine *e, struct pv_conn *c, int code)
{
    c->err = code;
    c->ev.kind = PV_EV_CLOSED;
    pv_post(e, &c->ev);
}

static void conn_close(struct pv_engine *e, struct pv_conn *c, int code)
{
    conn_forget(e, c);
    post_closed(e, c, code);
}

void pv_conn_init(struct pv_engine *e)
{
    pv_ring_init(&e->conn_ready);
    pv_ring_init(&e->conn_partial);
}

void pv_conn_fini(struct pv_engine *e)
{
    struct pv_record *r, *next;

    for (r = e->rec_cache; r != NULL; r = next) {
        next = (struct pv_record *)r->ev.next;
        rec_free(r);
    }
    for (r = e->rec_free; r != NULL; r = next) {
        next = (struct pv_record *)r->ev.next;
        rec_free(r);
    }
    e->rec_cache = e->rec_free = NULL;
    /* The loop closed every connection before it ended. */
    free(e->conn_fd);
    e->conn_fd = NULL;
    e->conn_fd_len = 0;
}

/* The connection's ATTACH is taken: from now on it is the loop's. A failure is no failure
 * of this function but the connection's end, posted as CLOSED with its errno. */
void pv_conn_attach(struct pv_engine *e, struct pv_conn *c)
{
    struct pv_err err;

    pv_ring_init(&c->ready);
    pv_ring_init(&c->partial);
    c->state = PV_CONN_READING;
    if (conn_put(e, c, &err) < 0) {
        /* EEXIST: the fd is attached already; that connection is left alone. */
        post_closed(e, c, err.code);
        return;
    }
    if (pv_epoll_set(e, EPOLL_CTL_ADD, c->fd, EPOLLIN | EPOLLONESHOT, conn_tag(c), &err) < 0) {
        /* EEXIST: a job runs on the socket; EPERM: not a socket. Not ours to delete. */
        e->conn_fd[c->fd] = NULL;
        atomic_fetch_sub(&e->n_attached, 1);
        post_closed(e, c, err.code);
        return;
    }
    c->armed = true;
}

/* Forget the connection (id, fd) and free it: 0, or -1 with err, the caller's misuse:
 * ENOENT (not attached: closed already, its CLOSED event queued) or EBUSY (a job runs). */
int pv_conn_detach(struct pv_engine *e, int64_t id, int fd, struct pv_err *err)
{
    struct pv_conn *c = conn_get(e, fd);

    if (c == NULL || c->id != id)
        return pv_misuse(err, ENOENT, "connection is not attached");
    if (c->state == PV_CONN_JOB)
        return pv_misuse(err, EBUSY, "connection is in a job");
    conn_forget(e, c);
    free(c);
    return 0;
}

void pv_conn_close_all(struct pv_engine *e, int code)
{
    for (size_t fd = 0; fd < e->conn_fd_len; fd++) {
        if (e->conn_fd[fd] != NULL)
            conn_close(e, e->conn_fd[fd], code);
    }
}

/* -- reading headers --------------------------------------------------------------------- */

static uint64_t le_bytes(const unsigned char *p, int n)
{
    uint64_t v = 0;

    /* Explicit little-endian decoding: the wire order, whatever the host's. */
    while (n-- > 0)
        v = (v << 8) | p[n];
    return v;
}

/* Check what arrived of the prefix; once complete, get a record for the header.
 * 0 to go on reading, or -1 with err: close the connection. */
static int prefix_check(struct pv_engine *e, struct pv_conn *c, struct pv_err *err)
{
    uint64_t hlen, blen;

    /* Garbage is refused at its first wrong byte, not after 16 of them. */
    if (memcmp(c->prefix, magic, c->got < sizeof(magic) ? c->got : sizeof(magic)) != 0)
        return pv_fail(err, EPROTO, "not a frame: bad magic");
    if (c->got < PV_PREFIX_LEN)
        return 0;
    hlen = le_bytes(c->prefix + 4, 4);
    blen = le_bytes(c->prefix + 8, 8);
    if (hlen == 0 || hlen > PV_MAX_HEADER || blen > PV_MAX_BULK)
        return pv_fail(err, EPROTO, "frame lengths out of range (%llu, %llu)",
                       (unsigned long long)hlen, (unsigned long long)blen);
    c->rec = rec_get(e, (size_t)hlen);
    if (c->rec == NULL)
        return pv_fail(err, ENOMEM, "out of memory");
    c->rec->conn_id = c->id;
    c->rec->bulk_len = blen;
    return 0;
}

/* A job the loop made joins the loop at the end of this turn (engine.c, take_own). */
static void own_push(struct pv_engine *e, struct pv_job *j)
{
    j->ev.kind = PV_EV_JOB;
    pv_ev_append(&e->own_head, &e->own_tail, &j->ev);
    atomic_fetch_add(&e->n_queued, 1);
}

/* Read c's next header until it is complete (FRAME posted), the socket is empty (AGAIN) or
 * the connection ended (CLOSED posted, c is gone). */
static int conn_read(struct pv_engine *e, struct pv_conn *c)
{
    for (;;) {
        size_t hdr = c->got - (c->got < PV_PREFIX_LEN ? c->got : PV_PREFIX_LEN);
        char *dst = c->rec == NULL ? (char *)c->prefix + c->got : c->rec->data + hdr;
        size_t want = c->rec == NULL ? PV_PREFIX_LEN - c->got : c->rec->len - hdr;
        ssize_t n = recv(c->fd, dst, want, MSG_DONTWAIT);
        struct pv_err err;

        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return READ_AGAIN;
            conn_close(e, c, errno);
            return READ_CLOSED;
        }
        if (n == 0) {
            /* Between frames the peer may hang up; inside one it broke the frame. */
            conn_close(e, c, c->got == 0 ? 0 : ECONNRESET);
            return READ_CLOSED;
        }
        if (c->got == 0) {
            c->t_begin = pv_now_ns();
            pv_ring_add_tail(&e->conn_partial, &c->partial);
        }
        c->got += (size_t)n;
        if (c->rec == NULL) {
            if (prefix_check(e, c, &err) < 0) {
                conn_close(e, c, err.code);
                return READ_CLOSED;
            }
        } else if (c->got == PV_PREFIX_LEN + c->rec->len) {
            struct pv_record *r = c->rec;
            struct pv_job *j;
            c->rec = NULL;
            c->got = 0;
            pv_ring_del(&c->partial);
            c->state = PV_CONN_WAIT;
            atomic_fetch_add_explicit(&e->n_frames, 1, memory_order_relaxed);
            /* A granted read or write is served without Python (fast.c); anything else is
             * Python's frame. */
            j = pv_fast_take(&e->fast, c->fd, r->data, r->len, r->bulk_len);
            if (j != NULL) {
                j->rec = r;
                own_push(e, j);
            } else {
                pv_post(e, &r->ev);
            }
            return READ_FRAME;
        }
    }
}

/* Make sure a connection that emptied its socket hears about the next bytes. */
static void conn_arm(struct pv_engine *e, struct pv_conn *c)
{
    struct pv_err err;

    if (c->armed)
        return;
    if (pv_epoll_set(e, EPOLL_CTL_MOD, c->fd, EPOLLIN | EPOLLONESHOT, conn_tag(c), &err) < 0) {
        conn_close(e, c, err.code);
        return;
    }
    c->armed = true;
}

/* An event for c was harvested: its one-shot has fired. */
void pv_conn_mark(struct pv_engine *e, struct pv_conn *c)
{
    c->armed = false;
    if (c->state == PV_CONN_READING && !pv_ring_linked(&c->ready))
        pv_ring_add_tail(&e->conn_ready, &c->ready);
}

void pv_conn_serve(struct pv_engine *e)
{
    for (int budget = PV_CONN_BATCH; budget > 0 && pv_ring_linked(&e->conn_ready); budget--) {
        struct pv_conn *c = pv_container_of(e->conn_ready.next, struct pv_conn, ready);

        pv_ring_del(&c->ready);
        if (conn_read(e, c) == READ_AGAIN)
            conn_arm(e, c);
    }
}

bool pv_conn_pending(const struct pv_engine *e)
{
    return pv_ring_linked(&e->conn_ready);
}

/* When the oldest begun header runs out of time; the partial ring is in t_begin order. */
int64_t pv_conn_deadline(const struct pv_engine *e)
{
    const struct pv_conn *c;

    if (!pv_ring_linked(&e->conn_partial))
        return INT64_MAX;
    c = pv_container_of(e->conn_partial.next, struct pv_conn, partial);
    return c->t_begin + e->idle_ns;
}

void pv_conn_expire(struct pv_engine *e, int64_t now)
{
    while (pv_ring_linked(&e->conn_partial)) {
        struct pv_conn *c = pv_container_of(e->conn_partial.next, struct pv_conn, partial);
        if (now - c->t_begin < e->idle_ns)
            break;
        conn_close(e, c, ETIMEDOUT);
    }
}

/* -- jobs on attached connections -------------------------------------------------------- */

/* A job arrives: if its socket is attached, the job takes over the connection's epoll entry.
 * 0 (attached or not), or -1 with err, what the job fails with; the connection is left as it
 * was. */
int pv_conn_bind(struct pv_engine *e, struct pv_job *j, struct pv_err *err)
{
    struct pv_conn *c = conn_get(e, j->sock);
    uint32_t events;

    if (c == NULL)
        return 0;
    /* Only a connection that posted a frame (or a storage error) waits for a job. */
    if (c->state == PV_CONN_JOB)
        return pv_fail(err, EEXIST, "a job runs on connection %lld", (long long)c->id);
    if (c->state != PV_CONN_WAIT)
        return pv_fail(err, EBUSY, "connection %lld is reading a header", (long long)c->id);
    j->reg_out = pv_job_wants_out(j);
    events = EPOLLET | (j->reg_out ? EPOLLOUT : EPOLLIN);
    if (pv_epoll_set(e, EPOLL_CTL_MOD, c->fd, events, (uintptr_t)j, err) < 0)
        return -1;
    c->state = PV_CONN_JOB;
    c->armed = false;
    c->job = j;
    j->conn = c;
    return 0;
}

/* The job on c ended and its "done" is posted. Success: read the next header right away --
 * with a pipelined client it is already here -- and only then give the epoll entry back to
 * the connection, armed if the header is not complete. A storage failure with the stream in
 * step, or a job that holds the connection (Python replies once it has done more, e.g.
 * set the file's mtime): wait for Python's next job (the reply). Anything else broke the
 * connection. */
void pv_conn_job_end(struct pv_engine *e, struct pv_job *j)
{
    struct pv_conn *c = j->conn;
    struct pv_err err;
    int r;

    j->conn = NULL;
    c->job = NULL;
    if (j->err != 0 && !pv_job_in_step(j)) {
        conn_close(e, c, j->err);
        return;
    }
    if (j->err != 0 || j->hold) {
        c->state = PV_CONN_WAIT;
        r = READ_FRAME;               /* as after a frame: disarmed */
    } else {
        c->state = PV_CONN_READING;
        r = conn_read(e, c);
        if (r == READ_CLOSED)
            return;
    }
    /* The job's pointer must leave the epoll entry before Python can free the job. */
    if (pv_epoll_set(e, EPOLL_CTL_MOD, c->fd,
                     r == READ_AGAIN ? EPOLLIN | EPOLLONESHOT : EPOLLONESHOT, conn_tag(c),
                     &err) < 0) {
        conn_close(e, c, err.code);
        return;
    }
    c->armed = r == READ_AGAIN;
}

/* -- jobs the loop made itself ----------------------------------------------------------- */

/* The error reply a fast write whose storage failed gets (server.on_done's), or NULL. */
static struct pv_job *error_reply(int sock, int code)
{
    unsigned char reply[PV_FAST_REPLY_MAX];
    size_t len = pv_fast_error_reply(reply, code);
    struct pv_err err;
    struct pv_job *j = pv_job_new(0, sock, sock, PV_OP_READ, NULL, 0, reply, len, NULL, 0, 0,
                                  &err);

    if (j != NULL)
        j->own = true;
    return j;
}

/* An own job ended (finish_job posted nothing for it). A fast job leaves its record and
 * gives its grant back; one that went stale, or never got its connection, has its frame
 * posted to Python after all (nothing moved: the connection waits for Python's job). A fast
 * write whose storage failed, the rest of its stream drained, is answered here as Python
 * would. Then the connection goes on (pv_conn_job_end) and the job is freed. */
void pv_conn_own_end(struct pv_engine *e, struct pv_job *j)
{
    struct pv_record *rec = j->rec;
    struct pv_job *reply = NULL;
    bool bound = j->conn != NULL;

    j->rec = NULL;
    if (!bound)
        j->stale = true;              /* it never ran: Python serves the request */
    if (j->fast != NULL) {
        if (!j->stale && j->err != 0 && j->op == PV_OP_WRITE && pv_job_in_step(j)
            && (reply = error_reply(j->sock, j->err)) == NULL)
            j->err = ENOMEM;          /* no reply to give: the connection must go */
        if (pv_fast_end(&e->fast, j))
            pv_eventfd_signal(e->done_fd);
    }
    if (bound)
        pv_conn_job_end(e, j);
    if (rec != NULL) {
        if (j->stale)
            pv_post(e, &rec->ev);
        else
            rec_put(e, rec);
    }
    if (reply != NULL)
        own_push(e, reply);
    pv_job_free(j);
}

/* The loop ends: own jobs that never arrived go, their requests unserved. */
void pv_conn_own_drop(struct pv_engine *e)
{
    struct pv_event *ev, *next;

    for (ev = e->own_head; ev != NULL; ev = next) {
        struct pv_job *j = pv_container_of(ev, struct pv_job, ev);
        next = ev->next;
        j->stale = true;
        if (j->fast != NULL)
            (void)pv_fast_end(&e->fast, j);
        if (j->rec != NULL)
            rec_free(j->rec);
        atomic_fetch_sub(&e->n_queued, 1);
        pv_job_free(j);
    }
    e->own_head = e->own_tail = NULL;
}
