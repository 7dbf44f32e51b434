/* The null device (kernels/null_backend.c) through the loader and a net, as a worker uses it:
 * the device specs it takes, the deterministic gradient (GRAD_VALUE / N on every trained
 * parameter, 0 on the model state), the backward pass's announcements one layer at a time,
 * the forward pass's waits for streamed weights, and the pacing of null:RATE. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "kernels/device.h"
#include "kernels/net.h"
#include "kernels/testing.h"
#include "model/model.h"

/* A graph with batch norm (model state), a bias-less layer and layers without parameters. */
static const char *spec =
    "input 6x6x2 name=x\nconv2d 3 3x3 padding=same relu name=a\n"
    "batchnorm\nconv2d 3 3x3 padding=same bias=no name=b\n"
    "add relu inputs=a,b\nmaxpool 2x2\nflatten\ndense 5 relu\n"
    "dropout 0.2\ndense 3 softmax\n";

enum { B = 4, N = 2 };

static void test_specs(void) {
  static const char *good[] = {"null", "null:1000", "null:2.5e5"};
  static const char *bad[] = {"null:", "null:x", "null:0", "null:-5", "null:1e13", "nul",
                              "null:5x"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    pst_backend *be = NULL;
    char note[256];
    CHECK(pst_device_open(good[i], 0, 1, &be, note, sizeof note) == 0);
    CHECK(be != NULL && strncmp(be->name, "null", 4) == 0 && be->host_memory);
    if (be) be->destroy(be);
  }
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    pst_backend *be = NULL;
    char note[256];
    CHECK(pst_device_open(bad[i], 0, 1, &be, note, sizeof note) == -EINVAL);
    CHECK(be == NULL && note[0] != '\0');
  }
}

typedef struct {
  size_t low;
  int calls, rising;
} ready_log;

static void on_ready(void *ctx, size_t from) {
  ready_log *r = ctx;
  if (from > r->low) r->rising++;
  if (from < r->low) r->low = from;
  r->calls++;
}

typedef struct {
  size_t got;
  int calls, shrinking;
} wait_log;

static int on_wait(void *ctx, size_t upto) {
  wait_log *w = ctx;
  if (upto <= w->got) w->shrinking++;
  w->got = upto;
  w->calls++;
  return 0;
}

static void test_step(void) {
  pst_model m;
  char err[256];
  CHECK(pst_model_parse(spec, "null test", &m, err, sizeof err) == 0);
  size_t n = m.n_params;
  int with_params = 0;
  for (int l = 1; l < m.n_layers; l++)
    with_params += m.layers[l].w_count + m.layers[l].b_count + m.layers[l].s_count > 0;
  pst_backend *be = NULL;
  CHECK(pst_device_open("null", 0, 1, &be, err, sizeof err) == 0);
  if (!be) return;
  pst_net *net = NULL;
  CHECK(pst_net_create(&m, be, B, &net) == 0);
  float *params = calloc(n, sizeof *params), *grad = malloc(n * sizeof *grad);
  float x[B * 72] = {0};
  int32_t labels[B] = {0, 1, 2, 0};
  /* The weights arrive layer by layer, and the gradient leaves so. */
  wait_log w = {0, 0, 0};
  ready_log r = {n, 0, 0};
  CHECK(pst_net_load_params_streamed(net, params, on_wait, &w) == 0);
  pst_net_on_grad_ready(net, on_ready, &r);
  memset(grad, 0xff, n * sizeof *grad); /* NaN until written */
  double loss = -1;
  int correct = -1;
  CHECK(pst_net_train_step(net, x, labels, B, 1.0f / (B * N), grad, &loss, &correct) == 0);
  CHECK(w.calls == with_params && w.shrinking == 0 && w.got == n);
  CHECK(r.calls == with_params + 1 && r.rising == 0 && r.low == 0);
  CHECK(fabs(loss - B * log(3.0)) < 1e-9 && correct == 0);
  /* GRAD_VALUE / N on the trained parameters, no change on the moving statistics. */
  size_t st_off[PST_MODEL_MAX_LAYERS], st_n[PST_MODEL_MAX_LAYERS];
  int ns = pst_model_state_ranges(&m, st_off, st_n);
  CHECK(ns == 1);
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) {
    int state = 0;
    for (int k = 0; k < ns; k++) state |= i >= st_off[k] && i < st_off[k] + st_n[k];
    if (grad[i] != (state ? 0.0f : 1e-3f / N)) wrong++;
  }
  CHECK(wrong == 0);
  /* The same bits again: a sync job's sums stay reproducible. */
  float *again = malloc(n * sizeof *again);
  CHECK(pst_net_load_params(net, params) == 0);
  CHECK(pst_net_train_step(net, x, labels, B, 1.0f / (B * N), again, &loss, &correct) == 0);
  CHECK(memcmp(grad, again, n * sizeof *grad) == 0);
  CHECK(pst_net_evaluate(net, x, labels, B, &loss, &correct) == 0 && correct == 0);
  free(again);
  free(params);
  free(grad);
  pst_net_destroy(net);
  be->destroy(be);
}

/* null:RATE: the first step counts the model's work and takes no time; every later one
 * takes at least the batch's time at RATE samples a second (sleeping can only make it
 * longer, so only the lower bound is checked). */
static void test_pacing(void) {
  pst_model m;
  char err[256];
  CHECK(pst_model_parse(spec, "null test", &m, err, sizeof err) == 0);
  pst_backend *be = NULL;
  CHECK(pst_device_open("null:400", 0, 1, &be, err, sizeof err) == 0); /* 10 ms per batch */
  if (!be) return;
  pst_net *net = NULL;
  CHECK(pst_net_create(&m, be, B, &net) == 0);
  float *params = calloc(m.n_params, sizeof *params), *grad = malloc(m.n_params * 4);
  float x[B * 72] = {0};
  int32_t labels[B] = {0, 1, 2, 0};
  double loss;
  int correct;
  CHECK(pst_net_load_params(net, params) == 0);
  double t0 = pst_now();
  CHECK(pst_net_train_step(net, x, labels, B, 1.0f / B, grad, &loss, &correct) == 0);
  double t1 = pst_now();
  for (int i = 0; i < 3; i++)
    CHECK(pst_net_train_step(net, x, labels, B, 1.0f / B, grad, &loss, &correct) == 0);
  double t2 = pst_now();
  printf("null:400, batch %d: first step %.3f ms, then %.3f ms a step (10 ms emulated)\n", B,
         (t1 - t0) * 1e3, (t2 - t1) / 3 * 1e3);
  CHECK((t2 - t1) / 3 >= 0.0099);
  /* An evaluation is a forward pass: a share of a step (about 3.3 ms here), not nothing.
   * Timed over ten: each operation starts its clock back by how late the wait before it
   * woke (the device's caller would not have overslept), so one evaluation after a wake-up
   * 3.5 ms late on a loaded machine took no time at all; over k of them those carries
   * telescope, and the total is at least k x its time less the first one's. */
  double e0 = pst_now();
  for (int i = 0; i < 10; i++) CHECK(pst_net_evaluate(net, x, labels, B, &loss, &correct) == 0);
  double ev = pst_now() - e0;
  printf("null:400: 10 evaluations took %.3f ms\n", ev * 1e3);
  CHECK(ev >= 10 * 0.001);
  free(params);
  free(grad);
  pst_net_destroy(net);
  be->destroy(be);
}

int main(void) {
  pst_log_init("null_backend_test", PST_LOG_WARN);
  test_specs();
  test_step();
  test_pacing();
  return t_summary();
}
