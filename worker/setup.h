/* What a worker computes with, set up the same way whoever runs the steps: the data (loaded
 * at start), and, once the job is known (index, world, batch, seed, model: from the ps's
 * WELCOME, or from the flags of an all-reduce rank), this worker's shard of it, its batches,
 * the device, the net and the buffers. Called by trainer.c and register.c (the ps's worker)
 * and by worker/allreduce/ (the all-reduce rank); it calls none of them. */
#ifndef PSTRAIN_WORKER_SETUP_H
#define PSTRAIN_WORKER_SETUP_H

#include <stddef.h>

#include "kernels/net.h"
#include "worker/state.h"

/* Loads t->opt's data set into t->train and t->test, and t->classes. 0, or -EIO with a
 * reason in err; desc gets one line describing the data. */
int wk_setup_data(wk_trainer *t, char *desc, size_t desclen, char *err, size_t errlen);
/* From t->index, world, batch, seed, epochs, data_ranges and model: the batches' preparation,
 * the shards of the training and test sets, steps_per_epoch, the device (and the layer-by-
 * layer flags left to it), the net (grad_ready: the backward pass's callback with
 * --push-by-layer, or NULL), params and grad [n_params], the batch buffers, the order and
 * the prefetching thread. 0, or a negative code with a reason in err. */
int wk_setup_compute(wk_trainer *t, pst_grad_ready_fn grad_ready, char *err, size_t errlen);
/* Frees what the two set up (safe on a zeroed trainer). */
void wk_setup_free(wk_trainer *t);
/* The dense evaluations' test subset (--eval-every): the first `samples` of a permutation of
 * the test set drawn from the job seed alone (the same subset on every worker and at every
 * point), split across the workers (t->index of t->world) like the full test set, into
 * t->subset_idx[t->subset_n]. A ps's workers and the all-reduce ranks take the same. 0 or
 * -ENOMEM. */
int wk_make_subset(wk_trainer *t, uint32_t samples);
/* A buffer of host_alloc's (pinned for CUDA) or aligned_alloc's, freed. */
void wk_host_buffer_free(wk_trainer *t, float *p);

#endif
