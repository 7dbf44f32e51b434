/* Inside kernels/net: the network's state and the record of its failures (net_state.c),
 * below both net.c (creation, loading, the forward pass, the steps) and net_backward.c (the
 * backward pass, which net.c calls). It calls neither. Not for other modules. */
#ifndef PSTRAIN_KERNELS_NET_STATE_H
#define PSTRAIN_KERNELS_NET_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/net.h"
#include "model/model.h"

struct pst_net {
  pst_model m;
  pst_backend *be;
  int max_batch;
  int params_loaded;
  int dry;                          /* backward only counts its gradient buffers */
  uint64_t seed;                    /* dropout seed of the next training steps */
  float *params;                    /* device [n_params] */
  float *grad;                      /* device [n_params]; NULL on host-memory backends */
  float *x;                         /* device [max_batch, input_size]; NULL on host memory */
  int32_t *labels;                  /* device [max_batch]; NULL on host memory */
  /* Layers without a bias (bias=no) run the backends' biased kernels with these: zeros in
   * place of the bias and a sink for its gradient, so no backend needs a bias-less
   * variant. device [largest channel count of such a layer]; NULL when there is none. */
  float *zero_bias, *bias_sink;
  float *act[PST_MODEL_MAX_LAYERS]; /* device [max_batch, out_size] per layer; NULL for
                                       input and flatten */
  /* Whether a layer's output needs its gradient: some layer at or above it in the graph's
   * ancestry (it included) holds parameters. */
  unsigned char needs_grad[PST_MODEL_MAX_LAYERS];
  int n_dbuf;                       /* gradient buffers in the pool */
  float *dbuf[PST_MODEL_MAX_LAYERS + 2]; /* device [max_batch, largest out_size] each */
  unsigned char dbuf_busy[PST_MODEL_MAX_LAYERS + 2];
  int grad_of[PST_MODEL_MAX_LAYERS];     /* the pool buffer holding a layer's output gradient */
  const float *out[PST_MODEL_MAX_LAYERS]; /* this step's output of each layer */
  /* batchnorm: device [2C] per such layer, the training forward's batch mean and inverse
   * standard deviation, which its backward reads; NULL for other layers. */
  float *bn_saved[PST_MODEL_MAX_LAYERS];
  float *dstate;                    /* training: the gradient vector whose state ranges the
                                       forward fills (net.h), or NULL */
  float state_scale;                /* training: loss_scale * batch (net.h) */
  pst_grad_ready_fn grad_ready;     /* pst_net_on_grad_ready, or NULL */
  void *grad_ready_ctx;
  pst_grad_part_fn grad_part;       /* pst_net_on_grad_part, or NULL */
  void *grad_part_ctx;
  /* pst_net_load_params_streamed: the host vector still arriving, its wait, and how many
   * of its floats are on the device; stream_src is NULL once all are. */
  const float *stream_src;
  pst_params_wait_fn stream_wait;
  void *stream_ctx;
  size_t stream_loaded;
  /* A training step's host gradient vector, and how much of it (every float at or above
   * grad_sent) a download has been asked for, on a backend with download (net.h). */
  float *host_grad;
  size_t grad_sent;
  /* pst_net_set_row_cuts: a dense layer's pieces of rows of its weights, pieces[i][0] = 0 <
   * ... < pieces[i][n_pieces[i]] = its input size; NULL and 0 for a layer run whole. */
  int *pieces[PST_MODEL_MAX_LAYERS];
  int n_pieces[PST_MODEL_MAX_LAYERS];
  /* Where each layer's parameters end (w, b and s ranges); 0 for a layer without any. */
  size_t params_end[PST_MODEL_MAX_LAYERS];
  char err[640];                    /* why the last call failed (pst_net_error) */
  /* A stage (kernels/net_stage.h, issue 40): the net runs layers [lo, hi) and holds the
   * parameters [p_lo, p_hi) of the flat vector (params, grad and grad_acc are that range
   * only); a whole model has lo = 1, hi = n_layers, p_lo = 0, p_hi = n_params. `slots`
   * micro-batches keep their activations at once, as rows of the [max_batch, ...] buffers;
   * bn_saved holds [slots, 2C]. */
  int lo, hi, slots;
  size_t p_lo, p_hi;
  int slot;                         /* the micro-batch slot of the pass under way */
  int row0;                         /* its first row in the batch */
  /* The cuts: cut_lo[j] for a tensor made below this stage (j < lo) that a layer at or
   * above lo takes; cut_hi[j] for one made below hi that a layer at or above hi takes. */
  unsigned char cut_lo[PST_MODEL_MAX_LAYERS], cut_hi[PST_MODEL_MAX_LAYERS];
  const float *ext_in[PST_MODEL_MAX_LAYERS]; /* cut_lo tensors: [max_batch, out_size(j)],
                                                the stage below's storage */
  float *gext[PST_MODEL_MAX_LAYERS];  /* cut_hi tensors' gradients from the stage above,
                                         [max_batch, out_size(j)] (its gin) */
  float *gin[PST_MODEL_MAX_LAYERS];   /* device [max_batch, out_size(j)] per cut_lo tensor that
                                         needs a gradient: what this stage sends down */
  /* Gradient buffers outside the pool, indices PST_NET_EXT + j (gext[j]) and PST_NET_EXT +
   * PST_MODEL_MAX_LAYERS + j (gin[j]) of grad_of: the rows of the micro-batch under way.
   * take_buf never hands them out, so nothing else is ever written there. */
  float *ext_buf[2 * PST_MODEL_MAX_LAYERS];
  float *grad_acc;                  /* device [p_hi - p_lo]: a later micro-batch's gradient,
                                       added on; NULL with one slot */
  int accumulate;                   /* the pass adds its gradient on (not the first micro-batch) */
  int final_pass;                   /* the step's last backward of this stage: grad_ready */
  size_t bytes;                     /* device memory this net allocated */
  /* --stages' balance: seconds each layer took (forward and backward) while profile is set. */
  int profile;
  double layer_seconds[PST_MODEL_MAX_LAYERS];
  /* Each layer's forward and backward span names on the timeline (common/timeline.h), made
   * once so that recording a layer allocates nothing. */
  char tl_name[2][PST_MODEL_MAX_LAYERS][48];
};

/* Indices of grad_of at or above this are ext_buf[index - PST_NET_EXT]. */
#define PST_NET_EXT 1024

/* A gradient buffer by its index: the pool's, or an outside one. */
static inline float *dbuf_at(const pst_net *net, int k) {
  return k >= PST_NET_EXT ? net->ext_buf[k - PST_NET_EXT] : net->dbuf[k];
}

/* A parameter's place on the device: params holds [p_lo, p_hi) of the flat vector. NULL for
 * an empty tensor, whose offset may lie outside the range. */
static inline float *param_at(const pst_net *net, size_t off, size_t count) {
  return count ? net->params + (off - net->p_lo) : NULL;
}

static inline size_t out_size(const pst_layer *L) {
  return (size_t)L->out_h * L->out_w * L->out_c;
}

static inline pst_window_shape window_of(const pst_layer *L, int batch) {
  pst_window_shape s = {
      .n = batch,
      .in_h = L->in_h, .in_w = L->in_w, .in_c = L->in_c,
      .k_h = L->k_h, .k_w = L->k_w,
      .stride_h = L->stride_h, .stride_w = L->stride_w,
      .pad_top = L->pad_top, .pad_left = L->pad_left,
      .out_h = L->out_h, .out_w = L->out_w, .out_c = L->out_c,
  };
  return s;
}

/* Layer i's dropout seed: the step's seed and the layer index through one splitmix64
 * round, so that two dropout layers of one step draw unrelated masks. */
static inline uint64_t layer_seed(const pst_net *net, int i) {
  uint64_t z = net->seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Records why layer i's operation `op` failed at this batch with rc (pst_net_error): the
 * layer's index, kind and name, op, its shapes, and what the backend said (its last_error,
 * read at once, on the failing thread) or else the code's text. Returns rc. */
int pst_net_fail(pst_net *net, int rc, int i, const char *op, int batch);
/* The same for a failure that belongs to no layer (the batch's upload, the final copy). */
int pst_net_fail_step(pst_net *net, int rc, const char *what);

/* The name of a layer kind, for messages ("conv2d"). */
const char *pst_net_kind_name(pst_layer_kind k);

#endif
