/* native.h -- shared declarations of the pvfs._native extension.
 *
 * Two halves live in this extension: the I/O daemon's engine (a service thread moving jobs'
 * bytes between sockets and files, in the order of a scheduling policy, optionally through
 * an emulated disk) and the client's scatter/gather, transfer.c and stripe.c around the plain
 * C of xfer/ (the exchange and the stripe split, shared with the front end). Nothing here
 * touches a Python object, so the engine's thread never needs the GIL; pvpy.h declares the
 * bindings.
 *
 * Units, in call order: each calls (or names) only units listed above it, never one below
 * (tests/unit/test_c_units.py reads the sources and checks this list):
 *   err.c         the one error convention (struct pv_err, below)
 *   base.c        the clock, eventfds, epoll registration, posting an event for Python
 *   job.c         a job: made, freed, its position, which way it waits, in step or not
 *   disk.c        the emulated disk's model: page cache, dirty list, the head's timing
 *   writeback.c   its write-back: the flusher, writes, fsync, dropping the cache
 *   diskaccess.c  an access charged to it: a read's miss, or a write (writeback.c)
 *   stream.c      moving a job's bytes: sendfile or mmap+send, recv+pwrite or splice
 *   fastwire.c    the fast path's wire: a read/write header parsed, the replies written
 *   fast.c        the fast path: a parsed header intersected, made a job; grants, records
 *   conn.c        attached connections: reading frame headers between jobs
 *   sched.c       the scheduling policies opt1..opt4, one const ops table each
 *   engine.c      the service loop: events, the policy's pick, a turn, posting results
 *   lifecycle.c   making, stopping and freeing an engine
 *   handoff.c     what the Python thread calls: the inbox and the done list
 *   transfer.c    the client's transfer(): the exchange (xfer/exchange.c) without the GIL
 *   stripe.c      the client's stripe_transfer(): a striped read or write split (xfer/split.c)
 *   pyerr.c       pv_raise: a struct pv_err as a Python exception
 *   pydisk.c      the Disk type
 *   pyconn.c      attach(), detach(), events()
 *   pyfast.c      the fast path's grants and records, fast_plan()
 *   module.c      the module and the Engine type
 * Sharing goes down, never up or sideways: what two units both need lives in one below them
 * (base.c for the engine's units, disk.c for the disk's). The engine calls its policy
 * through the ops table only (pv_sched_ops); the loop thread runs engine.c's pv_engine_main.
 */
#ifndef PVFS_NATIVE_H
#define PVFS_NATIVE_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "disk.h"               /* the emulated disk (disk.c, writeback.c, diskaccess.c) */

#define PV_ERR_LEN 256
#define PV_PREFIX_LEN 16              /* "PV01", u32 LE header_len, u64 LE bulk_len */
#define PV_MAX_HEADER ((uint32_t)1 << 20)
#define PV_MAX_BULK ((uint64_t)1 << 32)

/* The one error convention (err.c): a failing function returns -1 (or NULL) and fills this;
 * Python raises from it in one place (pv_raise, module.c) -- MemoryError for ENOMEM,
 * ValueError for the caller's misuse, else OSError(code, msg) -- never by reading msg. */
struct pv_err {
    int code;                         /* an errno value */
    bool misuse;                      /* the caller's mistake: a closed engine, a bad argument */
    char msg[PV_ERR_LEN];
};
int pv_err_set(struct pv_err *err, int code, bool misuse, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Fill err and return -1: a failure of the system (errno code), or the caller's misuse. */
#define pv_fail(err, code, ...) pv_err_set((err), (code), false, __VA_ARGS__)
#define pv_misuse(err, code, ...) pv_err_set((err), (code), true, __VA_ARGS__)
/* A system call named `what` just failed: fill err from errno and return -1. */
int pv_err_sys(struct pv_err *err, const char *what);

#define pv_container_of(p, type, member) ((type *)((char *)(p) - offsetof(type, member)))

/* epoll data of a registered fd: NULL for the wake fd, a pv_job, or a pv_conn with the low
 * bit set (both are malloc'd, so the bit is free). */
#define PV_TAG_CONN ((uintptr_t)1)

enum { PV_OP_READ = 0, PV_OP_WRITE = 1 };
enum { PV_ACC_FILE = 0, PV_ACC_ZERO = 1, PV_ACC_DISCARD = 2 };

enum pv_read_mode { PV_READ_SENDFILE = 0, PV_READ_MMAP = 1 };
enum pv_write_mode { PV_WRITE_PWRITE = 0, PV_WRITE_SPLICE = 1 };

/* A node of the engine's two hand-over queues. The inbox (Python -> loop) holds JOB, ATTACH
 * and DETACH; the done list (loop -> Python) holds JOB ("done"), FRAME and CLOSED, in the
 * order the loop posted them. Each node is embedded in what it stands for: a pv_job, a
 * pv_conn (ATTACH, and CLOSED once the loop has forgotten the connection), a pv_record
 * (FRAME) or a pv_detach (on the stack of the Python thread waiting for it). */
enum pv_ev_kind { PV_EV_JOB, PV_EV_ATTACH, PV_EV_DETACH, PV_EV_FRAME, PV_EV_CLOSED };

struct pv_event {
    struct pv_event *next;
    enum pv_ev_kind kind;
};

/* A circular doubly-linked list with a sentinel (conn.c's ready and partial lists). */
struct pv_ring {
    struct pv_ring *prev, *next;
};

/* A frame header read by the loop: pooled and reused, never freed per frame. */
struct pv_record {
    struct pv_event ev;           /* kind FRAME */
    int64_t conn_id;
    uint64_t bulk_len;
    size_t len, cap;              /* header bytes, buffer size */
    char *data;
};

enum pv_conn_state {
    PV_CONN_READING,              /* reading the next frame header */
    PV_CONN_WAIT,                 /* a frame (or a storage error) posted; waiting for a job */
    PV_CONN_JOB,                  /* a job runs on it */
};

/* An attached connection. Private to the loop from the ATTACH until the CLOSED event (or a
 * detach); Python only allocates it and frees it after taking its CLOSED event. */
struct pv_conn {
    struct pv_event ev;           /* ATTACH in the inbox, later CLOSED in the done list */
    struct pv_ring ready;         /* in e->conn_ready: readable, not served yet */
    struct pv_ring partial;       /* in e->conn_partial: a header begun; in t_begin order */
    int64_t id;
    int fd;
    int err;                      /* CLOSED: why */
    enum pv_conn_state state;
    bool armed;                   /* one-shot EPOLLIN armed and not fired yet */
    struct pv_job *job;           /* state JOB */
    unsigned char prefix[PV_PREFIX_LEN];
    size_t got;                   /* bytes of the current frame read: prefix, then header */
    struct pv_record *rec;        /* the header being read, once the prefix is complete */
    int64_t t_begin;              /* when the first byte of the current frame was read */
};

/* detach(): the Python thread waits on e->cmd_cond until the loop set done. */
struct pv_detach {
    struct pv_event ev;           /* kind DETACH */
    int64_t id;
    int fd;
    int result;                   /* 0, or -1 with err (pv_conn_detach) */
    struct pv_err err;
    bool done;
};

/* One contiguous local transfer of a job (thesis fig. 3.7). */
struct pv_access {
    int64_t kind;
    int64_t off;
    int64_t len;
};

/* Where a job is in the file system: the order is (inode, offset). */
struct pv_pos {
    uint64_t inode;
    int64_t off;
};

struct pv_job {
    struct pv_job *prev, *next;   /* engine's job list (arrival order) */
    struct pv_event ev;           /* kind JOB: in the inbox, then in the done list */
    int64_t id;
    int sock, file, op;
    int sock_flags;               /* the socket's O_ flags, restored when the job ends */
    bool registered;              /* sock is in the engine's epoll set */
    bool reg_out;                 /* registered for EPOLLOUT (else EPOLLIN) */
    struct pv_conn *conn;         /* the attached connection it runs on, or NULL */
    uint64_t inode;

    struct pv_access *acc;
    size_t nacc, cur;             /* accesses, index of the next one */
    int64_t acc_done;             /* bytes of acc[cur] already moved */
    bool zero_fill;               /* read: acc[cur] hit EOF, send zeros for the rest */

    char *prefix;                 /* reply frame sent ahead of a read's bulk */
    size_t prefix_len, prefix_done;
    char *suffix;                 /* sent after the bulk, only if all went well */
    size_t suffix_len, suffix_done;

    int err;                      /* first error; 0 while all is well */
    bool draining;                /* write: storage failed, discard the rest of the stream */

    bool ready;                   /* socket ready in the job's direction (edge-triggered) */
    uint64_t ready_seq;           /* when it last became ready: FCFS order for opt1 */
    uint64_t seq;                 /* arrival order: the last tie-breaker of every policy */

    int64_t nbytes;               /* bulk bytes moved (prefix not counted) */
    int64_t t_submit, t_start, t_done, t_last;  /* CLOCK_MONOTONIC ns; t_last: progress */

    char *map;                    /* read_mode "mmap": the mapped window of the file */
    int64_t map_off;
    size_t map_len;

    struct pv_ring sq;            /* link in the active policy's queue (e->sched_q), or in
                                   * e->express for a job that moves no file data */
    int64_t disk_until;           /* waiting for the emulated disk until then; 0: not */
    int64_t grant_off, grant_end; /* read: what its last disk miss read for it, sent even if
                                   * other jobs' misses evicted it meanwhile (see disk_limit) */

    /* Examined on the job's first turn, on the engine's thread (the daemon's trio thread
     * makes no file system call): see job_examine() in stream.c. */
    bool check;                   /* a descriptor unlinked meanwhile ends the job PV_ERR_STALE */
    bool hold;                    /* a write that succeeded: the connection awaits Python's reply */
    bool examined;
    bool stale;                   /* ended before moving a byte: the connection is in step */
    int64_t size_at;              /* read: the prefix's 8-byte slot for st_size, or -1 */
    int64_t file_end;             /* read: file bytes from here on are sent as zeros */

    /* A job the engine made itself (fast.c, conn.c): no "done" event; it ends in
     * pv_conn_own_end. A fast job holds a grant and the frame it came from. */
    bool own;
    struct pv_fast_entry *fast;   /* the grant whose descriptor it uses, or NULL */
    struct pv_record *rec;        /* the frame, posted to Python if the job goes stale */
    int64_t fast_want, fast_regions, fast_lo, fast_hi, fast_logical;   /* its record */
};

/* A job's err when its first turn found the descriptor unusable (unlinked, or fstat
 * failed): nothing moved, the connection waits for the next job. Negative: never an errno. */
#define PV_ERR_STALE (-ESTALE)

/* A job without accesses (a reply: a prefix and/or suffix, no file data) is no scheduling
 * decision: it has no position and costs no disk, so the engine serves it ahead of the
 * policy (e->express) and the policies never see it. Positioned at (inode 0, 0), it would
 * otherwise wait behind every data job under opt3/opt4 -- a zero-byte reply from the daemon
 * that holds none of a small read stalled the client's whole request. */
static inline bool pv_job_scheduled(const struct pv_job *j)
{
    return j->nacc > 0;
}

/* A job the policies may serve now: its socket is ready and it waits for no disk. */
static inline bool pv_job_runnable(const struct pv_job *j)
{
    return j->ready && j->disk_until == 0;
}

/* fast.c: requests served without Python (see fast.c). */
struct pv_fast_req {                  /* a parsed read/write header */
    int op;
    uint64_t ino;
    int64_t base, pcount, ssize;
    int64_t *regions;                 /* (offset, length) pairs */
    size_t nregions;
};

struct pv_fast_piece {                /* layout/intersect.py's (buf_off, local_off, length) */
    int64_t buf, local, len;
};

struct pv_fast_plan {                 /* a request as this daemon serves it */
    struct pv_fast_req rq;
    struct pv_fast_piece *pieces;
    size_t npieces;
    int64_t nbytes;
};

struct pv_fast_entry {                /* a grant: an inode Python opened, on a dup of its fd */
    struct pv_fast_entry *hnext;
    uint64_t ino;
    int fd, src_fd;                   /* our dup, Python's descriptor it was made from */
    bool write_ok;                    /* no size promise: writes may go by */
    bool dead;                        /* out of the table; closed by its last job */
    int64_t refs, writes;             /* jobs holding it, writes among them */
    uint64_t used;                    /* LRU clock */
};

struct pv_fast_rec {                  /* a finished fast job, for Python's statistics */
    uint64_t ino;
    int op, err;
    int64_t nbytes, want, regions, lo, hi, logical, t_submit, t_start, t_done;
};

struct pv_fast_counts {
    bool enabled;
    int64_t grants, jobs, declined, pending;
};

struct pv_fast {
    pthread_mutex_t lock;             /* everything below */
    bool enabled;
    int index, niods;                 /* this daemon's index, the file system's daemons */
    struct pv_fast_entry **buckets;
    size_t ngrants;
    uint64_t clock;
    struct pv_fast_rec *ring;
    size_t ring_head, ring_len, inflight;
    int64_t n_jobs, n_declined;
};

struct pv_engine;

/* A scheduling policy (thesis §4.2), Lustre NRS style: one const table per algorithm.
 *
 * The engine tells the policy what happens to its jobs (enqueue, update, dequeue) and asks it
 * which job to serve (peek), so a policy may keep its own queue and answer without scanning
 * every job each turn (opt1 keeps a FIFO of ready jobs); a policy without state may leave
 * the notifications out and scan the engine's job list in peek.
 *
 * Every op is called from the engine's thread only, never with e->lock held, so a policy
 * needs no locking of its own. The Python side switches policies through e->want_ops; the
 * loop then calls the old policy's so_stop and the new one's so_start between turns.
 */
struct pv_sched_ops {
    const char *so_name;
    /* Mandatory. The job to serve next, or NULL to wait for events. May return a job whose
     * socket is not ready: the loop then waits for that job (opt4). Must not change the
     * policy's state: the loop calls it before and after waiting for events. It may remember
     * its answer while e->sched_gen stays the same (opt2..opt4 do, in e->pick). */
    struct pv_job *(*so_peek)(struct pv_engine *e);
    /* Optional. A job joined the engine's job list (it is not ready yet). */
    void (*so_enqueue)(struct pv_engine *e, struct pv_job *j);
    /* Optional. A job's readiness (j->ready) or position changed: a readiness edge from
     * epoll, or a turn that ended with the job blocked. */
    void (*so_update)(struct pv_engine *e, struct pv_job *j);
    /* Optional. A job is about to leave the job list (done, failed or cancelled). */
    void (*so_dequeue)(struct pv_engine *e, struct pv_job *j);
    /* Optional. The policy becomes / stops being the active one: build its queue from the
     * job list, or drop it. so_start returns 0, or -1 with err to leave opt1 in charge. */
    int (*so_start)(struct pv_engine *e, struct pv_err *err);
    void (*so_stop)(struct pv_engine *e);
};

static inline void pv_ring_init(struct pv_ring *r) { r->prev = r->next = r; }
static inline bool pv_ring_linked(const struct pv_ring *r) { return r->next != r; }

static inline void pv_ring_add_tail(struct pv_ring *head, struct pv_ring *r)
{
    r->prev = head->prev;
    r->next = head;
    head->prev->next = r;
    head->prev = r;
}

static inline void pv_ring_del(struct pv_ring *r)
{
    r->prev->next = r->next;
    r->next->prev = r->prev;
    pv_ring_init(r);
}

extern const struct pv_sched_ops pv_sched_opt1, pv_sched_opt2, pv_sched_opt3, pv_sched_opt4;
const struct pv_sched_ops *pv_sched_find(const char *name);
extern const struct pv_sched_ops *const pv_sched_all[];

struct pv_engine_config {
    const struct pv_sched_ops *ops;
    int64_t window;
    int64_t gather_ns;
    int64_t idle_ns;
    enum pv_read_mode read_mode;
    enum pv_write_mode write_mode;
    size_t mmap_window;
    struct pv_disk *disk;         /* emulated disk, or NULL for plain files; not owned */
};

struct pv_engine {
    /* Set at creation, read-only afterwards. */
    enum pv_read_mode read_mode;
    enum pv_write_mode write_mode;
    size_t mmap_window;
    int64_t idle_ns;
    struct pv_disk *disk;         /* emulated disk or NULL; outlives the engine */
    int wake_fd;                  /* eventfd: Python side -> loop */
    int done_fd;                  /* eventfd: loop -> Python side, completions pending */
    pthread_t thread;

    /* Shared with the Python side, under lock. */
    pthread_mutex_t lock;
    struct pv_event *inbox_head, *inbox_tail; /* submitted, not yet seen by the loop */
    struct pv_event *done_head, *done_tail;   /* posted, not yet taken by events() */
    struct pv_record *rec_free;   /* records events() is done with, for the loop to reuse */
    size_t nrec_free;
    pthread_cond_t cmd_cond;      /* detach() waits here for the loop */
    const struct pv_sched_ops *want_ops;
    int64_t want_window;
    int64_t want_gather_ns;
    bool stopping;                /* close() asked; no submissions accepted */
    pthread_mutex_t join_lock;    /* serializes close() callers around pthread_join */
    bool joined;
    int fatal;                    /* errno that killed the loop, 0 if none */

    /* Counters, written by the loop, read by info() without the lock. */
    _Atomic int64_t n_queued, n_active, n_completed, bytes_read, bytes_written;
    _Atomic int64_t n_attached, n_frames;
    atomic_bool stop_req;         /* checked between chunks so close() is prompt */

    /* Private to the loop thread. */
    int epfd;
    struct pv_job *jobs_head, *jobs_tail;
    size_t njobs;
    const struct pv_sched_ops *ops;
    int64_t window;
    int64_t gather_ns;            /* opt4: how long a busy period's first job waits for others */
    size_t nsched;                /* jobs with accesses in the loop (the policy's jobs) */
    int64_t gather_until;         /* the current busy period's gathering ends here */
    bool gather_entry;            /* no turn served since that gathering ended */
    int64_t idle_since;           /* when the last busy period ended (0: never busy) */
    int64_t hold_until;           /* a policy holding back its pick asks to wake here (0: no) */
    struct pv_pos last;           /* where the engine last served */
    uint64_t seq, ready_seq;
    int64_t last_start;           /* keeps t_start strictly increasing */
    char *buf;                    /* recv buffer for pwrite and discards */
    size_t buf_len;
    int pipe_r, pipe_w;           /* write_mode "splice": socket -> pipe -> file */
    size_t pipe_size;
    struct pv_ring sched_q;       /* the active policy's queue of jobs (opt1: ready FIFO) */
    uint64_t sched_gen;           /* changes with anything a pick depends on (pv_sched_stale) */
    uint64_t pick_gen;            /* opt2..opt4: e->pick is their pick while this is sched_gen */
    struct pv_job *pick;
    struct pv_ring express;       /* runnable jobs without accesses (replies), served first */
    size_t ndisk_wait;            /* jobs waiting for the emulated disk */
    int64_t disk_next;            /* earliest disk_until among them */
    struct pv_event *out_head, *out_tail;     /* posted this turn, published at its end */
    struct pv_record *rec_cache;  /* spare records */
    struct pv_conn **conn_fd;     /* attached connections by fd */
    size_t conn_fd_len;
    struct pv_ring conn_ready, conn_partial;
    struct pv_event *own_head, *own_tail;     /* jobs the loop made, to arrive this turn */

    struct pv_fast fast;          /* its own lock; shared with the Python side */
};

/* The loop changed something a policy's pick depends on -- the job list, a job's readiness or
 * position, e->last, the window, gathering, the policy itself: a remembered pick is stale. */
static inline void pv_sched_stale(struct pv_engine *e)
{
    e->sched_gen++;
}

static inline void pv_ev_append(struct pv_event **head, struct pv_event **tail,
                                struct pv_event *ev)
{
    ev->next = NULL;
    if (*tail != NULL)
        (*tail)->next = ev;
    else
        *head = ev;
    *tail = ev;
}

/* base.c */
int64_t pv_now_ns(void);
void pv_eventfd_signal(int fd);
void pv_eventfd_drain(int fd);
/* epoll_ctl with the engine's data convention (PV_TAG_CONN); 0, or -1 with err. */
int pv_epoll_set(struct pv_engine *e, int op, int fd, uint32_t events, uintptr_t data,
                 struct pv_err *err);
/* Post an event for Python; the loop publishes the turn's events at its end. */
void pv_post(struct pv_engine *e, struct pv_event *ev);

/* job.c */
struct pv_job *pv_job_new(int64_t id, int sock, int file, int op, const void *acc,
                          size_t acc_len, const void *prefix, size_t prefix_len,
                          const void *suffix, size_t suffix_len, uint64_t inode,
                          struct pv_err *err);
void pv_job_free(struct pv_job *j);
void pv_job_unmap(struct pv_job *j);
bool pv_job_idle(const struct pv_job *j);
bool pv_job_wants_out(const struct pv_job *j);
bool pv_job_in_step(const struct pv_job *j);
struct pv_pos pv_job_pos(const struct pv_job *j);

/* stream.c: serve a job until it would block (the result), recording a failure in j->err. */
enum pv_serve { PV_SERVE_DONE, PV_SERVE_BLOCKED, PV_SERVE_DISK, PV_SERVE_YIELD };
enum pv_serve pv_serve_job(struct pv_engine *e, struct pv_job *j, bool *progress);

/* fastwire.c */
int pv_fast_parse(const void *hdr, size_t len, struct pv_fast_req *rq);   /* 0, or -1: not ours */
void pv_fast_req_free(struct pv_fast_req *rq);
#define PV_FAST_REPLY_MAX 256
size_t pv_fast_read_ack(unsigned char *p, uint64_t nbytes, int64_t *size_at);
size_t pv_fast_write_reply(unsigned char *p, uint64_t nbytes);
size_t pv_fast_error_reply(unsigned char *p, int err);

/* fast.c */
int pv_fast_plan(const void *hdr, size_t len, uint64_t bulk_len, int index, int niods,
                 struct pv_fast_plan *pl);
void pv_fast_plan_free(struct pv_fast_plan *pl);
int pv_fast_init(struct pv_fast *f, struct pv_err *err);
void pv_fast_fini(struct pv_fast *f);
void pv_fast_set(struct pv_fast *f, bool enabled, int index, int niods);
int pv_fast_grant(struct pv_fast *f, uint64_t ino, int fd, bool write, struct pv_err *err);
void pv_fast_revoke(struct pv_fast *f, uint64_t ino);
int64_t pv_fast_block_writes(struct pv_fast *f, uint64_t ino);
struct pv_job *pv_fast_take(struct pv_fast *f, int sock, const void *hdr, size_t len,
                            uint64_t bulk_len);
bool pv_fast_end(struct pv_fast *f, const struct pv_job *j);
size_t pv_fast_records(struct pv_fast *f, struct pv_fast_rec *out, size_t max);
void pv_fast_counts(struct pv_fast *f, struct pv_fast_counts *c);

/* conn.c */
void pv_conn_own_end(struct pv_engine *e, struct pv_job *j);
void pv_conn_own_drop(struct pv_engine *e);
void pv_conn_attach(struct pv_engine *e, struct pv_conn *c);
int pv_conn_detach(struct pv_engine *e, int64_t id, int fd, struct pv_err *err);
void pv_conn_mark(struct pv_engine *e, struct pv_conn *c);
void pv_conn_serve(struct pv_engine *e);
bool pv_conn_pending(const struct pv_engine *e);
int64_t pv_conn_deadline(const struct pv_engine *e);
void pv_conn_expire(struct pv_engine *e, int64_t now);
int pv_conn_bind(struct pv_engine *e, struct pv_job *j, struct pv_err *err);
void pv_conn_job_end(struct pv_engine *e, struct pv_job *j);
void pv_conn_close_all(struct pv_engine *e, int code);
void pv_conn_init(struct pv_engine *e);
void pv_conn_fini(struct pv_engine *e);
void pv_records_release(struct pv_engine *e, struct pv_record *list);
void pv_event_free(struct pv_event *ev);

/* engine.c */
void *pv_engine_main(void *arg);     /* the loop thread's body */

/* lifecycle.c */
struct pv_engine *pv_engine_create(const struct pv_engine_config *cfg, struct pv_err *err);
void pv_engine_stop(struct pv_engine *e);
void pv_engine_destroy(struct pv_engine *e);

/* handoff.c */
int pv_engine_submit(struct pv_engine *e, struct pv_job *j, struct pv_err *err);
int pv_engine_attach(struct pv_engine *e, int64_t id, int fd, struct pv_err *err);
int pv_engine_detach(struct pv_engine *e, int64_t id, int fd, struct pv_err *err);
int pv_engine_set_algorithm(struct pv_engine *e, const struct pv_sched_ops *ops,
                            struct pv_err *err);
int pv_engine_set_window(struct pv_engine *e, int64_t window, struct pv_err *err);
int pv_engine_set_gather(struct pv_engine *e, int64_t gather_ns, struct pv_err *err);
struct pv_event *pv_engine_take_completions(struct pv_engine *e);
struct pv_event *pv_engine_take_events(struct pv_engine *e);

#endif
