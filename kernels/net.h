/* A model instantiated on a backend: activations and gradients in device memory,
 * forward and backward over a batch. The worker's only entry to compute. */
#ifndef PSTRAIN_KERNELS_NET_H
#define PSTRAIN_KERNELS_NET_H

#include <stdint.h>

#include "kernels/backend.h"
#include "model/model.h"

typedef struct pst_net pst_net;

/* Allocates every buffer once for batches up to max_batch. */
int pst_net_create(const pst_model *m, pst_backend *be, int max_batch, pst_net **out);
/* Copies the flat parameter vector (host, n_params floats) to the device. */
int pst_net_load_params(pst_net *net, const float *params);
/* Waits, on the computing thread, until the host vector given to
 * pst_net_load_params_streamed holds the new weights in [0, upto): 0, or a negative code
 * that ends the step with that code (the weights will not come: the connection broke). */
typedef int (*pst_params_wait_fn)(void *ctx, size_t upto);
/* Like pst_net_load_params for weights that are still arriving, in order, into
 * params[n_params] (host): the next forward pass (training or evaluation) takes each
 * layer's parameters just before that layer runs, once wait(ctx, end of the layer's range)
 * has returned, so the first layers compute while the last ones are still on the wire.
 * Parameters are laid out in layer order, so the waits ask for ever larger prefixes; the
 * last asks for all n_params floats before the pass ends. The caller must not change
 * params[0, upto) after a wait for upto has returned, until the step is over. Each layer's
 * part is copied to the device once it is in: on the backend's copy stream where it has
 * upload (CUDA: the layers before it compute meanwhile), else with to_device. */
int pst_net_load_params_streamed(pst_net *net, const float *params, pst_params_wait_fn wait,
                                 void *ctx);
/* Cuts the dense layers into pieces of rows of their weights [in, out] at the row
 * boundaries just below the offsets `cuts` (ascending offsets of the flat parameter
 * vector: the chunks the weights travel in, model.h's pst_model_chunks): a layer with a cut
 * inside its weights runs its forward pass piece by piece, each once its rows of the
 * streamed weights are in (pst_net_load_params_streamed waits for each piece's end), and
 * its backward pass piece by piece from the last rows down, each piece's gradient announced
 * to grad_ready as soon as it is made. So a worker pushes the first layer's gradient (the
 * last one made) while the rest of it is computed, and starts its next forward pass on the
 * first weights back. The sums' order changes (backend.h, dense_forward_rows): results are
 * within rounding of the whole layers', the same run after run for the same cuts. At most
 * PST_NET_MAX_PIECES pieces a layer (later cuts are dropped). Nothing is cut when the
 * backend lacks the row operations, or for a stage of a pipeline or a net running
 * micro-batches (kernels/net_stage.h); n = 0 runs every layer whole again. Between steps
 * only. 0, or -EINVAL for cuts not ascending, -ENOMEM. */
#define PST_NET_MAX_PIECES 64
int pst_net_set_row_cuts(pst_net *net, const size_t *cuts, size_t n);
/* How many pieces layer i runs in (1 for a layer run whole). */
int pst_net_layer_pieces(const pst_net *net, int i);
/* Seeds the dropout masks of the following training steps (evaluation never drops).
 * Each dropout layer draws from seed mixed with its layer index; the worker passes a seed
 * derived from the job seed, its index and the step (worker/trainer.c), so a sync run is
 * bit-reproducible and no two workers or steps share a mask. Default 0. */
void pst_net_set_seed(pst_net *net, uint64_t seed);
/* One training step on x[batch, input_size] (host) and labels[batch] (host).
 * The model may be a graph (model/model.h): a layer output taken by several layers gets
 * the sum of their gradients, added in a fixed order, so results are reproducible.
 * grad (host, n_params floats) receives d(loss)/d(params) where
 * loss = loss_scale * sum over the batch of cross-entropy; so loss_scale = 1/(b*N) gives
 * the mean over the global batch of N workers (TF's compute_average_loss).
 * Model state (batchnorm's moving statistics, pst_model_state_ranges) has no gradient: its
 * entries of grad receive instead the change of the moving statistic that this batch asks
 * for, weighted like a gradient: (1 - momentum) * (batch_stat - moving) * loss_scale * batch,
 * where batch_stat is the batch's mean, or its biased variance, of that channel. With
 * loss_scale = 1/(b*N) that is the Keras update divided by N, so the ps's sync sum of the N
 * workers' shares is the mean of their updates and an async push (scaled by N, ps/train/update.h)
 * is one worker's own Keras update; the ps adds it without the optimizer (ps/train/optim.h).
 * *loss_sum gets the unscaled sum of per-sample losses, *correct the right predictions. */
int pst_net_train_step(pst_net *net, const float *x, const int32_t *labels, int batch,
                       float loss_scale, float *grad, double *loss_sum, int *correct);
/* Called during each training step as the gradient becomes final in the host's grad
 * vector: every float at offset >= from holds its final value and is not written again in
 * this step. `from` only goes down, and the last call of a step has from = 0, on the
 * computing thread once the step is over. Before it, one call per layer with parameters,
 * as the backward pass (last layer first; layers are laid out in order) finishes that
 * layer, so that a worker can send the last layers' gradients while the first layers' are
 * computed: on the computing thread for host-memory backends (CPU); for backends with
 * download (CUDA, kernels/backend.h) once that layer's gradient has reached the host, on
 * the backend's own thread, while the backward pass goes on. Backends with neither make
 * only the last call. NULL: no calls. */
typedef void (*pst_grad_ready_fn)(void *ctx, size_t from);
void pst_net_on_grad_ready(pst_net *net, pst_grad_ready_fn fn, void *ctx);
/* With grad_ready set, a layer cut into pieces (pst_net_set_row_cuts) is made from its
 * first rows up instead of from its last rows down, and each piece but the last is
 * announced here: floats [lo, hi) of the host's grad vector are final, lo the layer's first
 * float and hi the end of the rows made so far (growing; the bias, above the weights, comes
 * with the last piece, which grad_ready announces with from = lo as for a whole layer). The
 * calls come on the computing thread (host memory) or the backend's download thread, in
 * order with the grad_ready calls. So a worker sends a layer's first chunk first, which is
 * the chunk the next forward pass needs first. NULL: cut layers go from the top down,
 * announced by grad_ready alone. Between steps only. */
typedef void (*pst_grad_part_fn)(void *ctx, size_t lo, size_t hi);
void pst_net_on_grad_part(pst_net *net, pst_grad_part_fn fn, void *ctx);
/* Forward only, in evaluation mode (no dropout; batchnorm normalises with the moving
 * statistics of the loaded parameters): sum of losses and number correct. */
int pst_net_evaluate(pst_net *net, const float *x, const int32_t *labels, int batch,
                     double *loss_sum, int *correct);
/* Why the last failing call of pst_net_load_params, pst_net_train_step or pst_net_evaluate
 * failed, one line: the layer, what it ran, its shape and what the backend returned, e.g.
 * "layer 5 batchnorm (s1b1_bn1), inference forward of 65536 x 16: <the library call>:
 * <its status> (<file:line>)", or "uploading the batch: ...". "" when nothing failed. Read
 * it on any thread once the failing call has returned. */
const char *pst_net_error(const pst_net *net);
/* Logs, one line per layer, where and how it runs (--log-placement). */
void pst_net_log_placement(pst_net *net);
void pst_net_destroy(pst_net *net);

#endif
