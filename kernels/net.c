/* A model on a backend: buffers allocated once, forward and backward through the vtable
 * only, so that the same code drives the CPU and CUDA backends.
 *
 * Each non-flatten layer owns an output buffer [max_batch, out_size]; flatten aliases its
 * input (NHWC is already the row-major flat order), and so does dropout at evaluation,
 * where it is the identity. Backward walks the layers in reverse
 * with two ping-pong gradient buffers, applying each ReLU's derivative in place before
 * the layer's own backward. Parameter gradients go straight to their offsets in one flat
 * gradient vector, which for a host-memory backend is the caller's own array. */
#include "kernels/net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

struct pst_net {
  pst_model m;
  pst_backend *be;
  int max_batch;
  int first_param_layer;            /* lowest layer index holding parameters */
  int params_loaded;
  uint64_t seed;                    /* dropout seed of the next training steps */
  float *params;                    /* device [n_params] */
  float *grad;                      /* device [n_params]; NULL on host-memory backends */
  float *x;                         /* device [max_batch, input_size]; NULL on host memory */
  int32_t *labels;                  /* device [max_batch]; NULL on host memory */
  float *act[PST_MODEL_MAX_LAYERS]; /* device [max_batch, out_size] per layer; NULL for
                                       input and flatten */
  float *dbuf[2];                   /* device [max_batch, largest out_size] */
  const float *out[PST_MODEL_MAX_LAYERS]; /* this step's output of each layer */
  /* batchnorm: device [2C] per such layer, the training forward's batch mean and inverse
   * standard deviation, which its backward reads; NULL for other layers. */
  float *bn_saved[PST_MODEL_MAX_LAYERS];
  float *dstate;                    /* training: the gradient vector whose state ranges the
                                       forward fills (net.h), or NULL */
  float state_scale;                /* training: loss_scale * batch (net.h) */
};

static size_t out_size(const pst_layer *L) { return (size_t)L->out_h * L->out_w * L->out_c; }

static const char *kind_name(pst_layer_kind k) {
  switch (k) {
    case PST_LAYER_INPUT: return "input";
    case PST_LAYER_DENSE: return "dense";
    case PST_LAYER_CONV2D: return "conv2d";
    case PST_LAYER_MAXPOOL: return "maxpool";
    case PST_LAYER_FLATTEN: return "flatten";
    case PST_LAYER_AVGPOOL: return "avgpool";
    case PST_LAYER_GLOBAL_AVGPOOL: return "global_avgpool";
    case PST_LAYER_DROPOUT: return "dropout";
    case PST_LAYER_DEPTHWISE_CONV2D: return "depthwise_conv2d";
    case PST_LAYER_BATCHNORM: return "batchnorm";
  }
  return "?";
}

static pst_window_shape window_of(const pst_layer *L, int batch) {
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

void pst_net_destroy(pst_net *net) {
  if (net == NULL) return;
  pst_backend *be = net->be;
  if (net->params) be->free(be, net->params);
  if (net->grad) be->free(be, net->grad);
  if (net->x) be->free(be, net->x);
  if (net->labels) be->free(be, net->labels);
  for (int i = 0; i < PST_MODEL_MAX_LAYERS; i++)
    if (net->act[i]) be->free(be, net->act[i]);
  for (int i = 0; i < 2; i++)
    if (net->dbuf[i]) be->free(be, net->dbuf[i]);
  for (int i = 0; i < PST_MODEL_MAX_LAYERS; i++)
    if (net->bn_saved[i]) be->free(be, net->bn_saved[i]);
  free(net);
}

int pst_net_create(const pst_model *m, pst_backend *be, int max_batch, pst_net **out) {
  if (out == NULL) return -EINVAL;
  *out = NULL;
  if (m == NULL || be == NULL || max_batch <= 0 || m->n_layers < 2 || m->n_params == 0 ||
      m->n_layers > PST_MODEL_MAX_LAYERS)
    return -EINVAL;
  pst_net *net = calloc(1, sizeof *net);
  if (net == NULL) return -ENOMEM;
  net->m = *m;
  net->be = be;
  net->max_batch = max_batch;
  net->first_param_layer = m->n_layers;
  size_t largest = 0;
  for (int i = m->n_layers - 1; i >= 1; i--) {
    const pst_layer *L = &m->layers[i];
    if (L->w_count + L->b_count > 0) net->first_param_layer = i;
    if (out_size(L) > largest) largest = out_size(L);
  }

  int rc = -ENOMEM;
  size_t B = (size_t)max_batch;
  if ((net->params = be->alloc(be, m->n_params * sizeof(float))) == NULL) goto fail;
  if (!be->host_memory) {
    if ((net->grad = be->alloc(be, m->n_params * sizeof(float))) == NULL) goto fail;
    if ((net->x = be->alloc(be, B * m->input_size * sizeof(float))) == NULL) goto fail;
    if ((net->labels = be->alloc(be, B * sizeof(int32_t))) == NULL) goto fail;
  }
  for (int i = 1; i < m->n_layers; i++) {
    const pst_layer *L = &m->layers[i];
    if (L->kind == PST_LAYER_FLATTEN) continue;
    if ((net->act[i] = be->alloc(be, B * out_size(L) * sizeof(float))) == NULL) goto fail;
    if (L->kind == PST_LAYER_BATCHNORM) {
      if (be->batchnorm_forward_train == NULL || be->batchnorm_forward_infer == NULL ||
          be->batchnorm_backward == NULL) {
        rc = -ENOTSUP;
        goto fail;
      }
      if ((net->bn_saved[i] = be->alloc(be, 2 * (size_t)L->out_c * sizeof(float))) == NULL)
        goto fail;
    }
  }
  for (int i = 0; i < 2; i++)
    if ((net->dbuf[i] = be->alloc(be, B * largest * sizeof(float))) == NULL) goto fail;
  *out = net;
  return 0;
fail:
  pst_net_destroy(net);
  return rc;
}

int pst_net_load_params(pst_net *net, const float *params) {
  if (net == NULL || params == NULL) return -EINVAL;
  int rc = net->be->to_device(net->be, net->params, params, net->m.n_params * sizeof(float));
  if (rc == 0) net->params_loaded = 1;
  return rc;
}

/* Uploads the batch (or, on host memory, uses the caller's arrays in place). */
static int upload(pst_net *net, const float *x, const int32_t *labels, int batch,
                  const int32_t **dev_labels) {
  pst_backend *be = net->be;
  if (be->host_memory) {
    net->out[0] = x;
    *dev_labels = labels;
    return 0;
  }
  int rc = be->to_device(be, net->x, x, (size_t)batch * net->m.input_size * sizeof(float));
  if (rc == 0) rc = be->to_device(be, net->labels, labels, (size_t)batch * sizeof(int32_t));
  net->out[0] = net->x;
  *dev_labels = net->labels;
  return rc;
}

void pst_net_set_seed(pst_net *net, uint64_t seed) {
  if (net != NULL) net->seed = seed;
}

/* Layer i's dropout seed: the step's seed and the layer index through one splitmix64
 * round, so that two dropout layers of one step draw unrelated masks. */
static uint64_t layer_seed(const pst_net *net, int i) {
  uint64_t z = net->seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Applies layer L's activation to y in place. */
static int activate(pst_backend *be, const pst_layer *L, float *y, size_t n) {
  if (L->act == PST_ACT_RELU) return be->relu_forward(be, y, y, n);
  if (L->act == PST_ACT_RELU6) return be->relu6_forward(be, y, y, n);
  return 0;
}

/* Runs every layer; the last layer's output is left as logits (its softmax belongs to
 * the loss). `training` turns dropout on. */
static int forward(pst_net *net, int batch, int training) {
  pst_backend *be = net->be;
  const pst_model *m = &net->m;
  int rc = 0;
  for (int i = 1; i < m->n_layers && rc == 0; i++) {
    const pst_layer *L = &m->layers[i];
    const float *in = net->out[i - 1];
    float *y = net->act[i];
    const float *w = net->params + L->w_offset, *bias = net->params + L->b_offset;
    switch (L->kind) {
      case PST_LAYER_DENSE:
        rc = be->dense_forward(be, in, w, bias, y, batch, L->in_c, L->units);
        break;
      case PST_LAYER_CONV2D: {
        pst_window_shape s = window_of(L, batch);
        rc = be->conv2d_forward(be, &s, in, w, bias, y);
        break;
      }
      case PST_LAYER_DEPTHWISE_CONV2D: {
        pst_window_shape s = window_of(L, batch);
        rc = be->depthwise_conv2d_forward(be, &s, in, w, bias, y);
        break;
      }
      case PST_LAYER_MAXPOOL: {
        pst_window_shape s = window_of(L, batch);
        rc = be->maxpool_forward(be, &s, in, y);
        break;
      }
      case PST_LAYER_AVGPOOL:
      case PST_LAYER_GLOBAL_AVGPOOL: {
        pst_window_shape s = window_of(L, batch);
        rc = be->avgpool_forward(be, &s, in, y);
        break;
      }
      case PST_LAYER_DROPOUT:
        if (!training || L->rate == 0.0f) {
          net->out[i] = in;
          continue;
        }
        rc = be->dropout_forward(be, in, y, (size_t)batch * out_size(L), L->rate,
                                 layer_seed(net, i));
        break;
      case PST_LAYER_BATCHNORM: {
        /* Images are [B*H*W, C] with the channels innermost, flat vectors [B, C]. The
         * training forward also writes the moving statistics' share (net.h). */
        int rows = batch * L->out_h * L->out_w;
        const float *moving = net->params + L->s_offset;
        if (training)
          rc = be->batchnorm_forward_train(
              be, in, w, bias, y, rows, L->out_c, L->eps, moving,
              (1.0f - L->momentum) * net->state_scale, net->bn_saved[i],
              net->dstate != NULL ? net->dstate + L->s_offset : NULL);
        else
          rc = be->batchnorm_forward_infer(be, in, w, bias, moving, y, rows, L->out_c, L->eps);
        break;
      }
      case PST_LAYER_FLATTEN:
        net->out[i] = in;
        continue;
      case PST_LAYER_INPUT:
        rc = -EINVAL;
        break;
    }
    if (rc == 0) rc = activate(be, L, y, (size_t)batch * out_size(L));
    net->out[i] = y;
  }
  return rc;
}

/* Backpropagates dlogits (in dbuf[0]) down to the first layer with parameters. */
static int backward(pst_net *net, int batch, float *grad) {
  pst_backend *be = net->be;
  const pst_model *m = &net->m;
  float *d = net->dbuf[0], *other = net->dbuf[1];
  int rc = 0;
  for (int i = m->n_layers - 1; i >= net->first_param_layer && rc == 0; i--) {
    const pst_layer *L = &m->layers[i];
    const float *in = net->out[i - 1], *y = net->out[i];
    const float *w = net->params + L->w_offset;
    float *dx = i > net->first_param_layer ? other : NULL;
    if (L->act == PST_ACT_RELU || L->act == PST_ACT_RELU6) {
      rc = L->act == PST_ACT_RELU ? be->relu_backward(be, y, d, d, (size_t)batch * out_size(L))
                                  : be->relu6_backward(be, y, d, d, (size_t)batch * out_size(L));
      if (rc != 0) break;
    }
    switch (L->kind) {
      case PST_LAYER_DENSE:
        rc = be->dense_backward(be, in, w, d, dx, grad + L->w_offset, grad + L->b_offset, batch,
                                L->in_c, L->units);
        break;
      case PST_LAYER_CONV2D: {
        pst_window_shape s = window_of(L, batch);
        rc = be->conv2d_backward(be, &s, in, w, d, dx, grad + L->w_offset, grad + L->b_offset);
        break;
      }
      case PST_LAYER_DEPTHWISE_CONV2D: {
        pst_window_shape s = window_of(L, batch);
        rc = be->depthwise_conv2d_backward(be, &s, in, w, d, dx, grad + L->w_offset,
                                           grad + L->b_offset);
        break;
      }
      case PST_LAYER_MAXPOOL: {
        pst_window_shape s = window_of(L, batch);
        if (dx != NULL) rc = be->maxpool_backward(be, &s, in, y, d, dx);
        break;
      }
      case PST_LAYER_AVGPOOL:
      case PST_LAYER_GLOBAL_AVGPOOL: {
        pst_window_shape s = window_of(L, batch);
        if (dx != NULL) rc = be->avgpool_backward(be, &s, d, dx);
        break;
      }
      case PST_LAYER_DROPOUT:
        /* In place: the same scaled mask as forward, recomputed from the seed. */
        if (dx != NULL && L->rate != 0.0f)
          rc = be->dropout_backward(be, d, d, (size_t)batch * out_size(L), L->rate,
                                    layer_seed(net, i));
        dx = NULL;
        break;
      case PST_LAYER_BATCHNORM:
        rc = be->batchnorm_backward(be, in, w, net->bn_saved[i], d, dx, grad + L->w_offset,
                                    grad + L->b_offset, batch * L->out_h * L->out_w, L->out_c,
                                    L->eps);
        break;
      case PST_LAYER_FLATTEN:
        dx = NULL; /* the gradient passes through unchanged */
        break;
      case PST_LAYER_INPUT:
        rc = -EINVAL;
        break;
    }
    if (dx != NULL) {
      other = d;
      d = dx;
    }
  }
  return rc;
}

static int check_args(pst_net *net, const float *x, const int32_t *labels, int batch) {
  if (net == NULL || x == NULL || labels == NULL || batch <= 0 || batch > net->max_batch ||
      !net->params_loaded)
    return -EINVAL;
  return 0;
}

int pst_net_train_step(pst_net *net, const float *x, const int32_t *labels, int batch,
                       float loss_scale, float *grad, double *loss_sum, int *correct) {
  int rc = check_args(net, x, labels, batch);
  if (rc != 0 || grad == NULL) return rc != 0 ? rc : -EINVAL;
  pst_backend *be = net->be;
  const pst_model *m = &net->m;
  const int32_t *dev_labels;
  double loss = 0.0;
  int right = 0;
  float *dgrad = be->host_memory ? grad : net->grad;
  if ((rc = upload(net, x, labels, batch, &dev_labels)) != 0) return rc;
  net->dstate = dgrad;
  net->state_scale = loss_scale * (float)batch;
  rc = forward(net, batch, 1);
  net->dstate = NULL;
  if (rc != 0) return rc;
  rc = be->softmax_xent(be, net->out[m->n_layers - 1], dev_labels, net->dbuf[0], batch, m->classes,
                        loss_scale, &loss, &right);
  if (rc != 0) return rc;
  if ((rc = backward(net, batch, dgrad)) != 0) return rc;
  if (!be->host_memory &&
      (rc = be->to_host(be, grad, net->grad, m->n_params * sizeof(float))) != 0)
    return rc;
  if ((rc = be->synchronize(be)) != 0) return rc;
  if (loss_sum != NULL) *loss_sum = loss;
  if (correct != NULL) *correct = right;
  return 0;
}

int pst_net_evaluate(pst_net *net, const float *x, const int32_t *labels, int batch,
                     double *loss_sum, int *correct) {
  int rc = check_args(net, x, labels, batch);
  if (rc != 0) return rc;
  pst_backend *be = net->be;
  const int32_t *dev_labels;
  double loss = 0.0;
  int right = 0;
  if ((rc = upload(net, x, labels, batch, &dev_labels)) != 0) return rc;
  if ((rc = forward(net, batch, 0)) != 0) return rc;
  rc = be->softmax_xent(be, net->out[net->m.n_layers - 1], dev_labels, NULL, batch,
                        net->m.classes, 1.0f, &loss, &right);
  if (rc == 0) rc = be->synchronize(be);
  if (rc != 0) return rc;
  if (loss_sum != NULL) *loss_sum = loss;
  if (correct != NULL) *correct = right;
  return 0;
}

void pst_net_log_placement(pst_net *net) {
  if (net == NULL) return;
  pst_backend *be = net->be;
  for (int i = 1; i < net->m.n_layers; i++) {
    const pst_layer *L = &net->m.layers[i];
    const char *what = kind_name(L->kind);
    char how[256];
    if (be->describe != NULL)
      be->describe(be, what, i, how, sizeof how);
    else
      snprintf(how, sizeof how, "%s", be->name);
    LOG_INFO("layer %d %s -> %dx%dx%d%s: %s", i, what, L->out_h, L->out_w, L->out_c,
             L->act == PST_ACT_RELU      ? " + relu"
             : L->act == PST_ACT_RELU6   ? " + relu6"
             : L->act == PST_ACT_SOFTMAX ? " + softmax cross-entropy"
                                         : "",
             how);
  }
}
