/* stream.c -- moving one job's bytes between a socket and a file.
 *
 * A job is served "until it would block": pv_serve_job() moves as much as the socket takes
 * (reads) or holds (writes) and returns PV_SERVE_BLOCKED on EAGAIN, PV_SERVE_DONE when the
 * job finished or failed (j->err), PV_SERVE_YIELD when the engine is being closed.
 *
 * Reads stream the reply prefix, then every access in order: file bytes with sendfile(2) or
 * with mmap(2)+send(2) in windows of e->mmap_window bytes (the thesis used 128 KiB), zero
 * bytes for holes. A file that shrank under us is padded with zeros so the stream keeps the
 * length promised in the prefix. Writes receive every access in order: into the engine's
 * buffer and pwrite(2), or socket -> pipe -> file with splice(2). A storage error is kept as
 * the job's error while the rest of the stream is drained, so the connection stays in step.
 * A job's suffix (a write's reply frame) follows the bulk only if the job has no error.
 *
 * With an emulated disk (disk.c) a read sends only what the model's cache holds; a miss
 * charges the disk for at least its read-ahead, and the job returns PV_SERVE_DISK to wait
 * until the modelled disk would have finished (j->disk_until). A write makes its pages dirty
 * in the model's cache and waits only when the model throttles it (writeback.c). The real
 * file is read and written all the same.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "native.h"

/* Source of zero bytes for holes and for files that shrank. */
static const char zeros[64 << 10];

/* Largest single sendfile/send request; the socket takes less anyway. */
#define PV_CHUNK ((int64_t)1 << 30)

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

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

/* Skip finished and empty accesses; true when the prefix and the bulk are through. */
static bool job_skip_done(struct pv_job *j)
{
    while (j->cur < j->nacc && j->acc_done == j->acc[j->cur].len) {
        j->cur++;
        j->acc_done = 0;
        j->zero_fill = false;
    }
    return j->prefix_done == j->prefix_len && j->cur == j->nacc;
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

static int64_t bytes_left(const struct pv_job *j)
{
    int64_t left = 0;
    for (size_t i = j->cur; i < j->nacc; i++)
        left += j->acc[i].len;
    return left - j->acc_done;
}

static ssize_t send_zeros(struct pv_job *j, int64_t rem)
{
    return send(j->sock, zeros, (size_t)min64(rem, (int64_t)sizeof(zeros)),
                MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* mmap read mode: make sure the window holding offset o is mapped. Returns 1 when mapped,
 * 0 when o is past the end of the file (the caller pads with zeros), -1 with errno. */
static int map_window(struct pv_engine *e, struct pv_job *j, int64_t o)
{
    struct stat st;
    int64_t page = sysconf(_SC_PAGESIZE), start, len;
    void *m;

    if (j->map != NULL && o >= j->map_off && o < j->map_off + (int64_t)j->map_len)
        return 1;
    pv_job_unmap(j);
    if (fstat(j->file, &st) < 0)
        return -1;
    if (o >= st.st_size)
        return 0;
    start = o - o % page;
    len = min64((int64_t)e->mmap_window, st.st_size - start);
    /* A window must reach past o even when o sits at the end of a window-sized run. */
    if (start + len <= o)
        len = o - start + 1;
    m = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, j->file, start);
    if (m == MAP_FAILED)
        return -1;
    j->map = m;
    j->map_off = start;
    j->map_len = (size_t)len;
    return 1;
}

/* Emulated disk: how much of [o, o+rem) may be sent now. A miss charges the disk for the
 * read (at least its read-ahead, not past the end of the file) and returns 0 with
 * j->disk_until set; -1 with errno if the file cannot be examined.
 *
 * What a miss read is the job's once the disk is done (the grant), cached or not: the pages
 * become resident when the miss is charged, so with more jobs waiting on the disk than the
 * cache has read-ahead windows, every job's pages were evicted by the later misses before
 * it woke, it missed again, and no job ever finished (a study hung on a 512 KiB cache and
 * seven concurrent reads). Linux likewise hands a reader the pages it waited for. */
static int64_t disk_limit(struct pv_engine *e, struct pv_job *j, int64_t o, int64_t rem)
{
    struct pv_disk *d = e->disk;
    int64_t n, lo, hi, len, until, end, now = pv_now_ns();
    struct stat st;

    if (o >= j->grant_off && o < j->grant_end)
        return min64(rem, j->grant_end - o);
    n = pv_disk_resident(d, j->inode, o, rem, now, &until, &end);
    if (n > 0)
        return n;
    if (until > 0) {
        /* Another job's miss is bringing these pages in: wait for it, then they are ours
         * (the grant), as a reader of a page under read waits for it. Before, the pages
         * counted as there the moment the miss was charged, and a second reader of a block
         * got it at once while the first waited out the disk. */
        j->disk_until = until;
        j->grant_off = o;
        j->grant_end = end;
        return 0;
    }
    if (fstat(j->file, &st) < 0)
        return -1;
    lo = o - o % PV_DISK_PAGE;
    hi = o + (rem > d->p.readahead ? rem : d->p.readahead);
    if (hi > st.st_size)
        hi = st.st_size;
    if (hi <= o)
        return rem;                   /* past EOF: the zero fill below needs no disk */
    hi += (PV_DISK_PAGE - hi % PV_DISK_PAGE) % PV_DISK_PAGE;
    /* One request to the disk per turn: a huge access is read in read-ahead pieces so that
     * other jobs get the head between them, as the kernel would split it. */
    len = hi - lo;
    if (len > d->p.readahead && d->p.readahead > 0)
        len = (o - lo) + d->p.readahead + (PV_DISK_PAGE - d->p.readahead % PV_DISK_PAGE)
              % PV_DISK_PAGE;
    (void)pv_disk_access(d, j->inode, lo, len, false, now, &j->disk_until, &j->grant_end);
    j->grant_off = o;
    return 0;
}

/* One step of a read job's current access: >0 bytes sent, 0 state changed, -1 errno. */
static ssize_t read_step(struct pv_engine *e, struct pv_job *j)
{
    struct pv_access *a = &j->acc[j->cur];
    int64_t rem = a->len - j->acc_done, o = a->off + j->acc_done;
    ssize_t n;
    int r;

    if (a->kind == PV_ACC_ZERO || j->zero_fill || o >= j->file_end)
        return send_zeros(j, rem);
    rem = min64(rem, j->file_end - o);  /* the rest of the access is past the end: zeros */
    if (e->disk != NULL) {
        int64_t lim = disk_limit(e, j, o, rem);
        if (lim <= 0)
            return lim;               /* 0: waiting for the disk; -1: errno */
        rem = lim;
    }
    r = e->read_mode == PV_READ_MMAP ? map_window(e, j, o) : -1;
    /* ENODEV: a file system that cannot mmap; sendfile still can. */
    if (e->read_mode == PV_READ_SENDFILE || (r < 0 && errno == ENODEV)) {
        off_t fo = (off_t)o;
        n = sendfile(j->sock, j->file, &fo, (size_t)min64(rem, PV_CHUNK));
        if (n == 0)
            j->zero_fill = true;          /* EOF: the file shrank */
        return n;
    }
    if (r <= 0) {
        if (r == 0)
            j->zero_fill = true;
        return r;
    }
    n = send(j->sock, j->map + (o - j->map_off),
             (size_t)min64(rem, j->map_off + (int64_t)j->map_len - o),
             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EFAULT) {
        /* The mapped pages went past EOF after our fstat: the file shrank. */
        pv_job_unmap(j);
        j->zero_fill = true;
        return 0;
    }
    return n;
}

/* Store n bytes of e->buf at offset o; on failure keep the first errno and drain the rest. */
static void store(struct pv_job *j, const char *buf, size_t n, int64_t o)
{
    while (n > 0) {
        ssize_t w = pwrite(j->file, buf, n, (off_t)o);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            j->err = w < 0 ? errno : EIO;
            j->draining = true;
            return;
        }
        buf += w;
        n -= (size_t)w;
        o += w;
    }
}

/* splice write mode: socket -> pipe -> file, no copy through user space. */
static ssize_t splice_step(struct pv_engine *e, struct pv_job *j, int64_t rem, int64_t o)
{
    ssize_t n = splice(j->sock, NULL, e->pipe_w, NULL,
                       (size_t)min64(rem, (int64_t)e->pipe_size),
                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    size_t left;
    loff_t fo = o;

    if (n <= 0) {
        if (n == 0)
            errno = ECONNRESET;           /* peer closed in the middle of the stream */
        return -1;
    }
    left = (size_t)n;
    while (left > 0) {
        ssize_t w = splice(e->pipe_r, NULL, j->file, &fo, left, SPLICE_F_MOVE);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EINVAL)
            break;                        /* no splice_write here: pwrite what is left */
        if (w <= 0) {
            j->err = w < 0 ? errno : EIO;
            j->draining = true;
            break;
        }
        left -= (size_t)w;
    }
    /* Bytes still in the pipe belong to the stream: store them the slow way, or drop them
     * after a storage failure. The pipe holds at most pipe_size, all readable at once. */
    while (left > 0) {
        ssize_t d = read(e->pipe_r, e->buf, left < e->buf_len ? left : e->buf_len);
        if (d < 0 && errno == EINTR)
            continue;
        if (d <= 0) {
            if (j->err == 0)
                j->err = d < 0 ? errno : EIO;
            break;
        }
        if (!j->draining)
            store(j, e->buf, (size_t)d, (int64_t)fo);
        fo += d;
        left -= (size_t)d;
    }
    return n;
}

/* One step of a write job's current access: >0 bytes received, -1 errno. */
static ssize_t write_step(struct pv_engine *e, struct pv_job *j)
{
    struct pv_access *a = &j->acc[j->cur];
    int64_t rem = a->len - j->acc_done, o = a->off + j->acc_done;
    bool keep = a->kind == PV_ACC_FILE && !j->draining;
    ssize_t n;

    if (keep && e->write_mode == PV_WRITE_SPLICE)
        return splice_step(e, j, rem, o);
    n = recv(j->sock, e->buf, (size_t)min64(rem, (int64_t)e->buf_len), MSG_DONTWAIT);
    if (n == 0) {
        errno = ECONNRESET;               /* peer closed in the middle of the stream */
        return -1;
    }
    if (n > 0 && keep)
        store(j, e->buf, (size_t)n, o);
    return n;
}

/* The job's first turn: what the daemon used to ask with fstat(2) on its trio thread,
 * asked here on the engine's thread right before the first byte moves. A checked job whose
 * descriptor was unlinked behind the daemon's cache (or cannot be examined) ends at once
 * with PV_ERR_STALE, in step: the daemon reopens the file in a worker thread and submits
 * the request again. A read with a size slot gets the file's size written into its prefix
 * (big-endian, the slot of a msgpack uint64) and its file bytes clipped there. Returns false
 * when the job ended. */
static bool job_examine(struct pv_job *j)
{
    struct stat st;
    uint64_t v;

    j->examined = true;
    if (!j->check && j->size_at < 0)
        return true;
    if (fstat(j->file, &st) < 0 || (j->check && st.st_nlink == 0)) {
        j->err = PV_ERR_STALE;
        j->stale = true;
        return false;
    }
    if (j->size_at >= 0) {
        v = (uint64_t)st.st_size;
        for (int b = 7; b >= 0; b--, v >>= 8)
            j->prefix[j->size_at + b] = (char)(v & 0xff);
        j->file_end = st.st_size;
    }
    return true;
}

enum pv_serve pv_serve_job(struct pv_engine *e, struct pv_job *j, bool *progress)
{
    if (!j->examined && !job_examine(j))
        return PV_SERVE_DONE;
    for (;;) {
        enum { PREFIX, BULK, SUFFIX } part = BULK;
        bool through = job_skip_done(j);
        ssize_t n;

        if (through && (j->err != 0 || j->suffix_done == j->suffix_len))
            return PV_SERVE_DONE;
        if (j->disk_until != 0)
            return PV_SERVE_DISK;
        if (atomic_load_explicit(&e->stop_req, memory_order_relaxed))
            return PV_SERVE_YIELD;
        if (j->prefix_done < j->prefix_len) {
            /* MSG_MORE: the bulk follows at once, no need for a packet of its own. */
            int more = bytes_left(j) > 0 || j->suffix_len > 0 ? MSG_MORE : 0;
            n = send(j->sock, j->prefix + j->prefix_done, j->prefix_len - j->prefix_done,
                     MSG_NOSIGNAL | MSG_DONTWAIT | more);
            part = PREFIX;
        } else if (through) {
            n = send(j->sock, j->suffix + j->suffix_done, j->suffix_len - j->suffix_done,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
            part = SUFFIX;
        } else if (j->op == PV_OP_READ) {
            n = read_step(e, j);
        } else {
            n = write_step(e, j);
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return PV_SERVE_BLOCKED;
            /* A storage error seen earlier stays the job's error: it came first. */
            if (j->err == 0)
                j->err = errno;
            return PV_SERVE_DONE;
        }
        if (n == 0)
            continue;
        *progress = true;
        if (part == PREFIX) {
            j->prefix_done += (size_t)n;
            continue;
        }
        if (part == SUFFIX) {
            j->suffix_done += (size_t)n;
            continue;
        }
        if (e->disk != NULL && j->op == PV_OP_WRITE && j->acc[j->cur].kind == PV_ACC_FILE
            && !j->draining) {
            /* Write-back: the job waits only when the model throttles it or must write a
             * dirty victim first; otherwise it goes on at once, with no detour through the
             * disk-wait list (a readiness edge that would reorder it under opt1). */
            int64_t now = pv_now_ns(), done;
            if (pv_disk_write(e->disk, j->inode, j->acc[j->cur].off + j->acc_done, n, now,
                              &done) > 0)
                j->disk_until = done;
        }
        j->acc_done += n;
        j->nbytes += n;
        atomic_fetch_add_explicit(j->op == PV_OP_READ ? &e->bytes_read : &e->bytes_written,
                                  (int64_t)n, memory_order_relaxed);
    }
}
