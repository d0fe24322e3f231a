/* pywrites.c -- the Session methods that keep writes.c's state: the handles whose flush
 * needs nothing (fuse/cfront.py marks them quiet), the files whose close a write delegation
 * keeps (its mirror of fuse/delegations.py, cmirrors.KeptFiles), the handles whose writes are
 * answered once queued (behind) and the bound on their bytes, and the test hooks that ask
 * what a worker would answer without a kernel.
 */
#include "pyfront.h"

#include <errno.h>

/* ------------------------------------------------------------------ flushes */
PyObject *pvf_py_quiet(SessionObject *self, PyObject *args)
{
    unsigned long long fh;
    int writable = 0;

    if (!PyArg_ParseTuple(args, "K|p:quiet", &fh, &writable))
        return NULL;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    if (pvf_quiet_add(&self->f, fh, writable) < 0)
        return errno == ENOMEM ? PyErr_NoMemory() : PyErr_Format(PyExc_ValueError, "bad fh");
    Py_RETURN_NONE;
}

PyObject *pvf_py_is_quiet(SessionObject *self, PyObject *args)
{
    unsigned long long fh;
    int remove = 0;

    if (!PyArg_ParseTuple(args, "K|p:is_quiet", &fh, &remove))
        return NULL;
    return PyBool_FromLong(pvf_quiet_has(&self->f, fh, remove));
}

/* The files whose close a write delegation keeps (fuse/delegations.py's mirror): their
 * flushes answered in C. A mark that finds no memory is not made (returns False): its
 * flushes go to Python, as they may always. */
PyObject *pvf_py_keep_file(SessionObject *self, PyObject *args)
{
    unsigned long long ino;

    if (!PyArg_ParseTuple(args, "K:keep_file", &ino))
        return NULL;
    return PyBool_FromLong(ino != 0 && pvf_kept_mark(&self->f, ino) == 0);
}

PyObject *pvf_py_drop_file(SessionObject *self, PyObject *args)
{
    unsigned long long ino;

    if (!PyArg_ParseTuple(args, "K:drop_file", &ino))
        return NULL;
    pvf_kept_unmark(&self->f, ino);
    Py_RETURN_NONE;
}

PyObject *pvf_py_drop_files(SessionObject *self, PyObject *ignored)
{
    (void)ignored;
    pvf_kept_clear(&self->f);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ writes behind */
PyObject *pvf_py_behind(SessionObject *self, PyObject *args)
{
    unsigned long long fh;

    if (!PyArg_ParseTuple(args, "K:behind", &fh))
        return NULL;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    if (pvf_behind_add(&self->f, fh) < 0)
        return errno == ENOMEM ? PyErr_NoMemory() : PyErr_Format(PyExc_ValueError, "bad fh");
    Py_RETURN_NONE;
}

PyObject *pvf_py_behind_drop(SessionObject *self, PyObject *args)
{
    unsigned long long fh;

    if (!PyArg_ParseTuple(args, "K:behind_drop", &fh))
        return NULL;
    return PyBool_FromLong(pvf_behind_has(&self->f, fh, 1));
}

PyObject *pvf_py_behind_applied(SessionObject *self, PyObject *args)
{
    unsigned long long n;

    if (!PyArg_ParseTuple(args, "K:behind_applied", &n))
        return NULL;
    pvf_behind_applied(&self->f, n);
    Py_RETURN_NONE;
}

PyObject *pvf_py_behind_limit(SessionObject *self, PyObject *args)
{
    unsigned long long n;

    if (!PyArg_ParseTuple(args, "K:behind_limit", &n))
        return NULL;
    pthread_mutex_lock(&self->f.lock);
    self->f.behind_max = n;
    pthread_mutex_unlock(&self->f.lock);
    Py_RETURN_NONE;
}

/* Tests: what the workers do on a write (written=True) or a forget (False) of ino, and
 * whether a flush of (fh, ino) is answered in C. */
PyObject *pvf_py_flush_here(SessionObject *self, PyObject *args)
{
    unsigned long long fh, ino;

    if (!PyArg_ParseTuple(args, "KK:_flush_here", &fh, &ino))
        return NULL;
    return PyBool_FromLong(pvf_flush_here(&self->f, fh, ino));
}

PyObject *pvf_py_written(SessionObject *self, PyObject *args)
{
    unsigned long long ino;
    int written;

    if (!PyArg_ParseTuple(args, "Kp:_written", &ino, &written))
        return NULL;
    if (written)
        pvf_written(&self->f, ino);
    else
        pvf_unwritten(&self->f, ino);
    Py_RETURN_NONE;
}

/* Tests: what a worker does on a write of len bytes of ino through fh (pvf_written, then
 * whether it is answered here -- behind -- as op_write asks). */
PyObject *pvf_py_wrote(SessionObject *self, PyObject *args)
{
    unsigned long long fh, ino, len;

    if (!PyArg_ParseTuple(args, "KKK:_wrote", &fh, &ino, &len))
        return NULL;
    pvf_written(&self->f, ino);
    return PyBool_FromLong(pvf_behind_take(&self->f, fh, ino, (size_t)len));
}
