/* native.h -- shared declarations of the pvfs._native extension.
 *
 * Two halves live in this extension:
 *   - the I/O daemon's engine: engine.c (the service thread and its loop), sched.c (the
 *     scheduling policies, one const ops table each) and stream.c (moving a job's bytes:
 *     sendfile or mmap+send for reads, recv+pwrite or splice for writes);
 *   - the client's scatter/gather, transfer.c.
 * module.c holds the Python bindings. Nothing declared here touches a Python object, so the
 * engine's thread never needs the GIL.
 */
#ifndef PVFS_NATIVE_H
#define PVFS_NATIVE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PV_ERR_LEN 256

enum { PV_OP_READ = 0, PV_OP_WRITE = 1 };
enum { PV_ACC_FILE = 0, PV_ACC_ZERO = 1, PV_ACC_DISCARD = 2 };

enum pv_read_mode { PV_READ_SENDFILE = 0, PV_READ_MMAP = 1 };
enum pv_write_mode { PV_WRITE_PWRITE = 0, PV_WRITE_SPLICE = 1 };

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
    struct pv_job *prev, *next;   /* engine's job list (arrival order), inbox or done list */
    int64_t id;
    int sock, file, op;
    int sock_flags;               /* the socket's O_ flags, restored when the job ends */
    bool registered;              /* sock is in the engine's epoll set */
    uint64_t inode;

    struct pv_access *acc;
    size_t nacc, cur;             /* accesses, index of the next one */
    int64_t acc_done;             /* bytes of acc[cur] already moved */
    bool zero_fill;               /* read: acc[cur] hit EOF, send zeros for the rest */

    char *prefix;                 /* reply frame sent ahead of a read's bulk */
    size_t prefix_len, prefix_done;

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

    void *sched_data;             /* private to the active policy */
};

struct pv_engine;

/* A scheduling policy (thesis §4.2), Lustre NRS style: one const table per algorithm.
 *
 * Every op is called from the engine's thread only, never with e->lock held, so a policy
 * needs no locking of its own; it reads the engine's job list, e->last and e->window.
 */
struct pv_sched_ops {
    const char *so_name;
    /* Mandatory. The job to serve next, or NULL to wait for events. May return a job whose
     * socket is not ready: the loop then waits for that job (opt4). Called again after every
     * turn and every batch of events, so a newly arrived job is always considered. With
     * peek set the policy must not change any state of its own. */
    struct pv_job *(*so_select)(struct pv_engine *e, bool peek);
    /* Optional. A job arrived / is about to leave (done, failed or cancelled). */
    void (*so_job_add)(struct pv_engine *e, struct pv_job *j);
    void (*so_job_del)(struct pv_engine *e, struct pv_job *j);
    /* Optional. The policy becomes / stops being the active one (run-time switch). */
    int (*so_start)(struct pv_engine *e);
    void (*so_stop)(struct pv_engine *e);
};

extern const struct pv_sched_ops pv_sched_opt1, pv_sched_opt2, pv_sched_opt3, pv_sched_opt4;
const struct pv_sched_ops *pv_sched_find(const char *name);
extern const struct pv_sched_ops *const pv_sched_all[];

struct pv_engine_config {
    const struct pv_sched_ops *ops;
    int64_t window;
    int64_t idle_ns;
    enum pv_read_mode read_mode;
    enum pv_write_mode write_mode;
    size_t mmap_window;
};

struct pv_engine {
    /* Set at creation, read-only afterwards. */
    enum pv_read_mode read_mode;
    enum pv_write_mode write_mode;
    size_t mmap_window;
    int64_t idle_ns;
    int wake_fd;                  /* eventfd: Python side -> loop */
    int done_fd;                  /* eventfd: loop -> Python side, completions pending */
    pthread_t thread;

    /* Shared with the Python side, under lock. */
    pthread_mutex_t lock;
    struct pv_job *inbox_head, *inbox_tail;   /* submitted, not yet seen by the loop */
    struct pv_job *done_head, *done_tail;     /* finished, not yet taken by completions() */
    const struct pv_sched_ops *want_ops;
    int64_t want_window;
    bool stopping;                /* close() asked; no submissions accepted */
    pthread_mutex_t join_lock;    /* serializes close() callers around pthread_join */
    bool joined;
    int fatal;                    /* errno that killed the loop, 0 if none */

    /* Counters, written by the loop, read by info() without the lock. */
    _Atomic int64_t n_queued, n_active, n_completed, bytes_read, bytes_written;
    atomic_bool stop_req;         /* checked between chunks so close() is prompt */

    /* Private to the loop thread. */
    int epfd;
    struct pv_job *jobs_head, *jobs_tail;
    size_t njobs;
    const struct pv_sched_ops *ops;
    int64_t window;
    struct pv_pos last;           /* where the engine last served */
    uint64_t seq, ready_seq;
    int64_t last_start;           /* keeps t_start strictly increasing */
    char *buf;                    /* recv buffer for pwrite and discards */
    size_t buf_len;
    int pipe_r, pipe_w;           /* write_mode "splice": socket -> pipe -> file */
    size_t pipe_size;
    void *sched_data;             /* private to the active policy */
};

/* engine.c */
struct pv_engine *pv_engine_create(const struct pv_engine_config *cfg, char *err);
int pv_engine_submit(struct pv_engine *e, struct pv_job *j, char *err);
void pv_engine_stop(struct pv_engine *e);
void pv_engine_destroy(struct pv_engine *e);
int pv_engine_set_algorithm(struct pv_engine *e, const struct pv_sched_ops *ops, char *err);
int pv_engine_set_window(struct pv_engine *e, int64_t window, char *err);
struct pv_job *pv_engine_take_completions(struct pv_engine *e);
int64_t pv_now_ns(void);

/* stream.c */
enum pv_serve { PV_SERVE_DONE, PV_SERVE_BLOCKED, PV_SERVE_YIELD };
struct pv_job *pv_job_new(int64_t id, int sock, int file, int op, const void *acc,
                          size_t acc_len, const void *prefix, size_t prefix_len,
                          uint64_t inode, char *err);
void pv_job_free(struct pv_job *j);
bool pv_job_idle(const struct pv_job *j);
struct pv_pos pv_job_pos(const struct pv_job *j);
enum pv_serve pv_serve_job(struct pv_engine *e, struct pv_job *j, bool *progress);
void pv_job_unmap(struct pv_job *j);

#endif
