/* names.c -- leased directories' names, for "no such name" answered by the C workers.
 *
 * The kernel looks a name up before every O_CREAT open, and for a new file it is not there.
 * Under the manager's lease the mount knows every name of a directory it made or listed to
 * the end (fuse/leases.py: the directory is *complete*); Python mirrors here each such
 * directory's names (a name -> its inode, 0 for a name known not to be there), every change
 * to them, and whether the directory is complete. A lookup of a name a directory here does
 * not hold (or holds as 0) is answered ENOENT by the worker while the session lasts
 * (answers.c keeps its end).
 *
 * Not cached by the kernel: ENOENT carries no timeout, so no recall ever has to drop a
 * negative entry C gave (Python's own negative answers are cached and dropped at recalls).
 * A name it holds is answered here only when answers.c keeps the inode's attributes too
 * (pvf_names_found): those are Python's answer for it, mirrored; otherwise Python answers.
 *
 * Each directory has its own open-addressing table of names (hash and length compared
 * first), under the front's lock; the directories are a table of pointers by inode. If a
 * name cannot be stored, the directory is forgotten here: Python answers for it then.
 */
#include "front.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct pvf_name {
    char *name;             /* NULL: an empty slot; NUL-terminated */
    uint64_t ino;           /* 0: known not to be there */
    uint32_t hash;
    uint32_t len;
};

struct pvf_dirnames {
    uint64_t parent;
    int complete;
    size_t cap, n;
    size_t entries;         /* names there (ino != 0): fuse/leasetables.py's _Dir.entries */
    struct pvf_name *slots;
};

static uint32_t hash_of(const char *s, size_t n)
{
    uint32_t h = 2166136261u;   /* FNV-1a */

    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h ? h : 1;
}

static size_t dir_slot(uint64_t key, size_t cap)
{
    key *= 0x9e3779b97f4a7c15ull;
    return (size_t)(key >> 32) & (cap - 1);
}

/* ------------------------------------------------------------------ one directory's names */
static void dirnames_free(struct pvf_dirnames *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->cap; i++)
        free(d->slots[i].name);
    free(d->slots);
    free(d);
}

static size_t name_find(const struct pvf_dirnames *d, const char *name, size_t len,
                        uint32_t h)
{
    size_t j, mask = d->cap - 1;

    for (j = h & mask; d->slots[j].name != NULL; j = (j + 1) & mask) {
        const struct pvf_name *e = &d->slots[j];
        if (e->hash == h && e->len == len && memcmp(e->name, name, len) == 0)
            break;
    }
    return j;
}

static int names_grow(struct pvf_dirnames *d)
{
    size_t cap = d->cap ? 2 * d->cap : 16;
    struct pvf_name *slots = calloc(cap, sizeof(*slots));

    if (slots == NULL)
        return -1;
    for (size_t i = 0; i < d->cap; i++) {
        size_t j;
        if (d->slots[i].name == NULL)
            continue;
        for (j = d->slots[i].hash & (cap - 1); slots[j].name != NULL; j = (j + 1) & (cap - 1))
            ;
        slots[j] = d->slots[i];
    }
    free(d->slots);
    d->slots = slots;
    d->cap = cap;
    return 0;
}

static int name_put(struct pvf_dirnames *d, const char *name, size_t len, uint64_t ino)
{
    uint32_t h = hash_of(name, len);
    size_t j;
    char *copy;

    if (2 * (d->n + 1) > d->cap && names_grow(d) < 0)
        return -1;
    j = name_find(d, name, len, h);
    if (d->slots[j].name != NULL) {
        d->entries += (ino != 0) - (d->slots[j].ino != 0);
        d->slots[j].ino = ino;
        return 0;
    }
    copy = malloc(len + 1);
    if (copy == NULL)
        return -1;
    memcpy(copy, name, len);
    copy[len] = '\0';
    d->slots[j] = (struct pvf_name){ copy, ino, h, (uint32_t)len };
    d->n++;
    d->entries += ino != 0;
    return 0;
}

static void name_pop(struct pvf_dirnames *d, const char *name, size_t len)
{
    size_t mask, hole, j;

    if (d->n == 0)
        return;
    mask = d->cap - 1;
    hole = name_find(d, name, len, hash_of(name, len));
    if (d->slots[hole].name == NULL)
        return;
    d->entries -= d->slots[hole].ino != 0;
    free(d->slots[hole].name);
    d->slots[hole].name = NULL;
    d->n--;
    for (j = (hole + 1) & mask; d->slots[j].name != NULL; j = (j + 1) & mask) {
        size_t home = d->slots[j].hash & mask;
        int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            d->slots[hole] = d->slots[j];
            d->slots[j].name = NULL;
            hole = j;
        }
    }
}

/* ------------------------------------------------------------------ the directories */
static size_t dirs_find(const struct pvf_front *f, uint64_t parent)
{
    size_t j, mask = f->names_cap - 1;

    for (j = dir_slot(parent, f->names_cap); f->names[j] != NULL && f->names[j]->parent != parent;
         j = (j + 1) & mask)
        ;
    return j;
}

static struct pvf_dirnames *dir_get(struct pvf_front *f, uint64_t parent)
{
    size_t j;

    if (f->names_n == 0)
        return NULL;
    j = dirs_find(f, parent);
    return f->names[j];
}

static int dirs_grow(struct pvf_front *f)
{
    size_t cap = f->names_cap ? 2 * f->names_cap : 64;
    struct pvf_dirnames **slots = calloc(cap, sizeof(*slots));

    if (slots == NULL)
        return -1;
    for (size_t i = 0; i < f->names_cap; i++) {
        size_t j;
        if (f->names[i] == NULL)
            continue;
        for (j = dir_slot(f->names[i]->parent, cap); slots[j] != NULL; j = (j + 1) & (cap - 1))
            ;
        slots[j] = f->names[i];
    }
    free(f->names);
    f->names = slots;
    f->names_cap = cap;
    return 0;
}

/* Remove directory slot `hole` (backward shift). Caller holds the lock. */
static void dirs_remove(struct pvf_front *f, size_t hole)
{
    size_t mask = f->names_cap - 1;

    dirnames_free(f->names[hole]);
    f->names[hole] = NULL;
    f->names_n--;
    for (size_t k = (hole + 1) & mask; f->names[k] != NULL; k = (k + 1) & mask) {
        size_t home = dir_slot(f->names[k]->parent, f->names_cap);
        int stays = hole <= k ? (home > hole && home <= k) : (home > hole || home <= k);
        if (!stays) {
            f->names[hole] = f->names[k];
            f->names[k] = NULL;
            hole = k;
        }
    }
}

static void forget_locked(struct pvf_front *f, uint64_t parent)
{
    if (f->names_n > 0) {
        size_t j = dirs_find(f, parent);
        if (f->names[j] != NULL)
            dirs_remove(f, j);
    }
}

int pvf_names_dir(struct pvf_front *f, uint64_t parent, int complete)
{
    struct pvf_dirnames *d = calloc(1, sizeof(*d));
    int ret = 0;

    if (d == NULL) {
        errno = ENOMEM;
        return -1;
    }
    d->parent = parent;
    d->complete = complete;
    pthread_mutex_lock(&f->lock);
    forget_locked(f, parent);
    if (2 * (f->names_n + 1) > f->names_cap && dirs_grow(f) < 0) {
        dirnames_free(d);
        errno = ENOMEM;
        ret = -1;
    } else {
        f->names[dirs_find(f, parent)] = d;
        f->names_n++;
    }
    pthread_mutex_unlock(&f->lock);
    return ret;
}

void pvf_names_put(struct pvf_front *f, uint64_t parent, const char *name, size_t len,
                   uint64_t ino)
{
    struct pvf_dirnames *d;

    pthread_mutex_lock(&f->lock);
    d = dir_get(f, parent);
    if (d != NULL && name_put(d, name, len, ino) < 0)
        forget_locked(f, parent);   /* a name it cannot hold: Python answers for it */
    pthread_mutex_unlock(&f->lock);
}

void pvf_names_pop(struct pvf_front *f, uint64_t parent, const char *name, size_t len)
{
    struct pvf_dirnames *d;

    pthread_mutex_lock(&f->lock);
    d = dir_get(f, parent);
    if (d != NULL)
        name_pop(d, name, len);
    pthread_mutex_unlock(&f->lock);
}

void pvf_names_complete(struct pvf_front *f, uint64_t parent, int complete)
{
    struct pvf_dirnames *d;

    pthread_mutex_lock(&f->lock);
    d = dir_get(f, parent);
    if (d != NULL)
        d->complete = complete;
    pthread_mutex_unlock(&f->lock);
}

void pvf_names_forget(struct pvf_front *f, uint64_t parent)
{
    pthread_mutex_lock(&f->lock);
    forget_locked(f, parent);
    pthread_mutex_unlock(&f->lock);
}

void pvf_names_forget_all(struct pvf_front *f)
{
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->names_cap; i++) {
        dirnames_free(f->names[i]);
        f->names[i] = NULL;
    }
    f->names_n = 0;
    pthread_mutex_unlock(&f->lock);
}

void pvf_names_free(struct pvf_front *f)
{
    pvf_names_forget_all(f);
    free(f->names);
    f->names = NULL;
    f->names_cap = 0;
}

int pvf_names_missing(struct pvf_front *f, uint64_t parent, const char *name)
{
    size_t len = strlen(name);
    struct pvf_dirnames *d;
    int missing = 0;

    if (len == 0 || len > PVF_NAME_MAX || (name[0] == '.' && (len == 1 ||
                                                               (len == 2 && name[1] == '.'))))
        return 0;
    pthread_mutex_lock(&f->lock);
    d = dir_get(f, parent);
    if (d != NULL && pvf_lease_left(f) > 0.0) {
        if (d->cap == 0) {
            missing = d->complete;
        } else {
            size_t j = name_find(d, name, len, hash_of(name, len));
            missing = d->slots[j].name != NULL ? d->slots[j].ino == 0 : d->complete;
        }
        if (missing)
            f->c.missing_here++;
    }
    pthread_mutex_unlock(&f->lock);
    return missing;
}

/* A lookup of a name a leased directory here holds, of an inode whose attributes are kept
 * here too (answers.c: a leased directory's or regular file's): 1 and the entry Python
 * would give -- the kernel keeps the name until the session's end, as Python's
 * LeaseCache.name_timeout lets it (a recall drops every name of the directory), and the
 * attributes as long as a getattr here would -- else 0 (Python answers). */
int pvf_names_found(struct pvf_front *f, uint64_t parent, const char *name,
                    struct fuse_entry_param *e)
{
    size_t len = strlen(name), j;
    struct pvf_dirnames *d;
    struct pvf_dirattr *slot;
    double left;
    int found = 0;

    if (len == 0 || len > PVF_NAME_MAX)
        return 0;
    pthread_mutex_lock(&f->lock);
    left = pvf_lease_left(f);
    d = dir_get(f, parent);
    if (left > 0.0 && d != NULL && d->cap > 0) {
        j = name_find(d, name, len, hash_of(name, len));
        slot = d->slots[j].name != NULL && d->slots[j].ino != 0
            ? pvf_dir_slot_locked(f, d->slots[j].ino) : NULL;
        if (slot != NULL) {
            memset(e, 0, sizeof(*e));
            e->ino = slot->ino;
            e->attr = slot->st;
            e->entry_timeout = f->entry_floor == 0.0 ? 0.0
                : (left > f->entry_floor ? left : f->entry_floor);
            e->attr_timeout = f->attr_floor == 0.0 ? 0.0
                : (left > f->attr_floor ? left : f->attr_floor);
            f->c.found_here++;
            found = 1;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return found;
}

/* For creates.c, under the lock: whether `name` may be made in `parent` here -- a complete
 * directory that does not hold it -- and how many names it holds. */
int pvf_names_can_make_locked(struct pvf_front *f, uint64_t parent, const char *name,
                              size_t len, size_t *entries)
{
    struct pvf_dirnames *d = dir_get(f, parent);

    if (d == NULL || !d->complete)
        return 0;
    if (d->cap > 0) {
        size_t j = name_find(d, name, len, hash_of(name, len));
        if (d->slots[j].name != NULL && d->slots[j].ino != 0)
            return 0;
    }
    *entries = d->entries;
    return 1;
}

/* For unlinks.c, under the lock: whether a complete directory holds `name` (its inode in
 * *ino) and how many names it holds. */
int pvf_names_get_locked(struct pvf_front *f, uint64_t parent, const char *name, size_t len,
                         uint64_t *ino, size_t *entries)
{
    struct pvf_dirnames *d = dir_get(f, parent);
    size_t j;

    if (d == NULL || !d->complete || d->cap == 0)
        return 0;
    j = name_find(d, name, len, hash_of(name, len));
    if (d->slots[j].name == NULL || d->slots[j].ino == 0)
        return 0;
    *ino = d->slots[j].ino;
    *entries = d->entries;
    return 1;
}

/* For creates.c, under the lock: `name` names `ino` now; -1 if it could not be kept (the
 * directory is forgotten here then). */
int pvf_names_put_locked(struct pvf_front *f, uint64_t parent, const char *name, size_t len,
                         uint64_t ino)
{
    struct pvf_dirnames *d = dir_get(f, parent);

    if (d == NULL)
        return -1;
    if (name_put(d, name, len, ino) < 0) {
        forget_locked(f, parent);
        return -1;
    }
    return 0;
}
