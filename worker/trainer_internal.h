/* Shared between worker/trainer.c (the sessions with the ps) and worker/step.c (the
 * training steps); not for other modules. */
#ifndef PSTRAIN_WORKER_TRAINER_INTERNAL_H
#define PSTRAIN_WORKER_TRAINER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto/pstrain.pb-c.h"
#include "worker/trainer.h"

/* The index of a shard of t's. */
static inline int wk_shard_index(const wk_trainer *t, const wk_shard *sh) {
  return (int)(sh - t->ps);
}

/* trainer.c */
/* Ends the run with an error: logs it once, tells the ps why, closes every connection,
 * exit 1. */
void wk_fail(wk_trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Every shard's connection is open (registered or about to be). */
int wk_all_open(const wk_trainer *t);
void wk_close_all(wk_trainer *t);
/* Sends a control message to every shard whose connection is open. */
void wk_send_all(wk_trainer *t, const Pstrain__Header *h);

/* register.c */
/* Registration begins once every shard's connection is open: shard 0 first. */
void wk_register_all(wk_trainer *t);
/* A shard's WELCOME: the job set up (shard 0, first time) or checked, its part of the
 * vector taken; once every shard has welcomed, the session begins. */
void wk_on_welcome(wk_trainer *t, wk_shard *sh, const Pstrain__Welcome *w);
/* Frees a buffer of host_alloc's (pinned for CUDA) or aligned_alloc's. */
void wk_host_buffer_free(wk_trainer *t, float *p);

/* step.c */
/* Puts this worker where the ps says its slot stands (start_step steps of the shard done,
 * the evaluations of epochs 1..evals_done done), replaying the shuffles from the seed. */
void wk_take_position(wk_trainer *t, uint64_t start_step, uint32_t evals_done);
/* The data handout: the ps's DATA frame for the next step (its range, or the end). 0, or
 * -EPROTO for a range this worker cannot train (a lying ps). */
int wk_take_range(wk_trainer *t, const Pstrain__DataRange *d);
/* Says goodbye to the ps (BYE leaving) and waits for its SHUTDOWN to exit 0. */
void wk_leave(wk_trainer *t);
/* The first exchange of a session: weights to train on, or the final weights. */
void wk_begin_session(wk_trainer *t);
/* Fresh weights are in: an evaluation owed, a training step, or the end. */
void wk_next_work(wk_trainer *t);
/* --push-by-layer: the backward pass's callback (kernels/net.h, on the threadpool), and
 * the loop's side of it (grad_async). */
void wk_grad_ready(void *ctx, size_t from);
void wk_on_grad_ready(uv_async_t *a);
/* --pull-by-layer (the loop's side): start the next step early if it may; a chunk of a
 * shard's reply is in; every shard's reply is. */
void wk_try_early_step(wk_trainer *t);
void wk_pull_progress(wk_trainer *t, wk_shard *sh, const Pstrain__Header *h);
void wk_pull_complete(wk_trainer *t);
/* Ends the running step's waits for weights and its deliberate idling: the step is dropped
 * (a connection broke) or the worker stops. */
void wk_abandon_work(wk_trainer *t);

#endif
