/* pydisk.c -- the Python face of the emulated disk (disk.c): pvfs._native.Disk.
 *
 * One Disk object owns one struct pv_disk. An Engine created with disk=... charges its data
 * path to it (and keeps a reference, so the disk outlives the engine's thread); Python asks
 * the same object what is cached (the reactive selector), drops its cache (cold runs), reads
 * its counters, and calls the model directly in unit tests.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>

#include "native.h"
#include "pvpy.h"

typedef struct {
    PyObject_HEAD
    struct pv_disk d;
    bool ready;                   /* d initialised (pv_disk_fini needed) */
} DiskObject;

struct pv_disk *pv_py_disk_model(PyObject *disk)
{
    return &((DiskObject *)disk)->d;
}

static PyObject *Disk_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "read_bps", "write_bps", "seek_min", "seek_max", "rotation",
                              "span", "cache_bytes", "readahead", "dirty_background_ratio",
                              "dirty_ratio", "dirty_expire", NULL };
    struct pv_disk_params p;
    double smin, smax, rot, bg = 0.10, ratio = 0.20, expire = 30.0;
    long long span, cache, ra = 128 << 10;
    struct pv_err err;
    DiskObject *self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "dddddLL|Lddd:Disk", kwlist, &p.read_bps,
                                     &p.write_bps, &smin, &smax, &rot, &span, &cache, &ra, &bg,
                                     &ratio, &expire))
        return NULL;
    if (!(expire >= 0 && expire < 1e9))
        return PyErr_Format(PyExc_ValueError, "need 0 <= dirty_expire < 1e9 (seconds)");
    if (!(smin >= 0 && smax >= smin && rot >= 0 && smax < 1e6 && rot < 1e6))
        return PyErr_Format(PyExc_ValueError, "need 0 <= seek_min <= seek_max, rotation >= 0 "
                                              "(seconds)");
    p.seek_min_ns = (int64_t)llround(smin * 1e9);
    p.seek_max_ns = (int64_t)llround(smax * 1e9);
    p.rot_ns = (int64_t)llround(rot * 1e9);
    p.span = span;
    p.cache_bytes = cache;
    p.readahead = ra;
    p.dirty_bg_ratio = bg;
    p.dirty_ratio = ratio;
    p.dirty_expire_ns = (int64_t)llround(expire * 1e9);
    self = (DiskObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if (pv_disk_init(&self->d, &p, &err) < 0) {
        Py_DECREF(self);
        return pv_raise(&err);
    }
    self->ready = true;
    return (PyObject *)self;
}

static void Disk_dealloc(DiskObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->ready)
        pv_disk_fini(&self->d);
    tp->tp_free(self);
    Py_DECREF(tp);
}

PyDoc_STRVAR(Disk_access_doc,
"access(ino, offset, length, write=False, now=0) -> (service_s, done_s)\n\n"
"Charge one access to the model, as the engine does. A read (a cache miss): the seconds it\n"
"takes (positioning + transfer) and when it completes, queued behind earlier accesses\n"
"(now and done on the caller's clock, seconds); its pages become cached. A write: its pages\n"
"become dirty; the seconds the writer waits (0 unless throttled or a dirty page had to be\n"
"evicted) and when it may go on. Either first runs the write-back due by now.");

static PyObject *Disk_access(DiskObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "ino", "offset", "length", "write", "now", NULL };
    unsigned long long ino;
    long long off, len;
    int write = 0;
    double now = 0.0;
    int64_t cost, done;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KLL|pd:access", kwlist, &ino, &off, &len,
                                     &write, &now))
        return NULL;
    if (off < 0 || len < 0)
        return PyErr_Format(PyExc_ValueError, "offset and length must be >= 0");
    cost = pv_disk_access(&self->d, ino, off, len, write, (int64_t)llround(now * 1e9), &done,
                          NULL);
    return Py_BuildValue("dd", (double)cost / 1e9, (double)done / 1e9);
}

PyDoc_STRVAR(Disk_cached_doc,
"cached(ino, offset, length) -> int\n\n"
"Bytes of [offset, offset+length) of the file in the model's page cache (no side effect).");

static PyObject *Disk_cached(DiskObject *self, PyObject *args)
{
    unsigned long long ino;
    long long off, len;
    int64_t n;

    if (!PyArg_ParseTuple(args, "KLL:cached", &ino, &off, &len))
        return NULL;
    if (off < 0 || len < 0)
        return PyErr_Format(PyExc_ValueError, "offset and length must be >= 0");
    /* Microseconds under the disk's lock: keeping the GIL is cheaper than handing it over
     * (the reactive selector calls this on every request). */
    n = pv_disk_cached(&self->d, ino, off, len);
    return PyLong_FromLongLong(n);
}

/* now: seconds on the model's clock; None: CLOCK_MONOTONIC now, as the engine's. */
static int now_arg(PyObject *o, int64_t *now)
{
    double t;

    if (o == NULL || o == Py_None) {
        *now = pv_now_ns();
        return 0;
    }
    t = PyFloat_AsDouble(o);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    *now = (int64_t)llround(t * 1e9);
    return 0;
}

PyDoc_STRVAR(Disk_sync_doc,
"sync(ino, now=None) -> float\n\n"
"fsync: write back the file's dirty pages; when they are all on the disk (seconds on the\n"
"model's clock; now=None: time.monotonic(), the engine's clock).");

static PyObject *Disk_sync(DiskObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "ino", "now", NULL };
    unsigned long long ino;
    PyObject *o = NULL;
    int64_t now, done;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "K|O:sync", kwlist, &ino, &o)
        || now_arg(o, &now) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    done = pv_disk_sync(&self->d, ino, now);
    Py_END_ALLOW_THREADS
    return PyFloat_FromDouble((double)done / 1e9);
}

PyDoc_STRVAR(Disk_drop_doc,
"drop(now=None) -> float\n\n"
"Write back every dirty page, then empty the page cache (sync; echo 3 > drop_caches); when\n"
"the write-back is done (seconds, the clock of sync()).");

static PyObject *Disk_drop(DiskObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "now", NULL };
    PyObject *o = NULL;
    int64_t now, done;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:drop", kwlist, &o) || now_arg(o, &now) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    done = pv_disk_drop(&self->d, now);
    Py_END_ALLOW_THREADS
    return PyFloat_FromDouble((double)done / 1e9);
}

static PyObject *Disk_forget(DiskObject *self, PyObject *args)
{
    unsigned long long ino;

    if (!PyArg_ParseTuple(args, "K:forget", &ino))
        return NULL;
    pv_disk_forget(&self->d, ino);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(Disk_position_doc,
"position(from_addr, to_addr, write=False) -> float\n\n"
"Seconds to move the head from one disk address to another (0 when equal; a short forward\n"
"gap is read through; else seek by sqrt of the distance plus half a revolution).");

static PyObject *Disk_position(DiskObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "from_addr", "to_addr", "write", NULL };
    long long a, b;
    int write = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "LL|p:position", kwlist, &a, &b, &write))
        return NULL;
    return PyFloat_FromDouble((double)pv_disk_position_ns(&self->d, a, b, write) / 1e9);
}

static PyObject *Disk_addr(DiskObject *self, PyObject *args)
{
    unsigned long long ino;
    long long off;

    if (!PyArg_ParseTuple(args, "KL:addr", &ino, &off))
        return NULL;
    return PyLong_FromLongLong(pv_disk_addr(&self->d, ino, off));
}

PyDoc_STRVAR(Disk_info_doc,
"info() -> dict\n\n"
"The parameters and counters: accesses, busy_s (modelled disk time), miss_bytes (read from\n"
"the modelled disk), hit_bytes (served from its cache), write_bytes (written to the modelled\n"
"disk), cached_bytes, dirty_bytes.");

static PyObject *Disk_info(DiskObject *self, PyObject *Py_UNUSED(ignored))
{
    struct pv_disk *d = &self->d;
    long long used, dirty;

    pthread_mutex_lock(&d->lock);
    used = (long long)(d->used - d->nfree) * PV_DISK_PAGE;
    dirty = (long long)d->ndirty * PV_DISK_PAGE;
    pthread_mutex_unlock(&d->lock);
    return Py_BuildValue(
        "{s:d,s:d,s:d,s:d,s:d,s:L,s:L,s:L,s:d,s:d,s:d,s:L,s:d,s:L,s:L,s:L,s:L,s:L}",
        "read_bps", d->p.read_bps, "write_bps", d->p.write_bps,
        "seek_min", (double)d->p.seek_min_ns / 1e9, "seek_max", (double)d->p.seek_max_ns / 1e9,
        "rotation", (double)d->p.rot_ns / 1e9, "span", (long long)d->p.span,
        "cache_bytes", (long long)d->p.cache_bytes, "readahead", (long long)d->p.readahead,
        "dirty_background_ratio", d->p.dirty_bg_ratio, "dirty_ratio", d->p.dirty_ratio,
        "dirty_expire", (double)d->p.dirty_expire_ns / 1e9,
        "accesses", (long long)atomic_load(&d->accesses),
        "busy_s", (double)atomic_load(&d->busy_ns) / 1e9,
        "miss_bytes", (long long)atomic_load(&d->miss_bytes),
        "hit_bytes", (long long)atomic_load(&d->hit_bytes),
        "write_bytes", (long long)atomic_load(&d->write_bytes), "cached_bytes", used,
        "dirty_bytes", dirty);
}

static PyMethodDef Disk_methods[] = {
    { "access", (PyCFunction)(void (*)(void))Disk_access, METH_VARARGS | METH_KEYWORDS,
      Disk_access_doc },
    { "cached", (PyCFunction)Disk_cached, METH_VARARGS, Disk_cached_doc },
    { "sync", (PyCFunction)(void (*)(void))Disk_sync, METH_VARARGS | METH_KEYWORDS,
      Disk_sync_doc },
    { "drop", (PyCFunction)(void (*)(void))Disk_drop, METH_VARARGS | METH_KEYWORDS,
      Disk_drop_doc },
    { "forget", (PyCFunction)Disk_forget, METH_VARARGS,
      "forget(ino) -> None\n\nThe file was removed: its dirty pages are discarded unwritten." },
    { "position", (PyCFunction)(void (*)(void))Disk_position, METH_VARARGS | METH_KEYWORDS,
      Disk_position_doc },
    { "addr", (PyCFunction)Disk_addr, METH_VARARGS,
      "addr(ino, offset) -> int\n\nThe disk address the model gives a file byte." },
    { "info", (PyCFunction)Disk_info, METH_NOARGS, Disk_info_doc },
    { NULL, NULL, 0, NULL },
};

PyDoc_STRVAR(Disk_doc,
"Disk(read_bps, write_bps, seek_min, seek_max, rotation, span, cache_bytes,\n"
"     readahead=128 KiB, dirty_background_ratio=0.1, dirty_ratio=0.2, dirty_expire=30)\n\n"
"An emulated disk for Engine(disk=...): a deterministic timing model (seek by distance,\n"
"half a revolution per repositioning, transfer rate) behind an LRU page cache that writes\n"
"back as Linux's does. Times in seconds, rates in bytes per second, sizes in bytes.");

static PyType_Slot Disk_slots[] = {
    { Py_tp_new, Disk_new },
    { Py_tp_dealloc, Disk_dealloc },
    { Py_tp_methods, Disk_methods },
    { Py_tp_doc, (void *)Disk_doc },
    { 0, NULL },
};

static PyType_Spec Disk_spec = {
    .name = "pvfs._native.Disk",
    .basicsize = sizeof(DiskObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Disk_slots,
};

int pv_py_disk_register(PyObject *m, PyTypeObject **type)
{
    *type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Disk_spec, NULL);
    if (*type == NULL)
        return -1;
    return PyModule_AddType(m, *type);
}
