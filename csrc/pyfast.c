/* pyfast.c -- Python bindings of the fast path (fast.c): the Engine's grants and records,
 * and fast_plan(), the module function the tests use to hold the C reader against Python's.
 */
#include "pvpy.h"

#include <errno.h>

#include "native.h"

const char pv_fast_setup_doc[] =
"fast_setup(enabled, index, niods) -> None\n\n"
"Serve granted reads and writes without Python (enabled), as I/O daemon index of niods.\n"
"Disabled, every frame is posted as before.";

PyObject *pv_py_fast_setup(EngineObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "enabled", "index", "niods", NULL };
    int enabled, index, niods;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "pii:fast_setup", kwlist, &enabled,
                                     &index, &niods))
        return NULL;
    if (niods < 1 || index < 0 || index >= niods)
        return PyErr_Format(PyExc_ValueError, "index %d of %d I/O daemons", index, niods);
    pv_fast_set(&self->e->fast, enabled != 0, index, niods);
    Py_RETURN_NONE;
}

static int inode_arg(PyObject *o, void *out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(o);

    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return 0;
    if (v == 0 || v > (unsigned long long)INT64_MAX) {
        PyErr_SetString(PyExc_ValueError, "inode must be in 1..2**63-1");
        return 0;
    }
    *(uint64_t *)out = v;
    return 1;
}

const char pv_fast_grant_doc[] =
"fast_grant(ino, fd, write) -> bool\n\n"
"Let the engine serve reads of ino (and writes, if write) on a dup of fd, the daemon's\n"
"cached descriptor. Granted again with another fd, the grant follows it. False: no room\n"
"(every grant in use).";

PyObject *pv_py_fast_grant(EngineObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "ino", "fd", "write", NULL };
    uint64_t ino;
    int fd, write, r;
    struct pv_err err;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&ip:fast_grant", kwlist, inode_arg, &ino,
                                     &fd, &write))
        return NULL;
    if (fd < 0)
        return PyErr_Format(PyExc_ValueError, "fd must be >= 0, not %d", fd);
    r = pv_fast_grant(&self->e->fast, ino, fd, write != 0, &err);
    if (r < 0)
        return pv_raise(&err);
    return PyBool_FromLong(r);
}

const char pv_fast_revoke_doc[] =
"fast_revoke(ino) -> None\n\n"
"Forget ino's grant (its descriptor goes: unlinked, forgotten). Jobs running on it finish.";

PyObject *pv_py_fast_revoke(EngineObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "ino", NULL };
    uint64_t ino;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&:fast_revoke", kwlist, inode_arg, &ino))
        return NULL;
    pv_fast_revoke(&self->e->fast, ino);
    Py_RETURN_NONE;
}

const char pv_fast_block_writes_doc[] =
"fast_block_writes(ino=0) -> int\n\n"
"No more writes of ino (0: of any file) go by without Python; returns the writes of it the\n"
"engine has in flight now.";

PyObject *pv_py_fast_block_writes(EngineObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "ino", NULL };
    unsigned long long ino = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|K:fast_block_writes", kwlist, &ino))
        return NULL;
    return PyLong_FromLongLong(pv_fast_block_writes(&self->e->fast, ino));
}

const char pv_fast_records_doc[] =
"fast_records() -> list[tuple]\n\n"
"The fast jobs finished since the last call, oldest first: (ino, op, err, nbytes, want,\n"
"regions, lo, hi, logical, t_submit_ns, t_start_ns, t_done_ns); op 'read' or 'write',\n"
"nbytes moved, want the stream's length, regions/lo/hi/logical of its description.";

PyObject *pv_py_fast_records(EngineObject *self, PyObject *Py_UNUSED(ignored))
{
    struct pv_fast_rec recs[256];
    PyObject *out = PyList_New(0);
    size_t n;

    if (out == NULL)
        return NULL;
    do {
        n = pv_fast_records(&self->e->fast, recs, sizeof(recs) / sizeof(recs[0]));
        for (size_t i = 0; i < n; i++) {
            const struct pv_fast_rec *r = &recs[i];
            PyObject *t = Py_BuildValue("(KsiLLLLLLLLL)", (unsigned long long)r->ino,
                                        r->op == PV_OP_READ ? "read" : "write", r->err,
                                        (long long)r->nbytes, (long long)r->want,
                                        (long long)r->regions, (long long)r->lo,
                                        (long long)r->hi, (long long)r->logical,
                                        (long long)r->t_submit, (long long)r->t_start,
                                        (long long)r->t_done);
            if (t == NULL || PyList_Append(out, t) < 0) {
                /* The records taken are lost with the error: only out of memory. */
                Py_XDECREF(t);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(t);
        }
    } while (n == sizeof(recs) / sizeof(recs[0]));
    return out;
}

const char pv_fast_info_doc[] =
"fast_info() -> dict\n\n"
"enabled, grants (inodes granted now), jobs (requests served without Python), declined\n"
"(read/write/other headers left to Python while enabled or not), pending (records not\n"
"taken yet).";

PyObject *pv_py_fast_info(EngineObject *self, PyObject *Py_UNUSED(ignored))
{
    struct pv_fast_counts c;

    pv_fast_counts(&self->e->fast, &c);
    return Py_BuildValue("{s:O,s:L,s:L,s:L,s:L}", "enabled", c.enabled ? Py_True : Py_False,
                         "grants", (long long)c.grants, "jobs", (long long)c.jobs,
                         "declined", (long long)c.declined, "pending", (long long)c.pending);
}

const char pv_fast_plan_doc[] =
"fast_plan(header, bulk_len, index, niods) -> dict | None\n\n"
"What the engine's fast path makes of a frame header (msgpack bytes) at I/O daemon index\n"
"of niods: None where it leaves the request to Python, else {op, ino, stripe, regions,\n"
"pieces: [(buf_off, local_off, length)], nbytes}. For tests (it serves nothing).";

PyObject *pv_py_fast_plan(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "header", "bulk_len", "index", "niods", NULL };
    Py_buffer hdr;
    unsigned long long bulk;
    int index, niods;
    struct pv_fast_plan pl;
    PyObject *regions = NULL, *pieces = NULL, *out = NULL;
    int r;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*Kii:fast_plan", kwlist, &hdr, &bulk,
                                     &index, &niods))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    r = pv_fast_plan(hdr.buf, (size_t)hdr.len, bulk, index, niods, &pl);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&hdr);
    if (r < 0)
        Py_RETURN_NONE;
    regions = PyList_New((Py_ssize_t)pl.rq.nregions);
    pieces = PyList_New((Py_ssize_t)pl.npieces);
    if (regions == NULL || pieces == NULL)
        goto out;
    for (size_t i = 0; i < pl.rq.nregions; i++) {
        PyObject *t = Py_BuildValue("(LL)", (long long)pl.rq.regions[2 * i],
                                    (long long)pl.rq.regions[2 * i + 1]);
        if (t == NULL)
            goto out;
        PyList_SET_ITEM(regions, (Py_ssize_t)i, t);
    }
    for (size_t i = 0; i < pl.npieces; i++) {
        PyObject *t = Py_BuildValue("(LLL)", (long long)pl.pieces[i].buf,
                                    (long long)pl.pieces[i].local,
                                    (long long)pl.pieces[i].len);
        if (t == NULL)
            goto out;
        PyList_SET_ITEM(pieces, (Py_ssize_t)i, t);
    }
    out = Py_BuildValue("{s:s,s:K,s:(LLL),s:O,s:O,s:L}",
                        "op", pl.rq.op == PV_OP_READ ? "read" : "write",
                        "ino", (unsigned long long)pl.rq.ino, "stripe", (long long)pl.rq.base,
                        (long long)pl.rq.pcount, (long long)pl.rq.ssize, "regions", regions,
                        "pieces", pieces, "nbytes", (long long)pl.nbytes);
out:
    Py_XDECREF(regions);
    Py_XDECREF(pieces);
    pv_fast_plan_free(&pl);
    return out;
}
