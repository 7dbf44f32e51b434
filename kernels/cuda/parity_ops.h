/* The CUDA tests' operation checks: each runs one backend operation forward and backward
 * on the CPU reference (g_ref) and the backend under test (g_dut) with the same random
 * inputs and compares the outputs (kernels/cuda/parity.h). Shared by cuda_parity_test.c
 * (fixed shapes, the limits of the kernels themselves) and preset_parity_test.c (the shapes
 * the presets reach). Header-only like parity.h; each test sets g_ref and g_dut. */
#ifndef PSTRAIN_KERNELS_CUDA_PARITY_OPS_H
#define PSTRAIN_KERNELS_CUDA_PARITY_OPS_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cuda/parity.h"
#include "kernels/testing.h"

#define RTOL PST_PARITY_RTOL

static pst_backend *g_ref; /* the CPU backend */
static pst_backend *g_dut; /* the backend under test */
static uint64_t g_seed = 1;

/* ---- host <-> backend helpers ------------------------------------------------------ */

static inline void *up(pst_backend *b, const void *host, size_t bytes) {
  void *d = b->alloc(b, bytes ? bytes : 1);
  if (!d) {
    fprintf(stderr, "%s: alloc of %zu bytes failed\n", b->name, bytes);
    exit(1);
  }
  if (host && bytes && b->to_device(b, d, host, bytes) != 0) {
    fprintf(stderr, "%s: to_device failed\n", b->name);
    exit(1);
  }
  return d;
}

/* Downloads and synchronises; returns the status of the operations before it. */
static inline int down(pst_backend *b, void *host, const void *d, size_t bytes) {
  int rc = b->to_host(b, host, d, bytes);
  int rs = b->synchronize(b);
  return rc ? rc : rs;
}

static inline float *rand_floats(size_t n, double lo, double hi) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  if (!p) exit(1);
  t_fill(p, n, g_seed++, lo, hi);
  return p;
}



/* ---- dense ------------------------------------------------------------------------- */

typedef struct {
  float *y, *dx, *dw, *db, *dw_nodx;
  /* The same layer in pieces of rows (backend.h, dense_*_rows), when the backend has them:
   * forward pieces in ascending order with the bias on the last, backward pieces in
   * descending order with db on the first, as kernels/net runs them. */
  float *y_rows, *dx_rows, *dw_rows, *db_rows;
} dense_out;

/* The rows where the pieces of an `in`-row layer start: 3 pieces (or fewer rows), uneven. */
static inline int dense_row_cuts(int in, int *cut) {
  int n = 0;
  cut[n++] = 0;
  if (in >= 3) cut[n++] = in / 3;
  if (in >= 2 && in - in / 4 > cut[n - 1]) {
    cut[n] = in - in / 4;
    n++;
  }
  if (cut[n - 1] != in) {
    cut[n] = in;
    n++;
  }
  return n - 1; /* pieces */
}

static inline int run_dense(pst_backend *b, int B, int in, int out, const float *x,
                            const float *w, const float *bias, const float *dy, dense_out *o) {
  size_t nx = (size_t)B * in, ny = (size_t)B * out, nw = (size_t)in * out;
  float *dx_ = up(b, x, nx * 4), *dw_ = up(b, w, nw * 4), *dbias = up(b, bias, (size_t)out * 4);
  float *ddy = up(b, dy, ny * 4), *dyo = up(b, NULL, ny * 4), *dgx = up(b, NULL, nx * 4);
  float *dgw = up(b, NULL, nw * 4), *dgb = up(b, NULL, (size_t)out * 4);
  int rc = b->dense_forward(b, dx_, dw_, dbias, dyo, B, in, out);
  if (!rc) rc = down(b, o->y, dyo, ny * 4);
  if (!rc) rc = b->dense_backward(b, dx_, dw_, ddy, dgx, dgw, dgb, B, in, out);
  if (!rc) rc = down(b, o->dx, dgx, nx * 4);
  if (!rc) rc = down(b, o->dw, dgw, nw * 4);
  if (!rc) rc = down(b, o->db, dgb, (size_t)out * 4);
  /* The first layer's variant: no input gradient. */
  if (!rc) rc = b->dense_backward(b, dx_, dw_, ddy, NULL, dgw, NULL, B, in, out);
  if (!rc) rc = down(b, o->dw_nodx, dgw, nw * 4);
  if (!rc && b->dense_forward_rows && b->dense_backward_rows) {
    int cut[4], pieces = dense_row_cuts(in, cut);
    for (int k = 0; k < pieces && !rc; k++)
      rc = b->dense_forward_rows(b, dx_, dw_, k == pieces - 1 ? dbias : NULL, dyo, B, in, out,
                                 cut[k], cut[k + 1]);
    if (!rc) rc = down(b, o->y_rows, dyo, ny * 4);
    for (int k = pieces - 1; k >= 0 && !rc; k--)
      rc = b->dense_backward_rows(b, dx_, dw_, ddy, dgx, dgw, k == pieces - 1 ? dgb : NULL, B, in,
                                  out, cut[k], cut[k + 1]);
    if (!rc) rc = down(b, o->dx_rows, dgx, nx * 4);
    if (!rc) rc = down(b, o->dw_rows, dgw, nw * 4);
    if (!rc) rc = down(b, o->db_rows, dgb, (size_t)out * 4);
  }
  float *all[] = {dx_, dw_, dbias, ddy, dyo, dgx, dgw, dgb};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) b->free(b, all[i]);
  return rc;
}

static inline void test_dense(int B, int in, int out) {
  char what[64];
  snprintf(what, sizeof what, "dense %dx%d->%d", B, in, out);
  size_t nx = (size_t)B * in, ny = (size_t)B * out, nw = (size_t)in * out;
  float *x = rand_floats(nx, -1, 1), *w = rand_floats(nw, -0.5, 0.5);
  float *bias = rand_floats((size_t)out, -0.5, 0.5), *dy = rand_floats(ny, -1, 1);
  dense_out o[2];
  for (int k = 0; k < 2; k++) {
    o[k] = (dense_out){pst_parity_zeros(ny), pst_parity_zeros(nx), pst_parity_zeros(nw),
                       pst_parity_zeros((size_t)out), pst_parity_zeros(nw), pst_parity_zeros(ny),
                       pst_parity_zeros(nx), pst_parity_zeros(nw), pst_parity_zeros((size_t)out)};
    int rc = run_dense(k ? g_dut : g_ref, B, in, out, x, w, bias, dy, &o[k]);
    CHECK(rc == 0);
    pst_backend *b = k ? g_dut : g_ref;
    if (rc) fprintf(stderr, "  %s on %s: %s\n", what, b->name, pst_parity_reason(b, rc));
  }
  pst_parity_compare(what, "y", o[1].y, o[0].y, ny);
  pst_parity_compare(what, "dx", o[1].dx, o[0].dx, nx);
  pst_parity_compare(what, "dw", o[1].dw, o[0].dw, nw);
  pst_parity_compare(what, "db", o[1].db, o[0].db, (size_t)out);
  pst_parity_compare(what, "dw (dx NULL)", o[1].dw_nodx, o[0].dw_nodx, nw);
  /* The pieces, against the reference's whole layer (both backends have them: the CPU's
   * own pieces are checked against its whole layer in kernels/cpu_dense_test). */
  if (g_dut->dense_forward_rows && g_dut->dense_backward_rows) {
    pst_parity_compare(what, "y (rows)", o[1].y_rows, o[0].y, ny);
    pst_parity_compare(what, "dx (rows)", o[1].dx_rows, o[0].dx, nx);
    pst_parity_compare(what, "dw (rows)", o[1].dw_rows, o[0].dw, nw);
    pst_parity_compare(what, "db (rows)", o[1].db_rows, o[0].db, (size_t)out);
  }
  for (int k = 0; k < 2; k++) {
    free(o[k].y), free(o[k].dx), free(o[k].dw), free(o[k].db), free(o[k].dw_nodx);
    free(o[k].y_rows), free(o[k].dx_rows), free(o[k].dw_rows), free(o[k].db_rows);
  }
  free(x), free(w), free(bias), free(dy);
}

/* ---- relu -------------------------------------------------------------------------- */

static inline void test_relu(size_t n) {
  float *x = rand_floats(n, -1, 1), *dy = rand_floats(n, -1, 1);
  float *y[2] = {pst_parity_zeros(n), pst_parity_zeros(n)}, *dx[2] = {pst_parity_zeros(n), pst_parity_zeros(n)};
  float *yi[2] = {pst_parity_zeros(n), pst_parity_zeros(n)}, *dxi[2] = {pst_parity_zeros(n), pst_parity_zeros(n)};
  for (int k = 0; k < 2; k++) {
    pst_backend *b = k ? g_dut : g_ref;
    float *dxx = up(b, x, n * 4), *ddy = up(b, dy, n * 4), *dyy = up(b, NULL, n * 4);
    float *dgx = up(b, NULL, n * 4);
    int rc = b->relu_forward(b, dxx, dyy, n);
    if (!rc) rc = b->relu_backward(b, dyy, ddy, dgx, n);
    if (!rc) rc = down(b, y[k], dyy, n * 4);
    if (!rc) rc = down(b, dx[k], dgx, n * 4);
    /* In place: x == y forward, dx == dy backward. */
    if (!rc) rc = b->relu_forward(b, dxx, dxx, n);
    if (!rc) rc = b->relu_backward(b, dxx, ddy, ddy, n);
    if (!rc) rc = down(b, yi[k], dxx, n * 4);
    if (!rc) rc = down(b, dxi[k], ddy, n * 4);
    CHECK(rc == 0);
    b->free(b, dxx), b->free(b, ddy), b->free(b, dyy), b->free(b, dgx);
  }
  pst_parity_compare("relu", "y", y[1], y[0], n);
  pst_parity_compare("relu", "dx", dx[1], dx[0], n);
  pst_parity_compare("relu in place", "y", yi[1], yi[0], n);
  pst_parity_compare("relu in place", "dx", dxi[1], dxi[0], n);
  for (int k = 0; k < 2; k++) free(y[k]), free(dx[k]), free(yi[k]), free(dxi[k]);
  free(x), free(dy);
}

/* ---- relu6 and dropout ------------------------------------------------------------ */

static inline void test_relu6(size_t n) {
  /* [-3, 9): both kinks (0 and 6) are inside the range. */
  float *x = rand_floats(n, -3, 9), *dy = rand_floats(n, -1, 1);
  float *y[2] = {pst_parity_zeros(n), pst_parity_zeros(n)}, *dx[2] = {pst_parity_zeros(n), pst_parity_zeros(n)};
  for (int k = 0; k < 2; k++) {
    pst_backend *b = k ? g_dut : g_ref;
    float *dxx = up(b, x, n * 4), *ddy = up(b, dy, n * 4), *dyy = up(b, NULL, n * 4);
    int rc = b->relu6_forward(b, dxx, dyy, n);
    if (!rc) rc = down(b, y[k], dyy, n * 4);
    /* In place backward, as the net runs it. */
    if (!rc) rc = b->relu6_backward(b, dyy, ddy, ddy, n);
    if (!rc) rc = down(b, dx[k], ddy, n * 4);
    CHECK(rc == 0);
    b->free(b, dxx), b->free(b, ddy), b->free(b, dyy);
  }
  pst_parity_compare("relu6", "y", y[1], y[0], n);
  pst_parity_compare("relu6", "dx", dx[1], dx[0], n);
  free(y[0]), free(y[1]), free(dx[0]), free(dx[1]), free(x), free(dy);
}

static inline void test_dropout(size_t n, float rate, uint64_t seed) {
  float *x = rand_floats(n, -1, 1), *dy = rand_floats(n, -1, 1);
  float *y[2] = {pst_parity_zeros(n), pst_parity_zeros(n)}, *dx[2] = {pst_parity_zeros(n), pst_parity_zeros(n)};
  for (int k = 0; k < 2; k++) {
    pst_backend *b = k ? g_dut : g_ref;
    float *dxx = up(b, x, n * 4), *ddy = up(b, dy, n * 4), *dyy = up(b, NULL, n * 4);
    int rc = b->dropout_forward(b, dxx, dyy, n, rate, seed);
    if (!rc) rc = down(b, y[k], dyy, n * 4);
    if (!rc) rc = b->dropout_backward(b, ddy, ddy, n, rate, seed);
    if (!rc) rc = down(b, dx[k], ddy, n * 4);
    CHECK(rc == 0);
    b->free(b, dxx), b->free(b, ddy), b->free(b, dyy);
  }
  /* The mask is the same function on both sides: the results must be identical, not
   * merely close (one float multiply per kept cell). */
  CHECK(memcmp(y[0], y[1], n * 4) == 0);
  CHECK(memcmp(dx[0], dx[1], n * 4) == 0);
  pst_parity_compare("dropout", "y", y[1], y[0], n);
  pst_parity_compare("dropout", "dx", dx[1], dx[0], n);
  free(y[0]), free(y[1]), free(dx[0]), free(dx[1]), free(x), free(dy);
}

/* ---- add and concatenate ------------------------------------------------------------ */

/* y = x0 + x1, the copy (x1 NULL) and the in-place accumulation the net's gradient fan-in
 * runs (y == x0). One float addition per element on both sides: identical results. */
static inline void test_add(size_t n) {
  float *x0 = rand_floats(n, -1, 1), *x1 = rand_floats(n, -1, 1);
  float *y[2] = {pst_parity_zeros(n), pst_parity_zeros(n)}, *cp[2] = {pst_parity_zeros(n), pst_parity_zeros(n)}, *acc[2] = {pst_parity_zeros(n), pst_parity_zeros(n)};
  for (int k = 0; k < 2; k++) {
    pst_backend *b = k ? g_dut : g_ref;
    float *d0 = up(b, x0, n * 4), *d1 = up(b, x1, n * 4), *dy = up(b, NULL, n * 4);
    int rc = b->add(b, d0, d1, dy, n);
    if (!rc) rc = down(b, y[k], dy, n * 4);
    if (!rc) rc = b->add(b, d1, NULL, dy, n);
    if (!rc) rc = down(b, cp[k], dy, n * 4);
    /* dy (= x1) += x0 twice, in place, then dy + dy. */
    if (!rc) rc = b->add(b, dy, d0, dy, n);
    if (!rc) rc = b->add(b, dy, d0, dy, n);
    if (!rc) rc = b->add(b, dy, dy, dy, n);
    if (!rc) rc = down(b, acc[k], dy, n * 4);
    CHECK(rc == 0);
    b->free(b, d0), b->free(b, d1), b->free(b, dy);
  }
  CHECK(memcmp(y[0], y[1], n * 4) == 0);
  CHECK(memcmp(cp[0], cp[1], n * 4) == 0 && memcmp(cp[0], x1, n * 4) == 0);
  CHECK(memcmp(acc[0], acc[1], n * 4) == 0);
  pst_parity_compare("add", "y", y[1], y[0], n);
  pst_parity_compare("add", "in place", acc[1], acc[0], n);
  for (int k = 0; k < 2; k++) free(y[k]), free(cp[k]), free(acc[k]);
  free(x0), free(x1);
}

/* Concatenation of k inputs of cs[t] channels over `rows` positions, forward (each input
 * into its channels of y) and backward (each slice of dy back out). Copies: identical. */
static inline void test_concat(size_t rows, const int *cs, int k_in) {
  int yc = 0;
  for (int t = 0; t < k_in; t++) yc += cs[t];
  size_t ny = rows * (size_t)yc;
  float *x[8], *dy = rand_floats(ny, -1, 1);
  float *y[2] = {pst_parity_zeros(ny), pst_parity_zeros(ny)}, *dx[2][8];
  for (int t = 0; t < k_in; t++) {
    x[t] = rand_floats(rows * (size_t)cs[t], -1, 1);
    dx[0][t] = pst_parity_zeros(rows * (size_t)cs[t]);
    dx[1][t] = pst_parity_zeros(rows * (size_t)cs[t]);
  }
  for (int k = 0; k < 2; k++) {
    pst_backend *b = k ? g_dut : g_ref;
    float *dyy = up(b, NULL, ny * 4), *ddy = up(b, dy, ny * 4);
    int rc = 0, off = 0;
    for (int t = 0; t < k_in && !rc; t++) {
      size_t n = rows * (size_t)cs[t] * 4;
      float *dxx = up(b, x[t], n), *dgx = up(b, NULL, n);
      rc = b->concat_forward(b, dxx, dyy, rows, cs[t], yc, off);
      if (!rc) rc = b->concat_backward(b, ddy, dgx, rows, cs[t], yc, off);
      if (!rc) rc = down(b, dx[k][t], dgx, n);
      b->free(b, dxx), b->free(b, dgx);
      off += cs[t];
    }
    if (!rc) rc = down(b, y[k], dyy, ny * 4);
    CHECK(rc == 0);
    b->free(b, dyy), b->free(b, ddy);
  }
  CHECK(memcmp(y[0], y[1], ny * 4) == 0);
  /* The CPU side is the reference: spot-check it against the definition too. */
  CHECK(y[0][yc - 1] == x[k_in - 1][cs[k_in - 1] - 1]);
  CHECK(y[0][(rows - 1) * (size_t)yc] == x[0][(rows - 1) * (size_t)cs[0]]);
  for (int t = 0; t < k_in; t++) {
    CHECK(memcmp(dx[0][t], dx[1][t], rows * (size_t)cs[t] * 4) == 0);
    free(x[t]), free(dx[0][t]), free(dx[1][t]);
  }
  free(y[0]), free(y[1]), free(dy);
}

/* ---- softmax cross-entropy --------------------------------------------------------- */

static inline void test_xent(int B, int C) {
  char what[64];
  snprintf(what, sizeof what, "softmax_xent %dx%d", B, C);
  size_t n = (size_t)B * C;
  float *logits = rand_floats(n, -4, 4);
  int32_t *labels = malloc((size_t)B * sizeof(int32_t));
  uint64_t s = g_seed++;
  for (int i = 0; i < B; i++) labels[i] = (int32_t)(t_rand64(&s) % (uint64_t)C);
  /* Make about half the rows right, so that the count of correct rows is exercised. */
  for (int i = 0; i < B; i += 2) logits[(size_t)i * C + labels[i]] += 8.0f;
  float *dl[2] = {pst_parity_zeros(n), pst_parity_zeros(n)};
  double loss[2] = {0, 0}, loss_eval[2] = {0, 0};
  int correct[2] = {-1, -1}, correct_eval[2] = {-1, -2}, bad_rc[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    pst_backend *b = k ? g_dut : g_ref;
    float *dlg = up(b, logits, n * 4), *ddl = up(b, NULL, n * 4);
    int32_t *dlab = up(b, labels, (size_t)B * 4);
    int rc = b->softmax_xent(b, dlg, dlab, ddl, B, C, 1.0f / (float)B, &loss[k], &correct[k]);
    if (!rc) rc = down(b, dl[k], ddl, n * 4);
    if (!rc)
      rc = b->softmax_xent(b, dlg, dlab, NULL, B, C, 1.0f, &loss_eval[k], &correct_eval[k]);
    CHECK(rc == 0);
    /* A label out of range is an error on every backend. */
    int32_t bad = C;
    if (!rc) rc = b->to_device(b, dlab, &bad, sizeof bad);
    bad_rc[k] = b->softmax_xent(b, dlg, dlab, NULL, B, C, 1.0f, NULL, NULL);
    (void)b->synchronize(b);
    b->free(b, dlg), b->free(b, ddl), b->free(b, dlab);
  }
  pst_parity_compare(what, "dlogits", dl[1], dl[0], n);
  CHECK(fabs(loss[1] - loss[0]) <= RTOL * fabs(loss[0]));
  CHECK(fabs(loss_eval[1] - loss[0]) <= RTOL * fabs(loss[0]));
  CHECK(correct[1] == correct[0] && correct_eval[1] == correct[0]);
  CHECK(bad_rc[0] == -EINVAL && bad_rc[1] == -EINVAL);
  if (fabs(loss[1] - loss[0]) > RTOL * fabs(loss[0]) || correct[1] != correct[0])
    fprintf(stderr, "  %s: loss %.9g vs %.9g, correct %d vs %d\n", what, loss[1], loss[0],
            correct[1], correct[0]);
  free(dl[0]), free(dl[1]), free(logits), free(labels);
}

/* ---- windows (conv2d, maxpool) ----------------------------------------------------- */

/* Keras geometry: "same" gives ceil(in / stride) with the odd padding at the end. */
static inline void window_dim(int in, int k, int stride, int same, int *out, int *pad) {
  if (same) {
    *out = (in + stride - 1) / stride;
    int total = (*out - 1) * stride + k - in;
    *pad = total > 0 ? total / 2 : 0;
  } else {
    *out = (in - k) / stride + 1;
    *pad = 0;
  }
}

/* A rectangular geometry: kernel kh x kw, strides sh, sw. */
static inline pst_window_shape window2(int n, int h, int w, int c, int kh, int kw, int sh,
                                       int sw, int same, int out_c) {
  pst_window_shape s = {.n = n, .in_h = h, .in_w = w, .in_c = c, .k_h = kh, .k_w = kw,
                        .stride_h = sh, .stride_w = sw, .out_c = out_c};
  window_dim(h, kh, sh, same, &s.out_h, &s.pad_top);
  window_dim(w, kw, sw, same, &s.out_w, &s.pad_left);
  return s;
}

static inline pst_window_shape window(int n, int h, int w, int c, int k, int stride,
                                      int same, int out_c) {
  return window2(n, h, w, c, k, k, stride, stride, same, out_c);
}

static inline void describe_shape(const pst_window_shape *s, const char *op, char *out,
                                  size_t len) {
  snprintf(out, len, "%s n=%d %dx%dx%d k=%dx%d s=%d,%d pad=%d,%d -> %dx%dx%d", op, s->n,
           s->in_h, s->in_w, s->in_c, s->k_h, s->k_w, s->stride_h, s->stride_w, s->pad_top,
           s->pad_left, s->out_h, s->out_w, s->out_c);
}

typedef int (*conv_fwd_fn)(pst_backend *, const pst_window_shape *, const float *, const float *,
                           const float *, float *);
typedef int (*conv_bwd_fn)(pst_backend *, const pst_window_shape *, const float *, const float *,
                           const float *, float *, float *, float *);

/* conv2d, or with depthwise set depthwise_conv2d (s.out_c == s.in_c, w [C, KH, KW]). */
static inline void test_conv_kind(pst_window_shape s, int depthwise) {
  char what[128];
  describe_shape(&s, depthwise ? "depthwise_conv2d" : "conv2d", what, sizeof what);
  size_t nx = (size_t)s.n * s.in_h * s.in_w * s.in_c;
  size_t ny = (size_t)s.n * s.out_h * s.out_w * s.out_c;
  size_t nw = (size_t)s.out_c * s.k_h * s.k_w * (depthwise ? 1 : s.in_c);
  float *x = rand_floats(nx, -1, 1), *w = rand_floats(nw, -0.5, 0.5);
  float *bias = rand_floats((size_t)s.out_c, -0.5, 0.5), *dy = rand_floats(ny, -1, 1);
  float *y[2], *dx[2], *dw[2], *db[2], *dw2[2];
  for (int k = 0; k < 2; k++) {
    pst_backend *b = k ? g_dut : g_ref;
    y[k] = pst_parity_zeros(ny), dx[k] = pst_parity_zeros(nx), dw[k] = pst_parity_zeros(nw), db[k] = pst_parity_zeros((size_t)s.out_c);
    dw2[k] = pst_parity_zeros(nw);
    float *dxx = up(b, x, nx * 4), *dww = up(b, w, nw * 4), *dbias = up(b, bias, s.out_c * 4ul);
    float *ddy = up(b, dy, ny * 4), *dyy = up(b, NULL, ny * 4), *dgx = up(b, NULL, nx * 4);
    float *dgw = up(b, NULL, nw * 4), *dgb = up(b, NULL, s.out_c * 4ul);
    conv_fwd_fn fwd = depthwise ? b->depthwise_conv2d_forward : b->conv2d_forward;
    conv_bwd_fn bwd = depthwise ? b->depthwise_conv2d_backward : b->conv2d_backward;
    int rc = fwd(b, &s, dxx, dww, dbias, dyy);
    if (!rc) rc = down(b, y[k], dyy, ny * 4);
    if (!rc) rc = bwd(b, &s, dxx, dww, ddy, dgx, dgw, dgb);
    if (!rc) rc = down(b, dx[k], dgx, nx * 4);
    if (!rc) rc = down(b, dw[k], dgw, nw * 4);
    if (!rc) rc = down(b, db[k], dgb, s.out_c * 4ul);
    if (!rc) rc = bwd(b, &s, dxx, dww, ddy, NULL, dgw, dgb);
    if (!rc) rc = down(b, dw2[k], dgw, nw * 4);
    CHECK(rc == 0);
    if (rc) fprintf(stderr, "  %s on %s: %s\n", what, b->name, pst_parity_reason(b, rc));
    float *all[] = {dxx, dww, dbias, ddy, dyy, dgx, dgw, dgb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) b->free(b, all[i]);
  }
  pst_parity_compare(what, "y", y[1], y[0], ny);
  pst_parity_compare(what, "dx", dx[1], dx[0], nx);
  pst_parity_compare(what, "dw", dw[1], dw[0], nw);
  pst_parity_compare(what, "db", db[1], db[0], (size_t)s.out_c);
  pst_parity_compare(what, "dw (dx NULL)", dw2[1], dw2[0], nw);
  for (int k = 0; k < 2; k++) free(y[k]), free(dx[k]), free(dw[k]), free(db[k]), free(dw2[k]);
  free(x), free(w), free(bias), free(dy);
}

static inline void test_conv(pst_window_shape s) { test_conv_kind(s, 0); }
static inline void test_depthwise(pst_window_shape s) { test_conv_kind(s, 1); }

/* Max pooling, or with avg set average pooling (padding excluded from the mean). With ties,
 * x takes only the values -1, -0.5, 0, 0.5, so that windows hold several maxima and the
 * gradient must go to the first (row-major), as on the CPU. */
static inline void test_pool_kind(pst_window_shape s, int avg, int ties) {
  char what[128];
  describe_shape(&s, avg ? "avgpool" : ties ? "maxpool (ties)" : "maxpool", what, sizeof what);
  size_t nx = (size_t)s.n * s.in_h * s.in_w * s.in_c;
  size_t ny = (size_t)s.n * s.out_h * s.out_w * s.out_c;
  /* Otherwise distinct values, so that every window has a single maximum. */
  float *x = rand_floats(nx, -1, 1), *dy = rand_floats(ny, -1, 1);
  for (size_t i = 0; ties && i < nx; i++) x[i] = floorf(x[i] * 2.0f) / 2.0f;
  float *y[2], *dx[2];
  for (int k = 0; k < 2; k++) {
    pst_backend *b = k ? g_dut : g_ref;
    y[k] = pst_parity_zeros(ny), dx[k] = pst_parity_zeros(nx);
    float *dxx = up(b, x, nx * 4), *ddy = up(b, dy, ny * 4), *dyy = up(b, NULL, ny * 4);
    float *dgx = up(b, NULL, nx * 4);
    int rc = avg ? b->avgpool_forward(b, &s, dxx, dyy) : b->maxpool_forward(b, &s, dxx, dyy);
    if (!rc) rc = down(b, y[k], dyy, ny * 4);
    if (!rc)
      rc = avg ? b->avgpool_backward(b, &s, ddy, dgx)
               : b->maxpool_backward(b, &s, dxx, dyy, ddy, dgx);
    if (!rc) rc = down(b, dx[k], dgx, nx * 4);
    CHECK(rc == 0);
    if (rc) fprintf(stderr, "  %s on %s: %s\n", what, b->name, pst_parity_reason(b, rc));
    b->free(b, dxx), b->free(b, ddy), b->free(b, dyy), b->free(b, dgx);
  }
  pst_parity_compare(what, "y", y[1], y[0], ny);
  pst_parity_compare(what, "dx", dx[1], dx[0], nx);
  for (int k = 0; k < 2; k++) free(y[k]), free(dx[k]);
  free(x), free(dy);
}

/* ---- batchnorm ---------------------------------------------------------------------- */

/* x[rows, C] with the channels innermost; `offset` moves the data away from zero. The
 * training forward (y, the saved mean and inverse standard deviation, the moving statistics'
 * change), the inference forward and the backward, with dx and without (a first layer). */
static inline void test_batchnorm(int rows, int C, double offset) {
  char what[96];
  snprintf(what, sizeof what, "batchnorm %d x %d (offset %g)", rows, C, offset);
  size_t n = (size_t)rows * C;
  const float eps = 1e-3f, k = 0.01f * 0.5f;
  float *x = rand_floats(n, offset - 1, offset + 2), *dy = rand_floats(n, -1, 1);
  float *gamma = rand_floats(C, 0.5, 1.5), *beta = rand_floats(C, -0.5, 0.5);
  float *moving = rand_floats(2 * C, 0.2, 1.5);
  float *y[2], *yi[2], *saved[2], *dmov[2], *dx[2], *dg[2], *db[2], *dg1[2], *db1[2];
  for (int s = 0; s < 2; s++) {
    pst_backend *b = s ? g_dut : g_ref;
    y[s] = pst_parity_zeros(n), yi[s] = pst_parity_zeros(n), dx[s] = pst_parity_zeros(n), saved[s] = pst_parity_zeros(2 * C);
    dmov[s] = pst_parity_zeros(2 * C), dg[s] = pst_parity_zeros(C), db[s] = pst_parity_zeros(C), dg1[s] = pst_parity_zeros(C);
    db1[s] = pst_parity_zeros(C);
    float *dxx = up(b, x, n * 4), *ddy = up(b, dy, n * 4), *dyy = up(b, NULL, n * 4);
    float *dgx = up(b, NULL, n * 4), *dga = up(b, gamma, C * 4), *dbe = up(b, beta, C * 4);
    float *dmo = up(b, moving, 2 * C * 4), *dsa = up(b, NULL, 2 * C * 4);
    float *ddm = up(b, NULL, 2 * C * 4), *ddg = up(b, NULL, C * 4), *ddb = up(b, NULL, C * 4);
    int rc = b->batchnorm_forward_train(b, dxx, dga, dbe, dyy, rows, C, eps, dmo, k, dsa, ddm);
    if (!rc) rc = down(b, y[s], dyy, n * 4);
    if (!rc) rc = down(b, saved[s], dsa, 2 * C * 4);
    if (!rc) rc = down(b, dmov[s], ddm, 2 * C * 4);
    if (!rc) rc = b->batchnorm_backward(b, dxx, dga, dsa, ddy, dgx, ddg, ddb, rows, C, eps);
    if (!rc) rc = down(b, dx[s], dgx, n * 4);
    if (!rc) rc = down(b, dg[s], ddg, C * 4);
    if (!rc) rc = down(b, db[s], ddb, C * 4);
    if (!rc) rc = b->batchnorm_backward(b, dxx, dga, dsa, ddy, NULL, ddg, ddb, rows, C, eps);
    if (!rc) rc = down(b, dg1[s], ddg, C * 4);
    if (!rc) rc = down(b, db1[s], ddb, C * 4);
    if (!rc) rc = b->batchnorm_forward_infer(b, dxx, dga, dbe, dmo, dyy, rows, C, eps);
    if (!rc) rc = down(b, yi[s], dyy, n * 4);
    CHECK(rc == 0);
    if (rc) fprintf(stderr, "  %s on %s: %s\n", what, b->name, pst_parity_reason(b, rc));
    b->free(b, dxx), b->free(b, ddy), b->free(b, dyy), b->free(b, dgx), b->free(b, dga);
    b->free(b, dbe), b->free(b, dmo), b->free(b, dsa), b->free(b, ddm), b->free(b, ddg);
    b->free(b, ddb);
  }
  pst_parity_compare(what, "y", y[1], y[0], n);
  pst_parity_compare(what, "saved mean, inv_std", saved[1], saved[0], 2 * C);
  pst_parity_compare(what, "dmoving mean", dmov[1], dmov[0], C);
  pst_parity_compare(what, "dmoving var", dmov[1] + C, dmov[0] + C, C);
  pst_parity_compare(what, "dx", dx[1], dx[0], n);
  pst_parity_compare(what, "dgamma", dg[1], dg[0], C);
  pst_parity_compare(what, "dbeta", db[1], db[0], C);
  pst_parity_compare(what, "dgamma without dx", dg1[1], dg1[0], C);
  pst_parity_compare(what, "dbeta without dx", db1[1], db1[0], C);
  pst_parity_compare(what, "y (inference)", yi[1], yi[0], n);
  for (int s = 0; s < 2; s++) {
    free(y[s]), free(yi[s]), free(saved[s]), free(dmov[s]), free(dx[s]), free(dg[s]);
    free(db[s]), free(dg1[s]), free(db1[s]);
  }
  free(x), free(dy), free(gamma), free(beta), free(moving);
}

static inline void test_pool(pst_window_shape s) { test_pool_kind(s, 0, 0); }
static inline void test_pool_ties(pst_window_shape s) { test_pool_kind(s, 0, 1); }
static inline void test_avgpool(pst_window_shape s) { test_pool_kind(s, 1, 0); }

/* Global average pooling: one valid window over the whole map, as model/layer_line.c lays
 * it out. */
static inline pst_window_shape global_window(int n, int h, int w, int c) {
  pst_window_shape s = window2(n, h, w, c, h, w, 1, 1, 0, c);
  return s;
}

#endif
