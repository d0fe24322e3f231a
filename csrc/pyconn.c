/* pyconn.c -- Python bindings of attached connections: Engine.attach, detach and events.
 *
 * The Engine keeps {conn_id: sock_fd} of the connections Python attached (self->attached):
 * an id leaves it when detach() succeeds or when events() hands out its ("closed", ...), so
 * that Python's view changes only through Python's own calls and an id may be reused as
 * soon as Python has seen it go.
 */
#include "pvpy.h"

#include <errno.h>
#include <string.h>

#include "native.h"

/* A job's completion: (job_id, err, nbytes, t_submit, t_start, t_done), or the same
 * after kind for events(). */
PyObject *pv_py_done_tuple(PyObject *kind, const void *job)
{
    const struct pv_job *j = job;

    if (kind == NULL)
        return Py_BuildValue("(LiLLLL)", (long long)j->id, j->err, (long long)j->nbytes,
                             (long long)j->t_submit, (long long)j->t_start,
                             (long long)j->t_done);
    return Py_BuildValue("(OLiLLLL)", kind, (long long)j->id, j->err, (long long)j->nbytes,
                         (long long)j->t_submit, (long long)j->t_start, (long long)j->t_done);
}

const char pv_attach_doc[] =
"attach(conn_id, sock_fd) -> None\n\n"
"Give a connected socket to the engine between jobs. It sets O_NONBLOCK and, whenever no\n"
"job runs on the socket, reads the next frame header (the 16-byte prefix, then exactly\n"
"header_len bytes, never the bulk) and posts (\"frame\", conn_id, bulk_len, header). It\n"
"then stops reading until a job is submitted on the socket; after that job succeeds it\n"
"reads the next header by itself. Keep the socket object open until (\"closed\", conn_id,\n"
"err) or detach(); the engine never closes it.\n\n"
"Raises:\n"
"    ValueError: conn_id is attached already, sock_fd < 0, or the engine is closed.\n"
"    OSError: sock_fd is not an open file descriptor.";

PyObject *pv_py_attach(EngineObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "conn_id", "sock_fd", NULL };
    long long id;
    int fd, r;
    struct pv_err err;
    PyObject *key, *val;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Li:attach", kwlist, &id, &fd))
        return NULL;
    if (fd < 0)
        return PyErr_Format(PyExc_ValueError, "sock_fd must be >= 0, not %d", fd);
    key = PyLong_FromLongLong(id);
    if (key == NULL)
        return NULL;
    r = PyDict_Contains(self->attached, key);
    if (r != 0) {
        if (r > 0)
            PyErr_Format(PyExc_ValueError, "connection %lld is attached already", id);
        Py_DECREF(key);
        return NULL;
    }
    if (pv_engine_attach(self->e, id, fd, &err) < 0) {
        Py_DECREF(key);
        return pv_raise(&err);
    }
    /* The loop has it now: if recording it fails, the "closed" event still comes. */
    val = PyLong_FromLong(fd);
    r = val == NULL ? -1 : PyDict_SetItem(self->attached, key, val);
    Py_XDECREF(val);
    Py_DECREF(key);
    return r < 0 ? NULL : Py_NewRef(Py_None);
}

const char pv_detach_doc[] =
"detach(conn_id) -> None\n\n"
"Take an attached connection back from the engine. When it returns, the engine has\n"
"forgotten the connection and will not touch its fd again; a header it had begun to read\n"
"is dropped. Events posted before (a \"frame\") are still delivered. If the engine closed\n"
"the connection already, its (\"closed\", ...) event is queued and detach does nothing.\n"
"Blocks (without the GIL) for at most one turn of the engine's loop.\n\n"
"Raises:\n"
"    ValueError: conn_id is not attached, a job runs on it, or the engine is closed.";

PyObject *pv_py_detach(EngineObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = { "conn_id", NULL };
    PyObject *key, *val;
    long long id;
    struct pv_err err;
    int fd, r;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "L:detach", kwlist, &id))
        return NULL;
    key = PyLong_FromLongLong(id);
    if (key == NULL)
        return NULL;
    val = PyDict_GetItemWithError(self->attached, key);
    if (val == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "connection %lld is not attached", id);
        Py_DECREF(key);
        return NULL;
    }
    fd = (int)PyLong_AsLong(val);
    Py_BEGIN_ALLOW_THREADS
    r = pv_engine_detach(self->e, id, fd, &err);
    Py_END_ALLOW_THREADS
    /* ENOENT: the loop closed it first; the id goes with its "closed" event. */
    if (r == 0 && PyDict_DelItem(self->attached, key) < 0)
        PyErr_Clear();
    Py_DECREF(key);
    if (r < 0 && err.code != ENOENT)
        return pv_raise(&err);
    Py_RETURN_NONE;
}

const char pv_events_doc[] =
"events() -> list[tuple]\n\n"
"Drain the completion eventfd (fileno()) and return everything the engine posted, in order:\n"
"    (\"frame\", conn_id, bulk_len, header: bytes)\n"
"    (\"done\", job_id, err, nbytes, t_submit_ns, t_start_ns, t_done_ns)\n"
"    (\"closed\", conn_id, err)   0: the peer closed between frames; EPROTO: bad magic,\n"
"        header length or bulk length; ETIMEDOUT: a begun header not complete within\n"
"        idle_timeout; ECONNRESET: EOF inside a frame; else the socket's errno or the\n"
"        failed job's err. The engine has forgotten the connection.\n"
"May return an empty list after a spurious wake-up.";

/* The id of a "closed" connection leaves self->attached; keeps any pending exception. */
static void forget_id(EngineObject *self, int64_t id)
{
    PyObject *type, *value, *tb, *key;

    PyErr_Fetch(&type, &value, &tb);
    key = PyLong_FromLongLong(id);
    if (key == NULL || PyDict_DelItem(self->attached, key) < 0)
        PyErr_Clear();
    Py_XDECREF(key);
    PyErr_Restore(type, value, tb);
}

PyObject *pv_py_events(EngineObject *self, PyObject *Py_UNUSED(ignored))
{
    module_state *st = PyType_GetModuleState(Py_TYPE(self));
    struct pv_event *list = pv_engine_take_events(self->e), *next;
    struct pv_record *recs = NULL;
    PyObject *out = PyList_New(0);

    for (; list != NULL; list = next) {
        PyObject *t = NULL;

        next = list->next;
        if (list->kind == PV_EV_JOB) {
            struct pv_job *j = pv_container_of(list, struct pv_job, ev);
            if (out != NULL)
                t = pv_py_done_tuple(st->s_done, j);
            pv_job_free(j);
        } else if (list->kind == PV_EV_FRAME) {
            struct pv_record *r = (struct pv_record *)list;
            if (out != NULL)
                t = Py_BuildValue("(OLKy#)", st->s_frame, (long long)r->conn_id,
                                  (unsigned long long)r->bulk_len, r->data,
                                  (Py_ssize_t)r->len);
            r->ev.next = (struct pv_event *)recs;
            recs = r;
        } else {
            struct pv_conn *c = (struct pv_conn *)list;
            if (out != NULL)
                t = Py_BuildValue("(OLi)", st->s_closed, (long long)c->id, c->err);
            forget_id(self, c->id);
            free(c);
        }
        if (out != NULL && (t == NULL || PyList_Append(out, t) < 0))
            Py_CLEAR(out);
        Py_XDECREF(t);
    }
    if (recs != NULL)
        pv_records_release(self->e, recs);
    return out;
}
