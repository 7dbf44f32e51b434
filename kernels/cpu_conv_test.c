/* conv2d on the CPU backend: the fast path against plain reference loops (forward and
 * backward), and the backward pass against finite differences, for valid and same
 * padding, strides 1 and 2, 1x1 kernels, and a batch big enough to be chunked. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/testing.h"

/* Output size as the model computes it (TensorFlow's rule for same padding). */
static pst_window_shape make_shape(int n, int h, int w, int cin, int cout, int k_h, int k_w,
                                   int stride, int same) {
  pst_window_shape s = {.n = n, .in_h = h, .in_w = w, .in_c = cin, .k_h = k_h, .k_w = k_w,
                        .stride_h = stride, .stride_w = stride, .out_c = cout};
  if (same) {
    s.out_h = (h + stride - 1) / stride;
    s.out_w = (w + stride - 1) / stride;
    int ph = (s.out_h - 1) * stride + k_h - h, pw = (s.out_w - 1) * stride + k_w - w;
    s.pad_top = ph > 0 ? ph / 2 : 0;
    s.pad_left = pw > 0 ? pw / 2 : 0;
  } else {
    s.out_h = (h - k_h) / stride + 1;
    s.out_w = (w - k_w) / stride + 1;
  }
  return s;
}

/* Reference conv2d: naive loops in double, NHWC / OHWI, zero padding. */
static void ref_forward(const pst_window_shape *s, const float *x, const float *w,
                        const float *bias, double *y) {
  for (int n = 0; n < s->n; n++)
    for (int oh = 0; oh < s->out_h; oh++)
      for (int ow = 0; ow < s->out_w; ow++)
        for (int o = 0; o < s->out_c; o++) {
          double acc = bias[o];
          for (int i = 0; i < s->k_h; i++)
            for (int j = 0; j < s->k_w; j++) {
              int ih = oh * s->stride_h - s->pad_top + i, iw = ow * s->stride_w - s->pad_left + j;
              if (ih < 0 || ih >= s->in_h || iw < 0 || iw >= s->in_w) continue;
              for (int c = 0; c < s->in_c; c++)
                acc += (double)x[((n * s->in_h + ih) * s->in_w + iw) * s->in_c + c] *
                       w[((o * s->k_h + i) * s->k_w + j) * s->in_c + c];
            }
          y[((n * s->out_h + oh) * s->out_w + ow) * s->out_c + o] = acc;
        }
}

/* Reference backward: the same loops, scattering dy into dx, dw and db. */
static void ref_backward(const pst_window_shape *s, const float *x, const float *w,
                         const float *dy, double *dx, double *dw, double *db) {
  size_t nx = (size_t)s->n * s->in_h * s->in_w * s->in_c;
  size_t nw = (size_t)s->out_c * s->k_h * s->k_w * s->in_c;
  memset(dx, 0, nx * sizeof(double));
  memset(dw, 0, nw * sizeof(double));
  memset(db, 0, s->out_c * sizeof(double));
  for (int n = 0; n < s->n; n++)
    for (int oh = 0; oh < s->out_h; oh++)
      for (int ow = 0; ow < s->out_w; ow++)
        for (int o = 0; o < s->out_c; o++) {
          double g = dy[((n * s->out_h + oh) * s->out_w + ow) * s->out_c + o];
          db[o] += g;
          for (int i = 0; i < s->k_h; i++)
            for (int j = 0; j < s->k_w; j++) {
              int ih = oh * s->stride_h - s->pad_top + i, iw = ow * s->stride_w - s->pad_left + j;
              if (ih < 0 || ih >= s->in_h || iw < 0 || iw >= s->in_w) continue;
              for (int c = 0; c < s->in_c; c++) {
                size_t xi = ((size_t)(n * s->in_h + ih) * s->in_w + iw) * s->in_c + c;
                size_t wi = ((size_t)(o * s->k_h + i) * s->k_w + j) * s->in_c + c;
                dx[xi] += g * w[wi];
                dw[wi] += g * x[xi];
              }
            }
        }
}

static int all_close(const float *a, const double *ref, size_t n, double rtol, double atol) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) bad += !t_close(a[i], ref[i], rtol, atol);
  return bad;
}

typedef struct {
  pst_backend *be;
  pst_window_shape s;
  float *x, *w, *bias, *y, *r;
  size_t ny;
} conv_case;

static double conv_loss(void *ctx) {
  conv_case *c = ctx;
  c->be->conv2d_forward(c->be, &c->s, c->x, c->w, c->bias, c->y);
  double l = 0.0;
  for (size_t i = 0; i < c->ny; i++) l += (double)c->r[i] * c->y[i];
  return l;
}

/* Compares with the reference; with `fd`, also checks every gradient by finite
 * differences (small shapes only). */
static void run_case(pst_backend *be, pst_window_shape s, int fd, uint64_t seed) {
  conv_case c = {.be = be, .s = s};
  size_t nx = (size_t)s.n * s.in_h * s.in_w * s.in_c;
  size_t nw = (size_t)s.out_c * s.k_h * s.k_w * s.in_c;
  c.ny = (size_t)s.n * s.out_h * s.out_w * s.out_c;
  c.x = malloc(nx * 4), c.w = malloc(nw * 4), c.bias = malloc(s.out_c * 4);
  c.y = malloc(c.ny * 4), c.r = malloc(c.ny * 4);
  float *dx = malloc(nx * 4), *dw = malloc(nw * 4), *db = malloc(s.out_c * 4);
  double *ry = malloc(c.ny * 8), *rdx = malloc(nx * 8), *rdw = malloc(nw * 8);
  double *rdb = malloc(s.out_c * 8);
  t_fill(c.x, nx, seed, -1, 1);
  t_fill(c.w, nw, seed + 1, -1, 1);
  t_fill(c.bias, s.out_c, seed + 2, -1, 1);
  t_fill(c.r, c.ny, seed + 3, -1, 1);

  CHECK(be->conv2d_forward(be, &s, c.x, c.w, c.bias, c.y) == 0);
  ref_forward(&s, c.x, c.w, c.bias, ry);
  CHECK(all_close(c.y, ry, c.ny, 1e-4, 1e-4) == 0);

  memset(dw, 0x7f, nw * 4); /* overwritten, not accumulated */
  memset(db, 0x7f, s.out_c * 4);
  memset(dx, 0x7f, nx * 4);
  CHECK(be->conv2d_backward(be, &s, c.x, c.w, c.r, dx, dw, db) == 0);
  ref_backward(&s, c.x, c.w, c.r, rdx, rdw, rdb);
  CHECK(all_close(dx, rdx, nx, 1e-4, 1e-4) == 0);
  CHECK(all_close(dw, rdw, nw, 1e-4, 1e-3) == 0);
  CHECK(all_close(db, rdb, s.out_c, 1e-4, 1e-3) == 0);

  float *dw2 = malloc(nw * 4), *db2 = malloc(s.out_c * 4);
  CHECK(be->conv2d_backward(be, &s, c.x, c.w, c.r, NULL, dw2, db2) == 0);
  CHECK(memcmp(dw, dw2, nw * 4) == 0 && memcmp(db, db2, s.out_c * 4) == 0);
  free(dw2), free(db2);

  if (fd) {
    CHECK(t_gradcheck("conv dx", c.x, dx, nx, conv_loss, &c) == 0);
    CHECK(t_gradcheck("conv dw", c.w, dw, nw, conv_loss, &c) == 0);
    CHECK(t_gradcheck("conv db", c.bias, db, s.out_c, conv_loss, &c) == 0);
  }
  free(c.x), free(c.w), free(c.bias), free(c.y), free(c.r), free(dx), free(dw), free(db);
  free(ry), free(rdx), free(rdw), free(rdb);
}

int main(void) {
  pst_backend *be = NULL;
  CHECK(pst_cpu_backend_create(1, &be) == 0);
  /* Small shapes, checked by finite differences too. */
  run_case(be, make_shape(2, 5, 6, 3, 4, 3, 3, 1, 0), 1, 100);  /* valid */
  run_case(be, make_shape(2, 5, 6, 3, 4, 3, 3, 1, 1), 1, 200);  /* same */
  run_case(be, make_shape(2, 6, 7, 2, 3, 3, 3, 2, 1), 1, 300);  /* same, stride 2 */
  run_case(be, make_shape(2, 7, 6, 2, 3, 3, 2, 2, 0), 1, 400);  /* valid, stride 2, 3x2 */
  run_case(be, make_shape(2, 4, 4, 3, 5, 1, 1, 1, 0), 1, 500);  /* pointwise */
  run_case(be, make_shape(1, 4, 5, 1, 2, 4, 4, 1, 1), 1, 600);  /* same, even kernel */
  /* Bigger shapes: several chunks per batch, against the reference only. */
  run_case(be, make_shape(12, 20, 20, 8, 16, 3, 3, 1, 0), 0, 700);
  run_case(be, make_shape(9, 28, 28, 1, 32, 3, 3, 1, 0), 0, 800);
  run_case(be, make_shape(5, 15, 13, 16, 8, 5, 5, 2, 1), 0, 900);

  /* Inconsistent shapes are refused rather than read out of bounds. */
  pst_window_shape bad = make_shape(1, 5, 5, 1, 1, 3, 3, 1, 0);
  float buf[64] = {0};
  bad.out_h = 0;
  CHECK(be->conv2d_forward(be, &bad, buf, buf, buf, buf) == -EINVAL);
  bad = make_shape(1, 5, 5, 1, 1, 3, 3, 1, 0);
  bad.pad_top = 3;
  CHECK(be->conv2d_forward(be, &bad, buf, buf, buf, buf) == -EINVAL);
  bad = make_shape(1, 5, 5, 1, 1, 3, 3, 1, 0);
  bad.out_w = 9;
  CHECK(be->conv2d_forward(be, &bad, buf, buf, buf, buf) == -EINVAL);
  be->destroy(be);
  return t_summary();
}
