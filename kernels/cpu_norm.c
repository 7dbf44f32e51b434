/* Batch normalisation on the CPU backend (backend.h states the formulas).
 *
 * x is [rows, C] with the channels innermost, so every loop walks rows in the outer loop
 * and channels in the inner one: contiguous, and vectorised across channels. Per-channel
 * sums are accumulated in double (a column of 100k rows summed in float would lose
 * digits), in a scratch buffer of the backend, and the result is rounded to float once. The
 * statistics are exact two-pass ones (mean first, then the squared deviations), as cuDNN's
 * are, rather than E[x^2] - E[x]^2, which cancels badly for inputs far from zero. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu_internal.h"

static int check(int rows, int channels) {
  if (rows <= 0 || channels <= 0 || (size_t)rows * (size_t)channels > ((size_t)1 << 40))
    return -EINVAL;
  return 0;
}

/* Column sums of x[rows, C] into acc[C] (double). */
static void column_sums(const float *restrict x, double *restrict acc, int rows, int C) {
  memset(acc, 0, (size_t)C * sizeof *acc);
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * C;
    for (int c = 0; c < C; c++) acc[c] += xr[c];
  }
}

/* acc[c] += (x[r, c] - mean[c])^2 over the rows. The loops over [rows, C] live in small
 * functions whose pointers are restrict: the project builds with -fno-strict-aliasing, so
 * without it every float store would force the per-channel doubles to be reloaded and the
 * loop would stay scalar. */
static void squared_deviations(const float *restrict x, const double *restrict mean,
                               double *restrict acc, int rows, int C) {
  memset(acc, 0, (size_t)C * sizeof *acc);
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * C;
    for (int c = 0; c < C; c++) {
      double d = (double)xr[c] - mean[c];
      acc[c] += d * d;
    }
  }
}

/* y[r, c] = x[r, c] * scale[c] + shift[c], in double, rounded once. */
static void affine(const float *restrict x, const double *restrict scale,
                   const double *restrict shift, float *restrict y, int rows, int C) {
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * C;
    float *yr = y + (size_t)r * C;
    for (int c = 0; c < C; c++) yr[c] = (float)(xr[c] * scale[c] + shift[c]);
  }
}

/* sdy[c] = sum of dy, sdyx[c] = sum of dy * (x - mean) * inv, over the rows. */
static void backward_sums(const float *restrict x, const float *restrict dy,
                          const float *restrict mean, const float *restrict inv,
                          double *restrict sdy, double *restrict sdyx, int rows, int C) {
  memset(sdy, 0, (size_t)C * sizeof *sdy);
  memset(sdyx, 0, (size_t)C * sizeof *sdyx);
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * C, *dr = dy + (size_t)r * C;
    for (int c = 0; c < C; c++) {
      sdy[c] += dr[c];
      sdyx[c] += (double)dr[c] * (((double)xr[c] - mean[c]) * inv[c]);
    }
  }
}

/* dx[r, c] = g[c] * dy[r, c] + bx[c] * x[r, c] + c0[c]. */
static void backward_dx(const float *restrict x, const float *restrict dy,
                        const double *restrict g, const double *restrict bx,
                        const double *restrict c0, float *restrict dx, int rows, int C) {
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * C, *dr = dy + (size_t)r * C;
    float *o = dx + (size_t)r * C;
    for (int c = 0; c < C; c++) o[c] = (float)(g[c] * dr[c] + bx[c] * xr[c] + c0[c]);
  }
}

/* Per-channel double accumulators: three of them, as 6C floats of the backend's scratch. */
static double *bn_scratch(pst_backend *b, int C) {
  return (double *)cpu_scratch(b, CPU_SCRATCH_BN, 6 * (size_t)C);
}

int cpu_batchnorm_forward_train(pst_backend *b, const float *x, const float *gamma,
                                const float *beta, float *y, int rows, int C, float eps,
                                const float *moving, float k, float *saved, float *dmoving) {
  if (check(rows, C) != 0 || !(eps > 0.0f)) return -EINVAL;
  double *acc = bn_scratch(b, C);
  if (acc == NULL) return -ENOMEM;
  double *acc2 = acc + C;
  float *mean = saved, *inv = saved + C;
  /* The mean stays in double (acc) until the output is written: rounded to float first, it
   * would be off by up to 3e-8 of itself, which for data far from zero is a visible part of
   * the deviations. */
  column_sums(x, acc, rows, C);
  for (int c = 0; c < C; c++) acc[c] /= rows;
  squared_deviations(x, acc, acc2, rows, C);
  for (int c = 0; c < C; c++) {
    double m = acc[c], var = acc2[c] / rows, is = 1.0 / sqrt(var + (double)eps);
    mean[c] = (float)m;
    inv[c] = (float)is;
    if (dmoving != NULL && moving != NULL) {
      dmoving[c] = (float)((m - moving[c]) * k);
      dmoving[C + c] = (float)((var - moving[C + c]) * k);
    }
    /* y = x * scale + shift, per channel: one multiply-add per element below. */
    acc[c] = (double)gamma[c] * is;
    acc2[c] = (double)beta[c] - m * acc[c];
  }
  affine(x, acc, acc2, y, rows, C);
  return 0;
}

int cpu_batchnorm_forward_infer(pst_backend *b, const float *x, const float *gamma,
                                const float *beta, const float *moving, float *y, int rows,
                                int C, float eps) {
  if (check(rows, C) != 0 || !(eps > 0.0f)) return -EINVAL;
  double *acc = bn_scratch(b, C);
  if (acc == NULL) return -ENOMEM;
  double *scale = acc, *shift = acc + C;
  for (int c = 0; c < C; c++) {
    scale[c] = (double)gamma[c] / sqrt((double)moving[C + c] + (double)eps);
    shift[c] = (double)beta[c] - (double)moving[c] * scale[c];
  }
  affine(x, scale, shift, y, rows, C);
  return 0;
}

int cpu_batchnorm_backward(pst_backend *b, const float *x, const float *gamma, const float *saved,
                           const float *dy, float *dx, float *dgamma, float *dbeta, int rows,
                           int C, float eps) {
  (void)eps; /* the saved inverse standard deviation has it already */
  if (check(rows, C) != 0) return -EINVAL;
  double *acc = bn_scratch(b, C);
  if (acc == NULL) return -ENOMEM;
  double *sdy = acc, *sdyx = acc + C, *g = acc + 2 * C;
  const float *mean = saved, *inv = saved + C;
  backward_sums(x, dy, mean, inv, sdy, sdyx, rows, C);
  for (int c = 0; c < C; c++) {
    dbeta[c] = (float)sdy[c];
    dgamma[c] = (float)sdyx[c];
  }
  if (dx == NULL) return 0;
  /* backend.h's dx = gamma*inv/rows * (rows*dy - sdy - (x - mean)*inv*sdyx), expanded per
   * channel into G*dy + bx*x + c0 with G = gamma*inv, bx = -G*inv*sdyx/rows and
   * c0 = -G*sdy/rows - bx*mean: one pass of multiply-adds. */
  for (int c = 0; c < C; c++) {
    g[c] = (double)gamma[c] * inv[c];
    double bx = -g[c] * inv[c] * sdyx[c] / rows;
    sdyx[c] = bx;
    sdy[c] = -g[c] * sdy[c] / rows - bx * mean[c];
  }
  backward_dx(x, dy, g, sdyx, sdy, dx, rows, C);
  return 0;
}
