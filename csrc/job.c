/* job.c -- a job (thesis fig. 3.7): made from what Python submits, freed, and what the other
 * units ask of its state: its position, which way its socket must be ready, whether it left
 * its connection in step. Moving its bytes is stream.c's; serving it, engine.c's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "native.h"

struct pv_job *pv_job_new(int64_t id, int sock, int file, int op, const void *acc,
                          size_t acc_len, const void *prefix, size_t prefix_len,
                          const void *suffix, size_t suffix_len, uint64_t inode,
                          struct pv_err *err)
{
    const unsigned char *p = acc;
    struct pv_job *j = NULL;
    size_t n, i;
    int64_t total = 0;

    if (op != PV_OP_READ && op != PV_OP_WRITE) {
        pv_misuse(err, EINVAL, "op must be OP_READ or OP_WRITE, not %d", op);
        return NULL;
    }
    if (sock < 0 || file < 0) {
        pv_misuse(err, EINVAL, "file descriptors must be >= 0");
        return NULL;
    }
    if (op == PV_OP_WRITE && prefix_len != 0) {
        pv_misuse(err, EINVAL, "a write job takes no prefix");
        return NULL;
    }
    if (acc_len % sizeof(struct pv_access) != 0) {
        pv_misuse(err, EINVAL, "accesses must be packed int64 triples (%zu bytes)",
                 acc_len);
        return NULL;
    }
    n = acc_len / sizeof(struct pv_access);
    j = calloc(1, sizeof(*j));
    if (j == NULL)
        goto nomem;
    j->acc = malloc(n ? n * sizeof(struct pv_access) : 1);
    j->prefix = malloc(prefix_len ? prefix_len : 1);
    j->suffix = malloc(suffix_len ? suffix_len : 1);
    if (j->acc == NULL || j->prefix == NULL || j->suffix == NULL)
        goto nomem;
    for (i = 0; i < n; i++) {
        struct pv_access *a = &j->acc[i];
        int64_t f[3];
        /* Explicit little-endian decoding: the wire order, whatever the host's. */
        for (int k = 0; k < 3; k++) {
            uint64_t v = 0;
            for (int b = 7; b >= 0; b--)
                v = (v << 8) | p[i * 24 + (size_t)k * 8 + (size_t)b];
            f[k] = (int64_t)v;
        }
        a->kind = f[0];
        a->off = f[1];
        a->len = f[2];
        if (op == PV_OP_READ ? (a->kind != PV_ACC_FILE && a->kind != PV_ACC_ZERO)
                             : (a->kind != PV_ACC_FILE && a->kind != PV_ACC_DISCARD)) {
            pv_misuse(err, EINVAL, "access %zu: kind %lld not valid for this op", i,
                     (long long)a->kind);
            goto fail;
        }
        if (a->off < 0 || a->len < 0 || a->len > INT64_MAX - a->off
            || a->len > INT64_MAX - total) {
            pv_misuse(err, EINVAL, "access %zu: bad offset/length (%lld, %lld)", i,
                     (long long)a->off, (long long)a->len);
            goto fail;
        }
        total += a->len;
    }
    if (prefix_len)
        memcpy(j->prefix, prefix, prefix_len);
    if (suffix_len)
        memcpy(j->suffix, suffix, suffix_len);
    j->id = id;
    j->sock = sock;
    j->file = file;
    j->op = op;
    j->inode = inode;
    j->nacc = n;
    j->prefix_len = prefix_len;
    j->suffix_len = suffix_len;
    j->sock_flags = -1;
    j->size_at = -1;
    j->file_end = INT64_MAX;
    j->t_submit = pv_now_ns();
    return j;

nomem:
    pv_fail(err, ENOMEM, "out of memory");
fail:
    pv_job_free(j);
    return NULL;
}

void pv_job_free(struct pv_job *j)
{
    if (j == NULL)
        return;
    pv_job_unmap(j);
    free(j->acc);
    free(j->prefix);
    free(j->suffix);
    free(j);
}

void pv_job_unmap(struct pv_job *j)
{
    /* munmap of a mapping we made cannot fail short of a bug; nothing to report. */
    if (j->map != NULL)
        (void)munmap(j->map, j->map_len);
    j->map = NULL;
    j->map_len = 0;
}

bool pv_job_idle(const struct pv_job *j)
{
    if (j->prefix_len != 0 || j->suffix_len != 0)
        return false;
    for (size_t i = 0; i < j->nacc; i++) {
        if (j->acc[i].len != 0)
            return false;
    }
    return true;
}

static bool bulk_done(const struct pv_job *j)
{
    size_t i = j->cur;

    if (j->prefix_done != j->prefix_len)
        return false;
    if (i < j->nacc && j->acc_done == j->acc[i].len)
        i++;
    while (i < j->nacc && j->acc[i].len == 0)
        i++;
    return i == j->nacc;
}

/* Which way the socket must be ready: a write job sends only its suffix. */
bool pv_job_wants_out(const struct pv_job *j)
{
    return j->op == PV_OP_READ || (j->suffix_done < j->suffix_len && j->err == 0
                                   && bulk_done(j));
}

/* A failed job left its connection at a frame boundary: every byte of the bulk moved and
 * the failure was the file's (a write drained the rest of its stream), not the socket's. */
bool pv_job_in_step(const struct pv_job *j)
{
    return j->stale || (j->draining && bulk_done(j) && j->suffix_done == 0);
}

struct pv_pos pv_job_pos(const struct pv_job *j)
{
    struct pv_pos p = { .inode = j->inode, .off = 0 };
    if (j->cur < j->nacc)
        p.off = j->acc[j->cur].off + j->acc_done;
    else if (j->nacc > 0)
        p.off = j->acc[j->nacc - 1].off + j->acc[j->nacc - 1].len;
    return p;
}
