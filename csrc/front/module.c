/* module.c -- pvfs._fusefront: the Python side of the libfuse3 front end, the module itself.
 *
 * Multi-phase init with module state, as CPython's own modules: the attribute names the
 * replies read, interned once; the types Session (pysession.c), Request and DirBuf
 * (pyrequest.c); the functions reply_* and readdir_reply (replies.c); the OP_* and SET_*
 * constants of front.h. Kept apart from those units so each of them reads as one job and
 * this one as the list of what the module offers.
 */
#include "pyfront.h"

static int intern(PyObject **slot, const char *s)
{
    *slot = PyUnicode_InternFromString(s);
    return *slot == NULL ? -1 : 0;
}

static int module_exec(PyObject *m)
{
    fstate *st = PyModule_GetState(m);
    static const struct { const char *name; int value; } ops[] = {
        { "OP_LOOKUP", PVF_LOOKUP }, { "OP_GETATTR", PVF_GETATTR },
        { "OP_SETATTR", PVF_SETATTR }, { "OP_READLINK", PVF_READLINK },
        { "OP_MKNOD", PVF_MKNOD }, { "OP_MKDIR", PVF_MKDIR }, { "OP_UNLINK", PVF_UNLINK },
        { "OP_RMDIR", PVF_RMDIR }, { "OP_SYMLINK", PVF_SYMLINK }, { "OP_RENAME", PVF_RENAME },
        { "OP_LINK", PVF_LINK }, { "OP_OPEN", PVF_OPEN }, { "OP_READ", PVF_READ },
        { "OP_WRITE", PVF_WRITE }, { "OP_FLUSH", PVF_FLUSH }, { "OP_RELEASE", PVF_RELEASE },
        { "OP_FSYNC", PVF_FSYNC }, { "OP_OPENDIR", PVF_OPENDIR },
        { "OP_READDIRPLUS", PVF_READDIRPLUS }, { "OP_RELEASEDIR", PVF_RELEASEDIR },
        { "OP_FSYNCDIR", PVF_FSYNCDIR }, { "OP_STATFS", PVF_STATFS },
        { "OP_SETXATTR", PVF_SETXATTR }, { "OP_GETXATTR", PVF_GETXATTR },
        { "OP_LISTXATTR", PVF_LISTXATTR }, { "OP_REMOVEXATTR", PVF_REMOVEXATTR },
        { "OP_ACCESS", PVF_ACCESS }, { "OP_CREATE", PVF_CREATE },
        { "OP_CREATED", PVF_CREATED },
        { "OP_UNLINKED", PVF_UNLINKED },
        { "OP_WROTE", PVF_WROTE },
        { "SET_MODE", PVF_SET_MODE }, { "SET_UID", PVF_SET_UID }, { "SET_GID", PVF_SET_GID },
        { "SET_SIZE", PVF_SET_SIZE }, { "SET_ATIME", PVF_SET_ATIME },
        { "SET_MTIME", PVF_SET_MTIME }, { "SET_CTIME", PVF_SET_CTIME },
        { "FUSE_VERSION", FUSE_VERSION },
    };

    if (intern(&st->n_ino, "st_ino") < 0 || intern(&st->n_generation, "generation") < 0
        || intern(&st->n_entry_timeout, "entry_timeout") < 0
        || intern(&st->n_attr_timeout, "attr_timeout") < 0 || intern(&st->n_mode, "st_mode") < 0
        || intern(&st->n_nlink, "st_nlink") < 0 || intern(&st->n_uid, "st_uid") < 0
        || intern(&st->n_gid, "st_gid") < 0 || intern(&st->n_rdev, "st_rdev") < 0
        || intern(&st->n_size, "st_size") < 0 || intern(&st->n_blksize, "st_blksize") < 0
        || intern(&st->n_blocks, "st_blocks") < 0 || intern(&st->n_atime, "st_atime_ns") < 0
        || intern(&st->n_mtime, "st_mtime_ns") < 0 || intern(&st->n_ctime, "st_ctime_ns") < 0
        || intern(&st->n_fh, "fh") < 0 || intern(&st->n_direct_io, "direct_io") < 0
        || intern(&st->n_keep_cache, "keep_cache") < 0
        || intern(&st->n_nonseekable, "nonseekable") < 0 || intern(&st->n_bsize, "f_bsize") < 0
        || intern(&st->n_frsize, "f_frsize") < 0 || intern(&st->n_fblocks, "f_blocks") < 0
        || intern(&st->n_bfree, "f_bfree") < 0 || intern(&st->n_bavail, "f_bavail") < 0
        || intern(&st->n_files, "f_files") < 0 || intern(&st->n_ffree, "f_ffree") < 0
        || intern(&st->n_favail, "f_favail") < 0 || intern(&st->n_namemax, "f_namemax") < 0)
        return -1;
    st->session_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &pvf_py_session_spec, NULL);
    st->request_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &pvf_py_request_spec, NULL);
    st->dirbuf_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &pvf_py_dirbuf_spec, NULL);
    st->writedata_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &pvf_py_writedata_spec,
                                                                  NULL);
    if (st->session_type == NULL || st->request_type == NULL || st->dirbuf_type == NULL
        || st->writedata_type == NULL)
        return -1;
    if (PyModule_AddType(m, st->session_type) < 0 || PyModule_AddType(m, st->request_type) < 0
        || PyModule_AddType(m, st->dirbuf_type) < 0)
        return -1;
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        if (PyModule_AddIntConstant(m, ops[i].name, ops[i].value) < 0)
            return -1;
    }
    return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    fstate *st = PyModule_GetState(m);

    Py_VISIT(st->session_type);
    Py_VISIT(st->request_type);
    Py_VISIT(st->dirbuf_type);
    Py_VISIT(st->writedata_type);
    return 0;
}

static int module_clear(PyObject *m)
{
    fstate *st = PyModule_GetState(m);

    Py_CLEAR(st->session_type);
    Py_CLEAR(st->request_type);
    Py_CLEAR(st->dirbuf_type);
    Py_CLEAR(st->writedata_type);
    Py_CLEAR(st->n_ino);
    Py_CLEAR(st->n_generation);
    Py_CLEAR(st->n_entry_timeout);
    Py_CLEAR(st->n_attr_timeout);
    Py_CLEAR(st->n_mode);
    Py_CLEAR(st->n_nlink);
    Py_CLEAR(st->n_uid);
    Py_CLEAR(st->n_gid);
    Py_CLEAR(st->n_rdev);
    Py_CLEAR(st->n_size);
    Py_CLEAR(st->n_blksize);
    Py_CLEAR(st->n_blocks);
    Py_CLEAR(st->n_atime);
    Py_CLEAR(st->n_mtime);
    Py_CLEAR(st->n_ctime);
    Py_CLEAR(st->n_fh);
    Py_CLEAR(st->n_direct_io);
    Py_CLEAR(st->n_keep_cache);
    Py_CLEAR(st->n_nonseekable);
    Py_CLEAR(st->n_bsize);
    Py_CLEAR(st->n_frsize);
    Py_CLEAR(st->n_fblocks);
    Py_CLEAR(st->n_bfree);
    Py_CLEAR(st->n_bavail);
    Py_CLEAR(st->n_files);
    Py_CLEAR(st->n_ffree);
    Py_CLEAR(st->n_favail);
    Py_CLEAR(st->n_namemax);
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

static struct PyModuleDef fusefront_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pvfs._fusefront",
    .m_doc = "The mount's libfuse3 low-level front end (docs/mount.md, \"C front end\").",
    .m_size = sizeof(fstate),
    .m_methods = pvf_py_reply_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__fusefront(void)
{
    return PyModuleDef_Init(&fusefront_module);
}
