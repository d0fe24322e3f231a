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
 * The Python side talks to the loop through e->lock and two eventfds: submit() appends to
 * the inbox and writes wake_fd; the loop moves finished jobs to the done list and writes
 * done_fd, which Python watches (Engine.fileno()). The lock is only ever held for list
 * splicing, never across I/O, so the Python thread that takes it never waits long.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "native.h"

#define PV_MAX_EVENTS 256
#define PV_BUF_LEN ((size_t)1 << 20)
#define PV_PIPE_LEN ((size_t)1 << 20)

int64_t pv_now_ns(void)
{
    struct timespec ts;
    /* CLOCK_MONOTONIC cannot fail on Linux with a valid pointer. */
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void eventfd_signal(int fd)
{
    uint64_t one = 1;
    /* The only failure is EAGAIN at a counter of 2^64-2: the fd is readable anyway. */
    (void)!write(fd, &one, sizeof(one));
}

static void eventfd_drain(int fd)
{
    uint64_t v;
    /* Non-blocking; EAGAIN means there was nothing to drain. */
    (void)!read(fd, &v, sizeof(v));
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

/* End a job: leave epoll, give the socket its flags back, hand the job to completions(). */
static void finish_job(struct pv_engine *e, struct pv_job *j)
{
    if (j->registered) {
        /* EBADF/ENOENT: the owner closed the fd already, which also left the epoll set. */
        if (epoll_ctl(e->epfd, EPOLL_CTL_DEL, j->sock, NULL) < 0 && errno != EBADF
            && errno != ENOENT && j->err == 0)
            j->err = errno;
        if (e->ops->so_job_del != NULL)
            e->ops->so_job_del(e, j);
        list_remove(&e->jobs_head, &e->jobs_tail, j);
        e->njobs--;
        j->registered = false;
    }
    if (j->sock_flags >= 0 && !(j->sock_flags & O_NONBLOCK)
        && fcntl(j->sock, F_SETFL, j->sock_flags) < 0 && j->err == 0)
        j->err = errno;
    pv_job_unmap(j);
    /* The access list and prefix are not needed any more; the record stays until taken. */
    free(j->acc);
    free(j->prefix);
    j->acc = NULL;
    j->prefix = NULL;
    j->t_done = pv_now_ns();
    if (j->t_start != 0)
        atomic_fetch_sub(&e->n_active, 1);
    else
        atomic_fetch_sub(&e->n_queued, 1);
    atomic_fetch_add(&e->n_completed, 1);

    pthread_mutex_lock(&e->lock);
    list_append(&e->done_head, &e->done_tail, j);
    pthread_mutex_unlock(&e->lock);
    eventfd_signal(e->done_fd);
}

static void fail_job(struct pv_engine *e, struct pv_job *j, int err)
{
    if (j->err == 0)
        j->err = err;
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

/* A job from the inbox joins the loop: non-blocking socket, epoll registration. */
static void arrive(struct pv_engine *e, struct pv_job *j)
{
    struct epoll_event ev;
    int flags;

    j->seq = ++e->seq;
    j->t_last = pv_now_ns();
    if (pv_job_idle(j)) {
        /* Nothing to move: done as soon as seen. */
        j->t_start = stamp_start(e);
        atomic_fetch_sub(&e->n_queued, 1);
        atomic_fetch_add(&e->n_active, 1);
        finish_job(e, j);
        return;
    }
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
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLET | (j->op == PV_OP_READ ? EPOLLOUT : EPOLLIN);
    ev.data.ptr = j;
    if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, j->sock, &ev) < 0) {
        /* EEXIST: a second job on a socket that has one; EPERM: not a socket. */
        fail_job(e, j, errno);
        return;
    }
    j->registered = true;
    list_append(&e->jobs_head, &e->jobs_tail, j);
    e->njobs++;
    if (e->ops->so_job_add != NULL)
        e->ops->so_job_add(e, j);
}

static void switch_policy(struct pv_engine *e, const struct pv_sched_ops *ops)
{
    if (e->ops->so_stop != NULL)
        e->ops->so_stop(e);
    e->ops = ops;
    /* A policy that cannot start (no memory for its state) leaves opt1 in charge. */
    if (ops->so_start != NULL && ops->so_start(e) < 0)
        e->ops = &pv_sched_opt1;
}

/* Take what the Python side handed over. Returns true when the engine must stop. */
static bool take_inbox(struct pv_engine *e)
{
    struct pv_job *list, *next;
    const struct pv_sched_ops *ops;
    bool stop;

    eventfd_drain(e->wake_fd);
    pthread_mutex_lock(&e->lock);
    list = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    ops = e->want_ops;
    e->window = e->want_window;
    stop = e->stopping;
    pthread_mutex_unlock(&e->lock);

    if (ops != e->ops)
        switch_policy(e, ops);
    for (; list != NULL; list = next) {
        next = list->next;
        arrive(e, list);
    }
    return stop;
}

/* How long epoll_wait may sleep: until the first job waiting on its peer times out. */
static int wait_ms(struct pv_engine *e, int64_t now)
{
    int64_t first = INT64_MAX, ms;

    for (struct pv_job *j = e->jobs_head; j != NULL; j = j->next) {
        if (!j->ready && j->t_last + e->idle_ns < first)
            first = j->t_last + e->idle_ns;
    }
    if (first == INT64_MAX)
        return -1;
    if (first <= now)
        return 0;
    ms = (first - now + 999999) / 1000000;   /* round up: never wake just before */
    return ms > INT_MAX ? INT_MAX : (int)ms;
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
}

static void serve_turn(struct pv_engine *e, struct pv_job *j)
{
    enum pv_serve r;
    bool progress = false;

    if (j->t_start == 0) {
        j->t_start = stamp_start(e);
        atomic_fetch_sub(&e->n_queued, 1);
        atomic_fetch_add(&e->n_active, 1);
    }
    r = pv_serve_job(e, j, &progress);
    if (j->nacc > 0)
        e->last = pv_job_pos(j);
    /* Idle time counts from the end of the last turn: from then on the peer holds us up. */
    j->t_last = pv_now_ns();
    if (r == PV_SERVE_DONE)
        finish_job(e, j);
    else if (r == PV_SERVE_BLOCKED)
        j->ready = false;
}

static void *engine_main(void *arg)
{
    struct pv_engine *e = arg;
    struct epoll_event evs[PV_MAX_EVENTS];
    int err = ECANCELED;

    for (;;) {
        struct pv_job *j = e->ops->so_select(e, true);
        int timeout = (j != NULL && j->ready) ? 0 : wait_ms(e, pv_now_ns());
        int n = epoll_wait(e->epfd, evs, PV_MAX_EVENTS, timeout);
        bool stop = false;

        if (n < 0) {
            if (errno == EINTR)
                continue;
            err = errno;
            pthread_mutex_lock(&e->lock);
            e->fatal = err;
            e->stopping = true;
            pthread_mutex_unlock(&e->lock);
            break;
        }
        /* Mark everything first: no job is freed while evs may still point at it. */
        for (int i = 0; i < n; i++) {
            struct pv_job *ej = evs[i].data.ptr;
            if (ej == NULL) {
                stop |= take_inbox(e);
            } else if (!ej->ready) {
                ej->ready = true;
                ej->ready_seq = ++e->ready_seq;
            }
        }
        if (stop)
            break;
        expire_idle(e);
        j = e->ops->so_select(e, false);
        if (j != NULL && j->ready)
            serve_turn(e, j);
    }
    /* Close or a dead loop: everything still in hand completes with err. */
    take_inbox(e);
    while (e->jobs_head != NULL)
        fail_job(e, e->jobs_head, err);
    return NULL;
}

struct pv_engine *pv_engine_create(const struct pv_engine_config *cfg, char *err)
{
    struct pv_engine *e = calloc(1, sizeof(*e));
    struct epoll_event ev;
    sigset_t all, old;
    int rc;

    if (e == NULL) {
        snprintf(err, PV_ERR_LEN, "out of memory");
        return NULL;
    }
    e->wake_fd = e->done_fd = e->epfd = e->pipe_r = e->pipe_w = -1;
    e->ops = e->want_ops = cfg->ops;
    e->window = e->want_window = cfg->window;
    e->idle_ns = cfg->idle_ns;
    e->read_mode = cfg->read_mode;
    e->write_mode = cfg->write_mode;
    e->mmap_window = cfg->mmap_window;
    e->joined = true;                 /* until the thread exists, there is nothing to join */
    pthread_mutex_init(&e->lock, NULL);
    pthread_mutex_init(&e->join_lock, NULL);

    e->buf_len = PV_BUF_LEN;
    e->buf = malloc(e->buf_len);
    if (e->buf == NULL) {
        snprintf(err, PV_ERR_LEN, "out of memory");
        goto err;
    }
    e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    e->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    e->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (e->wake_fd < 0 || e->done_fd < 0 || e->epfd < 0) {
        snprintf(err, PV_ERR_LEN, "eventfd/epoll: %s", strerror(errno));
        goto err;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.ptr = NULL;               /* NULL marks the wake fd among job pointers */
    if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->wake_fd, &ev) < 0) {
        snprintf(err, PV_ERR_LEN, "epoll_ctl: %s", strerror(errno));
        goto err;
    }
    if (e->write_mode == PV_WRITE_SPLICE) {
        int p[2];
        if (pipe2(p, O_NONBLOCK | O_CLOEXEC) < 0) {
            snprintf(err, PV_ERR_LEN, "pipe2: %s", strerror(errno));
            goto err;
        }
        e->pipe_r = p[0];
        e->pipe_w = p[1];
        /* A bigger pipe moves more per splice; the default 64 KiB is kept if refused. */
        rc = fcntl(e->pipe_w, F_SETPIPE_SZ, (int)PV_PIPE_LEN);
        if (rc < 0)
            rc = fcntl(e->pipe_w, F_GETPIPE_SZ);
        if (rc < 0) {
            snprintf(err, PV_ERR_LEN, "F_GETPIPE_SZ: %s", strerror(errno));
            goto err;
        }
        e->pipe_size = (size_t)rc;
    }
    if (e->ops->so_start != NULL && e->ops->so_start(e) < 0) {
        snprintf(err, PV_ERR_LEN, "policy %s failed to start", e->ops->so_name);
        e->ops = NULL;                /* nothing to stop in pv_engine_destroy */
        goto err;
    }
    /* The loop thread takes no signals: Python handles them in the main thread, and a
     * SIGPIPE from sendfile/splice to a dead peer must become EPIPE, never a kill. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&e->thread, NULL, engine_main, e);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(err, PV_ERR_LEN, "pthread_create: %s", strerror(rc));
        goto err;
    }
    e->joined = false;
    return e;

err:
    pv_engine_destroy(e);
    return NULL;
}

static int check_open(struct pv_engine *e, char *err)
{
    if (e->fatal != 0) {
        snprintf(err, PV_ERR_LEN, "engine loop failed: %s", strerror(e->fatal));
        return -1;
    }
    if (e->stopping) {
        snprintf(err, PV_ERR_LEN, "engine is closed");
        return -1;
    }
    return 0;
}

int pv_engine_submit(struct pv_engine *e, struct pv_job *j, char *err)
{
    pthread_mutex_lock(&e->lock);
    if (check_open(e, err) < 0) {
        pthread_mutex_unlock(&e->lock);
        return -1;
    }
    list_append(&e->inbox_head, &e->inbox_tail, j);
    atomic_fetch_add(&e->n_queued, 1);
    pthread_mutex_unlock(&e->lock);
    eventfd_signal(e->wake_fd);
    return 0;
}

int pv_engine_set_algorithm(struct pv_engine *e, const struct pv_sched_ops *ops, char *err)
{
    pthread_mutex_lock(&e->lock);
    if (check_open(e, err) < 0) {
        pthread_mutex_unlock(&e->lock);
        return -1;
    }
    e->want_ops = ops;
    pthread_mutex_unlock(&e->lock);
    eventfd_signal(e->wake_fd);
    return 0;
}

int pv_engine_set_window(struct pv_engine *e, int64_t window, char *err)
{
    pthread_mutex_lock(&e->lock);
    if (check_open(e, err) < 0) {
        pthread_mutex_unlock(&e->lock);
        return -1;
    }
    e->want_window = window;
    pthread_mutex_unlock(&e->lock);
    eventfd_signal(e->wake_fd);
    return 0;
}

struct pv_job *pv_engine_take_completions(struct pv_engine *e)
{
    struct pv_job *list;

    eventfd_drain(e->done_fd);
    pthread_mutex_lock(&e->lock);
    list = e->done_head;
    e->done_head = e->done_tail = NULL;
    pthread_mutex_unlock(&e->lock);
    return list;
}

/* Stop the loop and join it; safe to call from several threads and more than once. Blocks
 * until the thread is gone, so call it without the GIL. */
void pv_engine_stop(struct pv_engine *e)
{
    pthread_mutex_lock(&e->join_lock);
    if (!e->joined) {
        pthread_mutex_lock(&e->lock);
        e->stopping = true;
        pthread_mutex_unlock(&e->lock);
        atomic_store(&e->stop_req, true);
        eventfd_signal(e->wake_fd);
        pthread_join(e->thread, NULL);
        e->joined = true;
    }
    pthread_mutex_unlock(&e->join_lock);
}

void pv_engine_destroy(struct pv_engine *e)
{
    struct pv_job *j, *next;

    if (e == NULL)
        return;
    pv_engine_stop(e);
    for (j = e->done_head; j != NULL; j = next) {
        next = j->next;
        pv_job_free(j);
    }
    for (j = e->inbox_head; j != NULL; j = next) {
        next = j->next;
        pv_job_free(j);
    }
    if (e->ops != NULL && e->ops->so_stop != NULL)
        e->ops->so_stop(e);
    /* close() of fds we own: nothing useful to do on failure while tearing down. */
    if (e->wake_fd >= 0)
        (void)close(e->wake_fd);
    if (e->done_fd >= 0)
        (void)close(e->done_fd);
    if (e->epfd >= 0)
        (void)close(e->epfd);
    if (e->pipe_r >= 0)
        (void)close(e->pipe_r);
    if (e->pipe_w >= 0)
        (void)close(e->pipe_w);
    free(e->buf);
    pthread_mutex_destroy(&e->lock);
    pthread_mutex_destroy(&e->join_lock);
    free(e);
}
