/* A stage's passes (net_stage.h): a micro-batch's rows bound, the forward and backward
 * passes of net.c and net_backward.c run on them, and the cuts' bindings. Creation and the
 * memory figures are in net.c, with the whole net's, so that the two cannot drift apart.
 * This file calls net.c (the forward pass) and net_backward.c; neither calls it. */
#include "kernels/net_stage.h"

#include <errno.h>
#include <string.h>

#include "kernels/net_backward.h"
#include "kernels/net_forward.h"
#include "kernels/net_state.h"

size_t pst_net_stage_bytes(const pst_net *net) { return net ? net->bytes : 0; }

void pst_net_stage_params(const pst_net *net, size_t *lo, size_t *hi) {
  *lo = net->p_lo;
  *hi = net->p_hi;
}

int pst_net_stage_takes(const pst_net *net, int j) {
  return j >= 0 && j < net->lo && net->cut_lo[j];
}

int pst_net_stage_sends(const pst_net *net, int j) {
  return j >= 0 && j < net->hi && net->cut_hi[j];
}

/* Floats per sample of tensor j (the input's for j = 0). */
static size_t tensor_size(const pst_net *net, int j) {
  return j == 0 ? (size_t)net->m.input_size : out_size(&net->m.layers[j]);
}

size_t pst_net_stage_tensor_floats(const pst_net *net, int j) {
  return j >= 0 && j < net->m.n_layers ? tensor_size(net, j) : 0;
}

const float *pst_net_stage_tensor(const pst_net *net, int j, int training, const float *x) {
  for (;;) {
    if (j == 0) return net->lo == 1 ? (net->be->host_memory ? x : net->x) : net->ext_in[0];
    if (j < net->lo) return net->ext_in[j];
    const pst_layer *L = &net->m.layers[j];
    /* Layers that pass their input on keep no buffer of their own (net.c's forward). */
    int alias = L->kind == PST_LAYER_FLATTEN ||
                (L->kind == PST_LAYER_DROPOUT && (!training || L->rate == 0.0f));
    if (!alias) return net->act[j];
    j = L->inputs[0];
  }
}

float *pst_net_stage_gin(const pst_net *net, int j) {
  return j > 0 && j < PST_MODEL_MAX_LAYERS ? net->gin[j] : NULL;
}

void pst_net_stage_bind(pst_net *net, int j, const float *in, float *grad) {
  if (j < 0 || j >= PST_MODEL_MAX_LAYERS) return;
  if (in != NULL) net->ext_in[j] = in;
  if (grad != NULL) net->gext[j] = grad;
}

/* Points out[] at the micro-batch's rows: the lower cut's tensors (or the batch) and this
 * stage's own outputs, for the backward pass, which reads them. */
static void point_rows(pst_net *net, int training, const float *x) {
  for (int j = 0; j < net->hi; j++) {
    int mine = j >= net->lo, taken = j == 0 ? net->lo == 1 || net->cut_lo[0] : net->cut_lo[j];
    if (!mine && !taken) continue;
    const float *base = pst_net_stage_tensor(net, j, training, x);
    net->out[j] = base ? base + (size_t)net->row0 * tensor_size(net, j) : NULL;
  }
}

/* Uploads the micro-batch's rows of the batch and labels that this stage reads, on a
 * device with memory of its own. NOT RUN: no GPU here; written to the backend interface's
 * contract (one stage with micro-batches on CUDA takes this path; several stages on such
 * devices are refused by kernels/pipeline). */
static int upload_rows(pst_net *net, const pst_stage_pass *p) {
  pst_backend *be = net->be;
  if (be->host_memory) return 0;
  int rc = 0;
  size_t in = (size_t)net->m.input_size;
  if (net->lo == 1)
    rc = be->to_device(be, net->x + (size_t)p->row0 * in, p->x + (size_t)p->row0 * in,
                       (size_t)p->rows * in * sizeof(float));
  if (rc == 0 && net->hi == net->m.n_layers)
    rc = be->to_device(be, net->labels + p->row0, p->labels + p->row0,
                       (size_t)p->rows * sizeof(int32_t));
  return rc;
}

/* The stage's part of the step's gradient, on its device. */
static float *grad_base(pst_net *net, const pst_stage_pass *p) {
  return net->be->host_memory ? p->grad + net->p_lo : net->grad;
}

int pst_net_stage_forward(pst_net *net, pst_stage_pass *p, int training) {
  if (net == NULL || p == NULL) return -EINVAL;
  net->err[0] = '\0';
  if (p->slot < 0 || p->slot >= net->slots || p->rows <= 0 || p->row0 < 0 ||
      p->row0 + p->rows > net->max_batch || !net->params_loaded ||
      (training && p->grad == NULL)) {
    snprintf(net->err, sizeof net->err, "%s",
             !net->params_loaded ? "no weights were loaded" : "a micro-batch outside the net");
    return -EINVAL;
  }
  pst_backend *be = net->be;
  net->slot = p->slot;
  net->row0 = p->row0;
  net->accumulate = training && p->accumulate;
  int rc = upload_rows(net, p);
  if (rc != 0) return pst_net_fail_step(net, rc, "uploading the micro-batch");
  point_rows(net, training, p->x);
  net->dstate = training ? grad_base(net, p) : NULL;
  net->state_scale = p->loss_scale * (float)p->rows;
  rc = pst_net_forward(net, p->rows, training);
  net->dstate = NULL;
  if (rc != 0) return rc;
  if (net->hi == net->m.n_layers) {
    int last = net->hi - 1;
    const int32_t *labels = be->host_memory ? p->labels : net->labels;
    p->loss = 0.0;
    p->correct = 0;
    rc = be->softmax_xent(be, net->out[last], labels + p->row0, training ? net->dbuf[0] : NULL,
                          p->rows, net->m.classes, training ? p->loss_scale : 1.0f, &p->loss,
                          &p->correct);
    if (rc != 0) return pst_net_fail(net, rc, last, "softmax cross-entropy", p->rows);
  }
  /* The stage above reads this micro-batch's outputs on another thread (or device): they
   * must be there, not just enqueued. */
  rc = be->synchronize(be);
  return rc != 0 ? pst_net_fail_step(net, rc, "finishing the micro-batch's forward pass") : 0;
}

int pst_net_stage_backward(pst_net *net, pst_stage_pass *p) {
  if (net == NULL || p == NULL || p->grad == NULL) return -EINVAL;
  pst_backend *be = net->be;
  net->slot = p->slot;
  net->row0 = p->row0;
  net->accumulate = p->accumulate;
  net->final_pass = p->final;
  net->host_grad = p->grad;
  net->grad_sent = net->p_hi;
  point_rows(net, 1, p->x);
  float *g = grad_base(net, p);
  int rc = pst_net_backward(net, p->rows, g);
  net->final_pass = 1;
  net->accumulate = 0;
  if (rc != 0) return rc;
  /* The gradient to the host, once final: what the per-layer downloads left, or all
   * (devices with memory of their own only: NOT RUN here, no GPU). */
  if (p->final && !be->host_memory) {
    int layered = net->grad_ready && be->download;
    size_t end = layered ? net->grad_sent : net->p_hi;
    rc = layered ? be->download(be, p->grad + net->p_lo, g, (end - net->p_lo) * sizeof(float),
                                NULL, NULL, 0)
                 : be->to_host(be, p->grad + net->p_lo, g, (end - net->p_lo) * sizeof(float));
    if (rc != 0) return pst_net_fail_step(net, rc, "downloading the gradient");
  }
  rc = be->synchronize(be);
  return rc != 0 ? pst_net_fail_step(net, rc, "finishing the micro-batch's backward pass") : 0;
}

void pst_net_stage_profile(pst_net *net, int on) {
  if (on && !net->profile) memset(net->layer_seconds, 0, sizeof net->layer_seconds);
  net->profile = on;
}

double pst_net_layer_seconds(const pst_net *net, int layer) {
  return layer > 0 && layer < PST_MODEL_MAX_LAYERS ? net->layer_seconds[layer] : 0.0;
}
