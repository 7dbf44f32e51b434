/* The job's gradient clip norm applied by a worker to its own share, the same for a ps's
 * worker (worker/step.c) and an all-reduce rank (worker/allreduce/), so that both push or sum
 * the same values. A pure function: it calls nothing of the worker. */
#ifndef PSTRAIN_WORKER_GRAD_CLIP_H
#define PSTRAIN_WORKER_GRAD_CLIP_H

#include "model/model.h"

/* grad[n_params] is this worker's share of the step's gradient, the gradient of its batch's
 * loss over world (the global batch's share); its batch mean's norm, over the trained
 * parameters, is the share's norm times world. When that is over clip_norm, the trained
 * parameters' entries are scaled down to it, as Keras's global_clipnorm; the model state
 * (batchnorm's moving statistics) is no gradient and is left as it is. Returns 1 when it
 * scaled, else 0. */
int wk_clip_gradient(const pst_model *m, float *grad, int world, double clip_norm);

#endif
