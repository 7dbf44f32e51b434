/* ReLU, ReLU6, dropout and softmax cross-entropy on the CPU backend. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/dropout_mask.h"
#include "kernels/testing.h"

typedef struct {
  pst_backend *be;
  size_t n;
  float *x, *y, *r;
} relu_case;

static double relu_loss(void *ctx) {
  relu_case *c = ctx;
  c->be->relu_forward(c->be, c->x, c->y, c->n);
  double l = 0.0;
  for (size_t i = 0; i < c->n; i++) l += (double)c->r[i] * c->y[i];
  return l;
}

static void test_relu(pst_backend *be) {
  enum { N = 103 };
  float x[N], y[N], r[N], dx[N], inplace[N];
  relu_case c = {be, N, x, y, r};
  t_fill_away_from_zero(x, N, 1);
  t_fill(r, N, 2, -1, 1);
  CHECK(be->relu_forward(be, x, y, N) == 0);
  int bad = 0;
  for (int i = 0; i < N; i++) bad += y[i] != (x[i] > 0 ? x[i] : 0.0f);
  CHECK(bad == 0);
  memcpy(inplace, x, sizeof x);
  CHECK(be->relu_forward(be, inplace, inplace, N) == 0);
  CHECK(memcmp(inplace, y, sizeof y) == 0);

  CHECK(be->relu_backward(be, y, r, dx, N) == 0);
  CHECK(t_gradcheck("relu dx", x, dx, N, relu_loss, &c) == 0);
  memcpy(inplace, r, sizeof r);
  CHECK(be->relu_backward(be, y, inplace, inplace, N) == 0);
  CHECK(memcmp(inplace, dx, sizeof dx) == 0);
}

static double relu6_loss(void *ctx) {
  relu_case *c = ctx;
  c->be->relu6_forward(c->be, c->x, c->y, c->n);
  double l = 0.0;
  for (size_t i = 0; i < c->n; i++) l += (double)c->r[i] * c->y[i];
  return l;
}

static void test_relu6(pst_backend *be) {
  enum { N = 120 };
  float x[N], y[N], r[N], dx[N], inplace[N];
  relu_case c = {be, N, x, y, r};
  /* Spread over [-3, 9] but at least 0.05 from both kinks (0 and 6), so that a
   * finite-difference step never crosses one. */
  uint64_t st = 11;
  for (int i = 0; i < N; i++) {
    float v;
    do v = (float)t_uniform(&st, -3, 9);
    while (fabsf(v) < 0.05f || fabsf(v - 6.0f) < 0.05f);
    x[i] = v;
  }
  t_fill(r, N, 12, -1, 1);
  CHECK(be->relu6_forward(be, x, y, N) == 0);
  int bad = 0, above = 0;
  for (int i = 0; i < N; i++) {
    bad += y[i] != (x[i] > 6 ? 6.0f : x[i] > 0 ? x[i] : 0.0f);
    above += x[i] > 6;
  }
  CHECK(bad == 0 && above > 5);
  memcpy(inplace, x, sizeof x);
  CHECK(be->relu6_forward(be, inplace, inplace, N) == 0);
  CHECK(memcmp(inplace, y, sizeof y) == 0);

  CHECK(be->relu6_backward(be, y, r, dx, N) == 0);
  CHECK(t_gradcheck("relu6 dx", x, dx, N, relu6_loss, &c) == 0);
  memcpy(inplace, r, sizeof r);
  CHECK(be->relu6_backward(be, y, inplace, inplace, N) == 0);
  CHECK(memcmp(inplace, dx, sizeof dx) == 0);
}

typedef struct {
  pst_backend *be;
  size_t n;
  float rate;
  uint64_t seed;
  float *x, *y, *r;
} dropout_case;

static double dropout_loss(void *ctx) {
  dropout_case *c = ctx;
  c->be->dropout_forward(c->be, c->x, c->y, c->n, c->rate, c->seed);
  double l = 0.0;
  for (size_t i = 0; i < c->n; i++) l += (double)c->r[i] * c->y[i];
  return l;
}

static void test_dropout(pst_backend *be) {
  enum { N = 4000 };
  static float x[N], y[N], y2[N], r[N], dx[N];
  dropout_case c = {be, N, 0.3f, 1234, x, y, r};
  t_fill(x, N, 21, -1, 1);
  t_fill(r, N, 22, -1, 1);
  CHECK(be->dropout_forward(be, x, y, N, c.rate, c.seed) == 0);
  /* Kept cells are scaled by 1/(1-rate), dropped ones are 0, and the mask is the shared
   * pure function of (seed, index) that the CUDA backend uses too. */
  const uint32_t th = pst_dropout_threshold(c.rate);
  const float scale = 1.0f / (1.0f - c.rate);
  int bad = 0, dropped = 0;
  for (int i = 0; i < N; i++) {
    int keep = pst_dropout_keep(c.seed, (size_t)i, th);
    dropped += !keep;
    bad += y[i] != (keep ? x[i] * scale : 0.0f);
  }
  CHECK(bad == 0);
  CHECK(dropped > N * 0.27 && dropped < N * 0.33);
  /* The same seed gives the same mask; another seed another one. */
  CHECK(be->dropout_forward(be, x, y2, N, c.rate, c.seed) == 0);
  CHECK(memcmp(y, y2, sizeof y) == 0);
  CHECK(be->dropout_forward(be, x, y2, N, c.rate, c.seed + 1) == 0);
  CHECK(memcmp(y, y2, sizeof y) != 0);
  /* Backward: the same scaled mask, checked by finite differences on a slice. */
  CHECK(be->dropout_backward(be, r, dx, N, c.rate, c.seed) == 0);
  c.n = 200;
  CHECK(t_gradcheck("dropout dx", x, dx, c.n, dropout_loss, &c) == 0);
  /* In place, rate 0 is the identity, and rates outside [0, 1) are refused. */
  memcpy(y2, x, sizeof x);
  CHECK(be->dropout_forward(be, y2, y2, N, 0.3f, 1234) == 0);
  CHECK(memcmp(y, y2, sizeof y) == 0);
  CHECK(be->dropout_forward(be, x, y2, N, 0.0f, 99) == 0);
  CHECK(memcmp(x, y2, sizeof x) == 0);
  CHECK(be->dropout_forward(be, x, y2, N, 1.0f, 1) == -EINVAL);
  CHECK(be->dropout_backward(be, x, y2, N, -0.1f, 1) == -EINVAL);
}

typedef struct {
  pst_backend *be;
  int batch, classes;
  float scale;
  float *logits;
  int32_t *labels;
} xent_case;

static double xent_loss(void *ctx) {
  xent_case *c = ctx;
  double loss = 0.0;
  int correct = 0;
  c->be->softmax_xent(c->be, c->logits, c->labels, NULL, c->batch, c->classes, 1.0f, &loss,
                      &correct);
  return loss * c->scale;
}

static void test_xent(pst_backend *be) {
  enum { B = 6, C = 5 };
  float logits[B * C], d[B * C];
  int32_t labels[B] = {0, 4, 2, 2, 1, 3};
  xent_case c = {be, B, C, 0.25f, logits, labels};
  t_fill(logits, B * C, 3, -3, 3);
  double loss = -1;
  int correct = -1;
  CHECK(be->softmax_xent(be, logits, labels, d, B, C, c.scale, &loss, &correct) == 0);
  double ref = 0;
  int ref_correct = 0;
  for (int b = 0; b < B; b++) {
    double s = 0;
    int arg = 0;
    for (int k = 0; k < C; k++) {
      s += exp(logits[b * C + k]);
      if (logits[b * C + k] > logits[b * C + arg]) arg = k;
    }
    ref += log(s) - logits[b * C + labels[b]];
    ref_correct += arg == labels[b];
  }
  CHECK(t_close(loss, ref, 1e-6, 1e-6));
  CHECK(correct == ref_correct);
  CHECK(t_gradcheck("dlogits", logits, d, B * C, xent_loss, &c) == 0);

  /* Rows of dlogits sum to 0 (softmax sums to 1, one-hot sums to 1). */
  double row = 0;
  for (int k = 0; k < C; k++) row += d[k];
  CHECK(fabs(row) < 1e-6);

  /* Numerical stability: huge logits give finite, exact results. */
  float big[2 * 3] = {1000.0f, 0.0f, -1000.0f, 88.0f, 89.0f, 90.0f};
  int32_t bl[2] = {0, 0};
  float bd[6];
  CHECK(be->softmax_xent(be, big, bl, bd, 2, 3, 1.0f, &loss, &correct) == 0);
  double want = 0.0 + (log(exp(-2.0) + exp(-1.0) + 1.0) + 2.0);
  CHECK(isfinite(loss) && t_close(loss, want, 1e-6, 1e-6));
  CHECK(correct == 1);
  CHECK(fabsf(bd[0]) < 1e-6f && isfinite(bd[3]) && isfinite(bd[5]));

  /* Eval only (NULL dlogits) and bad labels. */
  CHECK(be->softmax_xent(be, logits, labels, NULL, B, C, 1.0f, &loss, &correct) == 0);
  int32_t badl[B] = {0, 5, 0, 0, 0, 0};
  CHECK(be->softmax_xent(be, logits, badl, d, B, C, 1.0f, &loss, &correct) == -EINVAL);
  badl[1] = -1;
  CHECK(be->softmax_xent(be, logits, badl, d, B, C, 1.0f, &loss, &correct) == -EINVAL);
}

int main(void) {
  pst_backend *be = NULL;
  CHECK(pst_cpu_backend_create(1, &be) == 0);
  test_relu(be);
  test_relu6(be);
  test_dropout(be);
  test_xent(be);
  be->destroy(be);
  return t_summary();
}
