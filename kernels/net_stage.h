/* A part of a model on one device (issue 40): a stage of a pipeline (kernels/pipeline/)
 * runs layers [lo, hi) of the model, holds their parameters only, and keeps the
 * activations of several micro-batches at once, each in its own rows of the batch's
 * buffers, so that the stage below can compute the next micro-batch while this one works.
 *
 * What crosses a boundary b (between the stage ending at b and the one starting there) is
 * its cut: every tensor made below b that a layer at or above b takes. A plain stack's
 * cut is one tensor; a graph's (a residual edge over the boundary) may hold more, and a
 * tensor that a layer two stages up takes passes through the stage between (it is in both
 * of that stage's cuts). Forward, a stage reads the tensors of its lower cut where the
 * stage below keeps them (pst_net_stage_tensor: host memory needs no copy); backward it
 * writes their gradients into its own outbox (pst_net_stage_gin), which the stage below
 * reads as the gradients of its upper cut (pst_net_stage_bind). Parameter gradients of a
 * micro-batch after the first are added on, so the step's gradient is the sum over its
 * micro-batches: with the loss scale of the whole batch that is the whole batch's gradient
 * (batch normalisation aside: each micro-batch normalises with its own statistics, and
 * the moving statistics' change is the sum of the micro-batches' shares).
 *
 * The net of kernels/net.h is the one-stage case: pst_net_create is
 * pst_net_create_stage(m, be, max_batch, 1, n_layers, 1), and every function of net.h
 * works on a stage too, on its layers and parameter range (host vectors are always the
 * whole [n_params]). */
#ifndef PSTRAIN_KERNELS_NET_STAGE_H
#define PSTRAIN_KERNELS_NET_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/net.h"
#include "model/model.h"

/* A stage's device memory, in bytes, as creation allocates it. */
typedef struct {
  size_t weights;      /* its parameter range (and the zeros of bias-less layers) */
  size_t gradients;    /* the device gradient (not on host memory: the caller's vector)
                          and the micro-batches' accumulator */
  size_t activations;  /* its layers' outputs at max_batch, the gradient pool, the outbox
                          of its lower cut, batch normalisation's saved statistics */
  size_t total;
} pst_stage_need;

/* Layers [lo, hi) of m (1 <= lo < hi <= n_layers) on be, for batches up to max_batch, with
 * room for `slots` micro-batches (1 <= slots <= max_batch). 0 or a negative code. */
int pst_net_create_stage(const pst_model *m, pst_backend *be, int max_batch, int lo, int hi,
                         int slots, pst_net **out);
/* What pst_net_create_stage would allocate, without allocating it (need->total is exactly
 * pst_net_stage_bytes of the net it makes); host_memory as the backend's. The backend's
 * own workspace is not in it. 0 or -EINVAL. */
int pst_net_stage_need(const pst_model *m, int lo, int hi, int max_batch, int slots,
                       int host_memory, pst_stage_need *need);
size_t pst_net_stage_bytes(const pst_net *net);
/* The floats [*lo, *hi) of the flat vector this stage holds and writes the gradient of. */
void pst_net_stage_params(const pst_net *net, size_t *lo, size_t *hi);

/* Whether tensor j (a layer's output) is in the stage's lower cut (it takes j from below)
 * or its upper one (it sends j up). */
int pst_net_stage_takes(const pst_net *net, int j);
int pst_net_stage_sends(const pst_net *net, int j);
/* Where this stage keeps tensor j of its upper cut, [max_batch, out_size(j)] on its device,
 * for a training pass or an evaluation (flatten, and dropout when it is the identity, keep
 * their input's); for the first stage's tensor 0, the batch: x (host) on host memory. */
const float *pst_net_stage_tensor(const pst_net *net, int j, int training, const float *x);
/* Floats per sample of tensor j (the input's for j = 0): a cut tensor's rows are this long. */
size_t pst_net_stage_tensor_floats(const pst_net *net, int j);
/* This stage's outbox for the gradient of tensor j of its lower cut, [max_batch,
 * out_size(j)], or NULL when j needs none. */
float *pst_net_stage_gin(const pst_net *net, int j);
/* Binds tensor j: `in` is where the stage below keeps it (j in the lower cut), `grad` the
 * stage above's outbox for its gradient (j in the upper cut and it needs one). Either may
 * be NULL. On devices that share no memory (CUDA), the pipeline gives buffers of this
 * stage's own, on its device, that it copies the other stage's rows into
 * (kernels/pipeline/pipe.c, the backend's copy_from). */
void pst_net_stage_bind(pst_net *net, int j, const float *in, float *grad);

/* One micro-batch's pass through a stage. */
typedef struct {
  int slot;               /* its slot, 0 .. slots - 1 */
  int row0, rows;         /* its rows of the batch */
  const float *x;         /* host [batch, input_size]: the batch (the first stage's input) */
  const int32_t *labels;  /* host [batch]: the labels (the last stage's loss) */
  float loss_scale;       /* as pst_net_train_step's, for the whole batch */
  float *grad;            /* host [n_params]: the step's gradient (the stage's range) */
  int accumulate;         /* add this micro-batch's gradient on (not the step's first) */
  int final;              /* the step's last backward here: its gradients are final after
                             it (the grad_ready calls, the copy to the host) */
  double loss;            /* out, last stage: the micro-batch's summed loss */
  int correct;            /* out, last stage: its right predictions */
} pst_stage_pass;

/* The forward pass of a micro-batch (training: dropout on, batch statistics; else an
 * evaluation). On the last stage it ends with the loss (and, training, dlogits for the
 * backward pass that must follow before the next forward). 0 or a negative code, and
 * pst_net_error says why. */
int pst_net_stage_forward(pst_net *net, pst_stage_pass *p, int training);
/* The backward pass of the micro-batch whose forward ran in p->slot: its upper cut's
 * gradients must be in the stage above's outboxes. Fills this stage's outboxes. */
int pst_net_stage_backward(pst_net *net, pst_stage_pass *p);

/* Times each layer's forward and backward (wall seconds, summed) while on; the sums
 * start at 0 when it is turned on. */
void pst_net_stage_profile(pst_net *net, int on);
double pst_net_layer_seconds(const pst_net *net, int layer);

#endif
