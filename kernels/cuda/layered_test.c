/* The CUDA backend's copy stream through the network (kernels/backend.h upload and
 * download, kernels/net.h): weights that arrive layer by layer while the forward pass runs,
 * and each layer's gradient downloaded beside the backward pass and announced from the
 * backend's own thread, as a worker with --pull-by-layer and --push-by-layer uses them. The
 * step must give the bits of a plain step on the same device (dense layers only: cuBLAS is
 * deterministic) and match the CPU backend to 1e-4.
 *
 * Without a usable GPU it skips (kernels/cuda/parity.h); PSTRAIN_PARITY_DEVICE=cpu runs it on
 * the CPU backend (the harness itself). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/device.h"
#include "kernels/net.h"
#include "kernels/cuda/parity.h"
#include "kernels/testing.h"
#include "model/model.h"

static pst_backend *g_ref; /* the CPU backend */
static pst_backend *g_dut; /* the backend under test */

static float *rand_floats(size_t n, double lo, double hi) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  if (!p) exit(1);
  t_fill(p, n, 3, lo, hi);
  return p;
}


/* The net's layer-by-layer paths on the backend under test (kernels/net.h: weights
 * uploaded on the copy stream as each layer's wait returns, each layer's gradient
 * downloaded beside the backward pass and announced from the backend's thread): the step
 * must give the bits of a plain step on the same backend (dense layers only: cuBLAS is
 * deterministic), every announced range must already hold its final bits, and the
 * announcements must go down to 0. The weights start as NaN and arrive only as asked. */
typedef struct {
  const float *src;
  float *dst;
  size_t got;
} lw_weights;

static int lw_wait(void *ctx, size_t upto) {
  lw_weights *w = ctx;
  for (size_t i = w->got; i < upto; i++) w->dst[i] = w->src[i];
  if (upto > w->got) w->got = upto;
  return 0;
}

typedef struct {
  const float *grad;  /* the host gradient the downloads fill */
  float *seen;        /* each float as it was when announced */
  size_t low;
  int calls, rising;
} lw_ready;

static void lw_on_ready(void *ctx, size_t from) {
  lw_ready *r = ctx; /* calls come one at a time, in order (kernels/backend.h) */
  if (from > r->low) r->rising++;
  for (size_t i = from; i < r->low; i++) r->seen[i] = r->grad[i];
  if (from < r->low) r->low = from;
  r->calls++;
}

static void test_layered_net(void) {
  static pst_model m;
  char err[256];
  CHECK(pst_model_parse("input 300\ndense 200 relu\ndense 100 relu\ndense 50 relu\n"
                        "dense 10 softmax\n", "layered", &m, err, sizeof err) == 0);
  enum { B = 32 };
  float *params = malloc(m.n_params * 4), *want = pst_parity_zeros(m.n_params), *ref = pst_parity_zeros(m.n_params);
  float *x = rand_floats((size_t)B * m.input_size, -1, 1);
  int32_t labels[B];
  for (int i = 0; i < B; i++) labels[i] = (i * 7) % 10;
  pst_model_init_params(&m, 5, params);
  double loss;
  int correct, rc;
  pst_net *cpu = NULL, *net = NULL;
  rc = pst_net_create(&m, g_ref, B, &cpu);
  if (!rc) rc = pst_net_load_params(cpu, params);
  if (!rc) rc = pst_net_train_step(cpu, x, labels, B, 1.0f / B, ref, &loss, &correct);
  CHECK(rc == 0);
  pst_net_destroy(cpu);
  rc = pst_net_create(&m, g_dut, B, &net);
  if (!rc) rc = pst_net_load_params(net, params);
  if (!rc) rc = pst_net_train_step(net, x, labels, B, 1.0f / B, want, &loss, &correct);
  CHECK(rc == 0);
  pst_parity_compare("layered net", "plain gradient", want, ref, m.n_params);
  /* Pinned host buffers, as the worker's (plain ones for the CPU harness). */
  int pinned = g_dut->host_alloc != NULL;
  float *arriving = pinned ? g_dut->host_alloc(g_dut, m.n_params * 4) : malloc(m.n_params * 4);
  float *grad = pinned ? g_dut->host_alloc(g_dut, m.n_params * 4) : malloc(m.n_params * 4);
  float *seen = pst_parity_zeros(m.n_params);
  CHECK(arriving && grad);
  if (arriving && grad && net) {
    memset(arriving, 0xff, m.n_params * 4);
    memset(grad, 0xff, m.n_params * 4);
    rc = pst_net_load_params(net, arriving); /* NaN on the device first */
    lw_weights w = {params, arriving, 0};
    lw_ready r = {grad, seen, m.n_params, 0, 0};
    pst_net_on_grad_ready(net, lw_on_ready, &r);
    if (!rc) rc = pst_net_load_params_streamed(net, arriving, lw_wait, &w);
    if (!rc) rc = pst_net_train_step(net, x, labels, B, 1.0f / B, grad, &loss, &correct);
    CHECK(rc == 0 && w.got == m.n_params);
    CHECK(memcmp(grad, want, m.n_params * 4) == 0);
    CHECK(r.low == 0 && r.rising == 0 && r.calls == 5); /* 4 layers, then from = 0 */
    CHECK(memcmp(seen, want, m.n_params * 4) == 0);
    if (r.calls != 5) fprintf(stderr, "  layered net: %d gradient-ready calls, not 5\n", r.calls);
    pst_net_on_grad_ready(net, NULL, NULL);
  }
  if (pinned) {
    if (arriving) g_dut->host_free(g_dut, arriving);
    if (grad) g_dut->host_free(g_dut, grad);
  } else {
    free(arriving), free(grad);
  }
  pst_net_destroy(net);
  free(params), free(want), free(ref), free(x), free(seen);
}

int main(void) {
  int rc = pst_parity_open(&g_dut, &g_ref);
  if (rc != 0) return rc < 0 ? 1 : 0;
  test_layered_net();
  g_ref->destroy(g_ref);
  g_dut->destroy(g_dut);
  return t_summary();
}
