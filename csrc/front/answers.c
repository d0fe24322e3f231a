/* answers.c -- what the C workers answer themselves from state the Python side keeps here.
 *
 * Two kinds, all under the front's lock (the answers about this node's writes to open files
 * -- flushes, writes behind -- are writes.c's):
 *
 * - Directories' attributes under the manager's lease. Python mirrors every change of a
 *   leased directory's attributes here (fuse/leases.py's attribute table: kept, changed,
 *   dropped by a recall, gone with the session) together with the session's end, so a
 *   getattr of such a directory -- the kernel asks one after every create in it, since a
 *   create makes it drop its own copy of the parent's attributes -- is answered without a
 *   trip through Python, with the timeout Python would give (the session's remaining time,
 *   at least the mount's attr_timeout; 0 stays 0). Past the session's end nothing is.
 *   Leased regular files' attributes too, as Python would answer them at the moment it
 *   mirrors them (KernelView.entry: the lease's, the size this node's cache knows beyond,
 *   the mtime a write delegation holds): Python mirrors a file's on every change of its
 *   lease entry (fuse/leasetables.py), and what else moves them -- this node's writes and
 *   size changes -- drops the file here: the worker at the request's queueing
 *   (pvf_written, writes.c: before Python can apply it), Python once it applied a write (a mirror
 *   made in between, from the state before the write, goes with it). A getattr answered
 *   here from before a write is thus one concurrent with that write -- but for a write
 *   answered here (behind, writes.c): Python may mirror the file between its answer and
 *   its application, so until every such write is applied its file's attributes are not
 *   answered here (pvf_behind_pending_locked; nor by a lookup, names.c).
 *
 * - The kernel's `security.capability` probe before every write(2) to a file (FUSE never
 *   sets SB_NOSEC, so file_remove_privs asks each time): answered ENODATA here while Python's
 *   probe cache (fuse/xattrs.py, ProbedCache) holds that answer for the inode -- Python
 *   mirrors each absence it stores, with its expiry (time.monotonic(), CLOCK_MONOTONIC), and
 *   drops the inode before and after this node changes its xattrs and when the manager says
 *   it has security names. Any other name, and an inode not held or expired, goes to Python.
 *
 * And the u64 sets every unit keeps its marks in: open-addressing tables of u64 keys (0 is
 * an empty slot), linear probing, deletion by backward shift, grown at half full.
 */
#include "front.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t slot_of(uint64_t key, size_t cap)
{
    key *= 0x9e3779b97f4a7c15ull;   /* keys are often sequential: spread them */
    return (size_t)(key >> 32) & (cap - 1);
}

/* ------------------------------------------------------------------ u64 sets */
static int set_grow(struct pvf_fhset *s)
{
    size_t cap = s->cap ? 2 * s->cap : 64;
    uint64_t *slots = calloc(cap, sizeof(uint64_t));

    if (slots == NULL)
        return -1;
    for (size_t i = 0; i < s->cap; i++) {
        uint64_t key = s->slots[i];
        size_t j;
        if (key == 0)
            continue;
        for (j = slot_of(key, cap); slots[j] != 0; j = (j + 1) & (cap - 1))
            ;
        slots[j] = key;
    }
    free(s->slots);
    s->slots = slots;
    s->cap = cap;
    return 0;
}

/* Add key (0 is not kept); -1 on ENOMEM. Caller holds the lock. */
int pvf_set_add(struct pvf_fhset *s, uint64_t key)
{
    size_t j;

    if (key == 0)
        return 0;
    if (2 * (s->n + 1) > s->cap && set_grow(s) < 0)
        return -1;
    for (j = slot_of(key, s->cap); s->slots[j] != 0 && s->slots[j] != key;
         j = (j + 1) & (s->cap - 1))
        ;
    if (s->slots[j] == 0) {
        s->slots[j] = key;
        s->n++;
    }
    return 0;
}

/* Whether key is there; removed if `remove`. Caller holds the lock. */
int pvf_set_has(struct pvf_fhset *s, uint64_t key, int remove)
{
    size_t mask, j, hole;

    if (s->n == 0 || key == 0)
        return 0;
    mask = s->cap - 1;
    for (j = slot_of(key, s->cap); s->slots[j] != 0 && s->slots[j] != key; j = (j + 1) & mask)
        ;
    if (s->slots[j] != key)
        return 0;
    if (!remove)
        return 1;
    /* backward shift: pull later keys of the run into the hole */
    hole = j;
    s->slots[hole] = 0;
    s->n--;
    for (size_t k = (hole + 1) & mask; s->slots[k] != 0; k = (k + 1) & mask) {
        size_t home = slot_of(s->slots[k], s->cap);
        /* move k into the hole unless its home lies cyclically in (hole, k] */
        int stays = hole <= k ? (home > hole && home <= k) : (home > hole || home <= k);
        if (!stays) {
            s->slots[hole] = s->slots[k];
            s->slots[k] = 0;
            hole = k;
        }
    }
    return 1;
}

/* Every key gone (the memory kept). Caller holds the lock. */
void pvf_set_clear(struct pvf_fhset *s)
{
    if (s->slots != NULL)
        memset(s->slots, 0, s->cap * sizeof(uint64_t));
    s->n = 0;
}

void pvf_set_free(struct pvf_fhset *s)
{
    free(s->slots);
    memset(s, 0, sizeof(*s));
}

/* ------------------------------------------------------------------ directories' attributes */
static int dirs_grow(struct pvf_dirattrs *t)
{
    size_t cap = t->cap ? 2 * t->cap : 64;
    struct pvf_dirattr *slots = calloc(cap, sizeof(*slots));

    if (slots == NULL)
        return -1;
    for (size_t i = 0; i < t->cap; i++) {
        size_t j;
        if (t->slots[i].ino == 0)
            continue;
        for (j = slot_of(t->slots[i].ino, cap); slots[j].ino != 0; j = (j + 1) & (cap - 1))
            ;
        slots[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

static size_t dirs_find(const struct pvf_dirattrs *t, uint64_t ino)
{
    size_t j;

    for (j = slot_of(ino, t->cap); t->slots[j].ino != 0 && t->slots[j].ino != ino;
         j = (j + 1) & (t->cap - 1))
        ;
    return j;
}

int pvf_dir_keep(struct pvf_front *f, uint64_t ino, const struct stat *st)
{
    struct pvf_dirattrs *t = &f->dirs;
    int ret = 0;

    if (ino == 0) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&f->lock);
    if (2 * (t->n + 1) > t->cap && dirs_grow(t) < 0) {
        errno = ENOMEM;
        ret = -1;
    } else {
        size_t j = dirs_find(t, ino);
        if (t->slots[j].ino == 0) {
            t->n++;
            t->slots[j].pending = 0;
        }
        t->slots[j].ino = ino;
        if (t->slots[j].pending == 0)   /* else the workers' own creates are newer (creates.c) */
            t->slots[j].st = *st;
    }
    pthread_mutex_unlock(&f->lock);
    return ret;
}

static void dir_drop_locked(struct pvf_front *f, uint64_t ino)
{
    struct pvf_dirattrs *t = &f->dirs;

    if (t->n > 0 && ino != 0) {
        size_t mask = t->cap - 1, hole = dirs_find(t, ino);
        if (t->slots[hole].ino == ino) {
            t->slots[hole].ino = 0;
            t->n--;
            for (size_t k = (hole + 1) & mask; t->slots[k].ino != 0; k = (k + 1) & mask) {
                size_t home = slot_of(t->slots[k].ino, t->cap);
                int stays = hole <= k ? (home > hole && home <= k)
                                      : (home > hole || home <= k);
                if (!stays) {
                    t->slots[hole] = t->slots[k];
                    t->slots[k].ino = 0;
                    hole = k;
                }
            }
        }
    }
}

/* For writes.c and unlinks.c, under the lock: what is kept here of ino's attributes goes. */
void pvf_dir_drop_locked(struct pvf_front *f, uint64_t ino)
{
    dir_drop_locked(f, ino);
}

void pvf_dir_drop(struct pvf_front *f, uint64_t ino)
{
    pthread_mutex_lock(&f->lock);
    dir_drop_locked(f, ino);
    pthread_mutex_unlock(&f->lock);
}

void pvf_dir_drop_all(struct pvf_front *f)
{
    pthread_mutex_lock(&f->lock);
    if (f->dirs.slots != NULL)
        memset(f->dirs.slots, 0, f->dirs.cap * sizeof(*f->dirs.slots));
    f->dirs.n = 0;
    pthread_mutex_unlock(&f->lock);
}

void pvf_dir_free(struct pvf_front *f)
{
    free(f->dirs.slots);
    memset(&f->dirs, 0, sizeof(f->dirs));
}

void pvf_lease_until(struct pvf_front *f, double until, double floor)
{
    pthread_mutex_lock(&f->lock);
    f->lease_until = until;
    f->attr_floor = floor;
    pthread_mutex_unlock(&f->lock);
}

static double monotonic_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double pvf_lease_left(const struct pvf_front *f)
{
    return f->lease_until - monotonic_now();
}

/* The slot of a leased directory's attributes, or NULL. Caller holds the lock. */
struct pvf_dirattr *pvf_dir_slot_locked(struct pvf_front *f, uint64_t ino)
{
    size_t j;

    if (f->dirs.n == 0 || ino == 0)
        return NULL;
    j = dirs_find(&f->dirs, ino);
    if (f->dirs.slots[j].ino != ino)
        return NULL;
    if (S_ISREG(f->dirs.slots[j].st.st_mode) && pvf_behind_pending_locked(f, ino))
        return NULL;   /* a write answered here and not applied: Python says (writes.c) */
    return &f->dirs.slots[j];
}

int pvf_dir_answer(struct pvf_front *f, uint64_t ino, struct stat *st, double *timeout)
{
    double left;
    int found = 0;

    pthread_mutex_lock(&f->lock);
    left = pvf_lease_left(f);
    if (left > 0.0 && f->dirs.n > 0) {
        struct pvf_dirattr *slot = pvf_dir_slot_locked(f, ino);
        if (slot != NULL) {
            *st = slot->st;
            *timeout = f->attr_floor == 0.0 ? 0.0 : (left > f->attr_floor ? left
                                                                         : f->attr_floor);
            if (S_ISREG(st->st_mode))
                f->c.file_attrs_here++;
            else
                f->c.attrs_here++;
            found = 1;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return found;
}

/* ------------------------------------------------------------------ capability probes */
#define PVF_CAPS_MAX (1u << 17)   /* as Python's bound: past it the table starts empty */

static size_t caps_find(const struct pvf_caps *c, uint64_t ino)
{
    size_t j = slot_of(ino, c->cap);

    while (c->slots[j].ino != 0 && c->slots[j].ino != ino)
        j = (j + 1) & (c->cap - 1);
    return j;
}

static int caps_grow(struct pvf_caps *c, double now)
{
    size_t cap = c->cap ? 2 * c->cap : 64;
    struct pvf_capslot *old = c->slots, *grown;
    size_t oldcap = c->cap;

    grown = calloc(cap, sizeof(*grown));
    if (grown == NULL)
        return -1;
    c->slots = grown;
    c->cap = cap;
    c->n = 0;
    for (size_t i = 0; i < oldcap; i++) {   /* expired answers are left behind */
        if (old[i].ino != 0 && old[i].until > now) {
            size_t j = caps_find(c, old[i].ino);
            c->slots[j] = old[i];
            c->n++;
        }
    }
    free(old);
    return 0;
}

/* ino has no security.capability until `until` (monotonic seconds). */
int pvf_caps_none(struct pvf_front *f, uint64_t ino, double until)
{
    struct pvf_caps *c = &f->caps;
    double now = monotonic_now();
    int ret = 0;

    if (ino == 0)
        return 0;
    pthread_mutex_lock(&f->lock);
    if (c->n >= PVF_CAPS_MAX) {
        memset(c->slots, 0, c->cap * sizeof(*c->slots));
        c->n = 0;
    }
    if ((c->n + 1) * 2 > c->cap && caps_grow(c, now) < 0) {
        ret = -1;
    } else {
        size_t j = caps_find(c, ino);
        if (c->slots[j].ino == 0)
            c->n++;
        c->slots[j].ino = ino;
        c->slots[j].until = until;
    }
    pthread_mutex_unlock(&f->lock);
    return ret;
}

/* Its probes go to Python again (kept as an expired slot: removal needs no shifting). */
void pvf_caps_drop(struct pvf_front *f, uint64_t ino)
{
    struct pvf_caps *c = &f->caps;

    pthread_mutex_lock(&f->lock);
    if (c->cap > 0) {
        size_t j = caps_find(c, ino);
        if (c->slots[j].ino == ino)
            c->slots[j].until = 0.0;
    }
    pthread_mutex_unlock(&f->lock);
}

int pvf_caps_answer(struct pvf_front *f, uint64_t ino)
{
    struct pvf_caps *c = &f->caps;
    int here = 0;

    pthread_mutex_lock(&f->lock);
    if (c->n > 0) {
        size_t j = caps_find(c, ino);
        if (c->slots[j].ino == ino && c->slots[j].until > monotonic_now()) {
            f->c.caps_here++;
            here = 1;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return here;
}

void pvf_caps_free(struct pvf_front *f)
{
    free(f->caps.slots);
    f->caps.slots = NULL;
    f->caps.cap = f->caps.n = 0;
}
