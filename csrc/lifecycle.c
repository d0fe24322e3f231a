/* lifecycle.c -- making, stopping and freeing an engine (the loop itself is engine.c's).
 *
 * pv_engine_create() takes every resource the loop needs up front -- the copy buffer, the
 * wake and done eventfds, the epoll set, splice's pipe, the policy's state -- and only then
 * starts the loop thread, with every signal blocked in it; a failure part-way frees what was
 * taken through the one err: path (pv_engine_destroy copes with a half-made engine).
 * pv_engine_stop() asks the loop to finish and joins it; pv_engine_destroy() frees the rest.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "native.h"

#define PV_BUF_LEN ((size_t)1 << 20)
#define PV_PIPE_LEN ((size_t)1 << 20)

struct pv_engine *pv_engine_create(const struct pv_engine_config *cfg, struct pv_err *err)
{
    struct pv_engine *e = calloc(1, sizeof(*e));
    sigset_t all, old;
    int rc;

    if (e == NULL) {
        pv_fail(err, ENOMEM, "out of memory");
        return NULL;
    }
    e->wake_fd = e->done_fd = e->epfd = e->pipe_r = e->pipe_w = -1;
    e->ops = e->want_ops = cfg->ops;
    e->window = e->want_window = cfg->window;
    e->gather_ns = e->want_gather_ns = cfg->gather_ns;
    e->idle_ns = cfg->idle_ns;
    e->read_mode = cfg->read_mode;
    e->write_mode = cfg->write_mode;
    e->mmap_window = cfg->mmap_window;
    e->disk = cfg->disk;
    e->joined = true;                 /* until the thread exists, there is nothing to join */
    pthread_mutex_init(&e->lock, NULL);
    pthread_mutex_init(&e->join_lock, NULL);
    pthread_cond_init(&e->cmd_cond, NULL);
    pv_conn_init(e);
    pv_ring_init(&e->sched_q);
    e->sched_gen = 1;                 /* no pick remembered (pick_gen 0) */
    pv_ring_init(&e->express);

    if (pv_fast_init(&e->fast, err) < 0)
        goto err;
    e->buf_len = PV_BUF_LEN;
    e->buf = malloc(e->buf_len);
    if (e->buf == NULL) {
        pv_fail(err, ENOMEM, "out of memory");
        goto err;
    }
    e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    e->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    e->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (e->wake_fd < 0 || e->done_fd < 0 || e->epfd < 0) {
        pv_err_sys(err, "eventfd/epoll");
        goto err;
    }
    /* 0 marks the wake fd among job and connection pointers. */
    if (pv_epoll_set(e, EPOLL_CTL_ADD, e->wake_fd, EPOLLIN, 0, err) < 0)
        goto err;
    if (e->write_mode == PV_WRITE_SPLICE) {
        int p[2];
        if (pipe2(p, O_NONBLOCK | O_CLOEXEC) < 0) {
            pv_err_sys(err, "pipe2");
            goto err;
        }
        e->pipe_r = p[0];
        e->pipe_w = p[1];
        /* A bigger pipe moves more per splice; the default 64 KiB is kept if refused. */
        rc = fcntl(e->pipe_w, F_SETPIPE_SZ, (int)PV_PIPE_LEN);
        if (rc < 0)
            rc = fcntl(e->pipe_w, F_GETPIPE_SZ);
        if (rc < 0) {
            pv_err_sys(err, "F_GETPIPE_SZ");
            goto err;
        }
        e->pipe_size = (size_t)rc;
    }
    if (e->ops->so_start != NULL && e->ops->so_start(e, err) < 0) {
        e->ops = NULL;                /* nothing to stop in pv_engine_destroy */
        goto err;
    }
    /* The loop thread takes no signals: Python handles them in the main thread, and a
     * SIGPIPE from sendfile/splice to a dead peer must become EPIPE, never a kill. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&e->thread, NULL, pv_engine_main, e);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pv_fail(err, rc, "pthread_create: %s", strerror(rc));
        goto err;
    }
    e->joined = false;
    return e;

err:
    pv_engine_destroy(e);
    return NULL;
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
        pv_eventfd_signal(e->wake_fd);
        pthread_join(e->thread, NULL);
        e->joined = true;
    }
    pthread_mutex_unlock(&e->join_lock);
}

void pv_engine_destroy(struct pv_engine *e)
{
    struct pv_event *ev, *next;

    if (e == NULL)
        return;
    pv_engine_stop(e);
    for (ev = e->done_head; ev != NULL; ev = next) {
        next = ev->next;
        pv_event_free(ev);
    }
    /* Only a loop that never ran leaves an inbox: no detach() can be waiting on it. */
    for (ev = e->inbox_head; ev != NULL; ev = next) {
        next = ev->next;
        pv_event_free(ev);
    }
    pv_conn_fini(e);
    if (e->fast.buckets != NULL)
        pv_fast_fini(&e->fast);
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
    pthread_cond_destroy(&e->cmd_cond);
    pthread_mutex_destroy(&e->lock);
    pthread_mutex_destroy(&e->join_lock);
    free(e);
}
