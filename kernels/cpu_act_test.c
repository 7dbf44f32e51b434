/* ReLU and softmax cross-entropy on the CPU backend. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
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
  test_xent(be);
  be->destroy(be);
  return t_summary();
}
