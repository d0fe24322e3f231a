/* pyfront.h -- what the Python units of pvfs._fusefront share (front.h lists the units).
 *
 * The objects (Session, Request, DirBuf), the module's state, and the few names one unit
 * takes from another. Every unit including this runs on the Python thread holding the GIL;
 * Python.h comes first, as CPython asks.
 */
#ifndef PVFS_PYFRONT_H
#define PVFS_PYFRONT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "front.h"

/* The module's state: its types, and attribute names interned once (convert.c reads them). */
typedef struct {
    PyTypeObject *session_type, *request_type, *dirbuf_type, *writedata_type;
    PyObject *n_ino, *n_generation, *n_entry_timeout, *n_attr_timeout, *n_mode, *n_nlink,
        *n_uid, *n_gid, *n_rdev, *n_size, *n_blksize, *n_blocks, *n_atime, *n_mtime, *n_ctime,
        *n_fh, *n_direct_io, *n_keep_cache, *n_nonseekable, *n_bsize, *n_frsize,
        *n_fblocks, *n_bfree, *n_bavail, *n_files, *n_ffree, *n_favail, *n_namemax;
} fstate;

typedef struct {
    PyObject_HEAD
    struct pvf_front f;
    int ready;      /* pvf_bridge_init done */
    int closed;
    Py_buffer arena;    /* the block cache's arena (pyserve.c), while has_arena */
    int has_arena;
} SessionObject;

/* 0, or -1 with ValueError set: a method that needs a live session refuses a closed one. */
static inline int pvf_py_check_open(SessionObject *self)
{
    if (self->closed) {
        PyErr_SetString(PyExc_ValueError, "the session is closed");
        return -1;
    }
    return 0;
}

typedef struct {
    PyObject_HEAD
    struct pvf_req *r;
    SessionObject *session;
    PyObject *args;
    PyObject *reply;    /* fake requests: what the reply would have sent */
    int fake;
} RequestObject;

typedef struct {
    PyObject_HEAD
    char *buf;
    size_t size, used;
    Py_ssize_t entries;
} DirBufObject;

/* A write's bytes, taken over from its record (struct pvf_req.owned): Python sees them
 * through a read-only memoryview, and they are freed with the last view. */
typedef struct {
    PyObject_HEAD
    char *buf;
    Py_ssize_t len;
} WriteDataObject;

/* convert.c: -1 (NULL) with an exception set */
int pvf_py_get_u64(PyObject *obj, PyObject *name, uint64_t *out);
int pvf_py_fill_entry(fstate *st, PyObject *obj, struct fuse_entry_param *e);
int pvf_py_fill_file_info(fstate *st, PyObject *obj, struct fuse_file_info *fi);
PyObject *pvf_py_entry_tuple(const struct fuse_entry_param *e);

/* pyrequest.c */
extern PyType_Spec pvf_py_request_spec, pvf_py_dirbuf_spec, pvf_py_writedata_spec;
/* A drained record as a Request on the in-flight list. NULL with an exception set; when the
 * object was made but its args were not, its dealloc has answered the record EIO. */
PyObject *pvf_py_request_wrap(SessionObject *session, fstate *st, struct pvf_req *r, int fake);

/* replies.c: the module's functions */
extern PyMethodDef pvf_py_reply_methods[];

/* pyanswers.c: Session methods (pysession.c's table names them) */
PyObject *pvf_py_keep_dir(SessionObject *self, PyObject *args);
PyObject *pvf_py_keep_file_attrs(SessionObject *self, PyObject *args);
PyObject *pvf_py_drop_dir(SessionObject *self, PyObject *args);
PyObject *pvf_py_drop_dirs(SessionObject *self, PyObject *ignored);
PyObject *pvf_py_lease_until(SessionObject *self, PyObject *args);
PyObject *pvf_py_getattr_here(SessionObject *self, PyObject *args);
PyObject *pvf_py_caps_none(SessionObject *self, PyObject *args);
PyObject *pvf_py_caps_drop(SessionObject *self, PyObject *args);
PyObject *pvf_py_caps_here(SessionObject *self, PyObject *args);
PyObject *pvf_py_dir_names(SessionObject *self, PyObject *args);
PyObject *pvf_py_name_put(SessionObject *self, PyObject *args);
PyObject *pvf_py_name_pop(SessionObject *self, PyObject *args);
PyObject *pvf_py_dir_complete(SessionObject *self, PyObject *args);
PyObject *pvf_py_dir_forget(SessionObject *self, PyObject *args);
PyObject *pvf_py_dirs_forget(SessionObject *self, PyObject *ignored);
PyObject *pvf_py_missing_here(SessionObject *self, PyObject *args);
PyObject *pvf_py_found_here(SessionObject *self, PyObject *args);

/* pywrites.c: Session methods (pysession.c's table names them) */
PyObject *pvf_py_quiet(SessionObject *self, PyObject *args);
PyObject *pvf_py_is_quiet(SessionObject *self, PyObject *args);
PyObject *pvf_py_keep_file(SessionObject *self, PyObject *args);
PyObject *pvf_py_drop_file(SessionObject *self, PyObject *args);
PyObject *pvf_py_drop_files(SessionObject *self, PyObject *ignored);
PyObject *pvf_py_behind(SessionObject *self, PyObject *args);
PyObject *pvf_py_behind_drop(SessionObject *self, PyObject *args);
PyObject *pvf_py_behind_applied(SessionObject *self, PyObject *args);
PyObject *pvf_py_behind_limit(SessionObject *self, PyObject *args);
PyObject *pvf_py_flush_here(SessionObject *self, PyObject *args);
PyObject *pvf_py_written(SessionObject *self, PyObject *args);
PyObject *pvf_py_wrote(SessionObject *self, PyObject *args);

/* pycreates.c: Session methods (pysession.c's table names them) */
PyObject *pvf_py_create_settings(SessionObject *self, PyObject *args);
PyObject *pvf_py_create_dir(SessionObject *self, PyObject *args);
PyObject *pvf_py_create_dirs_off(SessionObject *self, PyObject *ignored);
PyObject *pvf_py_lend_numbers(SessionObject *self, PyObject *args);
PyObject *pvf_py_take_numbers(SessionObject *self, PyObject *ignored);
PyObject *pvf_py_numbers_left(SessionObject *self, PyObject *ignored);
PyObject *pvf_py_created_done(SessionObject *self, PyObject *args);
PyObject *pvf_py_create_here(SessionObject *self, PyObject *args);
PyObject *pvf_py_release_done(SessionObject *self, PyObject *args);
PyObject *pvf_py_unlinkable_drop(SessionObject *self, PyObject *args);
PyObject *pvf_py_kernel_sends(SessionObject *self, PyObject *args);
PyObject *pvf_py_unlink_here(SessionObject *self, PyObject *args);

/* pyserve.c: Session methods (pysession.c's table names them) */
PyObject *pvf_py_serve_arena(SessionObject *self, PyObject *args);
PyObject *pvf_py_publish(SessionObject *self, PyObject *args);
PyObject *pvf_py_serve_drop(SessionObject *self, PyObject *args);
PyObject *pvf_py_serve_recent(SessionObject *self, PyObject *ignored);
PyObject *pvf_py_warm(SessionObject *self, PyObject *args);
PyObject *pvf_py_read_here(SessionObject *self, PyObject *args);
PyObject *pvf_py_queued(SessionObject *self, PyObject *args);
void pvf_py_arena_release(SessionObject *self);
/* pystreams.c */
PyObject *pvf_py_stream_setup(SessionObject *self, PyObject *args);
PyObject *pvf_py_stream_give(SessionObject *self, PyObject *args);
PyObject *pvf_py_stream_conns(SessionObject *self, PyObject *args);
PyObject *pvf_py_stream_mark(SessionObject *self, PyObject *args);
PyObject *pvf_py_stream_here(SessionObject *self, PyObject *args);

/* pyinject.c: the test bridge's Session._inject */
PyObject *pvf_py_inject(SessionObject *self, PyObject *args, PyObject *kwargs);

/* pysession.c */
extern PyType_Spec pvf_py_session_spec;

#endif
