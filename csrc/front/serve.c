/* serve.c -- reads the C workers answer from the block cache's own buffers.
 *
 * The mount's block cache (src/pvfs/cache) keeps its blocks in one arena Python maps and
 * hands to the session (`serve_arena`). When Python answers a read wholly from cached
 * blocks, it *publishes* those blocks here -- where each one's bytes are in the arena -- with
 * the size of the file as it answered (`publish`). A later read of published blocks that
 * ends within that size is answered by the worker itself: one writev from the arena to
 * /dev/fuse, no trip through Python (the request rate of issue 30).
 *
 * Why a worker never answers bytes Python would not (docs/cache.md, "The data plane in C"):
 *
 * - Python drops a file here (`drop`) BEFORE any change of its cached bytes, of the blocks
 *   that hold them or of the size it answered with takes effect: a write applied, a fetch
 *   refreshing a block, an eviction, a truncation, an invalidation (coherence, a lease
 *   recall, a reopen after another node's change), a forget, a bypass bit set, the
 *   manager's size learned anew. `drop` waits until no worker still replies from the
 *   file's blocks, so Python may then reuse or rewrite them.
 * - A worker queueing a write or a size change of a file (pvf_written, writes.c) stops its
 *   reads being answered here before Python can apply it; and while such a request is in
 *   flight (queued and not yet answered, `mods`) nothing of the file is answered here nor
 *   published: a read the kernel sends after a write it has not seen answered may be cached
 *   by the kernel, so it must hold that write (Python waits for it: fs.writing).
 * - A write answered here before Python applied it (behind, writes.c) keeps its file out
 *   until it is applied (pvf_behind_pending_locked), for the same reason, and a publication
 *   made meanwhile is refused: it is older than that write.
 * - Reads past the published size go to Python, which alone decides the end of a file;
 *   so do reads larger than `serve_max` (1 MiB, the largest the kernel sends) or spanning
 *   more than PVF_SERVE_IOV blocks.
 *
 * Eviction is Python's (second-chance LRU): the inodes read here since it last asked are
 * handed to it (`serve_recent`) so it counts their blocks as used.
 *
 * All of it is under the front's lock; the reply itself is sent outside it, with the file
 * pinned (`pins`: `drop` waits for them on the `idle` condition).
 */
#include "front.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ u64 maps */
static size_t slot_of(uint64_t key, size_t cap)
{
    key *= 0x9e3779b97f4a7c15ull;
    return (size_t)(key >> 32) & (cap - 1);
}

static int map_grow(struct pvf_u64map *m)
{
    size_t cap = m->cap ? 2 * m->cap : 16;
    uint64_t *keys = calloc(cap, sizeof(uint64_t)), *vals = calloc(cap, sizeof(uint64_t));

    if (keys == NULL || vals == NULL) {
        free(keys);
        free(vals);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        size_t j;
        if (m->keys[i] == 0)
            continue;
        for (j = slot_of(m->keys[i], cap); keys[j] != 0; j = (j + 1) & (cap - 1))
            ;
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return 0;
}

/* The slot of key, or of the empty slot where it would go (cap > 0). */
static size_t map_find(const struct pvf_u64map *m, uint64_t key)
{
    size_t j;

    for (j = slot_of(key, m->cap); m->keys[j] != 0 && m->keys[j] != key;
         j = (j + 1) & (m->cap - 1))
        ;
    return j;
}

static int map_get(const struct pvf_u64map *m, uint64_t key, uint64_t *val)
{
    size_t j;

    if (m->n == 0 || key == 0)
        return 0;
    j = map_find(m, key);
    if (m->keys[j] != key)
        return 0;
    *val = m->vals[j];
    return 1;
}

/* Set key (not 0) to val; -1 on ENOMEM. */
static int map_put(struct pvf_u64map *m, uint64_t key, uint64_t val)
{
    size_t j;

    if (2 * (m->n + 1) > m->cap && map_grow(m) < 0)
        return -1;
    j = map_find(m, key);
    if (m->keys[j] == 0) {
        m->keys[j] = key;
        m->n++;
    }
    m->vals[j] = val;
    return 0;
}

/* Remove key (backward shift, as the u64 sets of answers.c). */
static void map_del(struct pvf_u64map *m, uint64_t key)
{
    size_t mask, hole;

    if (m->n == 0 || key == 0)
        return;
    mask = m->cap - 1;
    hole = map_find(m, key);
    if (m->keys[hole] != key)
        return;
    m->keys[hole] = 0;
    m->n--;
    for (size_t k = (hole + 1) & mask; m->keys[k] != 0; k = (k + 1) & mask) {
        size_t home = slot_of(m->keys[k], m->cap);
        int stays = hole <= k ? (home > hole && home <= k) : (home > hole || home <= k);
        if (!stays) {
            m->keys[hole] = m->keys[k];
            m->vals[hole] = m->vals[k];
            m->keys[k] = 0;
            hole = k;
        }
    }
}

static void map_free(struct pvf_u64map *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------------ files */
static struct pvf_served *served_get(struct pvf_front *f, uint64_t ino)
{
    uint64_t v;

    return map_get(&f->served, ino, &v) ? (struct pvf_served *)(uintptr_t)v : NULL;
}

static void served_free(struct pvf_served *s)
{
    map_free(&s->blocks);
    if (s->stripe != NULL)
        free(s->stripe->head);
    free(s->stripe);
    free(s);
}

/* Under the lock: ino's record for a publication or a stream mark (streams.c), made if
 * new; one stopped by a worker since starts empty (what it kept is from before that change:
 * Python dropped what it changed; this publication is current). NULL: refused (a write or
 * size change of it in flight, or answered here and not applied; serving off), or ENOMEM
 * (errno set). */
struct pvf_served *pvf_served_open_locked(struct pvf_front *f, uint64_t ino)
{
    struct pvf_served *s;
    uint64_t v;

    if (f->serve_max == 0 || ino == 0 || map_get(&f->mods, ino, &v) ||
        pvf_behind_pending_locked(f, ino)) {
        errno = 0;
        return NULL;
    }
    s = served_get(f, ino);
    if (s == NULL) {
        s = calloc(1, sizeof(*s));
        if (s == NULL || map_put(&f->served, ino, (uint64_t)(uintptr_t)s) < 0) {
            free(s);
            errno = ENOMEM;
            return NULL;
        }
        s->ino = ino;
    } else if (!s->live) {
        s->blocks.n = 0;
        if (s->blocks.keys != NULL)
            memset(s->blocks.keys, 0, s->blocks.cap * sizeof(uint64_t));
        if (s->stripe != NULL)
            free(s->stripe->head);
        free(s->stripe);
        s->stripe = NULL;
    }
    return s;
}

/* Under the lock: ino's record if reads of it may be answered here now. */
struct pvf_served *pvf_served_live_locked(struct pvf_front *f, uint64_t ino)
{
    struct pvf_served *s;
    uint64_t v;

    if (f->served.n == 0 || (s = served_get(f, ino)) == NULL || !s->live ||
        map_get(&f->mods, ino, &v) || pvf_behind_pending_locked(f, ino))
        return NULL;
    return s;
}

/* The arena's bytes, its block size and the largest read answered here (0: none). */
int pvf_serve_setup(struct pvf_front *f, const char *arena, size_t len, size_t block_size,
                    size_t max_read)
{
    if (block_size == 0 || (block_size & (block_size - 1)) || len % block_size) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&f->lock);
    f->arena = arena;
    f->arena_len = len;
    f->block_size = block_size;
    f->serve_max = max_read;
    pthread_mutex_unlock(&f->lock);
    return 0;
}

/* Whether ptr is the start of a block of the arena. */
int pvf_serve_in_arena(const struct pvf_front *f, const char *ptr)
{
    return f->arena != NULL && ptr >= f->arena && ptr < f->arena + f->arena_len &&
           (size_t)(ptr - f->arena) % f->block_size == 0;
}

/* Under the lock: nothing of ino is answered here until Python publishes it again. */
void pvf_serve_stop_locked(struct pvf_front *f, uint64_t ino)
{
    struct pvf_served *s;

    if (f->served.n == 0 || (s = served_get(f, ino)) == NULL)
        return;
    s->live = 0;
}

/* Python's blocks first.. of ino, n of them at ptrs (arena blocks), answer reads ending
 * within size: 1 published, 0 refused (a write or size change of it in flight, or answered
 * here and not applied; serving off), -1 on ENOMEM. */
int pvf_serve_publish(struct pvf_front *f, uint64_t ino, uint64_t size, uint64_t first,
                      size_t n, const char *const *ptrs)
{
    struct pvf_served *s;
    int ret = 1;

    pthread_mutex_lock(&f->lock);
    s = pvf_served_open_locked(f, ino);
    if (s == NULL) {
        ret = errno == ENOMEM ? -1 : 0;
        if (ret == 0)
            f->c.publish_refused++;
        pthread_mutex_unlock(&f->lock);
        if (ret < 0)
            errno = ENOMEM;
        return ret;
    }
    for (size_t i = 0; i < n; i++) {
        if (map_put(&s->blocks, first + i + 1, (uint64_t)(uintptr_t)ptrs[i]) < 0) {
            ret = -1;   /* what was put is as good as before: keep it */
            errno = ENOMEM;
            break;
        }
    }
    s->size = size;
    s->live = 1;
    f->c.published++;
    pthread_mutex_unlock(&f->lock);
    return ret;
}

/* Python: nothing of ino is answered here any more, and no worker replies from its
 * blocks when this returns. */
void pvf_serve_drop(struct pvf_front *f, uint64_t ino)
{
    struct pvf_served *s;

    pthread_mutex_lock(&f->lock);
    s = f->served.n ? served_get(f, ino) : NULL;
    if (s != NULL) {
        map_del(&f->served, ino);
        s->live = 0;
        while (s->pins > 0)
            pthread_cond_wait(&f->idle, &f->lock);
        served_free(s);
    }
    pthread_mutex_unlock(&f->lock);
}

/* A read of ino answerable from the arena: iov[*niov] filled (runs of adjacent blocks
 * joined), the file pinned in *pin; 1, or 0 (Python's). */
int pvf_serve_take(struct pvf_front *f, uint64_t ino, uint64_t off, size_t size,
                   struct iovec *iov, int *niov, struct pvf_served **pin)
{
    struct pvf_served *s;
    uint64_t v, bs, first, last;
    int n = 0;

    if (size == 0)
        return 0;
    pthread_mutex_lock(&f->lock);
    if (size > f->serve_max || (s = pvf_served_live_locked(f, ino)) == NULL ||
        off + size > s->size || off + size < off)
        goto miss;
    bs = f->block_size;
    first = off / bs;
    last = (off + size - 1) / bs;
    if (last - first + 1 > PVF_SERVE_IOV)
        goto miss;
    for (uint64_t b = first; b <= last; b++) {
        uint64_t a = b == first ? off % bs : 0;
        uint64_t e = b == last ? (off + size - 1) % bs + 1 : bs;
        const char *p;
        if (!map_get(&s->blocks, b + 1, &v))
            goto miss;
        p = (const char *)(uintptr_t)v + a;
        if (n > 0 && (const char *)iov[n - 1].iov_base + iov[n - 1].iov_len == p) {
            iov[n - 1].iov_len += e - a;
        } else {
            iov[n].iov_base = (void *)p;
            iov[n].iov_len = e - a;
            n++;
        }
    }
    s->pins++;
    f->c.reads_here++;
    f->c.read_bytes_here += size;
    pvf_set_add(&f->served_recent, ino);   /* (no room: the LRU sees it a little colder) */
    pthread_mutex_unlock(&f->lock);
    *niov = n;
    *pin = s;
    return 1;
miss:
    pthread_mutex_unlock(&f->lock);
    return 0;
}

void pvf_serve_unpin(struct pvf_front *f, struct pvf_served *s)
{
    pthread_mutex_lock(&f->lock);
    if (--s->pins == 0)
        pthread_cond_broadcast(&f->idle);
    pthread_mutex_unlock(&f->lock);
}

/* The inodes read here since the last call, in a new array (*n of them); NULL if none or
 * on ENOMEM (then they are lost: only the LRU's recency suffers). */
uint64_t *pvf_serve_recent(struct pvf_front *f, size_t *n)
{
    uint64_t *out = NULL;
    size_t k = 0;

    pthread_mutex_lock(&f->lock);
    if (f->served_recent.n > 0 && (out = malloc(f->served_recent.n * sizeof(uint64_t)))) {
        for (size_t i = 0; i < f->served_recent.cap; i++)
            if (f->served_recent.slots[i] != 0)
                out[k++] = f->served_recent.slots[i];
    }
    pvf_set_clear(&f->served_recent);
    pthread_mutex_unlock(&f->lock);
    *n = k;
    return out;
}

/* ------------------------------------------------------------------ writes in flight */
/* A worker queues a write or size change of ino for Python (not answered here): until
 * its answer, nothing of ino is answered or published here. Without memory to count it,
 * serving stops for every file (no count, no safe answer). */
void pvf_mods_begin(struct pvf_front *f, uint64_t ino)
{
    uint64_t v = 0;

    pthread_mutex_lock(&f->lock);
    pvf_serve_stop_locked(f, ino);
    map_get(&f->mods, ino, &v);
    if (map_put(&f->mods, ino, v + 1) < 0)
        f->serve_max = 0;
    pthread_mutex_unlock(&f->lock);
}

void pvf_mods_end(struct pvf_front *f, uint64_t ino)
{
    uint64_t v;

    pthread_mutex_lock(&f->lock);
    if (map_get(&f->mods, ino, &v)) {
        if (v <= 1)
            map_del(&f->mods, ino);
        else
            map_put(&f->mods, ino, v - 1);   /* (the key is there: no allocation) */
    }
    pthread_mutex_unlock(&f->lock);
}

void pvf_serve_free(struct pvf_front *f)
{
    for (size_t i = 0; i < f->served.cap; i++)
        if (f->served.keys[i] != 0)
            served_free((struct pvf_served *)(uintptr_t)f->served.vals[i]);
    map_free(&f->served);
    map_free(&f->mods);
    pvf_set_free(&f->served_recent);
    f->arena = NULL;
    f->serve_max = 0;
}
