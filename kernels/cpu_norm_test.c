/* Batch normalisation on the CPU backend: the training forward against a naive double
 * reference (normalised output, saved statistics, the moving statistics' change), the
 * inference forward with given moving statistics, and the training backward against finite
 * differences of loss = sum(r * y) for dx, dgamma and dbeta, on flat and image-shaped
 * inputs, including inputs far from zero (where a one-pass variance would cancel). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/testing.h"

static double max_rel(const float *a, const double *ref, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - ref[i]) / (fabs(ref[i]) > 1e-3 ? fabs(ref[i]) : 1e-3);
    if (e > m) m = e;
  }
  return m;
}

typedef struct {
  pst_backend *be;
  int rows, C;
  float eps;
  float *x, *gamma, *beta, *r, *y, *saved;
} bn_case;

/* sum(r * y) of the training forward: what the gradients are of. */
static double bn_loss(void *ctx) {
  bn_case *c = ctx;
  c->be->batchnorm_forward_train(c->be, c->x, c->gamma, c->beta, c->y, c->rows, c->C, c->eps,
                                 NULL, 0.0f, c->saved, NULL);
  double s = 0;
  for (size_t i = 0; i < (size_t)c->rows * c->C; i++) s += (double)c->r[i] * c->y[i];
  return s;
}

static void test_case(pst_backend *be, int rows, int C, double offset, uint64_t seed) {
  size_t n = (size_t)rows * C;
  float eps = 1e-3f, k = 0.25f;
  float *x = malloc(n * 4), *y = malloc(n * 4), *r = malloc(n * 4), *dx = malloc(n * 4);
  float *gamma = malloc(C * 4), *beta = malloc(C * 4), *saved = malloc(2 * C * 4);
  float *moving = malloc(2 * C * 4), *dmoving = malloc(2 * C * 4);
  float *dgamma = malloc(C * 4), *dbeta = malloc(C * 4);
  double *ref = malloc(n * sizeof(double)), *refc = malloc(2 * C * sizeof(double));
  t_fill(x, n, seed, offset - 1.5, offset + 1.5);
  t_fill(gamma, C, seed + 1, 0.5, 1.5);
  t_fill(beta, C, seed + 2, -0.5, 0.5);
  t_fill(r, n, seed + 3, -1, 1);
  t_fill(moving, C, seed + 4, -0.2, 0.2);
  t_fill(moving + C, C, seed + 5, 0.5, 2.0);

  /* Training forward against the definition. */
  CHECK(be->batchnorm_forward_train(be, x, gamma, beta, y, rows, C, eps, moving, k, saved,
                                    dmoving) == 0);
  double worst_stat = 0, worst_d = 0;
  for (int c = 0; c < C; c++) {
    double m = 0, v = 0;
    for (int i = 0; i < rows; i++) m += x[(size_t)i * C + c];
    m /= rows;
    for (int i = 0; i < rows; i++) v += (x[(size_t)i * C + c] - m) * (x[(size_t)i * C + c] - m);
    v /= rows;
    double inv = 1.0 / sqrt(v + eps);
    for (int i = 0; i < rows; i++)
      ref[(size_t)i * C + c] = gamma[c] * (x[(size_t)i * C + c] - m) * inv + beta[c];
    worst_stat = fmax(worst_stat, fabs(saved[c] - m) / fmax(fabs(m), 1e-3));
    worst_stat = fmax(worst_stat, fabs(saved[C + c] - inv) / inv);
    refc[c] = (m - moving[c]) * k;
    refc[C + c] = (v - moving[C + c]) * k;
  }
  worst_d = max_rel(dmoving, refc, 2 * (size_t)C);
  double worst_y = max_rel(y, ref, n);
  CHECK(worst_y < 1e-4 && worst_stat < 1e-5 && worst_d < 1e-4);
  if (!(worst_y < 1e-4 && worst_stat < 1e-5 && worst_d < 1e-4))
    fprintf(stderr, "  rows %d C %d offset %g: y %.3g stats %.3g dmoving %.3g\n", rows, C, offset,
            worst_y, worst_stat, worst_d);

  /* Inference with the moving statistics. */
  CHECK(be->batchnorm_forward_infer(be, x, gamma, beta, moving, y, rows, C, eps) == 0);
  for (int c = 0; c < C; c++)
    for (int i = 0; i < rows; i++)
      ref[(size_t)i * C + c] = gamma[c] * (x[(size_t)i * C + c] - moving[c]) /
                                   sqrt((double)moving[C + c] + eps) + beta[c];
  CHECK(max_rel(y, ref, n) < 1e-5);

  /* Backward against finite differences (the input offset only where the data are not
   * far from zero: a float step of 1e-2 on x = 100 cannot resolve its effect). */
  bn_case bc = {be, rows, C, eps, x, gamma, beta, r, y, saved};
  bn_loss(&bc);
  CHECK(be->batchnorm_backward(be, x, gamma, saved, r, dx, dgamma, dbeta, rows, C, eps) == 0);
  if (offset == 0) {
    CHECK(t_gradcheck("bn dx", x, dx, n, bn_loss, &bc) == 0);
    CHECK(t_gradcheck("bn dgamma", gamma, dgamma, C, bn_loss, &bc) == 0);
    CHECK(t_gradcheck("bn dbeta", beta, dbeta, C, bn_loss, &bc) == 0);
  }
  /* dx sums to zero over each channel (the mean is taken out) whatever the offset; without
   * dx (a first layer) dgamma and dbeta are the same. */
  for (int c = 0; c < C; c++) {
    double s = 0, a = 0;
    for (int i = 0; i < rows; i++) s += dx[(size_t)i * C + c], a += fabs(dx[(size_t)i * C + c]);
    CHECK(fabs(s) <= 1e-4 * (a + 1e-6));
  }
  float *dg2 = malloc(C * 4), *db2 = malloc(C * 4);
  CHECK(be->batchnorm_backward(be, x, gamma, saved, r, NULL, dg2, db2, rows, C, eps) == 0);
  CHECK(memcmp(dg2, dgamma, C * 4) == 0 && memcmp(db2, dbeta, C * 4) == 0);
  free(dg2), free(db2);
  free(x), free(y), free(r), free(dx), free(gamma), free(beta), free(saved), free(moving);
  free(dmoving), free(dgamma), free(dbeta), free(ref), free(refc);
}

int main(void) {
  pst_backend *be = NULL;
  CHECK(pst_cpu_backend_create(1, &be) == 0);
  test_case(be, 5, 3, 0.0, 1);      /* a flat [B, C] input */
  test_case(be, 2 * 3 * 4, 6, 0.0, 11); /* an NHWC image, B*H*W rows */
  test_case(be, 1, 4, 0.0, 21);      /* one row: zero variance, y = beta */
  test_case(be, 4000, 5, 100.0, 31); /* far from zero */
  float x[4] = {1, 2, 3, 4}, g[2] = {1, 1}, b[2] = {0, 0}, y[4], s[4];
  CHECK(be->batchnorm_forward_train(be, x, g, b, y, 0, 2, 1e-3f, NULL, 0, s, NULL) == -EINVAL);
  CHECK(be->batchnorm_forward_train(be, x, g, b, y, 2, 2, 0.0f, NULL, 0, s, NULL) == -EINVAL);
  CHECK(be->batchnorm_backward(be, x, g, s, x, y, g, b, 2, 0, 1e-3f) == -EINVAL);
  be->destroy(be);
  return t_summary();
}
