/* pvpy.h -- the Python-facing entry points shared between module.c and transfer.c. */
#ifndef PVFS_PVPY_H
#define PVFS_PVPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *pv_py_transfer(PyObject *module, PyObject *args, PyObject *kwargs);
extern const char pv_transfer_doc[];

#endif
