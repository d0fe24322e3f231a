/* pycreates.c -- the Session methods that keep creates.c's and unlinks.c's state: the
 * directories the workers create in, the inode numbers lent to them, a create or unlink
 * applied by Python (the directory's attributes handed back), a release finished by Python
 * (the file unlinkable by the workers), and the test hooks that make a create or an unlink
 * as a worker would without a kernel (fuse/workercreates.py is the Python side).
 */
#include "pyfront.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

PyObject *pvf_py_create_settings(SessionObject *self, PyObject *args)
{
    double entry_floor, caps_ttl = 0.0;
    unsigned long long first_fh;
    int behind = 0;

    if (!PyArg_ParseTuple(args, "dK|dp:create_settings", &entry_floor, &first_fh, &caps_ttl,
                          &behind))
        return NULL;
    if (!(entry_floor >= 0.0) || !(caps_ttl >= 0.0))
        return PyErr_Format(PyExc_ValueError,
                            "create_settings: entry_timeout and caps_ttl >= 0");
    pvf_create_settings(&self->f, entry_floor, first_fh, caps_ttl, behind);
    Py_RETURN_NONE;
}

PyObject *pvf_py_create_dir(SessionObject *self, PyObject *args)
{
    unsigned long long parent;
    int on;

    if (!PyArg_ParseTuple(args, "Kp:create_dir", &parent, &on))
        return NULL;
    if (pvf_create_dir(&self->f, parent, on) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

PyObject *pvf_py_create_dirs_off(SessionObject *self, PyObject *ignored)
{
    (void)ignored;
    pvf_create_dirs_off(&self->f);
    Py_RETURN_NONE;
}

PyObject *pvf_py_lend_numbers(SessionObject *self, PyObject *args)
{
    PyObject *seq, *fast;
    uint64_t *v;
    Py_ssize_t n;
    int ret;

    if (!PyArg_ParseTuple(args, "O:lend_numbers", &seq))
        return NULL;
    fast = PySequence_Fast(seq, "lend_numbers: a sequence of inode numbers");
    if (fast == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    v = malloc((size_t)(n > 0 ? n : 1) * sizeof(uint64_t));
    if (v == NULL) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        v[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v[i] == (uint64_t)-1 && PyErr_Occurred()) {
            free(v);
            Py_DECREF(fast);
            return NULL;
        }
        if (v[i] == 0) {
            free(v);
            Py_DECREF(fast);
            return PyErr_Format(PyExc_ValueError, "lend_numbers: inode 0");
        }
    }
    Py_DECREF(fast);
    ret = pvf_numbers_lend(&self->f, v, (size_t)n);
    free(v);
    if (ret < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

PyObject *pvf_py_take_numbers(SessionObject *self, PyObject *ignored)
{
    size_t n;
    uint64_t *v = pvf_numbers_take(&self->f, &n);
    PyObject *list = PyList_New((Py_ssize_t)n);

    (void)ignored;
    if (list != NULL) {
        for (size_t i = 0; i < n; i++) {
            PyObject *x = PyLong_FromUnsignedLongLong(v[i]);
            if (x == NULL) {
                Py_CLEAR(list);
                break;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, x);
        }
    }
    free(v);
    return list;
}

PyObject *pvf_py_numbers_left(SessionObject *self, PyObject *ignored)
{
    (void)ignored;
    return PyLong_FromSize_t(pvf_numbers_left(&self->f));
}

/* created_done(parent, entry or None): Python applied one create made in `parent`. */
PyObject *pvf_py_created_done(SessionObject *self, PyObject *args)
{
    unsigned long long parent;
    PyObject *entry;
    struct fuse_entry_param e;

    if (!PyArg_ParseTuple(args, "KO:created_done", &parent, &entry))
        return NULL;
    if (entry == Py_None) {
        pvf_created_done(&self->f, parent, NULL);
        Py_RETURN_NONE;
    }
    if (pvf_py_fill_entry(PyType_GetModuleState(Py_TYPE(self)), entry, &e) < 0)
        return NULL;
    pvf_created_done(&self->f, parent, &e.attr);
    Py_RETURN_NONE;
}

/* Tests: _create_here(parent, name, mode, flags, uid, gid) -> None, or (entry tuple, fh,
 * entry_timeout, attr_timeout) as a worker would reply; its record is queued. */
PyObject *pvf_py_create_here(SessionObject *self, PyObject *args)
{
    unsigned long long parent;
    const char *name;
    unsigned mode, uid, gid;
    int flags;
    struct fuse_entry_param e;
    uint64_t fh;

    if (!PyArg_ParseTuple(args, "KyIiII:_create_here", &parent, &name, &mode, &flags, &uid,
                          &gid))
        return NULL;
    if (!pvf_create_try(&self->f, NULL, (uid_t)uid, (gid_t)gid, parent, name, (mode_t)mode,
                        flags, &e, &fh))
        Py_RETURN_NONE;
    return Py_BuildValue("(NKdd)", pvf_py_entry_tuple(&e), (unsigned long long)fh,
                         e.entry_timeout, e.attr_timeout);
}

/* release_done(ino, closed_clean) -> bool: Python finished a release of ino (unlinks.c);
 * True if the file is unlinkable by the workers now. */
PyObject *pvf_py_release_done(SessionObject *self, PyObject *args)
{
    unsigned long long ino;
    int closed_clean;

    if (!PyArg_ParseTuple(args, "Kp:release_done", &ino, &closed_clean))
        return NULL;
    return PyBool_FromLong(pvf_release_done(&self->f, ino, closed_clean));
}

/* Tests: _kernel_sends(op, ino): what the workers do with a release ("release") or an open
 * ("open") of ino before they queue it. */
PyObject *pvf_py_kernel_sends(SessionObject *self, PyObject *args)
{
    const char *op;
    unsigned long long ino;

    if (!PyArg_ParseTuple(args, "sK:_kernel_sends", &op, &ino))
        return NULL;
    if (strcmp(op, "release") == 0)
        pvf_releasing(&self->f, ino);
    else if (strcmp(op, "open") == 0 || strcmp(op, "setattr") == 0)
        pvf_unlinkable_drop(&self->f, ino);
    else
        return PyErr_Format(PyExc_ValueError, "_kernel_sends: no op %s", op);
    Py_RETURN_NONE;
}

/* Tests: _unlink_here(parent, name, uid, gid) -> bool: an unlink made as a worker makes it
 * (answered, its record queued), or not. */
PyObject *pvf_py_unlink_here(SessionObject *self, PyObject *args)
{
    unsigned long long parent;
    const char *name;
    unsigned uid, gid;

    if (!PyArg_ParseTuple(args, "KyII:_unlink_here", &parent, &name, &uid, &gid))
        return NULL;
    return PyBool_FromLong(pvf_unlink_try(&self->f, NULL, (uid_t)uid, (gid_t)gid, parent,
                                          name));
}

/* unlinkable_drop(ino): the workers no longer unlink ino (Python unlinks it itself, or its
 * number names a new file: unlinks.c). */
PyObject *pvf_py_unlinkable_drop(SessionObject *self, PyObject *args)
{
    unsigned long long ino;

    if (!PyArg_ParseTuple(args, "K:unlinkable_drop", &ino))
        return NULL;
    pvf_unlinkable_drop(&self->f, ino);
    Py_RETURN_NONE;
}
