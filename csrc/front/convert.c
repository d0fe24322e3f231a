/* convert.c -- pyfuse3's attribute objects as libfuse's structs, and back.
 *
 * The reply functions (replies.c) take pyfuse3's plain data classes (EntryAttributes,
 * FileInfo, StatvfsData) or anything with the same attribute names, read through the names
 * the module interned once (fstate). Checking and converting them is a job of its own, kept
 * apart so replies.c reads as "check, take the request, reply"; entry_tuple goes the other
 * way, for the fake requests of tests, which keep what a reply would have sent.
 */
#include "pyfront.h"

#include <math.h>
#include <string.h>

/* obj.name as an integer of 0..2^64-1; -1 with an exception set (the get_* below alike). */
int pvf_py_get_u64(PyObject *obj, PyObject *name, uint64_t *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    unsigned long long x;

    if (v == NULL)
        return -1;
    x = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = x;
    return 0;
}

static int get_i64(PyObject *obj, PyObject *name, int64_t *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    long long x;

    if (v == NULL)
        return -1;
    x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *out = x;
    return 0;
}

static int get_double(PyObject *obj, PyObject *name, double *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    double x;

    if (v == NULL)
        return -1;
    x = PyFloat_AsDouble(v);
    Py_DECREF(v);
    if (x == -1.0 && PyErr_Occurred())
        return -1;
    if (!(x >= 0.0) || isinf(x)) {
        PyErr_SetString(PyExc_ValueError, "timeouts must be finite and >= 0");
        return -1;
    }
    *out = x;
    return 0;
}

static int get_bool(PyObject *obj, PyObject *name, int *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    int x;

    if (v == NULL)
        return -1;
    x = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (x < 0)
        return -1;
    *out = x;
    return 0;
}

static void set_ts(struct timespec *ts, int64_t ns)
{
    int64_t s = ns / 1000000000, rem = ns % 1000000000;

    if (rem < 0) {   /* before 1970: floor, with a positive tv_nsec */
        rem += 1000000000;
        s -= 1;
    }
    ts->tv_sec = (time_t)s;
    ts->tv_nsec = (long)rem;
}

/* An EntryAttributes (or look-alike) as libfuse's entry parameter. */
int pvf_py_fill_entry(fstate *st, PyObject *obj, struct fuse_entry_param *e)
{
    uint64_t ino, gen, mode, nlink, uid, gid, rdev, blksize, blocks;
    int64_t size, at, mt, ct;

    memset(e, 0, sizeof(*e));
    if (pvf_py_get_u64(obj, st->n_ino, &ino) < 0
        || pvf_py_get_u64(obj, st->n_generation, &gen) < 0
        || get_double(obj, st->n_entry_timeout, &e->entry_timeout) < 0
        || get_double(obj, st->n_attr_timeout, &e->attr_timeout) < 0
        || pvf_py_get_u64(obj, st->n_mode, &mode) < 0
        || pvf_py_get_u64(obj, st->n_nlink, &nlink) < 0
        || pvf_py_get_u64(obj, st->n_uid, &uid) < 0 || pvf_py_get_u64(obj, st->n_gid, &gid) < 0
        || pvf_py_get_u64(obj, st->n_rdev, &rdev) < 0 || get_i64(obj, st->n_size, &size) < 0
        || pvf_py_get_u64(obj, st->n_blksize, &blksize) < 0
        || pvf_py_get_u64(obj, st->n_blocks, &blocks) < 0
        || get_i64(obj, st->n_atime, &at) < 0 || get_i64(obj, st->n_mtime, &mt) < 0
        || get_i64(obj, st->n_ctime, &ct) < 0)
        return -1;
    if (mode > 0xffffffffu || uid > 0xffffffffu || gid > 0xffffffffu || size < 0) {
        PyErr_SetString(PyExc_ValueError, "entry attribute out of range");
        return -1;
    }
    e->ino = ino;
    e->generation = gen;
    e->attr.st_ino = ino;
    e->attr.st_mode = (mode_t)mode;
    e->attr.st_nlink = (nlink_t)nlink;
    e->attr.st_uid = (uid_t)uid;
    e->attr.st_gid = (gid_t)gid;
    e->attr.st_rdev = (dev_t)rdev;
    e->attr.st_size = (off_t)size;
    e->attr.st_blksize = (blksize_t)blksize;
    e->attr.st_blocks = (blkcnt_t)blocks;
    set_ts(&e->attr.st_atim, at);
    set_ts(&e->attr.st_mtim, mt);
    set_ts(&e->attr.st_ctim, ct);
    return 0;
}

/* A FileInfo (or look-alike, or a bare fh) as libfuse's file info. */
int pvf_py_fill_file_info(fstate *st, PyObject *obj, struct fuse_file_info *fi)
{
    int direct, keep, nonseek;

    memset(fi, 0, sizeof(*fi));
    if (PyLong_Check(obj)) {   /* opendir's handlers return the fh alone */
        fi->fh = PyLong_AsUnsignedLongLong(obj);
        return fi->fh == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
    }
    if (pvf_py_get_u64(obj, st->n_fh, &fi->fh) < 0
        || get_bool(obj, st->n_direct_io, &direct) < 0
        || get_bool(obj, st->n_keep_cache, &keep) < 0
        || get_bool(obj, st->n_nonseekable, &nonseek) < 0)
        return -1;
    fi->direct_io = (unsigned)direct;
    fi->keep_cache = (unsigned)keep;
    fi->nonseekable = (unsigned)nonseek;
    return 0;
}

/* The entry as the tuple a fake request keeps: every field, times in nanoseconds. */
PyObject *pvf_py_entry_tuple(const struct fuse_entry_param *e)
{
    return Py_BuildValue("KKddIKIIKLKKLLL", (unsigned long long)e->ino,
                         (unsigned long long)e->generation, e->entry_timeout, e->attr_timeout,
                         (unsigned)e->attr.st_mode, (unsigned long long)e->attr.st_nlink,
                         (unsigned)e->attr.st_uid, (unsigned)e->attr.st_gid,
                         (unsigned long long)e->attr.st_rdev, (long long)e->attr.st_size,
                         (unsigned long long)e->attr.st_blksize,
                         (unsigned long long)e->attr.st_blocks,
                         (long long)e->attr.st_atim.tv_sec * 1000000000 + e->attr.st_atim.tv_nsec,
                         (long long)e->attr.st_mtim.tv_sec * 1000000000 + e->attr.st_mtim.tv_nsec,
                         (long long)e->attr.st_ctim.tv_sec * 1000000000 + e->attr.st_ctim.tv_nsec);
}
