/* session.c -- the libfuse3 low-level session of a mount.
 *
 * fuse_session_loop_mt runs on a thread of its own with C worker threads (clone_fd: each
 * worker reads its own copy of /dev/fuse); the workers run the ops table of ops.c. Here: the
 * session made with that table, mounting, the loop thread, unmounting, and the kernel
 * notifications Python sends.
 */
#define _GNU_SOURCE  /* pthread_timedjoin_np */
#include "front.h"

#include <errno.h>
#include <signal.h>
#include <time.h>

int pvf_session_new(struct pvf_front *f, int argc, char **argv)
{
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);

    f->se = fuse_session_new(&args, &pvf_ops, sizeof(pvf_ops), f);
    fuse_opt_free_args(&args);
    return f->se == NULL ? -1 : 0;
}

int pvf_session_mount(struct pvf_front *f, const char *mountpoint)
{
    if (fuse_session_mount(f->se, mountpoint) != 0) {
        errno = EIO;   /* libfuse has printed why to stderr */
        return -1;
    }
    f->mounted = 1;
    return 0;
}

static void *loop_main(void *arg)
{
    struct pvf_front *f = arg;
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    int ret;

    if (cfg == NULL) {
        pvf_loop_ended(f, -ENOMEM);
        return NULL;
    }
    fuse_loop_cfg_set_clone_fd(cfg, 1);
    fuse_loop_cfg_set_max_threads(cfg, f->max_threads);
    /* Idle workers stay: making a thread per burst costs more than it saves. */
    fuse_loop_cfg_set_idle_threads(cfg, f->max_threads);
    ret = fuse_session_loop_mt(f->se, cfg);
    fuse_loop_cfg_destroy(cfg);
    pvf_loop_ended(f, ret);
    return NULL;
}

int pvf_session_start(struct pvf_front *f)
{
    sigset_t all, old;
    int err;

    /* Signals belong to the Python thread: the loop and its workers block them all. */
    sigfillset(&all);
    err = pthread_sigmask(SIG_BLOCK, &all, &old);
    if (err == 0) {
        err = pthread_create(&f->thread, NULL, loop_main, f);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (err != 0) {
        errno = err;
        return -1;
    }
    f->thread_started = 1;
    return 0;
}

/* How long the loop may take to return after the unmount. A detached unmount with files
 * still open on it (a program holding a descriptor when the mount is told to end) keeps the
 * kernel's connection: the workers' reads then never fail, and a join would wait for the
 * last descriptor, which the program may hold until the mount process exits. */
#define PVF_STOP_WAIT_S 2

/* End the session: unmount (the workers' reads then fail and the loop returns), join. A
 * loop that does not return in PVF_STOP_WAIT_S is left to the process's exit (its session
 * is then never destroyed: the workers still use it); the connection ends with the process,
 * as it does under pyfuse3, and the open files' next calls fail ENOTCONN. */
void pvf_session_stop(struct pvf_front *f)
{
    struct timespec until;

    if (f->se == NULL)
        return;
    fuse_session_exit(f->se);
    if (f->mounted) {
        fuse_session_unmount(f->se);
        pthread_mutex_lock(&f->lock);
        f->mounted = 0;
        pthread_mutex_unlock(&f->lock);
    }
    if (f->thread_started) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += PVF_STOP_WAIT_S;
        if (pthread_timedjoin_np(f->thread, NULL, &until) != 0) {
            pthread_detach(f->thread);
            f->abandoned = 1;
        }
        f->thread_started = 0;
    }
}

void pvf_session_destroy(struct pvf_front *f)
{
    if (f->se != NULL && !f->abandoned) {
        fuse_session_destroy(f->se);
        f->se = NULL;
    }
}

int pvf_notify_inval_inode(struct pvf_front *f, uint64_t ino, int attr_only)
{
    int ret;

    if (pvf_notify_begin(f) != 0)
        return -ENOTCONN;
    /* off -1: attributes only; 0 with len 0: the attributes and every cached page */
    ret = fuse_lowlevel_notify_inval_inode(f->se, ino, attr_only ? -1 : 0, 0);
    pvf_notify_end(f);
    return ret;
}

int pvf_notify_inval_entry(struct pvf_front *f, uint64_t parent, const char *name, size_t n)
{
    int ret;

    if (pvf_notify_begin(f) != 0)
        return -ENOTCONN;
    ret = fuse_lowlevel_notify_inval_entry(f->se, parent, name, n);
    pvf_notify_end(f);
    return ret;
}
