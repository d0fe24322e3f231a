/* pysession.c -- the Session type: one mount's session as Python drives it.
 *
 *   Session   mount(), fileno() (an eventfd, readable when requests wait), drain() ->
 *             ([Request], [(ino, nlookup)]), the kernel notifications, stats(), close().
 *             Session() without a mount point is a bridge alone, for tests: _inject() queues
 *             fake requests from a C thread and their replies are kept. The methods that keep
 *             the workers' answers are pyanswers.c's, pywrites.c's, pycreates.c's and
 *             pyserve.c's, _inject is pyinject.c's; the table below names them all.
 *
 * The Python face of session.c (the libfuse session, the loop thread) and bridge.c (the
 * queue): it owns struct pvf_front and hands each drained record to pyrequest.c as a
 * Request. Runs on the Python thread, the GIL released around mounting, unmounting and every
 * notification.
 */
#include "pyfront.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static fstate *state_of_type(PyTypeObject *tp)
{
    return PyType_GetModuleState(tp);
}

/* Set OSError(code, "what: strerror(code)"); returns NULL. */
static PyObject *raise_errno(int code, const char *what)
{
    PyObject *msg = PyUnicode_FromFormat("%s: %s", what, strerror(code));
    PyObject *exc;

    if (msg == NULL)
        return NULL;
    exc = PyObject_CallFunction(PyExc_OSError, "iO", code, msg);
    Py_DECREF(msg);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static PyObject *Session_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "mountpoint", "options", "writeback_cache", "export_support",
                              "posix_acl", "max_threads", "max_write", NULL };
    PyObject *mountpoint = Py_None, *options = NULL, *seq = NULL;
    int wb = 0, exp = 1, acl = 0;
    unsigned max_threads = 4, max_write = 1u << 20;
    SessionObject *self;
    char **argv = NULL;
    Py_ssize_t nopt = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO$pppII:Session", kwlist, &mountpoint,
                                     &options, &wb, &exp, &acl, &max_threads, &max_write))
        return NULL;
    if (max_threads < 1 || max_threads > 256)
        return PyErr_Format(PyExc_ValueError, "max_threads must be 1..256");
    if (max_write < 4096 || max_write > (1u << 24))
        return PyErr_Format(PyExc_ValueError, "max_write must be 4 KiB..16 MiB");
    if (mountpoint != Py_None && !PyUnicode_Check(mountpoint))
        return PyErr_Format(PyExc_TypeError, "mountpoint must be a str or None");
    if (options != NULL) {
        seq = PySequence_Fast(options, "options must be a sequence of str");
        if (seq == NULL)
            return NULL;
        nopt = PySequence_Fast_GET_SIZE(seq);
    }
    self = (SessionObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        goto err;
    if (pvf_bridge_init(&self->f) < 0) {
        raise_errno(errno, "eventfd");
        goto err;
    }
    self->ready = 1;
    self->f.max_threads = max_threads;
    self->f.max_write = max_write;
    self->f.want_writeback = (unsigned)wb;
    self->f.want_export = (unsigned)exp;
    self->f.want_acl = (unsigned)acl;
    if (mountpoint != Py_None) {
        /* argv: "pvfs" ["-o", "a,b,..."] -- libfuse parses the mount options itself */
        PyObject *joined = NULL, *comma = PyUnicode_FromString(",");
        int rc;
        if (comma == NULL)
            goto err;
        if (nopt > 0)
            joined = PyUnicode_Join(comma, seq);
        Py_DECREF(comma);
        if (nopt > 0 && joined == NULL)
            goto err;
        argv = PyMem_Calloc(4, sizeof(char *));
        if (argv == NULL) {
            Py_XDECREF(joined);
            PyErr_NoMemory();
            goto err;
        }
        argv[0] = "pvfs";
        if (joined != NULL) {
            argv[1] = "-o";
            argv[2] = (char *)PyUnicode_AsUTF8(joined);
            if (argv[2] == NULL) {
                Py_DECREF(joined);
                goto err;
            }
        }
        rc = pvf_session_new(&self->f, joined != NULL ? 3 : 1, argv);
        Py_XDECREF(joined);
        if (rc < 0) {
            PyErr_SetString(PyExc_ValueError, "libfuse refused the session's options");
            goto err;
        }
    }
    PyMem_Free(argv);
    Py_XDECREF(seq);
    return (PyObject *)self;
err:
    PyMem_Free(argv);
    Py_XDECREF(seq);
    Py_XDECREF(self);
    return NULL;
}

static PyObject *Session_mount(SessionObject *self, PyObject *args)
{
    const char *mountpoint;
    int rc, saved = 0;

    if (!PyArg_ParseTuple(args, "s:mount", &mountpoint))
        return NULL;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    if (self->f.se == NULL)
        return PyErr_Format(PyExc_ValueError, "a bridge without a session cannot mount");
    if (self->f.mounted || self->f.thread_started)
        return PyErr_Format(PyExc_ValueError, "mounted already");
    Py_BEGIN_ALLOW_THREADS
    rc = pvf_session_mount(&self->f, mountpoint);
    if (rc == 0) {
        rc = pvf_session_start(&self->f);
        saved = errno;
        if (rc != 0)
            pvf_session_stop(&self->f);
    } else {
        saved = errno;
    }
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return raise_errno(saved, "mount");
    Py_RETURN_NONE;
}

static PyObject *Session_fileno(SessionObject *self, PyObject *ignored)
{
    (void)ignored;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    return PyLong_FromLong(self->f.efd);
}

static PyObject *Session_drain(SessionObject *self, PyObject *ignored)
{
    fstate *st = state_of_type(Py_TYPE(self));
    PyObject *reqs = NULL, *forgets = NULL;
    struct pvf_req *r, *next;
    uint64_t *fl = NULL;
    size_t nf = 0;

    (void)ignored;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    pvf_drain_wakeup(&self->f);
    r = pvf_take_all(&self->f, &fl, &nf);
    reqs = PyList_New(0);
    forgets = PyList_New((Py_ssize_t)nf);
    if (reqs == NULL || forgets == NULL)
        goto fail;
    for (size_t i = 0; i < nf; i++) {
        PyObject *pair = Py_BuildValue("(KK)", (unsigned long long)fl[2 * i],
                                       (unsigned long long)fl[2 * i + 1]);
        if (pair == NULL)
            goto fail;
        PyList_SET_ITEM(forgets, (Py_ssize_t)i, pair);
    }
    free(fl);
    fl = NULL;
    for (; r != NULL; r = next) {
        PyObject *req;
        next = r->next;
        /* a record whose object fails is answered by the object's dealloc (EIO) */
        req = pvf_py_request_wrap(self, st, r, r->fr == (fuse_req_t)r);
        if (req == NULL) {
            r = next;
            goto fail;
        }
        if (PyList_Append(reqs, req) < 0) {
            Py_DECREF(req);
            r = next;
            goto fail;
        }
        Py_DECREF(req);
    }
    return Py_BuildValue("(NN)", reqs, forgets);
fail:
    free(fl);
    /* the rest of the batch stays in flight as objects so nothing is lost: answer EIO */
    for (; r != NULL; r = next) {
        next = r->next;
        if (r->fr != NULL && r->fr != (fuse_req_t)r)
            fuse_reply_err(r->fr, EIO);
        pvf_req_free(r);
    }
    Py_XDECREF(reqs);
    Py_XDECREF(forgets);
    return NULL;
}

static PyObject *Session_get_ended(SessionObject *self, void *c)
{
    int done;

    (void)c;
    pthread_mutex_lock(&self->f.lock);
    done = self->f.loop_done;
    pthread_mutex_unlock(&self->f.lock);
    return PyBool_FromLong(done || self->closed);
}

static PyObject *Session_stats(SessionObject *self, PyObject *ignored)
{
    struct pvf_counters c;
    Py_ssize_t inflight = 0;
    size_t kept, numbers, unlinkable, behind;
    uint64_t behind_bytes;
    Py_ssize_t served;
    size_t warmed;
    int warm_failed;

    (void)ignored;
    warmed = pvf_warm_done(&self->f.warm, &warm_failed);
    pthread_mutex_lock(&self->f.lock);
    c = self->f.c;
    kept = self->f.kept.n;
    unlinkable = self->f.unlinkable.n;
    behind = self->f.behind.n;
    behind_bytes = self->f.behind_bytes;
    numbers = self->f.nnumbers;
    served = (Py_ssize_t)self->f.served.n;
    pthread_mutex_unlock(&self->f.lock);
    if (self->ready) {
        for (struct pvf_req *r = self->f.inflight.next; r != &self->f.inflight; r = r->next)
            inflight++;
    }
    return Py_BuildValue("{"
                         "sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsn"   /* ... unlinked_here, unlinkable */
                         "sKsKsKsKsnsnsnsnsnsn"
                         "sKsKsKsKsnsnsi"
                         "sKsKsKsK}", "queued", c.queued,
                         "forgets", c.forgets, "wakeups", c.wakeups,
                         "reply_failures", c.reply_failures, "unanswered", c.unanswered,
                         "enomem", c.enomem, "quiet_flushes", c.quiet_flushes,
                         "kept_flushes", c.kept_flushes,
                         "attrs_here", c.attrs_here, "file_attrs_here", c.file_attrs_here,
                         "missing_here", c.missing_here, "found_here", c.found_here,
                         "created_here", c.created_here, "created_mismatch", c.created_mismatch,
                         "unlinked_here", c.unlinked_here,
                         "unlinkable", (Py_ssize_t)unlinkable,
                         "wrote_here", c.wrote_here, "behind_full", c.behind_full,
                         "caps_here", c.caps_here,
                         "behind_bytes", (unsigned long long)behind_bytes,
                         "behind_handles", (Py_ssize_t)behind,
                         "numbers_here", (Py_ssize_t)numbers,
                         "inflight", inflight,
                         "quiet_handles", (Py_ssize_t)(self->f.quiet.n + self->f.quiet_rw.n),
                         "kept_files", (Py_ssize_t)kept,
                         "dirs_here", (Py_ssize_t)self->f.dirs.n,
                         "reads_here", c.reads_here, "read_bytes_here", c.read_bytes_here,
                         "published", c.published, "publish_refused", c.publish_refused,
                         "files_served", served, "warmed", (Py_ssize_t)warmed,
                         "warm_failed", warm_failed,
                         "streams_here", c.streams_here,
                         "stream_bytes_here", c.stream_bytes_here,
                         "stream_failed", c.stream_failed, "stream_no_conn", c.stream_no_conn);
}

static PyObject *Session_invalidate_inode(SessionObject *self, PyObject *args)
{
    unsigned long long ino;
    int attr_only = 0, ret;

    if (!PyArg_ParseTuple(args, "K|p:invalidate_inode", &ino, &attr_only))
        return NULL;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    ret = pvf_notify_inval_inode(&self->f, ino, attr_only);
    Py_END_ALLOW_THREADS
    if (ret < 0)
        return raise_errno(-ret, "invalidate_inode");
    Py_RETURN_NONE;
}

static PyObject *Session_invalidate_entry(SessionObject *self, PyObject *args)
{
    unsigned long long parent;
    const char *name;
    Py_ssize_t n;
    int ret;

    if (!PyArg_ParseTuple(args, "Ky#:invalidate_entry", &parent, &name, &n))
        return NULL;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    if (n == 0 || (size_t)n != strlen(name))
        return PyErr_Format(PyExc_ValueError, "a name is not empty and has no NUL bytes");
    Py_BEGIN_ALLOW_THREADS
    ret = pvf_notify_inval_entry(&self->f, parent, name, (size_t)n);
    Py_END_ALLOW_THREADS
    if (ret < 0)
        return raise_errno(-ret, "invalidate_entry");
    Py_RETURN_NONE;
}

/* Answer what is left (queued, or in flight in Python) so no request outlives the session. */
static void answer_leftovers(SessionObject *self)
{
    uint64_t *fl = NULL;
    size_t nf = 0;
    struct pvf_req *r = pvf_take_all(&self->f, &fl, &nf), *next;

    free(fl);
    for (; r != NULL; r = next) {
        next = r->next;
        if (r->fr != NULL && r->fr != (fuse_req_t)r)
            fuse_reply_err(r->fr, ENODEV);
        pvf_req_free(r);
    }
    while (self->f.inflight.next != &self->f.inflight) {
        r = self->f.inflight.next;
        fuse_req_t fr = pvf_inflight_take(&self->f, r);   /* its Request object frees the record */
        if (fr != NULL && fr != (fuse_req_t)r)
            fuse_reply_err(fr, ENODEV);
    }
}

static PyObject *Session_close(SessionObject *self, PyObject *ignored)
{
    (void)ignored;
    if (self->closed || !self->ready)
        Py_RETURN_NONE;
    self->closed = 1;
    Py_BEGIN_ALLOW_THREADS
    pvf_session_stop(&self->f);
    pvf_close_wait_notifiers(&self->f);
    Py_END_ALLOW_THREADS
    answer_leftovers(self);
    pvf_session_destroy(&self->f);
    pvf_py_arena_release(self);
    Py_RETURN_NONE;
}

static void Session_dealloc(SessionObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject *r;

    if (self->ready) {
        r = Session_close(self, NULL);
        Py_XDECREF(r);
        pvf_bridge_fini(&self->f);
    }
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Session_methods[] = {
    { "mount", (PyCFunction)Session_mount, METH_VARARGS,
      "mount(mountpoint): mount and start the loop's worker threads" },
    { "fileno", (PyCFunction)Session_fileno, METH_NOARGS,
      "the eventfd that is readable when requests wait (trio.lowlevel.wait_readable)" },
    { "drain", (PyCFunction)Session_drain, METH_NOARGS,
      "drain() -> ([Request], [(ino, nlookup)]): every queued request and the forgets "
      "answered in C since the last drain" },
    { "stats", (PyCFunction)Session_stats, METH_NOARGS, "the bridge's counters (a dict)" },
    { "invalidate_inode", (PyCFunction)Session_invalidate_inode, METH_VARARGS,
      "invalidate_inode(ino, attr_only=False): drop the kernel's attributes (and pages)" },
    { "invalidate_entry", (PyCFunction)Session_invalidate_entry, METH_VARARGS,
      "invalidate_entry(parent, name): drop the kernel's entry of a name" },
    { "quiet", (PyCFunction)pvf_py_quiet, METH_VARARGS,
      "quiet(fh, writable=False): this handle's flush needs nothing (writable: while no "
      "write or truncation names its inode); answered in C until its release" },
    { "keep_dir", (PyCFunction)pvf_py_keep_dir, METH_VARARGS,
      "keep_dir(ino, entry): a leased directory's attributes, for getattr answered in C" },
    { "keep_file_attrs", (PyCFunction)pvf_py_keep_file_attrs, METH_VARARGS,
      "keep_file_attrs(ino, entry): a leased regular file's attributes as Python would "
      "answer them now, for getattr answered in C until a write or size change of it" },
    { "drop_dir", (PyCFunction)pvf_py_drop_dir, METH_VARARGS,
      "drop_dir(ino): its attributes are no longer answered in C" },
    { "drop_dirs", (PyCFunction)pvf_py_drop_dirs, METH_NOARGS,
      "drop_dirs(): no directory's attributes are answered in C" },
    { "lease_until", (PyCFunction)pvf_py_lease_until, METH_VARARGS,
      "lease_until(until, attr_timeout): the session's end (time.monotonic()) and the "
      "mount's attribute timeout" },
    { "keep_file", (PyCFunction)pvf_py_keep_file, METH_VARARGS,
      "keep_file(ino) -> bool: a file held by write delegation whose close is kept: its "
      "flushes answered in C while the session lasts (False: not marked, no memory)" },
    { "drop_file", (PyCFunction)pvf_py_drop_file, METH_VARARGS,
      "drop_file(ino): its flushes go to Python again" },
    { "drop_files", (PyCFunction)pvf_py_drop_files, METH_NOARGS,
      "drop_files(): no file's flush is answered in C for its delegation" },
    { "dir_names", (PyCFunction)pvf_py_dir_names, METH_VARARGS,
      "dir_names(parent, complete, [(name, ino)]): a leased directory's names (0: not "
      "there), for lookups of missing names answered in C" },
    { "name_put", (PyCFunction)pvf_py_name_put, METH_VARARGS,
      "name_put(parent, name, ino): a name of a directory given by dir_names" },
    { "name_pop", (PyCFunction)pvf_py_name_pop, METH_VARARGS,
      "name_pop(parent, name): what it named is no longer known" },
    { "dir_complete", (PyCFunction)pvf_py_dir_complete, METH_VARARGS,
      "dir_complete(parent, flag): every name it does not hold is not there (or not)" },
    { "dir_forget", (PyCFunction)pvf_py_dir_forget, METH_VARARGS,
      "dir_forget(parent): its names are no longer answered in C" },
    { "dirs_forget", (PyCFunction)pvf_py_dirs_forget, METH_NOARGS,
      "dirs_forget(): no directory's names are answered in C" },
    { "create_settings", (PyCFunction)pvf_py_create_settings, METH_VARARGS,
      "create_settings(entry_timeout, first_fh, caps_ttl=0, behind=False): the mount's "
      "entry timeout, the first handle number of files the workers create, how long such a "
      "file's security.capability probes are answered ENODATA here, and whether its "
      "writable handles' writes are answered here (creates.c)" },
    { "create_dir", (PyCFunction)pvf_py_create_dir, METH_VARARGS,
      "create_dir(parent, on): whether the workers create in parent (creates.c)" },
    { "create_dirs_off", (PyCFunction)pvf_py_create_dirs_off, METH_NOARGS,
      "create_dirs_off(): the workers create in no directory" },
    { "lend_numbers", (PyCFunction)pvf_py_lend_numbers, METH_VARARGS,
      "lend_numbers([ino]): inode numbers for the workers' creates" },
    { "take_numbers", (PyCFunction)pvf_py_take_numbers, METH_NOARGS,
      "take_numbers() -> [ino]: the numbers lent and not used, back" },
    { "numbers_left", (PyCFunction)pvf_py_numbers_left, METH_NOARGS,
      "numbers_left() -> int: how many lent numbers are not used yet" },
    { "created_done", (PyCFunction)pvf_py_created_done, METH_VARARGS,
      "created_done(parent, entry or None): a create made by a worker was applied; with "
      "the last of the directory's, entry is its attributes again" },
    { "_create_here", (PyCFunction)pvf_py_create_here, METH_VARARGS,
      "tests: _create_here(parent, name, mode, flags, uid, gid) -> None or (entry, fh, "
      "entry_timeout, attr_timeout): a create made as a worker makes it, its record queued" },
    { "release_done", (PyCFunction)pvf_py_release_done, METH_VARARGS,
      "release_done(ino, closed_clean) -> bool: Python finished a release of ino; closed_clean:"
      " no handle left, nothing dirty -- then the workers may answer its unlink (unlinks.c)" },
    { "unlinkable_drop", (PyCFunction)pvf_py_unlinkable_drop, METH_VARARGS,
      "unlinkable_drop(ino): the workers no longer unlink ino (Python unlinks it, or its "
      "number names a new file)" },
    { "_kernel_sends", (PyCFunction)pvf_py_kernel_sends, METH_VARARGS,
      "tests: _kernel_sends('release'|'open'|'setattr', ino) as the workers see that request" },
    { "_unlink_here", (PyCFunction)pvf_py_unlink_here, METH_VARARGS,
      "tests: _unlink_here(parent, name, uid, gid) -> bool: an unlink made as a worker makes "
      "it, its record queued" },
    { "_found_here", (PyCFunction)pvf_py_found_here, METH_VARARGS,
      "tests: (entry, entry_timeout, attr_timeout) a worker answers lookup(parent, name) "
      "with, or None" },
    { "_missing_here", (PyCFunction)pvf_py_missing_here, METH_VARARGS,
      "tests: whether a worker answers lookup(parent, name) ENOENT" },
    { "_getattr_here", (PyCFunction)pvf_py_getattr_here, METH_VARARGS,
      "tests: (mode, size, mtime_ns, timeout) a worker would answer getattr(ino), or None" },
    { "_flush_here", (PyCFunction)pvf_py_flush_here, METH_VARARGS,
      "tests: whether a worker answers a flush of (fh, ino)" },
    { "_written", (PyCFunction)pvf_py_written, METH_VARARGS,
      "tests: _written(ino, True) as a write does, (ino, False) as a forget" },
    { "_wrote", (PyCFunction)pvf_py_wrote, METH_VARARGS,
      "tests: _wrote(fh, ino, len) -> bool: a worker's write of it, answered here (behind)?" },
    { "behind", (PyCFunction)pvf_py_behind, METH_VARARGS,
      "behind(fh): this handle's writes are answered in C once queued (OP_WROTE records, "
      "applied by Python in order) while under behind_limit; until its release" },
    { "behind_drop", (PyCFunction)pvf_py_behind_drop, METH_VARARGS,
      "behind_drop(fh) -> bool: its writes wait for Python again (whether it was marked)" },
    { "behind_applied", (PyCFunction)pvf_py_behind_applied, METH_VARARGS,
      "behind_applied(nbytes): Python applied that many bytes of OP_WROTE records" },
    { "behind_limit", (PyCFunction)pvf_py_behind_limit, METH_VARARGS,
      "behind_limit(nbytes): the bound on bytes answered in C and not yet applied (0: none)" },
    { "caps_none", (PyCFunction)pvf_py_caps_none, METH_VARARGS,
      "caps_none(ino, until): ino has no security.capability until time.monotonic() "
      "reaches until: its probes are answered ENODATA in C" },
    { "caps_drop", (PyCFunction)pvf_py_caps_drop, METH_VARARGS,
      "caps_drop(ino): its security.capability probes go to Python again" },
    { "_caps_here", (PyCFunction)pvf_py_caps_here, METH_VARARGS,
      "tests: whether a worker answers ino's security.capability probe ENODATA" },
    { "serve_arena", (PyCFunction)pvf_py_serve_arena, METH_VARARGS,
      "serve_arena(buffer, block_size, max_read): the block cache's arena; reads of at most "
      "max_read bytes of blocks published from it are answered in C (0: none)" },
    { "publish", (PyCFunction)pvf_py_publish, METH_VARARGS,
      "publish(ino, size, first, blocks) -> bool: blocks (arena blocks) are blocks first.. "
      "of ino as Python answers them; reads ending within size are answered in C until "
      "serve_drop(ino) or a write or size change of it. False: refused (one in flight)" },
    { "serve_drop", (PyCFunction)pvf_py_serve_drop, METH_VARARGS,
      "serve_drop(ino): no read of ino is answered in C, nor being answered, on return" },
    { "serve_recent", (PyCFunction)pvf_py_serve_recent, METH_NOARGS,
      "serve_recent() -> [ino]: the files read in C since the last call" },
    { "warm", (PyCFunction)pvf_py_warm, METH_VARARGS,
      "warm(upto): the arena's first upto bytes faulted in ahead, on a thread of the session's" },
    { "stream_setup", (PyCFunction)pvf_py_stream_setup, METH_VARARGS,
      "stream_setup(niods, min_read, timeout): workers may answer reads of at least min_read "
      "bytes from the I/O daemons (0..niods-1), each exchange within timeout seconds" },
    { "stream_give", (PyCFunction)pvf_py_stream_give, METH_VARARGS,
      "stream_give(iod, fd): an open, authenticated connection to daemon iod, the workers' "
      "now (they close it); on an exception the caller still owns it" },
    { "stream_conns", (PyCFunction)pvf_py_stream_conns, METH_VARARGS,
      "stream_conns(iod) -> int: the workers' idle connections to daemon iod" },
    { "stream_mark", (PyCFunction)pvf_py_stream_mark, METH_VARARGS,
      "stream_mark(ino, size, ssize, iods, head) -> bool: stream-sized reads of ino within "
      "size are answered from the daemons (rank r on iods[r]; head: a read's msgpack header "
      "up to its desc) until serve_drop(ino) or a write or size change of it. False: refused" },
    { "_stream_here", (PyCFunction)pvf_py_stream_here, METH_VARARGS,
      "_stream_here(ino, off, size) -> bytes | None: what a worker would answer from the "
      "daemons (test hook)" },
    { "_read_here", (PyCFunction)pvf_py_read_here, METH_VARARGS,
      "tests: _read_here(ino, off, size) -> the bytes a worker would answer, or None" },
    { "_queued", (PyCFunction)pvf_py_queued, METH_VARARGS,
      "tests: _queued(ino, True) as a worker queueing a write of ino; False as its answer" },
    { "is_quiet", (PyCFunction)pvf_py_is_quiet, METH_VARARGS,
      "is_quiet(fh, remove=False): whether fh is marked (tests)" },
    { "close", (PyCFunction)Session_close, METH_NOARGS,
      "unmount, stop the loop, answer what is left ENODEV, free the session" },
    { "_inject", (PyCFunction)(void (*)(void))pvf_py_inject, METH_VARARGS | METH_KEYWORDS,
      "tests: queue n fake requests of op from a C thread (bridge without a session)" },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef Session_getset[] = {
    { "ended", (getter)Session_get_ended, NULL, "the loop returned (or the session closed)",
      NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot Session_slots[] = {
    { Py_tp_new, Session_new },
    { Py_tp_dealloc, Session_dealloc },
    { Py_tp_methods, Session_methods },
    { Py_tp_getset, Session_getset },
    { Py_tp_doc, "Session(mountpoint=None, options=(), *, writeback_cache=False, "
                 "export_support=True, posix_acl=False, max_threads=4, max_write=1 MiB)" },
    { 0, NULL },
};

PyType_Spec pvf_py_session_spec = {
    .name = "pvfs._fusefront.Session",
    .basicsize = sizeof(SessionObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Session_slots,
};
