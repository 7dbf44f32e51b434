/* Depthwise convolution on the CPU backend: forward against naive loops, backward (input,
 * filters, bias) against finite differences, for valid and same padding, strides and
 * rectangular kernels. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/testing.h"

static pst_window_shape make_shape(int n, int h, int w, int c, int kh, int kw, int stride,
                                   int same) {
  pst_window_shape s = {.n = n, .in_h = h, .in_w = w, .in_c = c, .k_h = kh, .k_w = kw,
                        .stride_h = stride, .stride_w = stride, .out_c = c};
  if (same) {
    s.out_h = (h + stride - 1) / stride;
    s.out_w = (w + stride - 1) / stride;
    int ph = (s.out_h - 1) * stride + kh - h, pw = (s.out_w - 1) * stride + kw - w;
    s.pad_top = ph > 0 ? ph / 2 : 0;
    s.pad_left = pw > 0 ? pw / 2 : 0;
  } else {
    s.out_h = (h - kh) / stride + 1;
    s.out_w = (w - kw) / stride + 1;
  }
  return s;
}

/* y[n, oh, ow, c] = bias[c] + sum over the window of x[n, ih, iw, c] * w[c, i, j]. */
static void ref_forward(const pst_window_shape *s, const float *x, const float *w,
                        const float *bias, float *y) {
  for (int n = 0; n < s->n; n++)
    for (int oh = 0; oh < s->out_h; oh++)
      for (int ow = 0; ow < s->out_w; ow++)
        for (int c = 0; c < s->in_c; c++) {
          double acc = bias[c];
          for (int i = 0; i < s->k_h; i++)
            for (int j = 0; j < s->k_w; j++) {
              int ih = oh * s->stride_h - s->pad_top + i, iw = ow * s->stride_w - s->pad_left + j;
              if (ih < 0 || ih >= s->in_h || iw < 0 || iw >= s->in_w) continue;
              acc += (double)x[((n * s->in_h + ih) * s->in_w + iw) * s->in_c + c] *
                     w[(c * s->k_h + i) * s->k_w + j];
            }
          y[((n * s->out_h + oh) * s->out_w + ow) * s->in_c + c] = (float)acc;
        }
}

typedef struct {
  pst_backend *be;
  pst_window_shape s;
  float *x, *w, *bias, *y, *r;
  size_t ny;
} dw_case;

static double dw_loss(void *ctx) {
  dw_case *c = ctx;
  c->be->depthwise_conv2d_forward(c->be, &c->s, c->x, c->w, c->bias, c->y);
  double l = 0.0;
  for (size_t i = 0; i < c->ny; i++) l += (double)c->r[i] * c->y[i];
  return l;
}

static void run_case(pst_backend *be, pst_window_shape s, uint64_t seed) {
  dw_case c = {.be = be, .s = s};
  const size_t nx = (size_t)s.n * s.in_h * s.in_w * s.in_c;
  const size_t nw = (size_t)s.in_c * s.k_h * s.k_w;
  c.ny = (size_t)s.n * s.out_h * s.out_w * s.out_c;
  c.x = malloc(nx * 4), c.w = malloc(nw * 4), c.bias = malloc(s.in_c * 4ul);
  c.y = malloc(c.ny * 4), c.r = malloc(c.ny * 4);
  float *ry = malloc(c.ny * 4), *dx = malloc(nx * 4), *dw = malloc(nw * 4);
  float *db = malloc(s.in_c * 4ul), *dw2 = malloc(nw * 4);
  t_fill(c.x, nx, seed, -1, 1);
  t_fill(c.w, nw, seed + 1, -0.5, 0.5);
  t_fill(c.bias, (size_t)s.in_c, seed + 2, -0.5, 0.5);
  t_fill(c.r, c.ny, seed + 3, -1, 1);
  CHECK(be->depthwise_conv2d_forward(be, &s, c.x, c.w, c.bias, c.y) == 0);
  ref_forward(&s, c.x, c.w, c.bias, ry);
  int bad = 0;
  for (size_t i = 0; i < c.ny; i++) bad += !t_close(c.y[i], ry[i], 1e-5, 1e-5);
  CHECK(bad == 0);
  memset(dx, 0x7f, nx * 4), memset(dw, 0x7f, nw * 4), memset(db, 0x7f, s.in_c * 4ul);
  CHECK(be->depthwise_conv2d_backward(be, &s, c.x, c.w, c.r, dx, dw, db) == 0);
  CHECK(t_gradcheck("depthwise dx", c.x, dx, nx, dw_loss, &c) == 0);
  CHECK(t_gradcheck("depthwise dw", c.w, dw, nw, dw_loss, &c) == 0);
  CHECK(t_gradcheck("depthwise db", c.bias, db, (size_t)s.in_c, dw_loss, &c) == 0);
  /* The first layer's variant (no dx) gives the same filter gradient. */
  CHECK(be->depthwise_conv2d_backward(be, &s, c.x, c.w, c.r, NULL, dw2, db) == 0);
  CHECK(memcmp(dw, dw2, nw * 4) == 0);
  free(c.x), free(c.w), free(c.bias), free(c.y), free(c.r);
  free(ry), free(dx), free(dw), free(db), free(dw2);
}

int main(void) {
  pst_backend *be = NULL;
  CHECK(pst_cpu_backend_create(1, &be) == 0);
  run_case(be, make_shape(2, 5, 5, 3, 3, 3, 1, 0), 1);   /* valid */
  run_case(be, make_shape(2, 6, 5, 4, 3, 3, 1, 1), 2);   /* same, symmetric */
  run_case(be, make_shape(1, 7, 7, 5, 3, 3, 2, 1), 3);   /* same, stride 2 */
  run_case(be, make_shape(2, 6, 6, 2, 2, 2, 2, 1), 4);   /* same, even kernel */
  run_case(be, make_shape(1, 6, 7, 3, 3, 2, 1, 1), 5);   /* rectangular kernel */
  run_case(be, make_shape(1, 4, 4, 33, 3, 3, 1, 1), 6);  /* channels past a vector */
  pst_window_shape bad = make_shape(1, 5, 5, 3, 3, 3, 1, 0);
  bad.out_c = 4;
  float x[75] = {0}, w[27] = {0}, y[36];
  CHECK(be->depthwise_conv2d_forward(be, &bad, x, w, NULL, y) == -EINVAL);
  be->destroy(be);
  return t_summary();
}
