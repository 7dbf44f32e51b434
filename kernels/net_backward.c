/* The network's backward pass, called by net.c (which has the rest of kernels/net); it
 * calls nothing of net.c's, only the state and failure record of net_state.h.
 *
 * Backward walks the layers in reverse, applying each ReLU's derivative in place before
 * the layer's own backward. Output gradients live in a small pool of buffers of the
 * largest layer size: a layer's gradient buffer is taken when the first of its consumers
 * (in reverse order) delivers to it and goes back to the pool once the layer itself has
 * run backward. A second consumer of the same tensor (a fan-in: a residual connection, two
 * towers from one input) writes into a scratch buffer that is then added on, so the tensor
 * gets the sum of its consumers' gradients; pass-through layers (flatten, dropout, the last
 * input of add) hand their buffer down instead of copying it. For a stack this is the two
 * ping-pong buffers of old. The pool's size is found at creation by a dry run of backward.
 *
 * A stage of a model (net_stage.h) walks its own layers only. The gradients of the tensors
 * it sends up come back into buffers of the stage above (gext), and those of the tensors it
 * took from below go straight into its own outbox (gin), the rows of the micro-batch under
 * way: both are buffers outside the pool (dbuf_at), so nothing is copied on the way except
 * where a tensor only passes through. */
#include <errno.h>
#include <string.h>

#include "common/clock.h"
#include "common/timeline.h"
#include "kernels/net_backward.h"
#include "kernels/net_state.h"

/* Backend calls of backward, skipped by the dry run at creation (which only counts the
 * gradient buffers the walk holds). */
#define RUN(call) (net->dry ? 0 : (call))

/* Takes a free gradient buffer from the pool; its index. */
static int take_buf(pst_net *net) {
  int k = 0;
  while (net->dbuf_busy[k]) k++; /* the pool has room for every layer at once, and two */
  net->dbuf_busy[k] = 1;
  if (k >= net->n_dbuf) {
    if (!net->dry) return -1; /* cannot happen: the dry run walked the same way */
    net->n_dbuf = k + 1;
  }
  return k;
}

static void give_buf(pst_net *net, int k) {
  if (k < PST_NET_EXT) net->dbuf_busy[k] = 0;
}

/* The outbox rows of tensor j (< lo, taken from the stage below) for this micro-batch, as
 * a buffer index; -1 when j is no such tensor. */
static int gin_slot(pst_net *net, int j) {
  if (j >= net->lo || !net->cut_lo[j]) return -1;
  int k = PST_NET_EXT + PST_MODEL_MAX_LAYERS + j;
  net->ext_buf[k - PST_NET_EXT] =
      net->dry ? NULL : net->gin[j] + (size_t)net->row0 * out_size(&net->m.layers[j]);
  return k;
}

/* Where the first gradient delivered to tensor j goes: its outbox for a tensor from below,
 * else a pool buffer. Its index, or -1. */
static int first_target(pst_net *net, int j) {
  int k = gin_slot(net, j);
  return k >= 0 ? k : take_buf(net);
}

/* Where a consumer should write layer j's gradient [batch, out_size(j)], in *target: j's
 * own buffer when nothing was delivered to it yet (*acc = -1), else a scratch buffer
 * (*acc = its index) to be added on with finish_delivery. 0 or -EINVAL. */
static int delivery_target(pst_net *net, int j, float **target, int *acc) {
  *acc = -1;
  if (net->grad_of[j] < 0) {
    int k = first_target(net, j);
    if (k < 0) return -EINVAL;
    net->grad_of[j] = k;
    *target = dbuf_at(net, k);
    return 0;
  }
  if ((*acc = take_buf(net)) < 0) return -EINVAL;
  *target = dbuf_at(net, *acc);
  return 0;
}

static int finish_delivery(pst_net *net, int j, int acc, int batch) {
  if (acc < 0) return 0;
  float *g = dbuf_at(net, net->grad_of[j]);
  size_t n = (size_t)batch * out_size(&net->m.layers[j]);
  int rc = RUN(net->be->add(net->be, g, dbuf_at(net, acc), g, n));
  give_buf(net, acc);
  return rc;
}

/* Delivers the gradient in buffer k unchanged to input j (flatten, dropout, add): handed
 * over when `give` and j has none yet, else copied or added on. Returns 1 when handed over
 * (k is then j's), 0 when not, or a negative error. */
static int pass_down(pst_net *net, int k, int j, int give, int batch) {
  pst_backend *be = net->be;
  size_t n = (size_t)batch * out_size(&net->m.layers[j]);
  /* A tensor from the stage below gets its gradient in its outbox, never a handed-over
   * buffer. */
  if (net->grad_of[j] < 0 && give && gin_slot(net, j) < 0) {
    net->grad_of[j] = k;
    return 1;
  }
  if (net->grad_of[j] < 0) {
    int g = first_target(net, j);
    if (g < 0) return -EINVAL;
    net->grad_of[j] = g;
    int rc = RUN(be->add(be, dbuf_at(net, k), NULL, dbuf_at(net, g), n));
    return rc < 0 ? rc : 0;
  }
  float *g = dbuf_at(net, net->grad_of[j]);
  int rc = RUN(be->add(be, g, dbuf_at(net, k), g, n));
  return rc < 0 ? rc : 0;
}

/* A later micro-batch's gradient (net->accumulate) was written to grad_acc: adds layer L's
 * trained ranges on to grad (its batchnorm state was added by the forward pass). */
static int accumulate_layer(pst_net *net, const pst_layer *L, float *grad) {
  pst_backend *be = net->be;
  int rc = 0;
  if (L->w_count) {
    size_t o = L->w_offset - net->p_lo;
    rc = RUN(be->add(be, grad + o, net->grad_acc + o, grad + o, L->w_count));
  }
  if (rc == 0 && L->b_count) {
    size_t o = L->b_offset - net->p_lo;
    rc = RUN(be->add(be, grad + o, net->grad_acc + o, grad + o, L->b_count));
  }
  return rc;
}

/* Every float of the gradient at or above `from` is final (net.h, grad_ready): says so once
 * for each new `from`, on a host-memory backend at once, on one with download once the
 * bytes are on the host (the copy is asked for here). The step's last pass only. */
static int announce(pst_net *net, size_t from, float *grad) {
  pst_backend *be = net->be;
  if (!net->grad_ready || !net->final_pass || net->dry || from >= net->grad_sent) return 0;
  int rc = 0;
  if (be->host_memory)
    net->grad_ready(net->grad_ready_ctx, from);
  else if (be->download)
    rc = be->download(be, net->host_grad + from, grad + (from - net->p_lo),
                      (net->grad_sent - from) * sizeof(float), net->grad_ready,
                      net->grad_ready_ctx, from);
  else
    return 0; /* neither: only the step's end says it (pst_net_train_step) */
  net->grad_sent = from;
  return rc;
}

/* Piece k of cut layer i as a range of the vector (its rows of the weights). */
static void piece_range(const pst_net *net, int i, int k, size_t *lo, size_t *hi) {
  const pst_layer *L = &net->m.layers[i];
  *lo = L->w_offset + (size_t)net->pieces[i][k] * L->units;
  *hi = L->w_offset + (size_t)net->pieces[i][k + 1] * L->units;
}

/* A rising piece's download is on the host (the backend's thread): arg is the layer times
 * PST_NET_MAX_PIECES plus the piece, whose range the cuts (unchanged during a step) give. */
static void part_downloaded(void *ctx, size_t arg) {
  pst_net *net = ctx;
  size_t lo, hi;
  int i = (int)(arg / PST_NET_MAX_PIECES);
  piece_range(net, i, (int)(arg % PST_NET_MAX_PIECES), &lo, &hi);
  net->grad_part(net->grad_part_ctx, net->m.layers[i].w_offset, hi);
}

/* Rows [lo, hi) of a rising layer are final (net.h, pst_net_on_grad_part). */
static int announce_part(pst_net *net, int i, int k, float *grad) {
  pst_backend *be = net->be;
  size_t lo, hi;
  piece_range(net, i, k, &lo, &hi);
  if (be->host_memory) {
    net->grad_part(net->grad_part_ctx, net->m.layers[i].w_offset, hi);
    return 0;
  }
  if (!be->download) return 0;
  return be->download(be, net->host_grad + lo, grad + (lo - net->p_lo), (hi - lo) * sizeof(float),
                      part_downloaded, net, (size_t)i * PST_NET_MAX_PIECES + (size_t)k);
}

/* A dense layer's backward in pieces of rows (pst_net_set_row_cuts). With grad_part, from
 * the first rows up, each piece but the last announced by grad_part as soon as it is made,
 * the bias (above the weights) with the last, which the layer's end announces (a backend
 * with download then copies only what the pieces did not: grad_sent moves down to the last
 * piece's first float here). Else from the last rows down, each piece announced by
 * grad_ready as soon as it is made, the bias with the first. */
static int dense_in_pieces(pst_net *net, int i, const float *in, const float *w, const float *d,
                           float *dx, float *gw, float *gb, int batch, float *grad) {
  pst_backend *be = net->be;
  const pst_layer *L = &net->m.layers[i];
  const int *r = net->pieces[i];
  int top = net->n_pieces[i] - 1, rc = 0;
  if (net->grad_part && net->grad_ready && net->final_pass) {
    for (int k = 0; k <= top && rc == 0; k++) {
      rc = be->dense_backward_rows(be, in, w, d, dx, gw, k == top ? gb : NULL, batch, L->in_c,
                                   L->units, r[k], r[k + 1]);
      if (rc == 0 && k < top) rc = announce_part(net, i, k, grad);
    }
    if (rc == 0 && !be->host_memory && be->download) {
      /* The last piece and the bias: downloaded by the layer's end, which says grad_ready
       * for the whole layer once they are in (downloads finish in order). */
      size_t lo, hi;
      piece_range(net, i, top, &lo, &hi);
      if (lo < net->grad_sent) {
        rc = be->download(be, net->host_grad + lo, grad + (lo - net->p_lo),
                          (net->grad_sent - lo) * sizeof(float), net->grad_ready,
                          net->grad_ready_ctx, L->w_offset);
        net->grad_sent = L->w_offset;
      }
    }
    return rc;
  }
  for (int k = top; k >= 0 && rc == 0; k--) {
    rc = be->dense_backward_rows(be, in, w, d, dx, gw, k == top ? gb : NULL, batch, L->in_c,
                                 L->units, r[k], r[k + 1]);
    if (rc == 0 && k > 0) rc = announce(net, L->w_offset + (size_t)r[k] * L->units, grad);
  }
  return rc;
}

/* The stage's tensors from below that need a gradient and got it elsewhere than in their
 * outbox (a tensor that only passes through this stage, or one whose gradient came from
 * above as well): copied there. */
static int fill_outboxes(pst_net *net, int batch) {
  for (int j = 0; j < net->lo; j++) {
    if (!net->cut_lo[j] || !net->needs_grad[j]) continue;
    int k = net->grad_of[j], g = gin_slot(net, j);
    if (k < 0) return -EINVAL; /* nothing of this stage or above delivered to it */
    if (k == g) continue;
    size_t n = (size_t)batch * out_size(&net->m.layers[j]);
    int rc = RUN(net->be->add(net->be, dbuf_at(net, k), NULL, dbuf_at(net, g), n));
    if (rc != 0) return rc;
  }
  return 0;
}

int pst_net_backward(pst_net *net, int batch, float *grad) {
  pst_backend *be = net->be;
  const pst_model *m = &net->m;
  int last = net->hi - 1;
  for (int i = 0; i < m->n_layers; i++) net->grad_of[i] = -1;
  memset(net->dbuf_busy, 0, sizeof net->dbuf_busy);
  if (net->dry) net->n_dbuf = 0;
  if (net->hi == m->n_layers) {
    if (take_buf(net) != 0) return -EINVAL; /* dlogits: softmax_xent wrote them to dbuf[0] */
    net->grad_of[last] = 0;
  }
  /* A stage below the last: the gradients of what it sent up, from the stage above. */
  for (int j = 0; j < net->hi; j++) {
    if (!net->cut_hi[j] || !net->needs_grad[j]) continue;
    net->ext_buf[j] = net->dry ? NULL : net->gext[j] + (size_t)net->row0 * out_size(&m->layers[j]);
    net->grad_of[j] = PST_NET_EXT + j;
  }
  /* A later micro-batch writes its parameter gradients aside and adds them on. */
  float *target = net->accumulate ? net->grad_acc : grad;
  int rc = 0;
  for (int i = last; i >= net->lo && rc == 0; i--) {
    const pst_layer *L = &m->layers[i];
    if (!net->needs_grad[i]) continue;
    /* The layer's time for --stages' balance, and its span on the timeline. */
    double t0 = net->profile || pst_tl_on() ? pst_now() : 0.0;
    int k = net->grad_of[i];
    if (k < 0) return -EINVAL; /* a layer nothing takes: the parser refuses those */
    float *d = dbuf_at(net, k);
    int kept = 0; /* 1 once d has been handed down to an input */
    const float *y = net->out[i];
    const float *w = net->dry ? NULL : param_at(net, L->w_offset, L->w_count);
    float *gw = net->dry || !L->w_count ? NULL : target + (L->w_offset - net->p_lo);
    float *gb = net->dry ? NULL : L->b_count ? target + (L->b_offset - net->p_lo) : net->bias_sink;
    size_t n = (size_t)batch * out_size(L);
    const char *op = "backward";
    if (L->act == PST_ACT_RELU || L->act == PST_ACT_RELU6) {
      rc = L->act == PST_ACT_RELU ? RUN(be->relu_backward(be, y, d, d, n))
                                  : RUN(be->relu6_backward(be, y, d, d, n));
      if (rc != 0) return pst_net_fail(net, rc, i, "its activation's backward", batch);
    }
    int j = L->inputs[0];
    const float *in = net->out[j];
    int need = net->needs_grad[j], acc = -1;
    float *dx = NULL;
    switch (L->kind) {
      case PST_LAYER_DENSE:
      case PST_LAYER_CONV2D:
      case PST_LAYER_DEPTHWISE_CONV2D:
      case PST_LAYER_MAXPOOL:
      case PST_LAYER_AVGPOOL:
      case PST_LAYER_GLOBAL_AVGPOOL:
      case PST_LAYER_BATCHNORM:
        if (need && delivery_target(net, j, &dx, &acc) != 0) return -EINVAL;
        break;
      default:
        break;
    }
    switch (L->kind) {
      case PST_LAYER_DENSE:
        if (net->n_pieces[i] && !net->dry) {
          rc = dense_in_pieces(net, i, in, w, d, dx, gw, gb, batch, grad);
          break;
        }
        rc = RUN(be->dense_backward(be, in, w, d, dx, gw, gb,
                                    batch, L->in_c, L->units));
        break;
      case PST_LAYER_CONV2D: {
        pst_window_shape s = window_of(L, batch);
        rc = RUN(be->conv2d_backward(be, &s, in, w, d, dx, gw, gb));
        break;
      }
      case PST_LAYER_DEPTHWISE_CONV2D: {
        pst_window_shape s = window_of(L, batch);
        rc = RUN(be->depthwise_conv2d_backward(be, &s, in, w, d, dx, gw, gb));
        break;
      }
      case PST_LAYER_MAXPOOL: {
        pst_window_shape s = window_of(L, batch);
        if (dx != NULL) rc = RUN(be->maxpool_backward(be, &s, in, y, d, dx));
        break;
      }
      case PST_LAYER_AVGPOOL:
      case PST_LAYER_GLOBAL_AVGPOOL: {
        pst_window_shape s = window_of(L, batch);
        if (dx != NULL) rc = RUN(be->avgpool_backward(be, &s, d, dx));
        break;
      }
      case PST_LAYER_DROPOUT:
        /* In place: the same scaled mask as forward, recomputed from the seed. */
        if (need && L->rate != 0.0f)
          rc = RUN(be->dropout_backward(be, d, d, n, L->rate, layer_seed(net, i)));
        if (rc == 0 && need) rc = pass_down(net, k, j, 1, batch);
        kept = rc == 1;
        rc = rc < 0 ? rc : 0;
        break;
      case PST_LAYER_BATCHNORM:
        rc = RUN(be->batchnorm_backward(be, in, w,
                                        net->dry ? NULL
                                                 : net->bn_saved[i] + (size_t)net->slot * 2 * L->out_c,
                                        d, dx, gw, gb, batch * L->out_h * L->out_w, L->out_c,
                                        L->eps));
        break;
      case PST_LAYER_ACTIVATION: /* its derivative was applied to d above */
      case PST_LAYER_FLATTEN:
        /* The gradient passes through unchanged. */
        if (need) rc = pass_down(net, k, j, 1, batch);
        kept = rc == 1;
        rc = rc < 0 ? rc : 0;
        break;
      case PST_LAYER_ADD: {
        /* Every input gets d itself; the last one that needs it may keep the buffer. */
        int last_need = -1;
        for (int t = 0; t < L->n_inputs; t++)
          if (net->needs_grad[L->inputs[t]]) last_need = t;
        for (int t = 0; t <= last_need && rc == 0; t++) {
          if (!net->needs_grad[L->inputs[t]]) continue;
          rc = pass_down(net, k, L->inputs[t], t == last_need, batch);
          kept |= rc == 1;
          rc = rc < 0 ? rc : 0;
        }
        break;
      }
      case PST_LAYER_CONCATENATE: {
        size_t rows = (size_t)batch * L->out_h * L->out_w;
        int offset = 0;
        for (int t = 0; t < L->n_inputs && rc == 0; t++) {
          int jt = L->inputs[t], c = m->layers[jt].out_c, a = -1;
          if (net->needs_grad[jt]) {
            float *target = NULL;
            if (delivery_target(net, jt, &target, &a) != 0) return -EINVAL;
            rc = RUN(be->concat_backward(be, d, target, rows, c, L->out_c, offset));
            if (rc == 0) rc = finish_delivery(net, jt, a, batch);
          }
          offset += c;
        }
        break;
      }
      case PST_LAYER_INPUT:
        rc = -EINVAL;
        break;
    }
    if (rc == 0 && acc >= 0) {
      op = "adding its input's gradients";
      rc = finish_delivery(net, j, acc, batch);
    }
    if (!kept) give_buf(net, k);
    if (rc == 0 && net->accumulate && !net->dry) {
      op = "adding its micro-batch's gradient";
      rc = accumulate_layer(net, L, grad);
    }
    /* This layer's parameters (and every later layer's) have their final gradient now:
     * their ranges lie above the earlier layers', and no earlier layer writes them. In
     * host memory that is all; a backend with download copies them to the host beside the
     * layers below and says so when they are there. A stage's gradient is final after the
     * step's last micro-batch only. */
    if (rc == 0 && L->w_count + L->b_count > 0) {
      op = "downloading its gradient";
      rc = announce(net, L->w_count ? L->w_offset : L->b_offset, grad);
    }
    if (net->profile) net->layer_seconds[i] += pst_now() - t0;
    if (rc != 0) return pst_net_fail(net, rc, i, op, batch);
    if (t0 > 0 && pst_tl_on())
      pst_tl_span("layer", net->tl_name[1][i], t0, pst_now(),
                  PST_TL_STEP(pst_tl_current_step(), i));
  }
  if (rc == 0) rc = fill_outboxes(net, batch);
  return rc;
}
