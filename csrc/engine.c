/* engine.c -- the I/O daemon's service loop (thesis §3.2.5, "Servicing Requests").
 *
 *     while (job list not empty) {
 *         select next ready job to service
 *         complete accesses from job until we would block
 *     }
 *
 * One pthread runs that loop over non-blocking sockets with epoll, never holding the GIL.
 * Sockets are registered edge-triggered: a job is marked ready on an edge and unready when
 * serving it hits EAGAIN, so jobs the policy passes over do not make epoll_wait spin.
 *
 * The Python side talks to the loop through e->lock and two eventfds: submit(), attach() and
 * detach() append to the inbox and write wake_fd; the loop posts what happened (a job done,
 * a frame header read, a connection closed) to a private list during a turn and publishes
 * the whole batch to the done list at the end of the turn with one write to done_fd, which
 * Python watches (Engine.fileno()). The lock is only ever held for list splicing, never
 * across I/O, so the Python thread that takes it never waits long.
 *
 * Attached connections (conn.c) are the engine's between jobs: it reads each one's next frame
 * header whenever it is readable, outside the scheduling policy, and posts a FRAME event.
 * Making, stopping and freeing an engine is lifecycle.c's; the clock, the eventfds, epoll
 * registration and posting an event are base.c's, which conn.c shares (native.h, "Units").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "native.h"

#define PV_MAX_EVENTS 256

/* One lock and one eventfd write per turn, however many events it produced. */
static void flush_events(struct pv_engine *e)
{
    if (e->out_head == NULL)
        return;
    pthread_mutex_lock(&e->lock);
    if (e->done_tail != NULL)
        e->done_tail->next = e->out_head;
    else
        e->done_head = e->out_head;
    e->done_tail = e->out_tail;
    pthread_mutex_unlock(&e->lock);
    e->out_head = e->out_tail = NULL;
    pv_eventfd_signal(e->done_fd);
}

static uint32_t job_events(const struct pv_job *j)
{
    return EPOLLET | (pv_job_wants_out(j) ? EPOLLOUT : EPOLLIN);
}

static void list_append(struct pv_job **head, struct pv_job **tail, struct pv_job *j)
{
    j->next = NULL;
    j->prev = *tail;
    if (*tail != NULL)
        (*tail)->next = j;
    else
        *head = j;
    *tail = j;
}

static void list_remove(struct pv_job **head, struct pv_job **tail, struct pv_job *j)
{
    if (j->prev != NULL)
        j->prev->next = j->next;
    else
        *head = j->next;
    if (j->next != NULL)
        j->next->prev = j->prev;
    else
        *tail = j->prev;
    j->prev = j->next = NULL;
}

/* End a job: leave epoll, give the socket its flags back, post its "done" event. A job on an
 * attached connection hands the socket back to the connection instead (conn.c). */
static void finish_job(struct pv_engine *e, struct pv_job *j)
{
    if (j->disk_until != 0) {
        j->disk_until = 0;
        e->ndisk_wait--;
    }
    if (j->registered) {
        /* EBADF/ENOENT: the owner closed the fd already, which also left the epoll set. */
        if (j->conn == NULL && epoll_ctl(e->epfd, EPOLL_CTL_DEL, j->sock, NULL) < 0
            && errno != EBADF && errno != ENOENT && j->err == 0)
            j->err = errno;
        if (!pv_job_scheduled(j)) {
            if (pv_ring_linked(&j->sq))
                pv_ring_del(&j->sq);
        } else {
            if (--e->nsched == 0)
                e->idle_since = pv_now_ns();
            if (e->ops->so_dequeue != NULL)
                e->ops->so_dequeue(e, j);
        }
        list_remove(&e->jobs_head, &e->jobs_tail, j);
        e->njobs--;
        j->registered = false;
        pv_sched_stale(e);
    }
    if (j->sock_flags >= 0 && !(j->sock_flags & O_NONBLOCK)
        && fcntl(j->sock, F_SETFL, j->sock_flags) < 0 && j->err == 0)
        j->err = errno;
    pv_job_unmap(j);
    j->t_done = pv_now_ns();
    if (j->t_start != 0)
        atomic_fetch_sub(&e->n_active, 1);
    else
        atomic_fetch_sub(&e->n_queued, 1);
    atomic_fetch_add(&e->n_completed, 1);
    if (j->own) {
        pv_conn_own_end(e, j);       /* no "done" for Python: the job is the loop's */
        return;
    }
    j->ev.kind = PV_EV_JOB;
    pv_post(e, &j->ev);
    /* After "done": the connection's "closed" or next "frame" follows it. */
    if (j->conn != NULL)
        pv_conn_job_end(e, j);
    /* The access list, prefix and suffix are not needed any more; the record stays until
     * taken (pv_conn_job_end reads them, so they go last). */
    free(j->acc);
    free(j->prefix);
    free(j->suffix);
    j->acc = NULL;
    j->prefix = j->suffix = NULL;
}

/* End a job with the errno `code` as its result, unless it has one already. */
static void fail_job(struct pv_engine *e, struct pv_job *j, int code)
{
    if (j->err == 0)
        j->err = code;
    finish_job(e, j);
}

static int64_t stamp_start(struct pv_engine *e)
{
    int64_t now = pv_now_ns();
    /* Strictly increasing per engine, so service order can be read off t_start. */
    if (now <= e->last_start)
        now = e->last_start + 1;
    e->last_start = now;
    return now;
}

static void join_loop(struct pv_engine *e, struct pv_job *j)
{
    j->registered = true;
    list_append(&e->jobs_head, &e->jobs_tail, j);
    e->njobs++;
    pv_sched_stale(e);
    pv_ring_init(&j->sq);
    if (!pv_job_scheduled(j))
        return;
    /* The first job of a busy period after a pause of at least gather_ns: the requests of a
     * collective that arrive with it are gathered for gather_ns before a policy that honours
     * it (opt4) picks among them. Shorter pauses are a task's turnaround between requests
     * it sends one after the other (a random-block read), not a new collective: gathering
     * there cost opt4 10 ms per 2 KiB cached block. */
    if (e->nsched++ == 0) {
        int64_t now = pv_now_ns();
        if (e->gather_ns > 0 && (e->idle_since == 0 || now - e->idle_since >= e->gather_ns)) {
            e->gather_until = now + e->gather_ns;
            e->gather_entry = true;
        }
    }
    if (e->ops->so_enqueue != NULL)
        e->ops->so_enqueue(e, j);
}

/* A job from the inbox joins the loop: non-blocking socket, epoll registration. A job on an
 * attached connection takes over the connection's registration instead. */
static void arrive(struct pv_engine *e, struct pv_job *j)
{
    struct pv_err err;
    int flags;

    j->seq = ++e->seq;
    j->t_last = pv_now_ns();
    if (pv_conn_bind(e, j, &err) < 0) {
        fail_job(e, j, err.code);
        return;
    }
    if (j->conn != NULL)
        join_loop(e, j);
    if (pv_job_idle(j)) {
        /* Nothing to move: done as soon as seen. */
        j->t_start = stamp_start(e);
        atomic_fetch_sub(&e->n_queued, 1);
        atomic_fetch_add(&e->n_active, 1);
        finish_job(e, j);
        return;
    }
    if (j->conn != NULL)
        return;
    flags = fcntl(j->sock, F_GETFL);
    if (flags < 0) {
        fail_job(e, j, errno);
        return;
    }
    if (!(flags & O_NONBLOCK) && fcntl(j->sock, F_SETFL, flags | O_NONBLOCK) < 0) {
        fail_job(e, j, errno);
        return;
    }
    j->sock_flags = flags;
    j->reg_out = pv_job_wants_out(j);
    if (pv_epoll_set(e, EPOLL_CTL_ADD, j->sock, job_events(j), (uintptr_t)j, &err) < 0) {
        /* EEXIST: a second job on a socket that has one; EPERM: not a socket. */
        fail_job(e, j, err.code);
        return;
    }
    join_loop(e, j);
}

/* A job's readiness changed: replies go to (or leave) the express queue, data jobs are the
 * policy's business. */
static void job_changed(struct pv_engine *e, struct pv_job *j)
{
    pv_sched_stale(e);
    if (!pv_job_scheduled(j)) {
        if (pv_job_runnable(j) && !pv_ring_linked(&j->sq))
            pv_ring_add_tail(&e->express, &j->sq);
        else if (!pv_job_runnable(j) && pv_ring_linked(&j->sq))
            pv_ring_del(&j->sq);
    } else if (e->ops->so_update != NULL) {
        e->ops->so_update(e, j);
    }
}

/* The next job to serve: a runnable reply first, else the policy's pick. A policy that holds
 * its pick back returns NULL and sets hold_until, which bounds the loop's sleep. */
static struct pv_job *next_job(struct pv_engine *e)
{
    e->hold_until = 0;
    if (pv_ring_linked(&e->express))
        return pv_container_of(e->express.next, struct pv_job, sq);
    return e->ops->so_peek(e);
}

static void switch_policy(struct pv_engine *e, const struct pv_sched_ops *ops)
{
    struct pv_err err;

    if (e->ops->so_stop != NULL)
        e->ops->so_stop(e);
    e->ops = ops;
    pv_sched_stale(e);
    /* A policy that cannot start (no memory for its state) leaves opt1 in charge; opt1's
     * start only links jobs that exist, so it cannot fail. */
    if (ops->so_start != NULL && ops->so_start(e, &err) < 0) {
        e->ops = &pv_sched_opt1;
        (void)pv_sched_opt1.so_start(e, &err);
    }
}

/* Take what the Python side handed over. Returns true when the engine must stop. */
static bool take_inbox(struct pv_engine *e)
{
    struct pv_event *list, *next;
    const struct pv_sched_ops *ops;
    bool stop;

    pv_eventfd_drain(e->wake_fd);
    pthread_mutex_lock(&e->lock);
    list = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    ops = e->want_ops;
    if (e->window != e->want_window || e->gather_ns != e->want_gather_ns)
        pv_sched_stale(e);
    e->window = e->want_window;
    e->gather_ns = e->want_gather_ns;
    stop = e->stopping;
    pthread_mutex_unlock(&e->lock);

    if (ops != e->ops)
        switch_policy(e, ops);
    /* In submission order: an attach, then a job on that socket, then a detach... */
    for (; list != NULL; list = next) {
        next = list->next;
        if (list->kind == PV_EV_JOB) {
            arrive(e, pv_container_of(list, struct pv_job, ev));
        } else if (list->kind == PV_EV_ATTACH) {
            pv_conn_attach(e, (struct pv_conn *)list);
        } else {
            struct pv_detach *d = (struct pv_detach *)list;
            int r = pv_conn_detach(e, d->id, d->fd, &d->err);
            pthread_mutex_lock(&e->lock);
            d->result = r;
            d->done = true;
            pthread_cond_broadcast(&e->cmd_cond);
            pthread_mutex_unlock(&e->lock);
        }
    }
    return stop;
}

/* Jobs whose emulated disk read or write has finished become runnable again: a readiness
 * edge, so opt1 puts them at the back of its queue as a real disk completion would. */
static void disk_wake(struct pv_engine *e, int64_t now)
{
    int64_t next = INT64_MAX;

    if (e->ndisk_wait == 0 || now < e->disk_next)
        return;
    for (struct pv_job *j = e->jobs_head; j != NULL; j = j->next) {
        if (j->disk_until == 0)
            continue;
        if (j->disk_until > now) {
            if (j->disk_until < next)
                next = j->disk_until;
            continue;
        }
        j->disk_until = 0;
        e->ndisk_wait--;
        j->t_last = now;
        if (j->ready)
            j->ready_seq = ++e->ready_seq;
        job_changed(e, j);
    }
    e->disk_next = next;
}

/* How long epoll_wait may sleep (ns, -1: no limit): until the first job waiting on its peer
 * times out, or the emulated disk finishes a job's access (exactly: the model's times must
 * not be rounded to epoll_wait's milliseconds, hence epoll_pwait2). */
static int64_t wait_ns(struct pv_engine *e, int64_t now)
{
    int64_t first = pv_conn_deadline(e);

    if (e->ndisk_wait > 0 && e->disk_next < first)
        first = e->disk_next;
    if (e->hold_until > 0 && e->hold_until < first)
        first = e->hold_until;
    for (struct pv_job *j = e->jobs_head; j != NULL; j = j->next) {
        if (!j->ready && j->t_last + e->idle_ns < first)
            first = j->t_last + e->idle_ns;
    }
    if (first == INT64_MAX)
        return -1;
    return first <= now ? 0 : first - now;
}

/* A job waiting on its peer for idle_timeout ends with ETIMEDOUT. A ready job the policy
 * keeps passing over is not idle: the wait is the server's choice, not the peer's. */
static void expire_idle(struct pv_engine *e)
{
    int64_t now = pv_now_ns();
    struct pv_job *j, *next;

    for (j = e->jobs_head; j != NULL; j = next) {
        next = j->next;
        if (!j->ready && now - j->t_last >= e->idle_ns)
            fail_job(e, j, ETIMEDOUT);
    }
    pv_conn_expire(e, now);
}

static void serve_turn(struct pv_engine *e, struct pv_job *j)
{
    struct pv_err err;
    enum pv_serve r;
    bool progress = false;

    if (j->t_start == 0) {
        j->t_start = stamp_start(e);
        atomic_fetch_sub(&e->n_queued, 1);
        atomic_fetch_add(&e->n_active, 1);
    }
    r = pv_serve_job(e, j, &progress);
    /* The job's position and e->last moved, and its readiness may have changed. */
    pv_sched_stale(e);
    if (j->nacc > 0)
        e->last = pv_job_pos(j);
    /* Idle time counts from the end of the last turn: from then on the peer holds us up. */
    j->t_last = pv_now_ns();
    if (e->gather_entry && j->t_last >= e->gather_until)
        e->gather_entry = false;
    if (r == PV_SERVE_DONE) {
        finish_job(e, j);
    } else if (r == PV_SERVE_DISK) {
        /* Waiting for the emulated disk: not runnable until disk_wake. */
        e->ndisk_wait++;
        if (e->ndisk_wait == 1 || j->disk_until < e->disk_next)
            e->disk_next = j->disk_until;
        job_changed(e, j);
    } else if (r == PV_SERVE_BLOCKED) {
        j->ready = false;
        job_changed(e, j);
        /* A write job's suffix needs the other direction. */
        if (pv_job_wants_out(j) != j->reg_out) {
            j->reg_out = !j->reg_out;
            if (pv_epoll_set(e, EPOLL_CTL_MOD, j->sock, job_events(j), (uintptr_t)j, &err) < 0)
                fail_job(e, j, err.code);
        }
    }
}

/* The jobs the loop made this turn (fast requests, their error replies) join it, in the
 * order they were made. */
static void take_own(struct pv_engine *e)
{
    while (e->own_head != NULL) {
        struct pv_event *list = e->own_head, *next;

        e->own_head = e->own_tail = NULL;
        for (; list != NULL; list = next) {
            next = list->next;
            arrive(e, pv_container_of(list, struct pv_job, ev));
        }
    }
}

/* The loop thread's body (started by pv_engine_create, lifecycle.c). */
void *pv_engine_main(void *arg)
{
    struct pv_engine *e = arg;
    struct epoll_event evs[PV_MAX_EVENTS];
    int code = ECANCELED;             /* what ends the jobs and connections left at the end */

    for (;;) {
        struct pv_job *j;
        struct timespec ts;
        int64_t wait;
        int n;
        bool wake = false;

        disk_wake(e, pv_now_ns());
        j = next_job(e);
        wait = (j != NULL && pv_job_runnable(j)) || pv_conn_pending(e) || e->own_head != NULL ? 0
                                                                      : wait_ns(e, pv_now_ns());
        ts.tv_sec = wait / 1000000000;
        ts.tv_nsec = wait % 1000000000;
        n = epoll_pwait2(e->epfd, evs, PV_MAX_EVENTS, wait < 0 ? NULL : &ts, NULL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            code = errno;
            pthread_mutex_lock(&e->lock);
            e->fatal = code;
            e->stopping = true;
            pthread_mutex_unlock(&e->lock);
            break;
        }
        /* Mark everything first: no job or connection is freed while evs may still point
         * at it, so the inbox (detach) is taken only after this. */
        for (int i = 0; i < n; i++) {
            uintptr_t d = (uintptr_t)evs[i].data.u64;
            struct pv_job *ej = (struct pv_job *)d;
            if (d == 0) {
                wake = true;
            } else if (d & PV_TAG_CONN) {
                pv_conn_mark(e, (struct pv_conn *)(d & ~PV_TAG_CONN));
            } else if (!ej->ready) {
                ej->ready = true;
                ej->ready_seq = ++e->ready_seq;
                job_changed(e, ej);
            }
        }
        if (wake && take_inbox(e))
            break;
        expire_idle(e);
        disk_wake(e, pv_now_ns());
        j = next_job(e);
        if (j != NULL && pv_job_runnable(j))
            serve_turn(e, j);
        /* Headers last: a job that just finished has its next header read in this turn. */
        pv_conn_serve(e);
        take_own(e);
        flush_events(e);
    }
    /* Close or a dead loop: everything still in hand completes with code. */
    take_inbox(e);
    pv_conn_own_drop(e);
    while (e->jobs_head != NULL)
        fail_job(e, e->jobs_head, code);
    pv_conn_own_drop(e);
    pv_conn_close_all(e, code);
    flush_events(e);
    return NULL;
}
