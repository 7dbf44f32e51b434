/* Where the worker stands in the data (position.c): below the step machine (step.c) and
 * trainer.c, which call it; it calls neither. */
#ifndef PSTRAIN_WORKER_POSITION_H
#define PSTRAIN_WORKER_POSITION_H

#include <stdint.h>

#include "proto/pstrain.pb-c.h"
#include "worker/state.h"

/* Puts this worker where the ps says its slot stands (start_step steps of the shard done,
 * the evaluations of epochs 1..evals_done done), replaying the shuffles from the seed. */
void wk_take_position(wk_trainer *t, uint64_t start_step, uint32_t evals_done);
/* The data handout: the ps's DATA frame for the next step (its range, or the end). 0, or
 * -EPROTO for a range this worker cannot train (a lying ps). */
int wk_take_range(wk_trainer *t, const Pstrain__DataRange *d);
/* A fixed shard's next epoch: its samples in t->order, shuffled by t->rng. */
void wk_new_epoch_order(wk_trainer *t);

#endif
