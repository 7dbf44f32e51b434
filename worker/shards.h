/* The connections to the ps shards as a group (shards.c), below trainer.c, step.c and
 * register.c, which all use it; it calls none of them. */
#ifndef PSTRAIN_WORKER_SHARDS_H
#define PSTRAIN_WORKER_SHARDS_H

#include "proto/pstrain.pb-c.h"
#include "worker/state.h"

/* Ends the run with an error: logs it once, tells the ps why, closes every connection,
 * exit 1. */
void wk_fail(wk_trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Every shard's connection is open (registered or about to be). */
int wk_all_open(const wk_trainer *t);
void wk_close_all(wk_trainer *t);
/* Sends a control message to every shard whose connection is open. */
void wk_send_all(wk_trainer *t, const Pstrain__Header *h);

#endif
