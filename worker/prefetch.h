/* A thread that prepares the next training batch (gather, channels, normalisation,
 * augmentation) while the current step computes, so that a step waits for its data only
 * when preparing takes longer than computing.
 *
 * The consumer (the step on the libuv threadpool) takes the batch of step s and then asks
 * for step s + 1's. Batches are named by the worker's step number: pst_batch_fill makes
 * the same bytes for a step whichever thread runs it, so a prefetched batch is exactly
 * the one an unprefetched run would use, and a batch prefetched for a step that does not
 * come next (a reconnection moved the worker) is simply not used. */
#ifndef PSTRAIN_WORKER_PREFETCH_H
#define PSTRAIN_WORKER_PREFETCH_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "data/imageops.h"

typedef enum { WK_PF_IDLE = 0, WK_PF_ASKED, WK_PF_WORKING, WK_PF_READY } wk_pf_state;

typedef struct {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;         /* the state changed */
  const pst_batch_prep *prep;
  int batch;
  size_t features;           /* floats per sample */
  int32_t *idx;              /* [batch]: the samples asked for */
  float *x;                  /* [batch, features]: the prepared batch */
  int32_t *y;                /* [batch] */
  uint64_t step;             /* the step asked for / prepared */
  wk_pf_state state;
  int stop;
  int started;
} wk_prefetch;

/* Starts the thread for batches of `batch` samples made by prep (which must outlive it). */
int wk_prefetch_start(wk_prefetch *pf, const pst_batch_prep *prep, int batch);
/* Fills x[batch, features] and y[batch] with the training batch of `step`, whose samples are
 * idx[0..batch): the prefetched one when it was asked for (waiting for it if need be),
 * else prepared now. Returns the seconds this took, which is the step's wait for data. */
double wk_prefetch_take(wk_prefetch *pf, uint64_t step, const int32_t *idx, float *x, int32_t *y);
/* The same, handing the prefetched batch over instead of copying it (issue 41: the copy was
 * 0.07-0.09 ms of a 2.6 ms step of mlp at batch 256 on the null device, inside the step): the
 * caller's *x and *y (x_floats floats and batch labels, malloc'd) and the prefetcher's
 * buffers change places, so the next batch is made in the caller's old ones. Where the batch
 * was not prefetched, or x_floats is not the prefetcher's batch x features, it is copied or
 * prepared into *x and *y as above. */
double wk_prefetch_take_swap(wk_prefetch *pf, uint64_t step, const int32_t *idx, float **x,
                             int32_t **y, size_t x_floats);
/* Asks for the batch of `step` (idx is copied) to be prepared in the background. */
void wk_prefetch_ask(wk_prefetch *pf, uint64_t step, const int32_t *idx);
/* Stops and joins the thread and frees the buffers (safe on a zeroed or stopped one). */
void wk_prefetch_stop(wk_prefetch *pf);

#endif
