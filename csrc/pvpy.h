/* pvpy.h -- the Python-facing declarations shared by module.c, pyconn.c, transfer.c, stripe.c. */
#ifndef PVFS_PVPY_H
#define PVFS_PVPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

struct pv_engine;
struct pv_err;

/* pyerr.c: raise the Python exception for a C-side error (the one convention, err.c):
 * MemoryError for ENOMEM, ValueError for misuse, else OSError(code, msg). Returns NULL. */
PyObject *pv_raise(const struct pv_err *err);

typedef struct {
    PyTypeObject *engine_type;
    PyTypeObject *disk_type;      /* pydisk.c */
    PyObject *s_frame, *s_done, *s_closed;    /* event kinds, interned */
} module_state;

typedef struct {
    PyObject_HEAD
    struct pv_engine *e;
    PyObject *attached;           /* {conn_id: sock_fd} until detach() or its "closed" event */
    PyObject *disk;               /* the Disk its data path charges, or NULL */
} EngineObject;

/* pydisk.c */
struct pv_disk;
int pv_py_disk_register(PyObject *m, PyTypeObject **type);
struct pv_disk *pv_py_disk_model(PyObject *disk);   /* disk must be a Disk */

/* transfer.c */
PyObject *pv_py_transfer(PyObject *module, PyObject *args, PyObject *kwargs);
extern const char pv_transfer_doc[];

/* stripe.c */
PyObject *pv_py_stripe_transfer(PyObject *module, PyObject *args, PyObject *kwargs);
extern const char pv_stripe_transfer_doc[];
PyObject *pv_py_stripe_send(PyObject *module, PyObject *args, PyObject *kwargs);
extern const char pv_stripe_send_doc[];

/* pyconn.c */
PyObject *pv_py_attach(EngineObject *self, PyObject *args, PyObject *kwargs);
PyObject *pv_py_detach(EngineObject *self, PyObject *args, PyObject *kwargs);
PyObject *pv_py_events(EngineObject *self, PyObject *ignored);
PyObject *pv_py_done_tuple(PyObject *kind, const void *job);
extern const char pv_attach_doc[], pv_detach_doc[], pv_events_doc[];

/* pyfast.c */
PyObject *pv_py_fast_setup(EngineObject *self, PyObject *args, PyObject *kwargs);
PyObject *pv_py_fast_grant(EngineObject *self, PyObject *args, PyObject *kwargs);
PyObject *pv_py_fast_revoke(EngineObject *self, PyObject *args, PyObject *kwargs);
PyObject *pv_py_fast_block_writes(EngineObject *self, PyObject *args, PyObject *kwargs);
PyObject *pv_py_fast_records(EngineObject *self, PyObject *ignored);
PyObject *pv_py_fast_info(EngineObject *self, PyObject *ignored);
PyObject *pv_py_fast_plan(PyObject *module, PyObject *args, PyObject *kwargs);
extern const char pv_fast_setup_doc[], pv_fast_grant_doc[], pv_fast_revoke_doc[],
    pv_fast_block_writes_doc[], pv_fast_records_doc[], pv_fast_info_doc[], pv_fast_plan_doc[];

#endif
