/* Registering with the ps (register.c): HELLO to every shard, each WELCOME checked and the
 * job set up from the first. Called by trainer.c (connections open, a WELCOME came) and by
 * the step machine (step.c: a HELLO held back while a stale step ran); it calls neither,
 * and says what the caller should do next by its result. */
#ifndef PSTRAIN_WORKER_REGISTER_H
#define PSTRAIN_WORKER_REGISTER_H

#include <stdint.h>

#include "kernels/net.h"
#include "proto/pstrain.pb-c.h"
#include "worker/state.h"

/* Where every shard's WELCOME put this worker: the step the session begins at (the
 * earliest of the shards'), the evaluations already done, and whether this is a
 * registration again (after a reconnection) rather than the first. */
typedef struct {
  uint64_t start_step;
  uint32_t evals_done;
  int again;
} wk_welcomed;

/* Registration begins once every shard's connection is open: shard 0 first. */
void wk_register_all(wk_trainer *t);
/* A reading of shard sh's clock (ps_clock, its seconds) that this worker asked for at sent_at
 * (its own) and got now, for the timeline's offset to it (a no-op without a timeline): from
 * the WELCOME to its HELLO, and from a HEARTBEAT answering a clock probe (proto/pstrain.proto). */
void wk_clock_sample(wk_trainer *t, wk_shard *sh, double sent_at, double ps_clock);
/* A shard's WELCOME: the job set up (shard 0, first time) or checked, its part of the
 * vector taken. Once every shard has welcomed, returns 1 with *out filled: the caller
 * begins the session there (wk_enter_session, worker/step.h). 0: more WELCOMEs to wait
 * for, or the run failed, or the shards were asked to go back to one version (their
 * connections close and registration starts again). grad_ready is the callback the net
 * built from the first WELCOME gets with --push-by-layer (kernels/net.h), ctx t. */
int wk_on_welcome(wk_trainer *t, wk_shard *sh, const Pstrain__Welcome *w,
                  pst_grad_ready_fn grad_ready, wk_welcomed *out);

#endif
