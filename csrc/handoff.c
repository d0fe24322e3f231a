/* handoff.c -- what the Python thread calls: the engine's inbox and done list.
 *
 * submit(), attach() and detach() append to the inbox under e->lock and write wake_fd; the
 * loop takes the whole inbox at once (engine.c, take_inbox). The loop publishes events to
 * the done list once per turn; events() takes it whole, completions() only its jobs. The
 * lock is held for list splicing only, never across I/O or Python calls.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"

static int check_open(struct pv_engine *e, struct pv_err *err)
{
    if (e->fatal != 0)
        return pv_misuse(err, e->fatal, "engine loop failed: %s", strerror(e->fatal));
    if (e->stopping)
        return pv_misuse(err, EBADF, "engine is closed");
    return 0;
}

int pv_engine_submit(struct pv_engine *e, struct pv_job *j, struct pv_err *err)
{
    pthread_mutex_lock(&e->lock);
    if (check_open(e, err) < 0) {
        pthread_mutex_unlock(&e->lock);
        return -1;
    }
    j->ev.kind = PV_EV_JOB;
    pv_ev_append(&e->inbox_head, &e->inbox_tail, &j->ev);
    atomic_fetch_add(&e->n_queued, 1);
    pthread_mutex_unlock(&e->lock);
    pv_eventfd_signal(e->wake_fd);
    return 0;
}

/* Hand a connection to the loop. The socket is made non-blocking here, so that a bad fd is
 * an error of the call (-1 with the fcntl errno); -1 too when the engine is closed or out of
 * memory. Everything else the loop reports as ("closed", id, err). */
int pv_engine_attach(struct pv_engine *e, int64_t id, int fd, struct pv_err *err)
{
    struct pv_conn *c;
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0 || (!(flags & O_NONBLOCK) && fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0))
        return pv_fail(err, errno, "sock_fd %d: %s", fd, strerror(errno));
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return pv_fail(err, ENOMEM, "out of memory");
    c->id = id;
    c->fd = fd;
    c->ev.kind = PV_EV_ATTACH;
    pthread_mutex_lock(&e->lock);
    if (check_open(e, err) < 0) {
        pthread_mutex_unlock(&e->lock);
        free(c);
        return -1;
    }
    pv_ev_append(&e->inbox_head, &e->inbox_tail, &c->ev);
    pthread_mutex_unlock(&e->lock);
    pv_eventfd_signal(e->wake_fd);
    return 0;
}

/* Wait until the loop has dealt with the request; when this returns 0 the engine has
 * forgotten the connection and never touches fd again, so the caller may close or reuse it.
 * Blocks for at most one loop turn: call it without the GIL. Returns 0, or -1 with err: the
 * engine is closed, or the loop refused with err->code ENOENT (not attached any more: its
 * CLOSED event is queued) or EBUSY (a job runs on it). */
int pv_engine_detach(struct pv_engine *e, int64_t id, int fd, struct pv_err *err)
{
    struct pv_detach d = { .ev.kind = PV_EV_DETACH, .id = id, .fd = fd };

    pthread_mutex_lock(&e->lock);
    if (check_open(e, err) < 0) {
        pthread_mutex_unlock(&e->lock);
        return -1;
    }
    pv_ev_append(&e->inbox_head, &e->inbox_tail, &d.ev);
    pv_eventfd_signal(e->wake_fd);
    /* Every command queued before stopping is taken by the loop's last take_inbox. */
    while (!d.done)
        pthread_cond_wait(&e->cmd_cond, &e->lock);
    pthread_mutex_unlock(&e->lock);
    if (d.result < 0) {
        *err = d.err;
        return -1;
    }
    return 0;
}

int pv_engine_set_algorithm(struct pv_engine *e, const struct pv_sched_ops *ops,
                            struct pv_err *err)
{
    pthread_mutex_lock(&e->lock);
    if (check_open(e, err) < 0) {
        pthread_mutex_unlock(&e->lock);
        return -1;
    }
    e->want_ops = ops;
    pthread_mutex_unlock(&e->lock);
    pv_eventfd_signal(e->wake_fd);
    return 0;
}

int pv_engine_set_window(struct pv_engine *e, int64_t window, struct pv_err *err)
{
    pthread_mutex_lock(&e->lock);
    if (check_open(e, err) < 0) {
        pthread_mutex_unlock(&e->lock);
        return -1;
    }
    e->want_window = window;
    pthread_mutex_unlock(&e->lock);
    pv_eventfd_signal(e->wake_fd);
    return 0;
}

int pv_engine_set_gather(struct pv_engine *e, int64_t gather_ns, struct pv_err *err)
{
    pthread_mutex_lock(&e->lock);
    if (check_open(e, err) < 0) {
        pthread_mutex_unlock(&e->lock);
        return -1;
    }
    e->want_gather_ns = gather_ns;
    pthread_mutex_unlock(&e->lock);
    pv_eventfd_signal(e->wake_fd);
    return 0;
}

/* The finished jobs only; frames and closed connections stay queued for events(). */
struct pv_event *pv_engine_take_completions(struct pv_engine *e)
{
    struct pv_event *jobs = NULL, *jtail = NULL, *keep = NULL, *ktail = NULL, *ev, *next;
    bool left;

    pv_eventfd_drain(e->done_fd);
    pthread_mutex_lock(&e->lock);
    for (ev = e->done_head; ev != NULL; ev = next) {
        next = ev->next;
        if (ev->kind == PV_EV_JOB)
            pv_ev_append(&jobs, &jtail, ev);
        else
            pv_ev_append(&keep, &ktail, ev);
    }
    e->done_head = keep;
    e->done_tail = ktail;
    left = keep != NULL;
    pthread_mutex_unlock(&e->lock);
    /* What stays queued keeps fileno() readable. */
    if (left)
        pv_eventfd_signal(e->done_fd);
    return jobs;
}

/* Everything posted, in order. */
struct pv_event *pv_engine_take_events(struct pv_engine *e)
{
    struct pv_event *list;

    pv_eventfd_drain(e->done_fd);
    pthread_mutex_lock(&e->lock);
    list = e->done_head;
    e->done_head = e->done_tail = NULL;
    pthread_mutex_unlock(&e->lock);
    return list;
}
