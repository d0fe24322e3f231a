/* pyanswers.c -- the Session methods that keep answers.c's and names.c's state: leased
 * directories' and files' attributes and the session's end (fuse/cfront.py's mirror of
 * fuse/leases.py), the security.capability probes Python's cache knows absent
 * (fuse/xattrs.py), leased directories' names, and the test hooks that ask what a worker
 * would answer without a kernel.
 */
#include "pyfront.h"

#include <errno.h>

PyObject *pvf_py_keep_dir(SessionObject *self, PyObject *args)
{
    unsigned long long ino;
    PyObject *entry;
    struct fuse_entry_param e;

    if (!PyArg_ParseTuple(args, "KO:keep_dir", &ino, &entry))
        return NULL;
    if (pvf_py_fill_entry(PyType_GetModuleState(Py_TYPE(self)), entry, &e) < 0)
        return NULL;
    if (!S_ISDIR(e.attr.st_mode) || (uint64_t)e.attr.st_ino != ino)
        return PyErr_Format(PyExc_ValueError, "keep_dir: the attributes of directory %llu",
                            ino);
    if (pvf_dir_keep(&self->f, ino, &e.attr) < 0)
        return errno == ENOMEM ? PyErr_NoMemory() : PyErr_Format(PyExc_ValueError, "bad ino");
    Py_RETURN_NONE;
}

/* A leased regular file's attributes (dropped by the workers at its next write or size
 * change, writes.c). */
PyObject *pvf_py_keep_file_attrs(SessionObject *self, PyObject *args)
{
    unsigned long long ino;
    PyObject *entry;
    struct fuse_entry_param e;

    if (!PyArg_ParseTuple(args, "KO:keep_file_attrs", &ino, &entry))
        return NULL;
    if (pvf_py_fill_entry(PyType_GetModuleState(Py_TYPE(self)), entry, &e) < 0)
        return NULL;
    if (!S_ISREG(e.attr.st_mode) || (uint64_t)e.attr.st_ino != ino)
        return PyErr_Format(PyExc_ValueError, "keep_file_attrs: the attributes of file %llu",
                            ino);
    if (pvf_dir_keep(&self->f, ino, &e.attr) < 0)
        return errno == ENOMEM ? PyErr_NoMemory() : PyErr_Format(PyExc_ValueError, "bad ino");
    Py_RETURN_NONE;
}

PyObject *pvf_py_drop_dir(SessionObject *self, PyObject *args)
{
    unsigned long long ino;

    if (!PyArg_ParseTuple(args, "K:drop_dir", &ino))
        return NULL;
    pvf_dir_drop(&self->f, ino);
    Py_RETURN_NONE;
}

PyObject *pvf_py_drop_dirs(SessionObject *self, PyObject *ignored)
{
    (void)ignored;
    pvf_dir_drop_all(&self->f);
    Py_RETURN_NONE;
}

PyObject *pvf_py_lease_until(SessionObject *self, PyObject *args)
{
    double until, floor;

    if (!PyArg_ParseTuple(args, "dd:lease_until", &until, &floor))
        return NULL;
    if (!(floor >= 0.0))
        return PyErr_Format(PyExc_ValueError, "lease_until: attr_timeout >= 0");
    pvf_lease_until(&self->f, until, floor);
    Py_RETURN_NONE;
}

/* Tests: what a worker would answer to getattr(ino): (mode, size, mtime_ns, timeout) or
 * None (queued for Python). */
PyObject *pvf_py_getattr_here(SessionObject *self, PyObject *args)
{
    unsigned long long ino;
    struct stat st;
    double timeout;

    if (!PyArg_ParseTuple(args, "K:_getattr_here", &ino))
        return NULL;
    if (!pvf_dir_answer(&self->f, ino, &st, &timeout))
        Py_RETURN_NONE;
    return Py_BuildValue("(KLLd)", (unsigned long long)st.st_mode, (long long)st.st_size,
                         (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
                         timeout);
}

/* ------------------------------------------------------------------ security.capability */
PyObject *pvf_py_caps_none(SessionObject *self, PyObject *args)
{
    unsigned long long ino;
    double until;

    if (!PyArg_ParseTuple(args, "Kd:caps_none", &ino, &until))
        return NULL;
    if (pvf_py_check_open(self) < 0)
        return NULL;
    if (pvf_caps_none(&self->f, ino, until) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

PyObject *pvf_py_caps_drop(SessionObject *self, PyObject *args)
{
    unsigned long long ino;

    if (!PyArg_ParseTuple(args, "K:caps_drop", &ino))
        return NULL;
    pvf_caps_drop(&self->f, ino);
    Py_RETURN_NONE;
}

PyObject *pvf_py_caps_here(SessionObject *self, PyObject *args)
{
    unsigned long long ino;

    if (!PyArg_ParseTuple(args, "K:_caps_here", &ino))
        return NULL;
    return PyBool_FromLong(pvf_caps_answer(&self->f, ino));
}

/* ------------------------------------------------------------------ names (names.c) */
PyObject *pvf_py_dir_names(SessionObject *self, PyObject *args)
{
    unsigned long long parent;
    int complete;
    PyObject *names, *seq;

    if (!PyArg_ParseTuple(args, "KpO:dir_names", &parent, &complete, &names))
        return NULL;
    seq = PySequence_Fast(names, "dir_names: a sequence of (name, ino)");
    if (seq == NULL)
        return NULL;
    if (pvf_names_dir(&self->f, parent, complete) < 0) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        const char *name;
        Py_ssize_t n;
        unsigned long long ino;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "y#K:dir_names", &name, &n,
                              &ino)) {
            pvf_names_forget(&self->f, parent);
            Py_DECREF(seq);
            return NULL;
        }
        pvf_names_put(&self->f, parent, name, (size_t)n, ino);
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

PyObject *pvf_py_name_put(SessionObject *self, PyObject *args)
{
    unsigned long long parent, ino;
    const char *name;
    Py_ssize_t n;

    if (!PyArg_ParseTuple(args, "Ky#K:name_put", &parent, &name, &n, &ino))
        return NULL;
    pvf_names_put(&self->f, parent, name, (size_t)n, ino);
    Py_RETURN_NONE;
}

PyObject *pvf_py_name_pop(SessionObject *self, PyObject *args)
{
    unsigned long long parent;
    const char *name;
    Py_ssize_t n;

    if (!PyArg_ParseTuple(args, "Ky#:name_pop", &parent, &name, &n))
        return NULL;
    pvf_names_pop(&self->f, parent, name, (size_t)n);
    Py_RETURN_NONE;
}

PyObject *pvf_py_dir_complete(SessionObject *self, PyObject *args)
{
    unsigned long long parent;
    int complete;

    if (!PyArg_ParseTuple(args, "Kp:dir_complete", &parent, &complete))
        return NULL;
    pvf_names_complete(&self->f, parent, complete);
    Py_RETURN_NONE;
}

PyObject *pvf_py_dir_forget(SessionObject *self, PyObject *args)
{
    unsigned long long parent;

    if (!PyArg_ParseTuple(args, "K:dir_forget", &parent))
        return NULL;
    pvf_names_forget(&self->f, parent);
    Py_RETURN_NONE;
}

PyObject *pvf_py_dirs_forget(SessionObject *self, PyObject *ignored)
{
    (void)ignored;
    pvf_names_forget_all(&self->f);
    Py_RETURN_NONE;
}

/* Tests: whether a worker answers lookup(parent, name) ENOENT. */
PyObject *pvf_py_missing_here(SessionObject *self, PyObject *args)
{
    unsigned long long parent;
    const char *name;

    if (!PyArg_ParseTuple(args, "Ky:_missing_here", &parent, &name))
        return NULL;
    return PyBool_FromLong(pvf_names_missing(&self->f, parent, name));
}

/* Tests: the entry a worker answers lookup(parent, name) with, as (entry tuple,
 * entry_timeout, attr_timeout), or None: Python answers. */
PyObject *pvf_py_found_here(SessionObject *self, PyObject *args)
{
    unsigned long long parent;
    const char *name;
    struct fuse_entry_param e;

    if (!PyArg_ParseTuple(args, "Ky:_found_here", &parent, &name))
        return NULL;
    if (!pvf_names_found(&self->f, parent, name, &e))
        Py_RETURN_NONE;
    return Py_BuildValue("(Ndd)", pvf_py_entry_tuple(&e), e.entry_timeout, e.attr_timeout);
}
