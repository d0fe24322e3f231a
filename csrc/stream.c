/* stream.c -- moving one job's bytes between a socket and a file.
 *
 * A job is served "until it would block": pv_serve_job() moves as much as the socket takes
 * (reads) or holds (writes) and returns PV_SERVE_BLOCKED on EAGAIN, PV_SERVE_DONE when the
 * job finished or failed (j->err), PV_SERVE_YIELD when the engine is being closed. The job
 * itself (made, freed, its position) is job.c's.
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

/* A step (below) moves some of a job's bytes with one system call and returns the bytes it
 * moved (> 0); PV_STEP_AGAIN when it moved none but the job may go on at once (its state
 * changed, or the call was interrupted); PV_STEP_BLOCKED when the socket would block -- not a
 * failure: the end of the job's turn; or -1 with err filled (err.c's convention). */
#define PV_STEP_AGAIN 0
#define PV_STEP_BLOCKED (-2)

/* A step's result from its system call's: n, or what errno says n < 0 means. */
static ssize_t step_result(ssize_t n, const char *what, struct pv_err *err)
{
    if (n >= 0)
        return n;
    if (errno == EINTR)
        return PV_STEP_AGAIN;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return PV_STEP_BLOCKED;
    return pv_err_sys(err, what);
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

static int64_t bytes_left(const struct pv_job *j)
{
    int64_t left = 0;
    for (size_t i = j->cur; i < j->nacc; i++)
        left += j->acc[i].len;
    return left - j->acc_done;
}

static ssize_t send_zeros(struct pv_job *j, int64_t rem, struct pv_err *err)
{
    return step_result(send(j->sock, zeros, (size_t)min64(rem, (int64_t)sizeof(zeros)),
                            MSG_NOSIGNAL | MSG_DONTWAIT),
                       "send", err);
}

/* mmap read mode: make sure the window holding offset o is mapped. Returns 1 when mapped,
 * 0 when o is past the end of the file (the caller pads with zeros), -1 with err. */
static int map_window(struct pv_engine *e, struct pv_job *j, int64_t o, struct pv_err *err)
{
    struct stat st;
    int64_t page = sysconf(_SC_PAGESIZE), start, len;
    void *m;

    if (j->map != NULL && o >= j->map_off && o < j->map_off + (int64_t)j->map_len)
        return 1;
    pv_job_unmap(j);
    if (fstat(j->file, &st) < 0)
        return pv_err_sys(err, "fstat");
    if (o >= st.st_size)
        return 0;
    start = o - o % page;
    len = min64((int64_t)e->mmap_window, st.st_size - start);
    /* A window must reach past o even when o sits at the end of a window-sized run. */
    if (start + len <= o)
        len = o - start + 1;
    m = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, j->file, start);
    if (m == MAP_FAILED)
        return pv_err_sys(err, "mmap");
    j->map = m;
    j->map_off = start;
    j->map_len = (size_t)len;
    return 1;
}

/* Emulated disk: how much of [o, o+rem) may be sent now. A miss charges the disk for the
 * read (at least its read-ahead, not past the end of the file) and returns 0 with
 * j->disk_until set; -1 with err if the file cannot be examined.
 *
 * What a miss read is the job's once the disk is done (the grant), cached or not: the pages
 * become resident when the miss is charged, so with more jobs waiting on the disk than the
 * cache has read-ahead windows, every job's pages were evicted by the later misses before
 * it woke, it missed again, and no job ever finished (a study hung on a 512 KiB cache and
 * seven concurrent reads). Linux likewise hands a reader the pages it waited for. */
static int64_t disk_limit(struct pv_engine *e, struct pv_job *j, int64_t o, int64_t rem,
                          struct pv_err *err)
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
        return pv_err_sys(err, "fstat");
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

/* One step of a read job's current access (see step_result). */
static ssize_t read_step(struct pv_engine *e, struct pv_job *j, struct pv_err *err)
{
    struct pv_access *a = &j->acc[j->cur];
    int64_t rem = a->len - j->acc_done, o = a->off + j->acc_done;
    ssize_t n;
    int r;

    if (a->kind == PV_ACC_ZERO || j->zero_fill || o >= j->file_end)
        return send_zeros(j, rem, err);
    rem = min64(rem, j->file_end - o);  /* the rest of the access is past the end: zeros */
    if (e->disk != NULL) {
        int64_t lim = disk_limit(e, j, o, rem, err);
        if (lim == 0)
            return PV_STEP_AGAIN;     /* waiting for the disk: j->disk_until is set */
        if (lim < 0)
            return -1;
        rem = lim;
    }
    r = e->read_mode == PV_READ_MMAP ? map_window(e, j, o, err) : 0;
    /* ENODEV: a file system that cannot mmap; sendfile still can. */
    if (e->read_mode == PV_READ_SENDFILE || (r < 0 && err->code == ENODEV)) {
        off_t fo = (off_t)o;
        n = sendfile(j->sock, j->file, &fo, (size_t)min64(rem, PV_CHUNK));
        if (n == 0)
            j->zero_fill = true;          /* EOF: the file shrank */
        return step_result(n, "sendfile", err);
    }
    if (r < 0)
        return -1;
    if (r == 0) {
        j->zero_fill = true;
        return PV_STEP_AGAIN;
    }
    n = send(j->sock, j->map + (o - j->map_off),
             (size_t)min64(rem, j->map_off + (int64_t)j->map_len - o),
             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EFAULT) {
        /* The mapped pages went past EOF after our fstat: the file shrank. */
        pv_job_unmap(j);
        j->zero_fill = true;
        return PV_STEP_AGAIN;
    }
    return step_result(n, "send", err);
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

/* splice write mode: socket -> pipe -> file, no copy through user space (see step_result). */
static ssize_t splice_step(struct pv_engine *e, struct pv_job *j, int64_t rem, int64_t o,
                           struct pv_err *err)
{
    ssize_t n = splice(j->sock, NULL, e->pipe_w, NULL,
                       (size_t)min64(rem, (int64_t)e->pipe_size),
                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    size_t left;
    loff_t fo = o;

    if (n == 0)
        return pv_fail(err, ECONNRESET, "peer closed in the middle of the stream");
    if (n < 0)
        return step_result(n, "splice", err);
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

/* One step of a write job's current access (see step_result). */
static ssize_t write_step(struct pv_engine *e, struct pv_job *j, struct pv_err *err)
{
    struct pv_access *a = &j->acc[j->cur];
    int64_t rem = a->len - j->acc_done, o = a->off + j->acc_done;
    bool keep = a->kind == PV_ACC_FILE && !j->draining;
    ssize_t n;

    if (keep && e->write_mode == PV_WRITE_SPLICE)
        return splice_step(e, j, rem, o, err);
    n = recv(j->sock, e->buf, (size_t)min64(rem, (int64_t)e->buf_len), MSG_DONTWAIT);
    if (n == 0)
        return pv_fail(err, ECONNRESET, "peer closed in the middle of the stream");
    if (n > 0 && keep)
        store(j, e->buf, (size_t)n, o);
    return step_result(n, "recv", err);
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
    struct pv_err err;

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
            n = step_result(send(j->sock, j->prefix + j->prefix_done,
                                 j->prefix_len - j->prefix_done,
                                 MSG_NOSIGNAL | MSG_DONTWAIT | more),
                            "send", &err);
            part = PREFIX;
        } else if (through) {
            n = step_result(send(j->sock, j->suffix + j->suffix_done,
                                 j->suffix_len - j->suffix_done, MSG_NOSIGNAL | MSG_DONTWAIT),
                            "send", &err);
            part = SUFFIX;
        } else if (j->op == PV_OP_READ) {
            n = read_step(e, j, &err);
        } else {
            n = write_step(e, j, &err);
        }
        if (n == PV_STEP_BLOCKED)
            return PV_SERVE_BLOCKED;
        if (n < 0) {
            /* A storage error seen earlier stays the job's error: it came first. */
            if (j->err == 0)
                j->err = err.code;
            return PV_SERVE_DONE;
        }
        if (n == PV_STEP_AGAIN)
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
