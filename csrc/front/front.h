/* front.h -- pvfs._fusefront: the mount's libfuse3 low-level front end.
 *
 * Units, in calling order (each calls only the ones before it):
 *   answers.c  what the workers answer from state Python keeps there: leased directories'
 *              and files' attributes (getattr), the session's end, the security.capability
 *              probes Python knows absent; the u64 sets
 *   names.c    leased directories' names: "no such name" answered by the workers, and a
 *              name whose inode's attributes answers.c keeps
 *   writes.c   what they answer about this node's writes to open files: the handles whose
 *              flush needs nothing, the files whose close a write delegation keeps, the
 *              writes answered once queued (behind)
 *   serve.c    reads answered from the block cache's arena: the blocks Python published,
 *              the writes and size changes in flight that stop them
 *   streams.c  stream-sized reads the workers answer from the I/O daemons themselves, on
 *              connections Python opened, of files Python marked (serve.c's rule)
 *   warm.c     the arena's pages faulted in ahead of the cache's use, on a thread of their own
 *   bridge.c   requests as C records, the queue handed to Python (a mutex, an eventfd that
 *              wakes the mount's trio loop), the forgets answered in C, the in-flight list,
 *              the records of requests the workers answer themselves (creates.c, unlinks.c)
 *   creates.c  creates answered by the workers in directories the mount creates ahead in,
 *              from numbers Python lends; each handed to Python as a record it applies
 *   unlinks.c  unlinks answered by the workers there, of files Python marked closed and
 *              clean; each handed to Python as a record it applies
 *   ops.c      the ops table: each request of the kernel answered in C (forgets, and what
 *              answers.c, names.c, writes.c, creates.c and unlinks.c can answer) or copied into
 *              a record and queued
 *   session.c  the libfuse3 session: the ops table run by fuse_session_loop_mt on C worker
 *              threads (clone_fd); mounting, the loop thread, unmounting, the kernel
 *              notifications
 * then the Python bindings (pyfront.h declares what they share):
 *   convert.c    pyfuse3's attribute objects as libfuse's structs (and back, for tests)
 *   pyrequest.c  the Request and DirBuf types; a drained record made a Request
 *   replies.c    the reply_* functions and readdir_reply: each answers a Request once
 *   pyanswers.c  Session methods keeping answers.c's and names.c's state (and test hooks)
 *   pywrites.c   Session methods keeping writes.c's state (and test hooks)
 *   pycreates.c  Session methods keeping creates.c's and unlinks.c's state (and test hooks)
 *   pyserve.c    Session methods keeping serve.c's state: the arena, publications (and hooks)
 *   pystreams.c  Session methods keeping streams.c's state: connections, marks (and hooks)
 *   pyinject.c   the test bridge's _inject: fake requests queued from a C thread
 *   pysession.c  the Session type: mount, drain, notifications, close, the test bridge
 *   module.c     the module: its state, the types and functions above, the constants
 *
 * Threads: libfuse's workers run the ops table and never touch Python; everything else runs
 * on the Python thread holding the GIL. What both sides touch (the queue, the forgets, the
 * loop's end, the count of notifications in progress) is in struct pvf_front under its lock.
 * All the mutable state of one mount is that struct: no globals.
 */
#ifndef PVFS_FRONT_H
#define PVFS_FRONT_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

/* The operations forwarded to Python (values are the Python module's OP_* constants). */
enum pvf_op {
    PVF_LOOKUP = 1,
    PVF_GETATTR,
    PVF_SETATTR,
    PVF_READLINK,
    PVF_MKNOD,
    PVF_MKDIR,
    PVF_UNLINK,
    PVF_RMDIR,
    PVF_SYMLINK,
    PVF_RENAME,
    PVF_LINK,
    PVF_OPEN,
    PVF_READ,
    PVF_WRITE,
    PVF_FLUSH,
    PVF_RELEASE,
    PVF_FSYNC,
    PVF_OPENDIR,
    PVF_READDIRPLUS,
    PVF_RELEASEDIR,
    PVF_FSYNCDIR,
    PVF_STATFS,
    PVF_SETXATTR,
    PVF_GETXATTR,
    PVF_LISTXATTR,
    PVF_REMOVEXATTR,
    PVF_ACCESS,
    PVF_CREATE,
    PVF_CREATED,    /* a create answered by a worker (creates.c): applied, never replied */
    PVF_UNLINKED,   /* an unlink answered by a worker (unlinks.c): applied, never replied */
    PVF_WROTE,      /* a write answered by a worker (writes.c, `behind`): applied, never replied */
    PVF_NOPS
};

/* setattr's fields, normalized: *_NOW folded into ATIME/MTIME with the time filled in. */
#define PVF_SET_MODE 1u
#define PVF_SET_UID 2u
#define PVF_SET_GID 4u
#define PVF_SET_SIZE 8u
#define PVF_SET_ATIME 16u
#define PVF_SET_MTIME 32u
#define PVF_SET_CTIME 64u

/* One request as the worker thread copied it: one allocation, names and data after it. */
struct pvf_req {
    struct pvf_req *next, *prev;    /* the queue (next only), then the in-flight list */
    fuse_req_t fr;                  /* NULL once answered */
    int op;                         /* enum pvf_op */
    uid_t uid;
    gid_t gid;
    pid_t pid;
    mode_t umask;
    uint64_t ino;                   /* the inode, or the parent of a name */
    uint64_t ino2;                  /* rename's new parent, link's new parent */
    uint64_t fh;
    int has_fh;                     /* getattr/setattr: fh only with a handle */
    int64_t off;
    uint64_t size;
    uint32_t mode;
    uint32_t flags;                 /* open flags, rename flags, setattr PVF_SET_*, access
                                     * mask, xattr flags, fsync's datasync */
    uint64_t rdev;
    uint32_t uid_set, gid_set;      /* setattr */
    int64_t size_set, atime_ns, mtime_ns;
    const char *name, *name2;       /* NUL-terminated, inside the allocation */
    const char *data;               /* write's bytes, setxattr's value */
    size_t len;
    char *owned;                    /* a write's bytes, allocated apart from the record: the
                                     * Python side takes them without a copy (pyrequest.c) */
    int counted;                    /* a write or size change counted in `mods` (serve.c) */
    char tail[];
};

/* Test hooks and counters, read by Session.stats(). */
struct pvf_counters {
    uint64_t queued;         /* requests handed to Python */
    uint64_t forgets;        /* forget entries answered in C */
    uint64_t wakeups;        /* eventfd writes */
    uint64_t reply_failures; /* fuse_reply_* that failed (interrupted, unmounted) */
    uint64_t unanswered;     /* requests Python dropped unanswered: answered EIO */
    uint64_t enomem;         /* requests refused for want of memory */
    uint64_t quiet_flushes;  /* flushes of quiet handles answered in C */
    uint64_t kept_flushes;   /* flushes of files kept by delegation answered in C */
    uint64_t attrs_here;     /* getattrs of leased directories answered in C */
    uint64_t file_attrs_here; /* getattrs of leased files answered in C */
    uint64_t missing_here;   /* lookups answered ENOENT in C (names.c) */
    uint64_t found_here;     /* lookups answered with an entry in C (names.c) */
    uint64_t created_here;   /* creates answered in C (creates.c) */
    uint64_t created_mismatch; /* directories' attributes C and Python made differently */
    uint64_t unlinked_here;  /* unlinks answered in C (unlinks.c) */
    uint64_t wrote_here;     /* writes answered in C, applied by Python after (writes.c) */
    uint64_t behind_full;    /* writes of a marked handle sent the slow way: bound reached */
    uint64_t caps_here;      /* security.capability probes answered ENODATA in C */
    uint64_t reads_here;     /* reads answered from the arena in C (serve.c) */
    uint64_t read_bytes_here;
    uint64_t published;      /* publications of cached blocks Python made ... */
    uint64_t publish_refused; /* ... and those refused: a change of the file in flight */
    uint64_t streams_here;   /* stream-sized reads answered from the daemons in C ... */
    uint64_t stream_bytes_here;
    uint64_t stream_failed;  /* ... and those whose exchange failed: sent to Python */
    uint64_t stream_no_conn; /* ... or that found no connection to a daemon free */
};

#define PVF_NAME_MAX 255     /* longer names go to Python (the manager's ENAMETOOLONG) */

struct pvf_dirnames;         /* names.c */

/* A set of u64 keys (answers.c): open addressing, 0 is an empty slot. Under the lock. */
struct pvf_fhset {
    uint64_t *slots;
    size_t cap, n;
};

/* A leased directory's attributes as the kernel gets them (answers.c). */
struct pvf_dirattr {
    uint64_t ino;                   /* 0: an empty slot */
    unsigned pending;               /* creates, unlinks made here Python has not applied */
    struct stat st;
};

/* Inodes known to have no security.capability until a CLOCK_MONOTONIC time (answers.c). */
struct pvf_capslot {
    uint64_t ino;                   /* 0: an empty slot */
    double until;
};

struct pvf_caps {
    struct pvf_capslot *slots;
    size_t cap, n;
};

struct pvf_dirattrs {
    struct pvf_dirattr *slots;
    size_t cap, n;
};

/* u64 -> u64, open addressing, 0 is an empty key (serve.c). Under the lock. */
struct pvf_u64map {
    uint64_t *keys, *vals;
    size_t cap, n;
};

/* A file's stripe as the workers read it from the I/O daemons (streams.c). */
struct pvf_stripe {
    uint64_t ssize;
    size_t pcount;
    unsigned char *head;            /* a read's msgpack header up to its "desc" value */
    size_t hlen;
    unsigned iods[];                /* per share rank: the I/O daemon holding it */
};

/* A file whose published blocks the workers answer reads from (serve.c), and whose
 * stream-sized reads they answer from the daemons when Python marked it (streams.c). */
struct pvf_served {
    uint64_t ino;
    uint64_t size;                  /* reads ending past it go to Python */
    unsigned pins;                  /* workers replying from its blocks now */
    int live;                       /* 0: a worker queued a change: nothing answered */
    struct pvf_u64map blocks;       /* block + 1 -> its bytes in the arena */
    struct pvf_stripe *stripe;      /* not NULL: marked for stream reads (streams.c) */
};

/* Idle connections to one I/O daemon the workers read on (streams.c). */
struct pvf_conns {
    int *fds;
    size_t n, cap;
};

/* A stream read a worker fetched: its bytes, and the file pinned until they are sent. */
struct pvf_fetched {
    char *buf;
    size_t n;
    struct pvf_served *pin;
};

#define PVF_SERVE_IOV 264            /* blocks of one read answered here, at most (1 MiB
                                      * of 4 KiB blocks, unaligned) */

/* The arena's pages faulted in ahead of use (warm.c): [0, done) is, [done, want) is asked. */
struct pvf_warm {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    pthread_t thread;
    char *base;
    size_t len, done, want;
    int started, stop, failed;   /* failed: the errno that ended it */
};

struct pvf_front {
    struct fuse_session *se;        /* NULL in a bridge made for tests */
    pthread_mutex_t lock;
    pthread_cond_t idle;            /* notifying dropped to 0 */
    /* under lock */
    struct pvf_req *head, *tail;    /* queued, not yet drained */
    uint64_t *forgets;              /* (ino, nlookup) pairs answered in C, for Python */
    size_t nforgets, capforgets;
    int loop_done;                  /* the loop thread returned */
    int loop_result;
    int closing;                    /* no new notifications */
    int notifying;                  /* notifications in progress */
    struct pvf_counters c;
    struct pvf_fhset quiet;         /* fh + 1 of read-only handles: flush needs nothing */
    struct pvf_fhset quiet_rw;      /* fh + 1 of writable ones: nothing if none written */
    struct pvf_fhset written;       /* inodes a write or truncation named (until forgotten) */
    struct pvf_fhset kept;          /* inodes held by delegation, their close kept (Python) */
    struct pvf_fhset behind;        /* fh + 1 of handles whose writes are answered here */
    uint64_t behind_bytes;          /* bytes of writes answered here, not yet applied */
    uint64_t behind_max;            /* the bound on behind_bytes (0: none answered here) */
    uint64_t behind_taken;          /* writes answered here so far ... */
    uint64_t behind_done;           /* ... and applied by Python (`idle` broadcast at each) */
    struct pvf_fhset behind_inos;   /* inodes of those not applied (emptied when all are) */
    struct pvf_caps caps;           /* security.capability known absent (ProbedCache) */
    struct pvf_dirattrs dirs;       /* leased directories' attributes */
    double lease_until;             /* CLOCK_MONOTONIC end of the lease session (0: none) */
    double attr_floor;              /* the mount's attr_timeout */
    struct pvf_dirnames **names;    /* leased directories' names, by inode (names.c) */
    size_t names_cap, names_n;
    struct pvf_fhset create_dirs;   /* directories the workers create in (creates.c) */
    uint64_t *numbers;              /* inode numbers lent for those creates */
    size_t nnumbers, capnumbers;
    uint64_t next_fh;               /* the next handle of a file created here */
    double entry_floor;             /* the mount's entry_timeout */
    double caps_new_ttl;            /* a file made here: no capability for this long (0: ask) */
    int create_behind;              /* a writable handle made here: its writes answered here */
    struct pvf_fhset unlinkable;    /* files closed and clean, Python says (unlinks.c) */
    struct pvf_fhset releasing;     /* files whose release is on its way to Python */
    const char *arena;              /* the block cache's buffers (serve.c; NULL: none) */
    size_t arena_len, block_size;
    size_t serve_max;               /* reads this large at most answered here (0: none) */
    struct pvf_u64map served;       /* ino -> struct pvf_served * */
    struct pvf_u64map mods;         /* ino -> writes and size changes queued, unanswered */
    struct pvf_fhset served_recent; /* inodes read here since Python last asked */
    struct pvf_warm warm;           /* the arena's pages faulted in ahead (warm.c) */
    struct pvf_conns *conns;        /* per I/O daemon: connections for stream reads */
    size_t nconns;
    size_t stream_min;              /* stream reads: this large at least (0: none here) */
    double stream_timeout;          /* seconds for one stream read's exchange */
    /* only on the Python thread (with the GIL) */
    struct pvf_req inflight;        /* sentinel: drained, not yet answered */
    int efd;                        /* eventfd: Python waits for it to be readable */
    pthread_t thread;
    int thread_started;
    int abandoned;                  /* the loop did not return after the unmount (session.c) */
    int mounted;
    unsigned max_threads;
    unsigned want_writeback, want_export, want_acl;
    unsigned max_write;
};

/* answers.c */
int pvf_set_add(struct pvf_fhset *s, uint64_t key);                /* -1: ENOMEM */
int pvf_set_has(struct pvf_fhset *s, uint64_t key, int remove);    /* 1: it was there */
void pvf_set_clear(struct pvf_fhset *s);
void pvf_set_free(struct pvf_fhset *s);
int pvf_dir_keep(struct pvf_front *f, uint64_t ino, const struct stat *st);  /* -1, errno */
void pvf_dir_drop(struct pvf_front *f, uint64_t ino);
void pvf_dir_drop_locked(struct pvf_front *f, uint64_t ino);
void pvf_dir_drop_all(struct pvf_front *f);
void pvf_dir_free(struct pvf_front *f);
void pvf_lease_until(struct pvf_front *f, double until, double floor);
double pvf_lease_left(const struct pvf_front *f);                  /* under the lock */
int pvf_dir_answer(struct pvf_front *f, uint64_t ino, struct stat *st, double *timeout);
struct pvf_dirattr *pvf_dir_slot_locked(struct pvf_front *f, uint64_t ino);
int pvf_caps_none(struct pvf_front *f, uint64_t ino, double until);  /* -1: ENOMEM */
void pvf_caps_drop(struct pvf_front *f, uint64_t ino);
int pvf_caps_answer(struct pvf_front *f, uint64_t ino);             /* 1: ENODATA here */
void pvf_caps_free(struct pvf_front *f);

/* names.c */
int pvf_names_dir(struct pvf_front *f, uint64_t parent, int complete);  /* -1 with errno */
void pvf_names_put(struct pvf_front *f, uint64_t parent, const char *name, size_t len,
                   uint64_t ino);
void pvf_names_pop(struct pvf_front *f, uint64_t parent, const char *name, size_t len);
void pvf_names_complete(struct pvf_front *f, uint64_t parent, int complete);
void pvf_names_forget(struct pvf_front *f, uint64_t parent);
void pvf_names_forget_all(struct pvf_front *f);
void pvf_names_free(struct pvf_front *f);
int pvf_names_missing(struct pvf_front *f, uint64_t parent, const char *name);  /* 1: ENOENT */
int pvf_names_found(struct pvf_front *f, uint64_t parent, const char *name,
                    struct fuse_entry_param *e);                    /* 1: e is the answer */
int pvf_names_can_make_locked(struct pvf_front *f, uint64_t parent, const char *name,
                              size_t len, size_t *entries);
int pvf_names_put_locked(struct pvf_front *f, uint64_t parent, const char *name, size_t len,
                         uint64_t ino);
int pvf_names_get_locked(struct pvf_front *f, uint64_t parent, const char *name, size_t len,
                         uint64_t *ino, size_t *entries);

/* writes.c */
int pvf_quiet_add(struct pvf_front *f, uint64_t fh, int writable);  /* -1 with errno */
int pvf_quiet_has(struct pvf_front *f, uint64_t fh, int remove);    /* 1: it was there */
int pvf_flush_here(struct pvf_front *f, uint64_t fh, uint64_t ino); /* 1: answer it */
void pvf_written(struct pvf_front *f, uint64_t ino);
void pvf_unwritten(struct pvf_front *f, uint64_t ino);
int pvf_kept_mark(struct pvf_front *f, uint64_t ino);               /* -1: ENOMEM */
void pvf_kept_unmark(struct pvf_front *f, uint64_t ino);
void pvf_kept_clear(struct pvf_front *f);
int pvf_behind_add(struct pvf_front *f, uint64_t fh);               /* -1 with errno */
int pvf_behind_has(struct pvf_front *f, uint64_t fh, int remove);   /* 1: it was there */
int pvf_behind_take(struct pvf_front *f, uint64_t fh, uint64_t ino, size_t len); /* 1: here */
int pvf_behind_pending_locked(struct pvf_front *f, uint64_t ino);  /* a write not applied */
void pvf_behind_applied(struct pvf_front *f, uint64_t bytes);

/* warm.c */
int pvf_warm_start(struct pvf_warm *w, char *base, size_t len);    /* -1 with errno */
void pvf_warm_to(struct pvf_warm *w, size_t upto);
size_t pvf_warm_done(struct pvf_warm *w, int *failed);
void pvf_warm_stop(struct pvf_warm *w);

/* serve.c */
int pvf_serve_setup(struct pvf_front *f, const char *arena, size_t len, size_t block_size,
                    size_t max_read);                               /* -1 with errno */
int pvf_serve_in_arena(const struct pvf_front *f, const char *ptr);
void pvf_serve_stop_locked(struct pvf_front *f, uint64_t ino);
int pvf_serve_publish(struct pvf_front *f, uint64_t ino, uint64_t size, uint64_t first,
                      size_t n, const char *const *ptrs);          /* 1, 0 refused, -1 */
void pvf_serve_drop(struct pvf_front *f, uint64_t ino);
int pvf_serve_take(struct pvf_front *f, uint64_t ino, uint64_t off, size_t size,
                   struct iovec *iov, int *niov, struct pvf_served **pin);  /* 1: here */
void pvf_serve_unpin(struct pvf_front *f, struct pvf_served *s);
uint64_t *pvf_serve_recent(struct pvf_front *f, size_t *n);
void pvf_mods_begin(struct pvf_front *f, uint64_t ino);
void pvf_mods_end(struct pvf_front *f, uint64_t ino);
void pvf_serve_free(struct pvf_front *f);
struct pvf_served *pvf_served_open_locked(struct pvf_front *f, uint64_t ino);
struct pvf_served *pvf_served_live_locked(struct pvf_front *f, uint64_t ino);

/* streams.c */
int pvf_stream_setup(struct pvf_front *f, size_t niods, size_t min_read, double timeout);
int pvf_stream_give(struct pvf_front *f, size_t iod, int fd);      /* -1 with errno */
size_t pvf_stream_conns(struct pvf_front *f, size_t iod);
int pvf_stream_mark(struct pvf_front *f, uint64_t ino, uint64_t size, uint64_t ssize,
                    const unsigned *iods, size_t pcount, const void *head, size_t hlen);
int pvf_stream_fetch(struct pvf_front *f, uint64_t ino, uint64_t off, size_t size,
                     struct pvf_fetched *out);                      /* 1: fetched here */
void pvf_stream_done(struct pvf_front *f, struct pvf_fetched *got);
void pvf_stream_free(struct pvf_front *f);

/* bridge.c */
int pvf_bridge_init(struct pvf_front *f);            /* -1 with errno */
void pvf_bridge_fini(struct pvf_front *f);
struct pvf_req *pvf_req_new(fuse_req_t fr, int op, size_t tail);
void pvf_req_free(struct pvf_req *r);
char *pvf_req_put(struct pvf_req *r, size_t *at, const char *src, size_t n);
void pvf_enqueue(struct pvf_front *f, struct pvf_req *r);
void pvf_enqueue_locked(struct pvf_front *f, struct pvf_req *r);
int pvf_queue_answered(struct pvf_front *f, fuse_req_t fr, int op, uid_t uid, gid_t gid,
                       uint64_t parent, const char *name, size_t len,
                       int (*take)(struct pvf_front *f, struct pvf_req *r, size_t len,
                                   void *arg),
                       void *arg);                                  /* 1: queued */
void pvf_forget(struct pvf_front *f, uint64_t ino, uint64_t nlookup);
void pvf_loop_ended(struct pvf_front *f, int result);
void pvf_drain_wakeup(struct pvf_front *f);
struct pvf_req *pvf_take_all(struct pvf_front *f, uint64_t **forgets, size_t *nforgets);
void pvf_inflight_add(struct pvf_front *f, struct pvf_req *r);
fuse_req_t pvf_inflight_take(struct pvf_front *f, struct pvf_req *r);
void pvf_counted_reply(struct pvf_front *f, int ret);
int pvf_notify_begin(struct pvf_front *f);
void pvf_notify_end(struct pvf_front *f);
void pvf_close_wait_notifiers(struct pvf_front *f);

/* creates.c */
off_t pvf_dir_size(size_t entries);
int pvf_plain_name(const char *name, size_t len);
void pvf_create_settings(struct pvf_front *f, double entry_floor, uint64_t first_fh,
                         double caps_ttl, int behind);
int pvf_create_dir(struct pvf_front *f, uint64_t parent, int on);  /* -1: ENOMEM */
void pvf_create_dirs_off(struct pvf_front *f);
int pvf_numbers_lend(struct pvf_front *f, const uint64_t *inos, size_t n);  /* -1: ENOMEM */
uint64_t *pvf_numbers_take(struct pvf_front *f, size_t *n);
size_t pvf_numbers_left(struct pvf_front *f);
void pvf_numbers_free(struct pvf_front *f);
int pvf_create_try(struct pvf_front *f, fuse_req_t fr, uid_t uid, gid_t gid, uint64_t parent,
                   const char *name, mode_t mode, int flags, struct fuse_entry_param *e,
                   uint64_t *fh);                                   /* 1: made */
int pvf_create_here(struct pvf_front *f, fuse_req_t fr, uint64_t parent, const char *name,
                    mode_t mode, const struct fuse_file_info *fi);   /* 1: answered */
void pvf_created_done(struct pvf_front *f, uint64_t parent, const struct stat *st);

/* unlinks.c */
void pvf_releasing(struct pvf_front *f, uint64_t ino);
void pvf_unlinkable_drop(struct pvf_front *f, uint64_t ino);
int pvf_release_done(struct pvf_front *f, uint64_t ino, int closed_clean);  /* 1: marked */
void pvf_unlinks_free(struct pvf_front *f);
int pvf_unlink_try(struct pvf_front *f, fuse_req_t fr, uid_t uid, gid_t gid, uint64_t parent,
                   const char *name);                               /* 1: made */
int pvf_unlink_here(struct pvf_front *f, fuse_req_t fr, uint64_t parent, const char *name);

/* ops.c */
extern const struct fuse_lowlevel_ops pvf_ops;

/* session.c */
int pvf_session_new(struct pvf_front *f, int argc, char **argv);   /* -1: bad options */
int pvf_session_mount(struct pvf_front *f, const char *mountpoint); /* -1 with errno */
int pvf_session_start(struct pvf_front *f);                         /* -1 with errno */
void pvf_session_stop(struct pvf_front *f);                         /* unmount and join */
void pvf_session_destroy(struct pvf_front *f);
int pvf_notify_inval_inode(struct pvf_front *f, uint64_t ino, int attr_only);
int pvf_notify_inval_entry(struct pvf_front *f, uint64_t parent, const char *name, size_t n);

#endif
