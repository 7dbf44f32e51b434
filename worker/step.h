/* The step machine (step.c): the training steps and what follows each on the loop. Called
 * by trainer.c (the sessions); it calls registration (register.c) and the shards' group
 * (shards.c), never trainer.c. */
#ifndef PSTRAIN_WORKER_STEP_H
#define PSTRAIN_WORKER_STEP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto/pstrain.pb-c.h"
#include "worker/position.h"
#include "worker/register.h"
#include "worker/state.h"

/* Says goodbye to the ps (BYE leaving) and waits for its SHUTDOWN to exit 0. */
void wk_leave(wk_trainer *t);
/* The first exchange of a session: weights to train on, or the final weights. */
void wk_begin_session(wk_trainer *t);
/* Every shard has welcomed this worker (wk_on_welcome returned 1 with w): takes the slot's
 * position and begins the session, or leaves it to the end of a stale work item. */
void wk_enter_session(wk_trainer *t, const wk_welcomed *w);
/* Fresh weights are in: an evaluation owed, a training step, or the end. */
void wk_next_work(wk_trainer *t);
/* --pull-by-layer (the loop's side): start the next step early if it may; a chunk of a
 * shard's reply is in; every shard's reply is. */
void wk_try_early_step(wk_trainer *t);
/* From the loop while a training step computes, after its pushed chunks were queued: sends
 * the next step's PULL now if the first layer's chunk 0 has gone and nothing at this step's
 * end needs another exchange first (worker/state.h, pull_ahead). */
void wk_pull_ahead(wk_trainer *t);
/* The backward pass's wake-up on the loop (trainer.c's grad_async): the chunks final now
 * queued (layer_push.h's wk_on_grad_ready), then wk_pull_ahead. */
void wk_on_grad_async(uv_async_t *a);
void wk_pull_progress(wk_trainer *t, wk_shard *sh, const Pstrain__Header *h);
void wk_pull_complete(wk_trainer *t);
/* Ends the running step's waits for weights and its deliberate idling: the step is dropped
 * (a connection broke) or the worker stops. */
void wk_abandon_work(wk_trainer *t);

#endif
