/* transfer.h -- the exchange as Python calls it (transfer.c, stripe.c).
 *
 * The exchange and the stripe split are plain C in xfer/ (built into the front end too);
 * these two units hold Python's buffers around them and release the GIL while they run.
 */
#ifndef PVFS_TRANSFER_H
#define PVFS_TRANSFER_H

#include "pvpy.h"
#include "xfer/xfer.h"

/* Run the exchange of n requests at once, the GIL released, under one deadline (seconds).
 * -1 if a signal handler raised (exception set). */
int pv_xreq_exchange(struct xreq *reqs, size_t n, struct pollfd *pfds, size_t *map,
                     double timeout);

#endif
