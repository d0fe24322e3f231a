/* module.c -- Python bindings of pvfs._native: the Engine type and the module itself.
 *
 * The engine proper (engine.c, handoff.c, sched.c, stream.c, conn.c) never touches Python;
 * this file turns Python arguments into jobs and completions into tuples, pyconn.c does the
 * same for attached connections and events(). Module state, not globals, holds
 * the Engine type (multi-phase init), as in CPython's selectmodule.c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <string.h>

#include "native.h"
#include "pvpy.h"

/* Defaults chosen from bench/results/engine_modes.json (see docs/native.md). */
#define PV_DEFAULT_READ_MODE "mmap"
#define PV_DEFAULT_WRITE_MODE "splice"
#define PV_DEFAULT_MMAP_WINDOW ((Py_ssize_t)8 << 20)

static const char *const read_modes[] = { "sendfile", "mmap", NULL };
static const char *const write_modes[] = { "pwrite", "splice", NULL };

static int mode_index(const char *const *names, const char *name)
{
    for (int i = 0; names[i] != NULL; i++) {
        if (strcmp(names[i], name) == 0)
            return i;
    }
    return -1;
}

static PyObject *Engine_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "algorithm", "window", "idle_timeout", "read_mode",
                              "write_mode", "mmap_window", "disk", "gather", NULL };
    module_state *st = PyType_GetModuleState(type);
    PyObject *disk = Py_None;
    const char *alg = "opt1", *rmode = PV_DEFAULT_READ_MODE, *wmode = PV_DEFAULT_WRITE_MODE;
    long long window = (long long)256 << 20;
    double idle = 30.0, gather = 0.0;
    Py_ssize_t mwin = PV_DEFAULT_MMAP_WINDOW;
    struct pv_engine_config cfg;
    struct pv_err err;
    EngineObject *self;
    int ri, wi;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|sLdssnOd:Engine", kwlist, &alg, &window,
                                     &idle, &rmode, &wmode, &mwin, &disk, &gather))
        return NULL;
    if (disk != Py_None && (st == NULL || !PyObject_TypeCheck(disk, st->disk_type)))
        return PyErr_Format(PyExc_TypeError, "disk must be a pvfs._native.Disk or None");
    cfg.disk = disk == Py_None ? NULL : pv_py_disk_model(disk);
    cfg.ops = pv_sched_find(alg);
    if (cfg.ops == NULL)
        return PyErr_Format(PyExc_ValueError, "unknown algorithm '%s'", alg);
    if (window <= 0)
        return PyErr_Format(PyExc_ValueError, "window must be > 0, not %lld", window);
    if (!(idle > 0.0) || isnan(idle))
        return PyErr_Format(PyExc_ValueError, "idle_timeout must be > 0");
    if (!(gather >= 0.0 && gather <= 10.0))
        return PyErr_Format(PyExc_ValueError, "gather must be 0..10 seconds");
    ri = mode_index(read_modes, rmode);
    wi = mode_index(write_modes, wmode);
    if (ri < 0 || wi < 0)
        return PyErr_Format(PyExc_ValueError, "unknown %s %s",
                            ri < 0 ? "read_mode" : "write_mode", ri < 0 ? rmode : wmode);
    if (mwin <= 0)
        return PyErr_Format(PyExc_ValueError, "mmap_window must be > 0");
    cfg.window = window;
    cfg.gather_ns = (int64_t)(gather * 1e9);
    /* An idle_timeout of years is "never"; keep the arithmetic far from overflow. */
    cfg.idle_ns = idle >= 1e9 ? (int64_t)1e18 : (int64_t)(idle * 1e9);
    if (cfg.idle_ns < 1)
        cfg.idle_ns = 1;
    cfg.read_mode = (enum pv_read_mode)ri;
    cfg.write_mode = (enum pv_write_mode)wi;
    cfg.mmap_window = (size_t)mwin;

    self = (EngineObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->attached = PyDict_New();
    if (self->attached == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    if (disk != Py_None)
        self->disk = Py_NewRef(disk);
    self->e = pv_engine_create(&cfg, &err);
    if (self->e == NULL) {
        Py_DECREF(self);
        return pv_raise(&err);
    }
    return (PyObject *)self;
}

static void Engine_dealloc(EngineObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    struct pv_engine *e = self->e;

    self->e = NULL;
    if (e != NULL) {
        /* Joining the loop may take a moment: let other threads run meanwhile. */
        Py_BEGIN_ALLOW_THREADS
        pv_engine_destroy(e);
        Py_END_ALLOW_THREADS
    }
    Py_CLEAR(self->attached);
    /* Only now: the loop that charged the disk is gone. */
    Py_CLEAR(self->disk);
    tp->tp_free(self);
    Py_DECREF(tp);
}

PyDoc_STRVAR(Engine_fileno_doc,
"fileno() -> int\n\n"
"The completion eventfd: readable when events() (or completions()) has something to\n"
"return.");

static PyObject *Engine_fileno(EngineObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(self->e->done_fd);
}

PyDoc_STRVAR(Engine_submit_doc,
"submit(job_id, sock_fd, file_fd, op, accesses, prefix=b'', inode=0, suffix=b'',\n"
"       size_at=-1, check=False, hold=False) -> None\n\n"
"Hand a job to the engine. accesses: packed little-endian int64 triples\n"
"(kind, file_offset, length) in stream order. OP_READ sends prefix, then each access\n"
"(ACC_FILE bytes of the file, ACC_ZERO zeros); OP_WRITE receives each access (ACC_FILE\n"
"stored at its offset, ACC_DISCARD dropped) and takes no prefix. suffix is sent after the\n"
"bulk if the job succeeded (a write's reply); hold=True leaves the connection waiting for\n"
"the next job instead (Python's reply, once it did more). On an attached connection the\n"
"job must follow a frame. The engine never closes either fd; the job's result arrives through\n"
"events() as (\"done\", ...) or completions().\n\n"
"On the job's first turn, on the engine's thread: check=True ends the job with err\n"
"ERR_STALE, nothing moved and the connection in step, if file_fd was unlinked (or fstat\n"
"fails); size_at >= 0 (reads) writes the file's size big-endian into the 8 bytes\n"
"prefix[size_at:size_at+8] and sends file bytes past it as zeros.\n\n"
"Raises:\n"
"    ValueError: malformed accesses or arguments, or the engine is closed.");

static PyObject *Engine_submit(EngineObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "job_id", "sock_fd", "file_fd", "op", "accesses", "prefix",
                              "inode", "suffix", "size_at", "check", "hold", NULL };
    long long id, size_at = -1;
    int check = 0, hold = 0;
    int sock, file, op;
    Py_buffer acc = { 0 }, prefix = { 0 }, suffix = { 0 };
    PyObject *inode_obj = NULL;
    unsigned long long inode = 0;
    struct pv_err err;
    struct pv_job *j;
    PyObject *ret = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Liiiy*|y*Oy*Lpp:submit", kwlist, &id,
                                     &sock, &file, &op, &acc, &prefix, &inode_obj, &suffix,
                                     &size_at, &check, &hold))
        return NULL;
    if (inode_obj != NULL) {
        inode = PyLong_AsUnsignedLongLong(inode_obj);
        if (inode == (unsigned long long)-1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError, "inode must be in 0..2**64-1");
            }
            goto out;
        }
    }
    j = pv_job_new(id, sock, file, op, acc.buf, (size_t)acc.len,
                   prefix.obj != NULL ? prefix.buf : NULL,
                   prefix.obj != NULL ? (size_t)prefix.len : 0,
                   suffix.obj != NULL ? suffix.buf : NULL,
                   suffix.obj != NULL ? (size_t)suffix.len : 0, inode, &err);
    if (j == NULL) {
        pv_raise(&err);
        goto out;
    }
    if (size_at >= 0 && (op != PV_OP_READ || prefix.obj == NULL || size_at > prefix.len - 8)) {
        pv_job_free(j);
        PyErr_SetString(PyExc_ValueError, "size_at must name 8 bytes of a read's prefix");
        goto out;
    }
    j->size_at = size_at < 0 ? -1 : size_at;
    j->check = check != 0;
    j->hold = hold != 0;
    if (pv_engine_submit(self->e, j, &err) < 0) {
        pv_job_free(j);
        pv_raise(&err);
        goto out;
    }
    ret = Py_NewRef(Py_None);
out:
    PyBuffer_Release(&acc);
    if (prefix.obj != NULL)
        PyBuffer_Release(&prefix);
    if (suffix.obj != NULL)
        PyBuffer_Release(&suffix);
    return ret;
}

PyDoc_STRVAR(Engine_completions_doc,
"completions() -> list[tuple[int, int, int, int, int, int]]\n\n"
"Drain the completion eventfd and return the finished jobs as (job_id, err, nbytes,\n"
"t_submit_ns, t_start_ns, t_done_ns); err is 0 or an errno, nbytes counts bulk bytes\n"
"(not the prefix), times are CLOCK_MONOTONIC ns and t_start_ns is 0 for a job that was\n"
"never served. May return an empty list after a spurious wake-up. Takes only jobs:\n"
"frames and closed connections stay queued for events() (and keep fileno() readable).");

static PyObject *Engine_completions(EngineObject *self, PyObject *Py_UNUSED(ignored))
{
    struct pv_event *list = pv_engine_take_completions(self->e), *next;
    PyObject *out = PyList_New(0);

    for (; list != NULL; list = next) {
        struct pv_job *j = pv_container_of(list, struct pv_job, ev);
        PyObject *t;
        next = list->next;
        if (out != NULL) {
            t = pv_py_done_tuple(NULL, j);
            if (t == NULL || PyList_Append(out, t) < 0)
                Py_CLEAR(out);
            Py_XDECREF(t);
        }
        pv_job_free(j);
    }
    return out;
}

PyDoc_STRVAR(Engine_info_doc,
"info() -> dict\n\n"
"algorithm, window, queued (submitted, not yet served), active (being served),\n"
"completed, bytes_read, bytes_written (bulk bytes), read_mode, write_mode, mmap_window,\n"
"attached (connections the loop holds), frames (headers read), closed.");

static PyObject *Engine_info(EngineObject *self, PyObject *Py_UNUSED(ignored))
{
    struct pv_engine *e = self->e;
    const char *alg;
    long long window;
    int closed;

    pthread_mutex_lock(&e->lock);
    alg = e->want_ops->so_name;
    window = e->want_window;
    closed = e->stopping;
    pthread_mutex_unlock(&e->lock);
    return Py_BuildValue("{s:s,s:L,s:L,s:L,s:L,s:L,s:L,s:s,s:s,s:n,s:L,s:L,s:O}",
                         "algorithm", alg, "window", window,
                         "queued", (long long)atomic_load(&e->n_queued),
                         "active", (long long)atomic_load(&e->n_active),
                         "completed", (long long)atomic_load(&e->n_completed),
                         "bytes_read", (long long)atomic_load(&e->bytes_read),
                         "bytes_written", (long long)atomic_load(&e->bytes_written),
                         "read_mode", read_modes[e->read_mode],
                         "write_mode", write_modes[e->write_mode],
                         "mmap_window", (Py_ssize_t)e->mmap_window,
                         "attached", (long long)atomic_load(&e->n_attached),
                         "frames", (long long)atomic_load(&e->n_frames),
                         "closed", closed ? Py_True : Py_False);
}

PyDoc_STRVAR(Engine_close_doc,
"close() -> None\n\n"
"Stop and join the service thread; unfinished jobs complete with ECANCELED, attached\n"
"connections get (\"closed\", conn_id, ECANCELED). Idempotent; fileno(), events() and\n"
"completions() keep working so those can be collected. Once close() returned the engine\n"
"touches no fd any more.");

static PyObject *Engine_close(EngineObject *self, PyObject *Py_UNUSED(ignored))
{
    Py_BEGIN_ALLOW_THREADS
    pv_engine_stop(self->e);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *Engine_enter(EngineObject *self, PyObject *Py_UNUSED(ignored))
{
    return Py_NewRef(self);
}

static PyObject *Engine_exit(EngineObject *self, PyObject *Py_UNUSED(args))
{
    return Engine_close(self, NULL);
}

static PyObject *Engine_get_algorithm(EngineObject *self, void *Py_UNUSED(closure))
{
    const char *name;

    pthread_mutex_lock(&self->e->lock);
    name = self->e->want_ops->so_name;
    pthread_mutex_unlock(&self->e->lock);
    return PyUnicode_FromString(name);
}

static int Engine_set_algorithm(EngineObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    const struct pv_sched_ops *ops;
    const char *name;
    struct pv_err err;

    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "cannot delete algorithm");
        return -1;
    }
    if (!PyUnicode_Check(value)) {
        PyErr_Format(PyExc_ValueError, "algorithm must be one of opt1..opt4, not %R", value);
        return -1;
    }
    name = PyUnicode_AsUTF8(value);
    if (name == NULL)
        return -1;
    ops = pv_sched_find(name);
    if (ops == NULL) {
        PyErr_Format(PyExc_ValueError, "unknown algorithm %R", value);
        return -1;
    }
    if (pv_engine_set_algorithm(self->e, ops, &err) < 0) {
        pv_raise(&err);
        return -1;
    }
    return 0;
}

static PyObject *Engine_get_window(EngineObject *self, void *Py_UNUSED(closure))
{
    long long w;

    pthread_mutex_lock(&self->e->lock);
    w = self->e->want_window;
    pthread_mutex_unlock(&self->e->lock);
    return PyLong_FromLongLong(w);
}

static int Engine_set_window(EngineObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    long long w;
    struct pv_err err;

    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "cannot delete window");
        return -1;
    }
    w = PyLong_AsLongLong(value);
    if (w == -1 && PyErr_Occurred())
        return -1;
    if (w <= 0) {
        PyErr_Format(PyExc_ValueError, "window must be > 0, not %lld", w);
        return -1;
    }
    if (pv_engine_set_window(self->e, w, &err) < 0) {
        pv_raise(&err);
        return -1;
    }
    return 0;
}

static PyObject *Engine_get_gather(EngineObject *self, void *Py_UNUSED(closure))
{
    int64_t g;

    pthread_mutex_lock(&self->e->lock);
    g = self->e->want_gather_ns;
    pthread_mutex_unlock(&self->e->lock);
    return PyFloat_FromDouble((double)g / 1e9);
}

static int Engine_set_gather(EngineObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    double g;
    struct pv_err err;

    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "cannot delete gather");
        return -1;
    }
    g = PyFloat_AsDouble(value);
    if (g == -1.0 && PyErr_Occurred())
        return -1;
    if (!(g >= 0.0 && g <= 10.0)) {
        PyErr_SetString(PyExc_ValueError, "gather must be 0..10 seconds");
        return -1;
    }
    if (pv_engine_set_gather(self->e, (int64_t)(g * 1e9), &err) < 0) {
        pv_raise(&err);
        return -1;
    }
    return 0;
}

static PyMethodDef Engine_methods[] = {
    { "fileno", (PyCFunction)Engine_fileno, METH_NOARGS, Engine_fileno_doc },
    { "submit", (PyCFunction)(void (*)(void))Engine_submit, METH_VARARGS | METH_KEYWORDS,
      Engine_submit_doc },
    { "completions", (PyCFunction)Engine_completions, METH_NOARGS, Engine_completions_doc },
    { "attach", (PyCFunction)(void (*)(void))pv_py_attach, METH_VARARGS | METH_KEYWORDS,
      pv_attach_doc },
    { "detach", (PyCFunction)(void (*)(void))pv_py_detach, METH_VARARGS | METH_KEYWORDS,
      pv_detach_doc },
    { "events", (PyCFunction)pv_py_events, METH_NOARGS, pv_events_doc },
    { "fast_setup", (PyCFunction)(void (*)(void))pv_py_fast_setup,
      METH_VARARGS | METH_KEYWORDS, pv_fast_setup_doc },
    { "fast_grant", (PyCFunction)(void (*)(void))pv_py_fast_grant,
      METH_VARARGS | METH_KEYWORDS, pv_fast_grant_doc },
    { "fast_revoke", (PyCFunction)(void (*)(void))pv_py_fast_revoke,
      METH_VARARGS | METH_KEYWORDS, pv_fast_revoke_doc },
    { "fast_block_writes", (PyCFunction)(void (*)(void))pv_py_fast_block_writes,
      METH_VARARGS | METH_KEYWORDS, pv_fast_block_writes_doc },
    { "fast_records", (PyCFunction)pv_py_fast_records, METH_NOARGS, pv_fast_records_doc },
    { "fast_info", (PyCFunction)pv_py_fast_info, METH_NOARGS, pv_fast_info_doc },
    { "info", (PyCFunction)Engine_info, METH_NOARGS, Engine_info_doc },
    { "close", (PyCFunction)Engine_close, METH_NOARGS, Engine_close_doc },
    { "__enter__", (PyCFunction)Engine_enter, METH_NOARGS, NULL },
    { "__exit__", (PyCFunction)Engine_exit, METH_VARARGS, NULL },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef Engine_getset[] = {
    { "algorithm", (getter)Engine_get_algorithm, (setter)Engine_set_algorithm,
      "Scheduling algorithm, 'opt1'..'opt4'; may be switched at run time.", NULL },
    { "window", (getter)Engine_get_window, (setter)Engine_set_window,
      "opt3's window in bytes (> 0); jobs within window/2 of the last position.", NULL },
    { "gather", (getter)Engine_get_gather, (setter)Engine_set_gather,
      "opt4: seconds the first request of a busy period waits for the others (0: off).",
      NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

PyDoc_STRVAR(Engine_doc,
"Engine(algorithm='opt1', window=256 MiB, idle_timeout=30.0, read_mode=..., write_mode=...,\n"
"       mmap_window=8 MiB, disk=None, gather=0.0)\n\n"
"The I/O daemon's service loop: one native thread moving the bytes of submitted jobs\n"
"between sockets and files, choosing the next job by the scheduling algorithm.");

static PyType_Slot Engine_slots[] = {
    { Py_tp_new, Engine_new },
    { Py_tp_dealloc, Engine_dealloc },
    { Py_tp_methods, Engine_methods },
    { Py_tp_getset, Engine_getset },
    { Py_tp_doc, (void *)Engine_doc },
    { 0, NULL },
};

static PyType_Spec Engine_spec = {
    .name = "pvfs._native.Engine",
    .basicsize = sizeof(EngineObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Engine_slots,
};

static PyMethodDef module_methods[] = {
    { "transfer", (PyCFunction)(void (*)(void))pv_py_transfer, METH_VARARGS | METH_KEYWORDS,
      pv_transfer_doc },
    { "stripe_transfer", (PyCFunction)(void (*)(void))pv_py_stripe_transfer,
      METH_VARARGS | METH_KEYWORDS, pv_stripe_transfer_doc },
    { "stripe_send", (PyCFunction)(void (*)(void))pv_py_stripe_send,
      METH_VARARGS | METH_KEYWORDS, pv_stripe_send_doc },
    { "fast_plan", (PyCFunction)(void (*)(void))pv_py_fast_plan,
      METH_VARARGS | METH_KEYWORDS, pv_fast_plan_doc },
    { NULL, NULL, 0, NULL },
};

static PyObject *names_tuple(const char *const *names)
{
    Py_ssize_t n = 0;
    PyObject *t;

    while (names[n] != NULL)
        n++;
    t = PyTuple_New(n);
    for (Py_ssize_t i = 0; t != NULL && i < n; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (s == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

static int add_names(PyObject *m, const char *name, const char *const *names)
{
    PyObject *t = names_tuple(names);
    int rc = PyModule_AddObjectRef(m, name, t);

    Py_XDECREF(t);
    return rc;
}

static int module_exec(PyObject *m)
{
    module_state *st = PyModule_GetState(m);
    const char *algs[8];
    size_t i;

    st->s_frame = PyUnicode_InternFromString("frame");
    st->s_done = PyUnicode_InternFromString("done");
    st->s_closed = PyUnicode_InternFromString("closed");
    if (st->s_frame == NULL || st->s_done == NULL || st->s_closed == NULL)
        return -1;
    st->engine_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Engine_spec, NULL);
    if (st->engine_type == NULL)
        return -1;
    if (PyModule_AddType(m, st->engine_type) < 0)
        return -1;
    if (pv_py_disk_register(m, &st->disk_type) < 0)
        return -1;
    for (i = 0; pv_sched_all[i] != NULL && i < 7; i++)
        algs[i] = pv_sched_all[i]->so_name;
    algs[i] = NULL;
    if (PyModule_AddIntConstant(m, "OP_READ", PV_OP_READ) < 0
        || PyModule_AddIntConstant(m, "OP_WRITE", PV_OP_WRITE) < 0
        || PyModule_AddIntConstant(m, "ACC_FILE", PV_ACC_FILE) < 0
        || PyModule_AddIntConstant(m, "ACC_ZERO", PV_ACC_ZERO) < 0
        || PyModule_AddIntConstant(m, "ACC_DISCARD", PV_ACC_DISCARD) < 0
        || PyModule_AddIntConstant(m, "ERR_STALE", PV_ERR_STALE) < 0
        || PyModule_AddStringConstant(m, "DEFAULT_READ_MODE", PV_DEFAULT_READ_MODE) < 0
        || PyModule_AddStringConstant(m, "DEFAULT_WRITE_MODE", PV_DEFAULT_WRITE_MODE) < 0
        || add_names(m, "ALGORITHMS", algs) < 0
        || add_names(m, "READ_MODES", read_modes) < 0
        || add_names(m, "WRITE_MODES", write_modes) < 0)
        return -1;
    return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    module_state *st = PyModule_GetState(m);
    Py_VISIT(st->engine_type);
    Py_VISIT(st->disk_type);
    Py_VISIT(st->s_frame);
    Py_VISIT(st->s_done);
    Py_VISIT(st->s_closed);
    return 0;
}

static int module_clear(PyObject *m)
{
    module_state *st = PyModule_GetState(m);
    Py_CLEAR(st->engine_type);
    Py_CLEAR(st->disk_type);
    Py_CLEAR(st->s_frame);
    Py_CLEAR(st->s_done);
    Py_CLEAR(st->s_closed);
    return 0;
}

static void module_free(void *m)
{
    module_clear((PyObject *)m);
}

static PyModuleDef_Slot module_slots[] = {
    { Py_mod_exec, module_exec },
    { 0, NULL },
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pvfs._native",
    .m_doc = "pvfs native code: the I/O daemon engine (Engine) and the client's "
             "scatter/gather (transfer).",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__native(void)
{
    return PyModuleDef_Init(&native_module);
}
