/* A step's transfers layer by layer (layer_push.c): the push that begins before the compute
 * and leaves as the backward pass makes the gradient (--push-by-layer), the backward pass's
 * callbacks and the loop's side of them, and the net's pieces that follow the wire's chunks
 * (--layer-pieces, issue 41). Called by step.c (the step machine) and trainer.c (the
 * callbacks' registration); it calls the shards' clients and kernels/pipeline, never
 * step.c. */
#ifndef PSTRAIN_WORKER_LAYER_PUSH_H
#define PSTRAIN_WORKER_LAYER_PUSH_H

#include <stddef.h>
#include <uv.h>

#include "worker/state.h"

/* Begins this step's push before its compute, when the step may push layer by layer. */
void wk_begin_layer_push(wk_trainer *t);
/* The backward pass's callbacks (kernels/net.h, on the threadpool or the backend's
 * download thread), and the loop's side of them (grad_async). */
void wk_grad_ready(void *ctx, size_t from);
void wk_grad_part(void *ctx, size_t lo, size_t hi);
void wk_on_grad_ready(uv_async_t *a);
/* --layer-pieces: the net's cuts from the shards' chunks, before a step is queued. */
void wk_set_row_cuts(wk_trainer *t);

#endif
