/* A model on a backend: buffers allocated once, forward and backward through the vtable
 * only, so that the same code drives the CPU and CUDA backends.
 *
 * Each non-flatten layer owns an output buffer [max_batch, out_size]; flatten aliases its
 * input (NHWC is already the row-major flat order), and so does dropout at evaluation,
 * where it is the identity. The layers run in spec order, which the parser guarantees is
 * an order of the graph (every input is above the layer that takes it). The backward pass
 * is in net_backward.c, which this file calls; the state both use, and the record of
 * failures, are in net_state.h and net_state.c. Parameter gradients go straight to their
 * offsets in one flat gradient vector, which for a host-memory backend is the caller's own
 * array. */
#include "kernels/net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/timeline.h"
#include "kernels/net_backward.h"
#include "kernels/net_forward.h"
#include "kernels/net_stage.h"
#include "kernels/net_state.h"

void pst_net_destroy(pst_net *net) {
  if (net == NULL) return;
  pst_backend *be = net->be;
  if (net->params) be->free(be, net->params);
  if (net->grad) be->free(be, net->grad);
  if (net->x) be->free(be, net->x);
  if (net->labels) be->free(be, net->labels);
  if (net->zero_bias) be->free(be, net->zero_bias);
  if (net->bias_sink) be->free(be, net->bias_sink);
  for (int i = 0; i < PST_MODEL_MAX_LAYERS; i++)
    if (net->act[i]) be->free(be, net->act[i]);
  for (int i = 0; i < net->n_dbuf; i++)
    if (net->dbuf[i]) be->free(be, net->dbuf[i]);
  for (int i = 0; i < PST_MODEL_MAX_LAYERS; i++)
    if (net->bn_saved[i]) be->free(be, net->bn_saved[i]);
  for (int i = 0; i < PST_MODEL_MAX_LAYERS; i++)
    if (net->gin[i]) be->free(be, net->gin[i]);
  if (net->grad_acc) be->free(be, net->grad_acc);
  for (int i = 0; i < PST_MODEL_MAX_LAYERS; i++) free(net->pieces[i]);
  free(net);
}

int pst_net_create(const pst_model *m, pst_backend *be, int max_batch, pst_net **out) {
  return pst_net_create_stage(m, be, max_batch, 1, m != NULL ? m->n_layers : 0, 1, out);
}

/* Allocates on the net's device and counts the bytes (pst_net_stage_bytes). */
static void *net_alloc(pst_net *net, size_t bytes) {
  void *p = net->be->alloc(net->be, bytes);
  if (p != NULL) net->bytes += bytes;
  return p;
}

/* The layout of layers [lo, hi) of m: where each layer's parameters end, which outputs need
 * a gradient, the cuts, the stage's parameter range and its largest tensor (for the
 * gradient pool). -EINVAL for a graph out of order. Shared by creation and by
 * pst_net_stage_need, so that a prediction is what creation allocates. */
static int plan_part(pst_net *net, const pst_model *m, int lo, int hi, size_t *largest) {
  net->lo = lo;
  net->hi = hi;
  *largest = 0;
  for (int i = 1; i < m->n_layers; i++) {
    const pst_layer *L = &m->layers[i];
    int need = L->w_count + L->b_count > 0;
    for (int t = 0; t < L->n_inputs; t++) {
      int j = L->inputs[t];
      if (j < 0 || j >= i) return -EINVAL;
      need |= net->needs_grad[j];
      if (j < lo && i >= lo) net->cut_lo[j] = 1;
      if (j < hi && i >= hi) net->cut_hi[j] = 1;
    }
    net->needs_grad[i] = (unsigned char)need;
    size_t end = 0;
    if (L->w_count && L->w_offset + L->w_count > end) end = L->w_offset + L->w_count;
    if (L->b_count && L->b_offset + L->b_count > end) end = L->b_offset + L->b_count;
    if (L->s_count && L->s_offset + L->s_count > end) end = L->s_offset + L->s_count;
    net->params_end[i] = end;
    if (i < lo && end > net->p_lo) net->p_lo = end;
    if (i < hi && end > net->p_hi) net->p_hi = end;
    if (i >= lo && i < hi && out_size(L) > *largest) *largest = out_size(L);
  }
  /* The first stage takes the batch itself (out[0]), not a tensor from below. */
  net->cut_lo[0] = 0;
  for (int j = 1; j < lo; j++)
    if (net->cut_lo[j] && out_size(&m->layers[j]) > *largest) *largest = out_size(&m->layers[j]);
  if (lo == 1) net->p_lo = 0;
  if (hi == m->n_layers) net->p_hi = m->n_params;
  /* The dry run: the same walk as every training step, counting the buffers it holds at
   * once. */
  net->dry = 1;
  int rc = pst_net_backward(net, 1, NULL);
  net->dry = 0;
  return rc;
}

/* What creation allocates, part by part (pst_net_stage_need's figures). */
static void part_bytes(const pst_net *net, int host_memory, int max_batch, size_t largest,
                       pst_stage_need *need) {
  const pst_model *m = &net->m;
  size_t B = (size_t)max_batch, F = sizeof(float), np = net->p_hi - net->p_lo;
  memset(need, 0, sizeof *need);
  need->weights = np * F;
  if (!host_memory) need->gradients = np * F;
  if (net->slots > 1) need->gradients += np * F;
  if (!host_memory && net->lo == 1) need->activations += B * (size_t)m->input_size * F;
  if (!host_memory && net->hi == m->n_layers) need->activations += B * sizeof(int32_t);
  for (int i = net->lo; i < net->hi; i++) {
    const pst_layer *L = &m->layers[i];
    if (L->kind == PST_LAYER_FLATTEN) continue;
    need->activations += B * out_size(L) * F;
    if (L->kind == PST_LAYER_BATCHNORM) need->activations += (size_t)net->slots * 2 * L->out_c * F;
  }
  for (int j = 1; j < net->lo; j++)
    if (net->cut_lo[j] && net->needs_grad[j]) need->activations += B * out_size(&m->layers[j]) * F;
  need->activations += (size_t)net->n_dbuf * B * largest * F;
  size_t no_bias = 0; /* the zeros and the sink of layers without a bias, as below */
  for (int i = net->lo; i < net->hi; i++) {
    const pst_layer *L = &m->layers[i];
    int biased_kind = L->kind == PST_LAYER_DENSE || L->kind == PST_LAYER_CONV2D ||
                      L->kind == PST_LAYER_DEPTHWISE_CONV2D;
    if (biased_kind && L->b_count == 0 && (size_t)L->out_c > no_bias) no_bias = (size_t)L->out_c;
  }
  need->weights += 2 * no_bias * F;
  need->total = need->weights + need->gradients + need->activations;
}

int pst_net_stage_need(const pst_model *m, int lo, int hi, int max_batch, int slots,
                       int host_memory, pst_stage_need *need) {
  if (m == NULL || need == NULL || lo < 1 || hi <= lo || hi > m->n_layers || slots < 1 ||
      max_batch < slots)
    return -EINVAL;
  pst_net *net = calloc(1, sizeof *net);
  if (net == NULL) return -ENOMEM;
  net->m = *m;
  net->slots = slots;
  size_t largest;
  int rc = plan_part(net, m, lo, hi, &largest);
  if (rc == 0) part_bytes(net, host_memory, max_batch, largest, need);
  free(net);
  return rc;
}

int pst_net_create_stage(const pst_model *m, pst_backend *be, int max_batch, int lo, int hi,
                         int slots, pst_net **out) {
  if (out == NULL) return -EINVAL;
  *out = NULL;
  if (m == NULL || be == NULL || max_batch <= 0 || m->n_layers < 2 || m->n_params == 0 ||
      m->n_layers > PST_MODEL_MAX_LAYERS || lo < 1 || hi <= lo || hi > m->n_layers ||
      slots < 1 || slots > max_batch)
    return -EINVAL;
  pst_net *net = calloc(1, sizeof *net);
  if (net == NULL) return -ENOMEM;
  net->m = *m;
  net->be = be;
  net->max_batch = max_batch;
  net->slots = slots;
  net->final_pass = 1;
  size_t largest;
  int rc = plan_part(net, m, lo, hi, &largest);
  if (rc != 0) {
    free(net);
    return rc;
  }

  rc = -ENOMEM;
  size_t B = (size_t)max_batch, np = net->p_hi - net->p_lo;
  if ((net->params = net_alloc(net, np * sizeof(float))) == NULL) goto fail;
  if (!be->host_memory) {
    if ((net->grad = net_alloc(net, np * sizeof(float))) == NULL) goto fail;
    if (lo == 1 && (net->x = net_alloc(net, B * m->input_size * sizeof(float))) == NULL) goto fail;
    if (hi == m->n_layers && (net->labels = net_alloc(net, B * sizeof(int32_t))) == NULL)
      goto fail;
  }
  if (slots > 1 && (net->grad_acc = net_alloc(net, np * sizeof(float))) == NULL) goto fail;
  for (int i = lo; i < hi; i++) {
    const pst_layer *L = &m->layers[i];
    if (L->kind == PST_LAYER_FLATTEN) continue;
    if ((net->act[i] = net_alloc(net, B * out_size(L) * sizeof(float))) == NULL) goto fail;
    if (L->kind == PST_LAYER_BATCHNORM) {
      if (be->batchnorm_forward_train == NULL || be->batchnorm_forward_infer == NULL ||
          be->batchnorm_backward == NULL) {
        rc = -ENOTSUP;
        goto fail;
      }
      if ((net->bn_saved[i] = net_alloc(net, (size_t)slots * 2 * L->out_c * sizeof(float))) == NULL)
        goto fail;
    }
  }
  for (int j = 1; j < lo; j++)
    if (net->cut_lo[j] && net->needs_grad[j] &&
        (net->gin[j] = net_alloc(net, B * out_size(&m->layers[j]) * sizeof(float))) == NULL)
      goto fail;
  for (int i = 0; i < net->n_dbuf; i++)
    if ((net->dbuf[i] = net_alloc(net, B * largest * sizeof(float))) == NULL) goto fail;
  size_t no_bias = 0;
  for (int i = lo; i < hi; i++) {
    const pst_layer *L = &m->layers[i];
    int biased_kind = L->kind == PST_LAYER_DENSE || L->kind == PST_LAYER_CONV2D ||
                      L->kind == PST_LAYER_DEPTHWISE_CONV2D;
    if (biased_kind && L->b_count == 0 && (size_t)L->out_c > no_bias) no_bias = (size_t)L->out_c;
  }
  if (no_bias > 0) {
    float *zeros = calloc(no_bias, sizeof(float));
    if (zeros == NULL) goto fail;
    net->zero_bias = net_alloc(net, no_bias * sizeof(float));
    net->bias_sink = net_alloc(net, no_bias * sizeof(float));
    int up = net->zero_bias && net->bias_sink
                 ? be->to_device(be, net->zero_bias, zeros, no_bias * sizeof(float))
                 : -ENOMEM;
    free(zeros);
    if (up != 0) {
      rc = up;
      goto fail;
    }
  }
  for (int i = 0; i < m->n_layers; i++) {
    char name[40]; /* as the model's summary shows it: its name= or Keras's automatic one */
    pst_model_layer_name(m, i, 1, name, sizeof name);
    snprintf(net->tl_name[0][i], sizeof net->tl_name[0][i], "forward %.38s", name);
    snprintf(net->tl_name[1][i], sizeof net->tl_name[1][i], "backward %.38s", name);
  }
  *out = net;
  return 0;
fail:
  pst_net_destroy(net);
  return rc;
}

int pst_net_load_params(pst_net *net, const float *params) {
  if (net == NULL || params == NULL) return -EINVAL;
  net->stream_src = NULL;
  int rc = net->be->to_device(net->be, net->params, params + net->p_lo,
                              (net->p_hi - net->p_lo) * sizeof(float));
  if (rc == 0) net->params_loaded = 1;
  return rc != 0 ? pst_net_fail_step(net, rc, "uploading the weights") : 0;
}

int pst_net_load_params_streamed(pst_net *net, const float *params, pst_params_wait_fn wait,
                                 void *ctx) {
  if (net == NULL || params == NULL || wait == NULL) return -EINVAL;
  net->stream_src = params;
  net->stream_wait = wait;
  net->stream_ctx = ctx;
  net->stream_loaded = net->p_lo;
  net->params_loaded = 1;
  return 0;
}

/* Streamed weights: waits for params[0, upto) and copies what the device lacks of it, on
 * the backend's copy stream where it has one (the layers before run meanwhile). */
static int stream_params(pst_net *net, size_t upto) {
  if (upto > net->p_hi) upto = net->p_hi; /* a stage holds [p_lo, p_hi) only */
  if (net->stream_src == NULL || net->dry || upto <= net->stream_loaded) return 0;
  pst_backend *be = net->be;
  int rc = net->stream_wait(net->stream_ctx, upto);
  if (rc == 0)
    rc = (be->upload ? be->upload : be->to_device)(
        be, net->params + (net->stream_loaded - net->p_lo), net->stream_src + net->stream_loaded,
        (upto - net->stream_loaded) * sizeof(float));
  if (rc != 0) return rc;
  net->stream_loaded = upto;
  if (upto == net->p_hi) net->stream_src = NULL;
  return 0;
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

int pst_net_set_row_cuts(pst_net *net, const size_t *cuts, size_t n) {
  if (net == NULL || (n > 0 && cuts == NULL)) return -EINVAL;
  for (size_t k = 1; k < n; k++)
    if (cuts[k] <= cuts[k - 1]) return -EINVAL;
  for (int i = 0; i < PST_MODEL_MAX_LAYERS; i++) {
    free(net->pieces[i]);
    net->pieces[i] = NULL;
    net->n_pieces[i] = 0;
  }
  const pst_backend *be = net->be;
  /* A stage's micro-batches add each layer's gradient on after its whole backward
   * (accumulate_layer), and a stage's first layer need not start the vector: pieces are for
   * a whole model run in one pass. */
  if (n == 0 || !be->dense_forward_rows || !be->dense_backward_rows || net->slots > 1 ||
      net->lo != 1 || net->hi != net->m.n_layers)
    return 0;
  for (int i = net->lo; i < net->hi; i++) {
    const pst_layer *L = &net->m.layers[i];
    if (L->kind != PST_LAYER_DENSE || L->w_count == 0) continue;
    int rows[PST_NET_MAX_PIECES + 1], k = 0;
    rows[0] = 0;
    for (size_t c = 0; c < n && k < PST_NET_MAX_PIECES - 1; c++) {
      if (cuts[c] <= L->w_offset || cuts[c] >= L->w_offset + L->w_count) continue;
      /* The row boundary at or below the cut: the chunk that starts at the cut is then whole
       * once the piece above the boundary is made, and the piece below it needs no float of
       * that chunk. */
      int r = (int)((cuts[c] - L->w_offset) / (size_t)L->units);
      if (r > rows[k] && r < L->in_c) rows[++k] = r;
    }
    if (k == 0) continue;
    rows[++k] = L->in_c;
    net->pieces[i] = malloc((size_t)(k + 1) * sizeof(int));
    if (net->pieces[i] == NULL) return -ENOMEM;
    memcpy(net->pieces[i], rows, (size_t)(k + 1) * sizeof(int));
    net->n_pieces[i] = k;
  }
  return 0;
}

int pst_net_layer_pieces(const pst_net *net, int i) {
  return net && i >= 0 && i < PST_MODEL_MAX_LAYERS && net->n_pieces[i] ? net->n_pieces[i] : 1;
}

void pst_net_set_seed(pst_net *net, uint64_t seed) {
  if (net != NULL) net->seed = seed;
}

/* Applies layer L's activation to x into y (in place when x is y). */
static int activate(pst_backend *be, const pst_layer *L, const float *x, float *y, size_t n) {
  if (L->act == PST_ACT_RELU) return be->relu_forward(be, x, y, n);
  if (L->act == PST_ACT_RELU6) return be->relu6_forward(be, x, y, n);
  return 0;
}

/* Runs layer i forward, leaving its output in net->out[i]; *op names what it ran, for the
 * error message of a failure. */
static int forward_layer(pst_net *net, int i, int batch, int training, const char **op) {
  pst_backend *be = net->be;
  const pst_model *m = &net->m;
  const pst_layer *L = &m->layers[i];
  const float *in = net->out[L->inputs[0]];
  /* The micro-batch's rows of the layer's buffer (row0 = 0 for a whole batch). */
  float *y = net->act[i] ? net->act[i] + (size_t)net->row0 * out_size(L) : NULL;
  const float *w = param_at(net, L->w_offset, L->w_count);
  const float *bias = L->b_count ? param_at(net, L->b_offset, L->b_count) : net->zero_bias;
  int rc = 0;
  *op = training ? "forward" : "evaluation forward";
  switch (L->kind) {
    case PST_LAYER_DENSE:
      if (net->n_pieces[i]) {
        /* In pieces of rows (pst_net_set_row_cuts), each once its weights are in; the bias,
         * at the end of the layer's range, with the last. */
        const int *r = net->pieces[i];
        int last = net->n_pieces[i] - 1;
        *op = "loading its weights";
        for (int k = 0; k <= last && rc == 0; k++) {
          rc = stream_params(net, k == last ? net->params_end[i]
                                            : L->w_offset + (size_t)r[k + 1] * L->units);
          if (rc == 0) {
            *op = training ? "forward" : "evaluation forward";
            rc = be->dense_forward_rows(be, in, w, k == last ? bias : NULL, y, batch, L->in_c,
                                        L->units, r[k], r[k + 1]);
          }
        }
        break;
      }
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
        return 0;
      }
      rc = be->dropout_forward(be, in, y, (size_t)batch * out_size(L), L->rate,
                               layer_seed(net, i));
      break;
    case PST_LAYER_BATCHNORM: {
      /* Images are [B*H*W, C] with the channels innermost, flat vectors [B, C]. The
       * training forward also writes the moving statistics' share (net.h). */
      int rows = batch * L->out_h * L->out_w;
      const float *moving = param_at(net, L->s_offset, L->s_count);
      *op = training ? "training forward" : "inference forward";
      if (training) {
        /* A later micro-batch's share of the moving statistics is written aside and added
         * on: the pushed change is the sum over the micro-batches (net_stage.h). */
        float *dst = net->dstate, *ds = NULL;
        if (dst != NULL && net->accumulate) dst = net->grad_acc;
        if (dst != NULL) ds = dst + (L->s_offset - net->p_lo);
        rc = be->batchnorm_forward_train(
            be, in, w, bias, y, rows, L->out_c, L->eps, moving,
            (1.0f - L->momentum) * net->state_scale,
            net->bn_saved[i] + (size_t)net->slot * 2 * L->out_c, ds);
        if (rc == 0 && ds != NULL && net->accumulate) {
          float *sum = net->dstate + (L->s_offset - net->p_lo);
          rc = be->add(be, sum, ds, sum, L->s_count);
        }
      } else
        rc = be->batchnorm_forward_infer(be, in, w, bias, moving, y, rows, L->out_c, L->eps);
      break;
    }
    case PST_LAYER_FLATTEN:
      net->out[i] = in;
      return 0;
    case PST_LAYER_ACTIVATION:
      *op = L->act == PST_ACT_RELU6 ? "relu6" : "relu";
      rc = activate(be, L, in, y, (size_t)batch * out_size(L));
      net->out[i] = y;
      return rc;
    case PST_LAYER_ADD: {
      /* Left to right, one addition at a time: the same rounding on every backend. */
      size_t n = (size_t)batch * out_size(L);
      rc = be->add(be, in, net->out[L->inputs[1]], y, n);
      for (int t = 2; t < L->n_inputs && rc == 0; t++)
        rc = be->add(be, y, net->out[L->inputs[t]], y, n);
      break;
    }
    case PST_LAYER_CONCATENATE: {
      size_t rows = (size_t)batch * L->out_h * L->out_w;
      int offset = 0;
      for (int t = 0; t < L->n_inputs && rc == 0; t++) {
        int c = m->layers[L->inputs[t]].out_c;
        rc = be->concat_forward(be, net->out[L->inputs[t]], y, rows, c, L->out_c, offset);
        offset += c;
      }
      break;
    }
    case PST_LAYER_INPUT:
      rc = -EINVAL;
      break;
  }
  net->out[i] = y;
  if (rc != 0) return rc;
  if (L->act == PST_ACT_RELU || L->act == PST_ACT_RELU6)
    *op = L->act == PST_ACT_RELU ? "its relu" : "its relu6";
  return activate(be, L, y, y, (size_t)batch * out_size(L));
}

/* Runs the net's layers (net_forward.h); the last layer's output is left as logits (its
 * softmax belongs to the loss). */
int pst_net_forward(pst_net *net, int batch, int training) {
  for (int i = net->lo; i < net->hi; i++) {
    const char *op = "loading its weights";
    double p0 = net->profile ? pst_now() : 0.0; /* --stages' balance: weights' wait included */
    /* A layer in pieces waits for each piece's weights itself (forward_layer). */
    const pst_layer *L = &net->m.layers[i];
    int rc = stream_params(net, net->n_pieces[i]
                                    ? L->w_offset + (size_t)net->pieces[i][1] * L->units
                                    : net->params_end[i]);
    /* On the timeline: the layer's host-side time (a GPU's launches, the null device's
     * pacing, the CPU's compute), after its weights came. */
    double t0 = pst_tl_on() ? pst_now() : 0;
    if (rc == 0) rc = forward_layer(net, i, batch, training, &op);
    if (t0 > 0)
      pst_tl_span("layer", net->tl_name[0][i], t0, pst_now(),
                  PST_TL_STEP(pst_tl_current_step(), i));
    if (rc != 0) return pst_net_fail(net, rc, i, op, batch);
    if (net->profile) net->layer_seconds[i] += pst_now() - p0;
  }
  /* Streamed weights: whatever no layer asked for (none, as layers cover the vector), so
   * that the whole vector is in before the pass ends. */
  int rc = stream_params(net, net->p_hi);
  return rc != 0 ? pst_net_fail_step(net, rc, "loading the last weights") : 0;
}

void pst_net_on_grad_part(pst_net *net, pst_grad_part_fn fn, void *ctx) {
  net->grad_part = fn;
  net->grad_part_ctx = ctx;
}

void pst_net_on_grad_ready(pst_net *net, pst_grad_ready_fn fn, void *ctx) {
  net->grad_ready = fn;
  net->grad_ready_ctx = ctx;
}

const char *pst_net_error(const pst_net *net) { return net != NULL ? net->err : ""; }

static int check_args(pst_net *net, const float *x, const int32_t *labels, int batch) {
  if (net == NULL) return -EINVAL;
  net->err[0] = '\0';
  net->row0 = net->slot = 0; /* the whole batch, from the first row (net_stage.c moves them) */
  if (x == NULL || labels == NULL || batch <= 0 || batch > net->max_batch || !net->params_loaded) {
    snprintf(net->err, sizeof net->err, "%s",
             !net->params_loaded ? "no weights were loaded"
             : batch <= 0 || batch > net->max_batch ? "the batch is outside 1 .. the net's size"
                                                     : "no batch given");
    return -EINVAL;
  }
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
  if ((rc = upload(net, x, labels, batch, &dev_labels)) != 0)
    return pst_net_fail_step(net, rc, "uploading the batch");
  net->dstate = dgrad;
  net->host_grad = grad;
  net->grad_sent = m->n_params;
  net->state_scale = loss_scale * (float)batch;
  rc = pst_net_forward(net, batch, 1);
  net->dstate = NULL;
  if (rc != 0) return rc;
  rc = be->softmax_xent(be, net->out[m->n_layers - 1], dev_labels, net->dbuf[0], batch, m->classes,
                        loss_scale, &loss, &right);
  if (rc != 0) return pst_net_fail(net, rc, m->n_layers - 1, "softmax cross-entropy", batch);
  if ((rc = pst_net_backward(net, batch, dgrad)) != 0) return rc;
  /* The gradient to the host: what the per-layer downloads left (nothing, when the first
   * layer has parameters), or all of it in one copy. */
  if (!be->host_memory) {
    int layered = net->grad_ready && be->download;
    size_t n = layered ? net->grad_sent : m->n_params;
    rc = layered ? be->download(be, grad, net->grad, n * sizeof(float), NULL, NULL, 0)
                 : be->to_host(be, grad, net->grad, n * sizeof(float));
    if (rc != 0) return pst_net_fail_step(net, rc, "downloading the gradient");
  }
  if ((rc = be->synchronize(be)) != 0)
    return pst_net_fail_step(net, rc, "finishing the training step");
  if (net->grad_ready) net->grad_ready(net->grad_ready_ctx, 0);
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
  if ((rc = upload(net, x, labels, batch, &dev_labels)) != 0)
    return pst_net_fail_step(net, rc, "uploading the evaluation batch");
  if ((rc = pst_net_forward(net, batch, 0)) != 0) return rc;
  rc = be->softmax_xent(be, net->out[net->m.n_layers - 1], dev_labels, NULL, batch,
                        net->m.classes, 1.0f, &loss, &right);
  if (rc != 0)
    return pst_net_fail(net, rc, net->m.n_layers - 1, "evaluation softmax cross-entropy", batch);
  if ((rc = be->synchronize(be)) != 0)
    return pst_net_fail_step(net, rc, "finishing the evaluation");
  if (loss_sum != NULL) *loss_sum = loss;
  if (correct != NULL) *correct = right;
  return 0;
}

void pst_net_log_placement(pst_net *net) {
  if (net == NULL) return;
  pst_backend *be = net->be;
  LOG_INFO("backward holds %d gradient buffer%s of the largest layer's size", net->n_dbuf,
           net->n_dbuf == 1 ? "" : "s");
  for (int i = net->lo; i < net->hi; i++) {
    const pst_layer *L = &net->m.layers[i];
    const char *what = pst_net_kind_name(L->kind);
    char how[256];
    if (be->describe != NULL)
      be->describe(be, what, i, how, sizeof how);
    else
      snprintf(how, sizeof how, "%s", be->name);
    /* A graph's layers say what they take: "<- stem,3" (names, or indices of unnamed
     * layers). */
    char from[PST_LAYER_MAX_INPUTS * PST_MODEL_MAX_NAME + 8] = "";
    for (int t = 0; net->m.graph && t < L->n_inputs; t++) {
      const pst_layer *in = &net->m.layers[L->inputs[t]];
      size_t used = strlen(from);
      if (in->name[0] != '\0')
        snprintf(from + used, sizeof from - used, "%s%s", t ? "," : " <- ", in->name);
      else
        snprintf(from + used, sizeof from - used, "%s%d", t ? "," : " <- ", L->inputs[t]);
    }
    LOG_INFO("layer %d %s%s -> %dx%dx%d%s: %s", i, what, from, L->out_h, L->out_w, L->out_c,
             L->act == PST_ACT_RELU      ? " + relu"
             : L->act == PST_ACT_RELU6   ? " + relu6"
             : L->act == PST_ACT_SOFTMAX ? " + softmax cross-entropy"
                                         : "",
             how);
  }
}
