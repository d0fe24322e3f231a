/* pyerr.c -- the Python side of the one error convention (err.c): pv_raise() turns a
 * struct pv_err into the exception every binding raises for it, so no binding compares
 * message strings and every OSError carries its errno. */
#include "pvpy.h"

#include <errno.h>

#include "native.h"

PyObject *pv_raise(const struct pv_err *err)
{
    PyObject *args;

    if (err->code == ENOMEM)
        return PyErr_NoMemory();
    if (err->misuse) {
        PyErr_SetString(PyExc_ValueError, err->msg);
        return NULL;
    }
    /* OSError((errno, msg)) picks the subclass (FileNotFoundError, ...) from the errno. */
    args = Py_BuildValue("(is)", err->code, err->msg);
    if (args != NULL) {
        PyErr_SetObject(PyExc_OSError, args);
        Py_DECREF(args);
    }
    return NULL;
}
