/* warm.c -- the arena's pages faulted in ahead of the block cache's use, on a thread of
 * their own.
 *
 * The arena (serve.c) is an anonymous mapping: each page is faulted in -- allocated and
 * zeroed by the kernel -- the first time the cache writes a block into it. Under IOR hard's
 * writes that was a third of the mount's Python thread (clear_page in the profile): the one
 * thread every write passes through paid for it. Python asks here for the arena's first
 * `upto` bytes ahead of the blocks it hands out (`warm`); this thread faults them in with
 * MADV_POPULATE_WRITE, 2 MiB at a time, off Python's thread.
 *
 * MADV_POPULATE_WRITE never changes a byte (it only does what a write's fault would), so
 * it may run on pages the cache has meanwhile handed out and written. Pages are asked in
 * order and never given back (the cache keeps its buffers), so the state is one frontier.
 * A kernel without it (before 5.14: EINVAL) ends the thread; the cache works as before.
 */
#include "front.h"

#include <errno.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define WARM_STEP ((size_t)2 << 20)

static void *warm_main(void *arg)
{
    struct pvf_warm *w = arg;

    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->stop && w->done >= w->want)
            pthread_cond_wait(&w->cv, &w->lock);
        if (w->stop)
            break;
        size_t at = w->done, n = w->want - at;
        if (n > WARM_STEP)
            n = WARM_STEP;
        pthread_mutex_unlock(&w->lock);
        int ret = madvise(w->base + at, n, MADV_POPULATE_WRITE);
        int err = errno;
        pthread_mutex_lock(&w->lock);
        if (ret < 0 && err != EINTR && err != EAGAIN) {
            w->failed = err;   /* EINVAL: not this kernel; ENOMEM: none to give */
            break;
        }
        if (ret == 0)
            w->done = at + n;
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Start warming the arena [base, base + len) (len a multiple of the page size; nothing is
 * faulted in until asked). -1 with errno if the thread cannot start: then never warmed. */
int pvf_warm_start(struct pvf_warm *w, char *base, size_t len)
{
    int err;

    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->base = base;
    w->len = len;
    w->done = w->want = 0;
    w->stop = w->failed = 0;
    err = pthread_create(&w->thread, NULL, warm_main, w);
    if (err) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->lock);
        errno = err;
        return -1;
    }
    w->started = 1;
    return 0;
}

/* The arena's first upto bytes are wanted soon (rounded up to the page, capped at its end). */
void pvf_warm_to(struct pvf_warm *w, size_t upto)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->lock);
    if (upto > w->len)
        upto = w->len;
    upto = (upto + 4095) & ~(size_t)4095;
    if (upto > w->len)
        upto = w->len;
    if (upto > w->want) {
        w->want = upto;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->lock);
}

/* Bytes from the arena's start faulted in so far, and the error that ended warming (0). */
size_t pvf_warm_done(struct pvf_warm *w, int *failed)
{
    size_t done;

    *failed = 0;
    if (!w->started)
        return 0;
    pthread_mutex_lock(&w->lock);
    done = w->done;
    *failed = w->failed;
    pthread_mutex_unlock(&w->lock);
    return done;
}

/* The thread ends (after the step it is in) before the arena may be let go. */
void pvf_warm_stop(struct pvf_warm *w)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->lock);
    w->started = 0;
}
