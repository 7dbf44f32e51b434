/* The worker's training loop as a state machine on the event loop:
 *
 *   connect -> HELLO -> WELCOME (model, shard, epochs) -> load data, build the net
 *   -> PULL -> WEIGHTS (chunks land straight in the parameter buffer)
 *   -> compute on the threadpool (the loop stays free for the socket)
 *   -> PUSH (chunks straight from the gradient buffer) -> PULL -> ...
 *   after each epoch: PULL, evaluate the test shard, REPORT; after the last: BYE, and exit
 *   when the ps says SHUTDOWN.
 *
 * With K ps shards (kernels/partition.h) the worker holds one connection per shard and does
 * all of the above with each: it registers with shard 0 first (which gives it its index) and
 * then with the others under that index, pulls from every shard into its own part of the
 * parameter buffer, pushes each shard its part of the gradient, and reports to all. Losing
 * any shard is losing the ps: every connection is closed and all are made again. */
#ifndef PSTRAIN_WORKER_TRAINER_H
#define PSTRAIN_WORKER_TRAINER_H

#include <stddef.h>
#include <uv.h>

#include "worker/state.h"

/* The top of the training loop (trainer.c: the sessions) calls down into the step machine
 * (step.c), which calls registration (register.c); all three share the state of
 * worker/state.h and the shards' connections as a group (worker/shards.h). */

/* Loads the data and starts connecting. 0, or a negative code with a reason in err. */
int wk_trainer_start(wk_trainer *t, uv_loop_t *loop, const wk_options *opt, char *err,
                     size_t errlen);
/* Frees everything after the loop has ended. */
void wk_trainer_free(wk_trainer *t);

#endif
