/* sched.c -- the request scheduling policies of the I/O daemon (thesis §4.2).
 *
 * Each algorithm is one const ops table (struct pv_sched_ops) behind the same interface, in
 * the manner of Lustre's NRS policies. The engine asks so_peek() for the next job after
 * every turn and every batch of events; a job's position is (inode, file offset of its next
 * access) and e->last is where the engine last served. Positions in different inodes are
 * "far": distance orders by inode first, then by offset.
 *
 * All ops run on the engine's thread without e->lock (see native.h). opt1 keeps a FIFO of
 * ready jobs in e->sched_q (enqueue on a readiness edge, dequeue when a turn blocks or the
 * job leaves), so its peek is O(1). opt2..opt4 order by position, which moves with every
 * turn; their job list is short (one job per client connection in service) and every turn
 * moves at least one socket buffer of data, so they scan the list instead of keeping a tree
 * sorted under positions that change as jobs are served -- but only when something their
 * pick depends on changed since the last scan (e->sched_gen, bumped by the loop): the loop
 * asks before and after each wait for events, and a wait that brought nothing for the jobs
 * (a frame header, a wake-up, a timeout) costs no second scan. The pick is the same as a
 * scan would give, so the order of service is.
 *
 * Jobs without accesses (replies) never reach a policy: the engine serves them first
 * (native.h, pv_job_scheduled).
 *
 * The reactive selector (rs, thesis §5) is not a policy here: it lives in Python
 * (pvfs.models.rs) and switches the engine between these four on each new request.
 */
#include <string.h>

#include "native.h"

/* Lexicographic (inode, offset) order. */
static int pos_cmp(struct pv_pos a, struct pv_pos b)
{
    if (a.inode != b.inode)
        return a.inode < b.inode ? -1 : 1;
    if (a.off != b.off)
        return a.off < b.off ? -1 : 1;
    return 0;
}

struct pv_dist {
    uint64_t dinode;              /* 0 when both positions are in the same file */
    uint64_t doff;
};

/* How far the candidate position c is from the last position served. In the same file, the
 * offsets' difference. In another file, offsets are not comparable (the file could be
 * anywhere): it is farther than any job of this file, and among its jobs the one nearest its
 * start comes first -- so that every daemon enters a striped file at the same end. */
static struct pv_dist pos_dist(struct pv_pos c, struct pv_pos last)
{
    struct pv_dist d;
    d.dinode = c.inode > last.inode ? c.inode - last.inode : last.inode - c.inode;
    if (d.dinode != 0)
        d.doff = (uint64_t)c.off;
    else
        d.doff = c.off > last.off ? (uint64_t)c.off - (uint64_t)last.off
                                  : (uint64_t)last.off - (uint64_t)c.off;
    return d;
}

static int dist_cmp(struct pv_dist a, struct pv_dist b)
{
    if (a.dinode != b.dinode)
        return a.dinode < b.dinode ? -1 : 1;
    if (a.doff != b.doff)
        return a.doff < b.doff ? -1 : 1;
    return 0;
}

/* CSCAN comparator: is candidate c a better pick than the best so far, b?
 * A position at or after the last one comes first (the scan goes on in its direction);
 * only when nothing is ahead do we wrap to the lowest position. */
static bool cscan_better(struct pv_pos last, const struct pv_job *c, const struct pv_job *b)
{
    struct pv_pos pc = pv_job_pos(c), pb = pv_job_pos(b);
    bool ac = pos_cmp(pc, last) >= 0, ab = pos_cmp(pb, last) >= 0;
    int r;

    /* Ahead of the scan beats behind it (behind means waiting for the wrap). */
    if (ac != ab)
        return ac;
    /* On the same side, the lower position is next in the scan. */
    r = pos_cmp(pc, pb);
    if (r != 0)
        return r < 0;
    /* Same position: the one ready longest goes first (FCFS among equals). */
    if (c->ready_seq != b->ready_seq)
        return c->ready_seq < b->ready_seq;
    /* Same readiness stamp cannot happen for two ready jobs; arrival order settles it. */
    return c->seq < b->seq;
}

/* Nearest-position comparator used by opt3's fallback and by opt4. */
static bool nearest_better(struct pv_pos last, const struct pv_job *c, const struct pv_job *b)
{
    struct pv_pos pc = pv_job_pos(c), pb = pv_job_pos(b);
    int r = dist_cmp(pos_dist(pc, last), pos_dist(pb, last));
    bool ac, ab;

    /* Shorter "seek" first; another file is always farther than this one. */
    if (r != 0)
        return r < 0;
    /* Equally near: a job that can move data now beats one we would wait for. */
    if (pv_job_runnable(c) != pv_job_runnable(b))
        return pv_job_runnable(c);
    /* Equally near on both sides: keep going forward, as the disk's read-ahead does. */
    ac = pos_cmp(pc, last) >= 0;
    ab = pos_cmp(pb, last) >= 0;
    if (ac != ab)
        return ac;
    /* Otherwise the oldest job, so that no job starves among equals. */
    return c->seq < b->seq;
}

/* opt1: network-oriented, PVFS's original. Every ready job is served, first come first
 * served on readiness: the job that became ready earliest goes next. A job served until it
 * would block is ready again only after a new edge, which puts it at the back: round robin.
 * The queue holds exactly the runnable jobs, in the order of their readiness edges (a
 * finished emulated-disk access counts as an edge). */
static struct pv_job *opt1_peek(struct pv_engine *e)
{
    if (!pv_ring_linked(&e->sched_q))
        return NULL;
    return pv_container_of(e->sched_q.next, struct pv_job, sq);
}

static void opt1_update(struct pv_engine *e, struct pv_job *j)
{
    /* A new edge goes to the back; a job still ready after its turn (the engine yielded)
     * keeps its place. */
    if (pv_job_runnable(j) && !pv_ring_linked(&j->sq))
        pv_ring_add_tail(&e->sched_q, &j->sq);
    else if (!pv_job_runnable(j) && pv_ring_linked(&j->sq))
        pv_ring_del(&j->sq);
}

static void opt1_dequeue(struct pv_engine *e, struct pv_job *j)
{
    (void)e;
    if (pv_ring_linked(&j->sq))
        pv_ring_del(&j->sq);
}

/* Taking over from another policy: queue the ready jobs in the order of their edges. */
static int opt1_start(struct pv_engine *e, struct pv_err *err)
{
    (void)err;                        /* links what exists: cannot fail */
    for (struct pv_job *j = e->jobs_head; j != NULL; j = j->next) {
        struct pv_ring *at = &e->sched_q;
        if (!pv_job_scheduled(j) || !pv_job_runnable(j))
            continue;
        /* Insertion sort from the back: edges mostly arrive in order already. */
        while (at->prev != &e->sched_q
               && pv_container_of(at->prev, struct pv_job, sq)->ready_seq > j->ready_seq)
            at = at->prev;
        pv_ring_add_tail(at, &j->sq);
    }
    return 0;
}

static void opt1_stop(struct pv_engine *e)
{
    while (pv_ring_linked(&e->sched_q))
        pv_ring_del(e->sched_q.next);
}

/* opt2..opt4's peek: the scan's pick, scanned again only when the loop changed something
 * it depends on (pv_sched_stale). */
static struct pv_job *remembered(struct pv_engine *e, struct pv_job *(*scan)(struct pv_engine *))
{
    if (e->pick_gen != e->sched_gen) {
        e->pick = scan(e);
        e->pick_gen = e->sched_gen;
    }
    return e->pick;
}

/* opt2: CSCAN over the positions of the ready jobs. */
static struct pv_job *opt2_scan(struct pv_engine *e)
{
    struct pv_job *best = NULL;

    for (struct pv_job *j = e->jobs_head; j != NULL; j = j->next) {
        if (pv_job_scheduled(j) && pv_job_runnable(j)
            && (best == NULL || cscan_better(e->last, j, best)))
            best = j;
    }
    return best;
}

static struct pv_job *opt2_peek(struct pv_engine *e)
{
    return remembered(e, opt2_scan);
}

/* opt3: window scan. Ready jobs whose next access starts within window/2 of the last
 * position (same file) are served in CSCAN order; if there are none, the nearest ready job. */
static struct pv_job *opt3_scan(struct pv_engine *e)
{
    struct pv_job *in = NULL, *near = NULL;
    uint64_t half = (uint64_t)e->window / 2;

    for (struct pv_job *j = e->jobs_head; j != NULL; j = j->next) {
        struct pv_dist d;
        if (!pv_job_scheduled(j) || !pv_job_runnable(j))
            continue;
        d = pos_dist(pv_job_pos(j), e->last);
        /* Inside the window: "no more than one half the window size bytes" away. */
        if (d.dinode == 0 && d.doff <= half) {
            if (in == NULL || cscan_better(e->last, j, in))
                in = j;
        } else if (near == NULL || nearest_better(e->last, j, near)) {
            near = j;
        }
    }
    return in != NULL ? in : near;
}

static struct pv_job *opt3_peek(struct pv_engine *e)
{
    return remembered(e, opt3_scan);
}

/* opt4: SSTF / disk-directed. The job nearest the last position whether ready or not; the
 * loop waits for it when it is not (idle_timeout still ends it if its peer stalls).
 *
 * At the start of a busy period after a pause (engine.c, join_loop) it first waits gather_ns
 * for the rest of the collective:
 * SSTF from whichever request reached this daemon first makes the daemons of a striped file
 * serve its tasks in different orders, and each task then waits for its slowest piece
 * (anticipatory scheduling, Iyer & Druschel 2001). With the requests gathered, the first pick
 * is the one nearest the start of the file last served, not nearest where that daemon
 * happened to stop (or where another policy's turn left it, when rs switched to opt4 after
 * the first request), so every daemon serves the tasks in the same order. */
static struct pv_job *opt4_scan(struct pv_engine *e)
{
    struct pv_job *best = NULL;
    struct pv_pos from = e->last;

    if (e->gather_ns > 0 && e->gather_entry)
        from.off = 0;
    for (struct pv_job *j = e->jobs_head; j != NULL; j = j->next) {
        if (pv_job_scheduled(j) && (best == NULL || nearest_better(from, j, best)))
            best = j;
    }
    return best;
}

static struct pv_job *opt4_peek(struct pv_engine *e)
{
    /* The clock is no input of the remembered pick: the gathering is checked every time. */
    if (e->gather_ns > 0 && pv_now_ns() < e->gather_until) {
        e->hold_until = e->gather_until;
        return NULL;
    }
    return remembered(e, opt4_scan);
}

const struct pv_sched_ops pv_sched_opt1 = {
    .so_name = "opt1",
    .so_peek = opt1_peek,
    .so_update = opt1_update,
    .so_dequeue = opt1_dequeue,
    .so_start = opt1_start,
    .so_stop = opt1_stop,
};

const struct pv_sched_ops pv_sched_opt2 = {
    .so_name = "opt2",
    .so_peek = opt2_peek,
};

const struct pv_sched_ops pv_sched_opt3 = {
    .so_name = "opt3",
    .so_peek = opt3_peek,
};

const struct pv_sched_ops pv_sched_opt4 = {
    .so_name = "opt4",
    .so_peek = opt4_peek,
};

const struct pv_sched_ops *const pv_sched_all[] = {
    &pv_sched_opt1, &pv_sched_opt2, &pv_sched_opt3, &pv_sched_opt4, NULL,
};

const struct pv_sched_ops *pv_sched_find(const char *name)
{
    for (size_t i = 0; pv_sched_all[i] != NULL; i++) {
        if (strcmp(pv_sched_all[i]->so_name, name) == 0)
            return pv_sched_all[i];
    }
    return NULL;
}
