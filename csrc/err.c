/* err.c -- the extension's one error convention.
 *
 * A C function that fails returns -1 (or NULL) and fills a struct pv_err: the errno value
 * that says what went wrong, whether it was the caller's misuse, and a message for people
 * (redis anet's "-1 and an err buffer", with the errno kept so nothing has to parse the
 * message). pv_fail()/pv_misuse() (native.h) fill it; the Python bindings raise from it in
 * one place, pv_raise() in module.c.
 */
#include <stdarg.h>
#include <stdio.h>

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
