/* base.c -- what the engine's units all use: the clock, the eventfds, epoll registration
 * with the engine's data convention, and posting an event for Python.
 *
 * It calls no other unit but err.c, so that engine.c, conn.c, stream.c and sched.c can share
 * these without calling each other both ways (native.h, "Units").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "native.h"

int64_t pv_now_ns(void)
{
    struct timespec ts;
    /* CLOCK_MONOTONIC cannot fail on Linux with a valid pointer. */
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void pv_eventfd_signal(int fd)
{
    uint64_t one = 1;
    /* The only failure is EAGAIN at a counter of 2^64-2: the fd is readable anyway. */
    (void)!write(fd, &one, sizeof(one));
}

void pv_eventfd_drain(int fd)
{
    uint64_t v;
    /* Non-blocking; EAGAIN means there was nothing to drain. */
    (void)!read(fd, &v, sizeof(v));
}

/* epoll_ctl with the engine's data convention (native.h, PV_TAG_CONN). */
int pv_epoll_set(struct pv_engine *e, int op, int fd, uint32_t events, uintptr_t data,
                 struct pv_err *err)
{
    struct epoll_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.events = events;
    ev.data.u64 = data;
    if (epoll_ctl(e->epfd, op, fd, op == EPOLL_CTL_DEL ? NULL : &ev) < 0)
        return pv_fail(err, errno, "epoll_ctl(%d, fd %d): %s", op, fd, strerror(errno));
    return 0;
}

/* Post an event for Python; the loop publishes it at the end of the turn (engine.c). */
void pv_post(struct pv_engine *e, struct pv_event *ev)
{
    pv_ev_append(&e->out_head, &e->out_tail, ev);
}
