/* err.c -- the extension's one error convention.
 *
 * A C function that fails returns -1 (or NULL) and fills a struct pv_err: the errno value
 * that says what went wrong, whether it was the caller's misuse, and a message for people
 * (redis anet's "-1 and an err buffer", with the errno kept so nothing has to parse the
 * message). pv_fail()/pv_misuse()/pv_err_sys() fill it; the Python bindings raise from it in
 * one place, pv_raise() in pyerr.c.
 *
 * No function returns an errno value (0 or an errno) or leaves its failure in errno: errno is
 * read only right after the system call that set it, and turned into a struct pv_err there --
 * or, on the engine's thread, into the result of a job or a connection (j->err, c->err),
 * which is data for Python, not a failure of the function that records it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "native.h"

int pv_err_set(struct pv_err *err, int code, bool misuse, const char *fmt, ...)
{
    va_list ap;

    err->code = code;
    err->misuse = misuse;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return -1;
}

int pv_err_sys(struct pv_err *err, const char *what)
{
    int code = errno;
    char text[128];

    /* strerror_r, not strerror: the engine's thread and Python's fail at the same time. */
    if (strerror_r(code, text, sizeof(text)) != 0)
        snprintf(text, sizeof(text), "errno %d", code);
    return pv_err_set(err, code, false, "%s: %s", what, text);
}
