/* bridge.c -- the requests between libfuse's worker threads and the mount's Python thread.
 *
 * A worker copies a request into one allocation (struct pvf_req, names and data after it)
 * and appends it to the queue; the first request into an empty queue writes the eventfd,
 * so a burst costs one wakeup. Python reads the eventfd *before* taking the whole queue:
 * a request queued after the take finds the queue empty and writes again, so none is left
 * behind without a wakeup (a wakeup for a request already taken only makes an empty drain).
 *
 * Forgets are answered in C at once (fuse_reply_none); their (ino, nlookup) pairs ride
 * along with the next drain for the mount's bookkeeping, which only drops what it no longer
 * needs: if growing the list fails, the pairs are dropped and the mount keeps a little more.
 */
#include "front.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Forgets queued before Python is woken for them alone (they need no answer). */
#define PVF_FORGET_BATCH 512

int pvf_bridge_init(struct pvf_front *f)
{
    int err;

    memset(f, 0, sizeof(*f));
    f->inflight.next = f->inflight.prev = &f->inflight;
    f->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (f->efd < 0)
        return -1;
    err = pthread_mutex_init(&f->lock, NULL);
    if (err == 0) {
        err = pthread_cond_init(&f->idle, NULL);
        if (err != 0)
            pthread_mutex_destroy(&f->lock);
    }
    if (err != 0) {
        close(f->efd);
        f->efd = -1;
        errno = err;
        return -1;
    }
    return 0;
}

void pvf_bridge_fini(struct pvf_front *f)
{
    struct pvf_req *r = f->head;

    while (r != NULL) {   /* only a test bridge (no session) can get here with requests */
        struct pvf_req *next = r->next;
        pvf_req_free(r);
        r = next;
    }
    f->head = f->tail = NULL;
    free(f->forgets);
    f->forgets = NULL;
    pvf_set_free(&f->quiet);
    pvf_set_free(&f->quiet_rw);
    pvf_set_free(&f->written);
    pvf_set_free(&f->kept);
    pvf_set_free(&f->behind);
    pvf_set_free(&f->behind_inos);
    pvf_caps_free(f);
    pvf_serve_free(f);
    pvf_stream_free(f);
    pvf_dir_free(f);
    pvf_names_free(f);
    pvf_numbers_free(f);
    pvf_unlinks_free(f);
    if (f->efd >= 0)
        close(f->efd);
    f->efd = -1;
    pthread_cond_destroy(&f->idle);
    pthread_mutex_destroy(&f->lock);
}

struct pvf_req *pvf_req_new(fuse_req_t fr, int op, size_t tail)
{
    struct pvf_req *r = malloc(sizeof(*r) + tail);

    if (r == NULL)
        return NULL;
    memset(r, 0, sizeof(*r));
    r->fr = fr;
    r->op = op;
    if (fr != NULL) {
        const struct fuse_ctx *ctx = fuse_req_ctx(fr);
        r->uid = ctx->uid;
        r->gid = ctx->gid;
        r->pid = ctx->pid;
        r->umask = ctx->umask;
    }
    return r;
}

void pvf_req_free(struct pvf_req *r)
{
    free(r->owned);
    free(r);
}

/* Copy n bytes and a NUL into the record's tail at *at; returns where they went. The caller
 * sized the tail for every put (n + 1 each). */
char *pvf_req_put(struct pvf_req *r, size_t *at, const char *src, size_t n)
{
    char *dst = r->tail + *at;

    if (n > 0)
        memcpy(dst, src, n);
    dst[n] = '\0';
    *at += n + 1;
    return dst;
}

/* Make the eventfd readable. EAGAIN means its counter is near overflow: readable already. */
static void wake(struct pvf_front *f)
{
    uint64_t one = 1;

    f->c.wakeups++;
    while (write(f->efd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
}

/* Append r to the queue (waking Python for the first). Caller holds the lock. */
void pvf_enqueue_locked(struct pvf_front *f, struct pvf_req *r)
{
    int was_empty = f->head == NULL && f->nforgets < PVF_FORGET_BATCH;

    r->next = NULL;
    if (f->tail != NULL)
        f->tail->next = r;
    else
        f->head = r;
    f->tail = r;
    f->c.queued++;
    if (was_empty)
        wake(f);
}

void pvf_enqueue(struct pvf_front *f, struct pvf_req *r)
{
    pthread_mutex_lock(&f->lock);
    pvf_enqueue_locked(f, r);
    pthread_mutex_unlock(&f->lock);
}

/* A request a worker answers itself, made a record of `op` (PVF_CREATED, PVF_UNLINKED:
 * `name` in `parent`) that Python applies and never replies to. take() -- creates.c's or
 * unlinks.c's -- decides under the lock and makes there what the answer changes; the record
 * is queued in the same hold, so nothing Python changes on its own comes between the
 * decision and the record. uid/gid: the caller's, when there is no kernel request to carry
 * them (the test bridge). 1: answered, its record queued; 0: not here, nothing changed (the
 * caller queues it for Python). */
int pvf_queue_answered(struct pvf_front *f, fuse_req_t fr, int op, uid_t uid, gid_t gid,
                       uint64_t parent, const char *name, size_t len,
                       int (*take)(struct pvf_front *f, struct pvf_req *r, size_t len,
                                   void *arg),
                       void *arg)
{
    size_t at = 0;
    struct pvf_req *r = pvf_req_new(fr, op, len + 1);
    int here;

    if (r == NULL)
        return 0;
    r->fr = NULL;   /* answered here: Python never replies to it */
    if (fr == NULL) {
        r->uid = uid;
        r->gid = gid;
    }
    r->ino = parent;
    r->name = pvf_req_put(r, &at, name, len);
    pthread_mutex_lock(&f->lock);
    here = take(f, r, len, arg);
    if (here)
        pvf_enqueue_locked(f, r);
    pthread_mutex_unlock(&f->lock);
    if (!here)
        pvf_req_free(r);
    return here;
}

void pvf_forget(struct pvf_front *f, uint64_t ino, uint64_t nlookup)
{
    pthread_mutex_lock(&f->lock);
    f->c.forgets++;
    if (f->nforgets == f->capforgets) {
        size_t cap = f->capforgets ? 2 * f->capforgets : 64;
        uint64_t *grown = realloc(f->forgets, cap * 2 * sizeof(uint64_t));
        if (grown == NULL) {   /* see the top of this file */
            pthread_mutex_unlock(&f->lock);
            return;
        }
        f->forgets = grown;
        f->capforgets = cap;
    }
    f->forgets[2 * f->nforgets] = ino;
    f->forgets[2 * f->nforgets + 1] = nlookup;
    f->nforgets++;
    if (f->nforgets == PVF_FORGET_BATCH && f->head == NULL)
        wake(f);
    pthread_mutex_unlock(&f->lock);
}

void pvf_loop_ended(struct pvf_front *f, int result)
{
    pthread_mutex_lock(&f->lock);
    f->loop_done = 1;
    f->loop_result = result;
    wake(f);
    pthread_mutex_unlock(&f->lock);
}

/* Consume the eventfd's count (before taking the queue; see the top of this file). */
void pvf_drain_wakeup(struct pvf_front *f)
{
    uint64_t n;

    while (read(f->efd, &n, sizeof(n)) < 0 && errno == EINTR)
        ;
}

/* The whole queue (oldest first) and the pending forgets; the caller frees *forgets. */
struct pvf_req *pvf_take_all(struct pvf_front *f, uint64_t **forgets, size_t *nforgets)
{
    struct pvf_req *r;

    pthread_mutex_lock(&f->lock);
    r = f->head;
    f->head = f->tail = NULL;
    *forgets = f->forgets;
    *nforgets = f->nforgets;
    f->forgets = NULL;
    f->nforgets = f->capforgets = 0;
    pthread_mutex_unlock(&f->lock);
    return r;
}

/* The in-flight list is only touched on the Python thread: no lock. */
void pvf_inflight_add(struct pvf_front *f, struct pvf_req *r)
{
    r->prev = f->inflight.prev;
    r->next = &f->inflight;
    f->inflight.prev->next = r;
    f->inflight.prev = r;
}

/* Take the request's fuse_req_t to answer it (NULL: answered already), off the list. */
fuse_req_t pvf_inflight_take(struct pvf_front *f, struct pvf_req *r)
{
    fuse_req_t fr = r->fr;

    r->fr = NULL;
    if (r->counted) {   /* a write or size change answered: reads of it may be served */
        r->counted = 0;
        pvf_mods_end(f, r->ino);
    }
    if (r->prev != NULL) {
        r->prev->next = r->next;
        r->next->prev = r->prev;
        r->next = r->prev = NULL;
    }
    return fr;
}

void pvf_counted_reply(struct pvf_front *f, int ret)
{
    if (ret != 0) {
        pthread_mutex_lock(&f->lock);
        f->c.reply_failures++;
        pthread_mutex_unlock(&f->lock);
    }
}

/* Notifications run on threads Python starts; the session must outlive them. */
int pvf_notify_begin(struct pvf_front *f)
{
    int ok;

    pthread_mutex_lock(&f->lock);
    ok = !f->closing && f->se != NULL && f->mounted;
    if (ok)
        f->notifying++;
    pthread_mutex_unlock(&f->lock);
    return ok ? 0 : -1;
}

void pvf_notify_end(struct pvf_front *f)
{
    pthread_mutex_lock(&f->lock);
    if (--f->notifying == 0)
        pthread_cond_broadcast(&f->idle);
    pthread_mutex_unlock(&f->lock);
}

void pvf_close_wait_notifiers(struct pvf_front *f)
{
    pthread_mutex_lock(&f->lock);
    f->closing = 1;
    while (f->notifying > 0)
        pthread_cond_wait(&f->idle, &f->lock);
    pthread_mutex_unlock(&f->lock);
}
