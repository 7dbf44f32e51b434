/* Max and average pooling on the CPU backend: forward against naive loops, backward
 * against finite differences (on inputs without near-ties for max), tie routing and same
 * padding; average pooling's padding cells are left out of the mean. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/testing.h"

static pst_window_shape make_shape(int n, int h, int w, int c, int k, int stride, int same) {
  pst_window_shape s = {.n = n, .in_h = h, .in_w = w, .in_c = c, .k_h = k, .k_w = k,
                        .stride_h = stride, .stride_w = stride, .out_c = c};
  if (same) {
    s.out_h = (h + stride - 1) / stride;
    s.out_w = (w + stride - 1) / stride;
    int ph = (s.out_h - 1) * stride + k - h, pw = (s.out_w - 1) * stride + k - w;
    s.pad_top = ph > 0 ? ph / 2 : 0;
    s.pad_left = pw > 0 ? pw / 2 : 0;
  } else {
    s.out_h = (h - k) / stride + 1;
    s.out_w = (w - k) / stride + 1;
  }
  return s;
}

static void ref_forward(const pst_window_shape *s, const float *x, float *y) {
  for (int n = 0; n < s->n; n++)
    for (int oh = 0; oh < s->out_h; oh++)
      for (int ow = 0; ow < s->out_w; ow++)
        for (int c = 0; c < s->in_c; c++) {
          float m = -INFINITY;
          for (int i = 0; i < s->k_h; i++)
            for (int j = 0; j < s->k_w; j++) {
              int ih = oh * s->stride_h - s->pad_top + i, iw = ow * s->stride_w - s->pad_left + j;
              if (ih < 0 || ih >= s->in_h || iw < 0 || iw >= s->in_w) continue;
              float v = x[((n * s->in_h + ih) * s->in_w + iw) * s->in_c + c];
              if (v > m) m = v;
            }
          y[((n * s->out_h + oh) * s->out_w + ow) * s->in_c + c] = m;
        }
}

/* Distinct values at least 0.01 apart, shuffled, so that a finite-difference step of
 * 1e-3 never changes which cell is the maximum. */
static void fill_distinct(float *p, size_t n, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++) p[i] = (float)((double)i * 0.01 - (double)n * 0.005);
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = t_rand64(&s) % (i + 1);
    float t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
}

typedef struct {
  pst_backend *be;
  pst_window_shape s;
  float *x, *y, *r;
  size_t ny;
} pool_case;

static double pool_loss(void *ctx) {
  pool_case *c = ctx;
  c->be->maxpool_forward(c->be, &c->s, c->x, c->y);
  double l = 0.0;
  for (size_t i = 0; i < c->ny; i++) l += (double)c->r[i] * c->y[i];
  return l;
}

static void run_case(pst_backend *be, pst_window_shape s, uint64_t seed) {
  pool_case c = {.be = be, .s = s};
  size_t nx = (size_t)s.n * s.in_h * s.in_w * s.in_c;
  c.ny = (size_t)s.n * s.out_h * s.out_w * s.out_c;
  c.x = malloc(nx * 4), c.y = malloc(c.ny * 4), c.r = malloc(c.ny * 4);
  float *ry = malloc(c.ny * 4), *dx = malloc(nx * 4);
  fill_distinct(c.x, nx, seed);
  t_fill(c.r, c.ny, seed + 1, -1, 1);
  CHECK(be->maxpool_forward(be, &s, c.x, c.y) == 0);
  ref_forward(&s, c.x, ry);
  CHECK(memcmp(c.y, ry, c.ny * 4) == 0);
  memset(dx, 0x7f, nx * 4);
  CHECK(be->maxpool_backward(be, &s, c.x, c.y, c.r, dx) == 0);
  CHECK(t_gradcheck("pool dx", c.x, dx, nx, pool_loss, &c) == 0);
  free(c.x), free(c.y), free(c.r), free(ry), free(dx);
}

static void test_ties_and_padding(pst_backend *be) {
  /* All equal: each window's gradient goes to its first cell (row-major), once. */
  pst_window_shape s = make_shape(1, 4, 4, 2, 2, 2, 0);
  float x[32], y[8], dy[8], dx[32];
  for (int i = 0; i < 32; i++) x[i] = 1.5f;
  for (int i = 0; i < 8; i++) dy[i] = (float)(i + 1);
  CHECK(be->maxpool_forward(be, &s, x, y) == 0);
  CHECK(be->maxpool_backward(be, &s, x, y, dy, dx) == 0);
  int ok = 1;
  for (int h = 0; h < 4; h++)
    for (int w = 0; w < 4; w++)
      for (int c = 0; c < 2; c++) {
        float want = (h % 2 == 0 && w % 2 == 0) ? dy[((h / 2) * 2 + w / 2) * 2 + c] : 0.0f;
        ok &= dx[(h * 4 + w) * 2 + c] == want;
      }
  CHECK(ok);

  /* Same padding on negative inputs: the padding cells never win, so the output is a
   * real (negative) value, never 0. */
  s = make_shape(1, 3, 3, 1, 2, 2, 1);
  CHECK(s.out_h == 2 && s.pad_top == 0);
  float nx[9] = {-9, -8, -7, -6, -5, -4, -3, -2, -1}, ny[4], ry[4];
  CHECK(be->maxpool_forward(be, &s, nx, ny) == 0);
  ref_forward(&s, nx, ry);
  CHECK(memcmp(ny, ry, sizeof ny) == 0 && ny[0] == -5 && ny[1] == -4 && ny[3] == -1);

  /* Overlapping windows (3x3, stride 1) accumulate into shared cells. */
  s = make_shape(1, 4, 4, 1, 3, 1, 0);
  float ox[16], oy[4], ody[4] = {1, 1, 1, 1}, odx[16];
  for (int i = 0; i < 16; i++) ox[i] = 0.0f;
  ox[5] = 1.0f; /* the maximum of all four windows */
  CHECK(be->maxpool_forward(be, &s, ox, oy) == 0);
  CHECK(be->maxpool_backward(be, &s, ox, oy, ody, odx) == 0);
  CHECK(odx[5] == 4.0f && odx[0] == 0.0f && odx[6] == 0.0f);

  pst_window_shape bad = make_shape(1, 4, 4, 2, 2, 2, 0);
  bad.out_c = 3;
  CHECK(be->maxpool_forward(be, &bad, x, y) == -EINVAL);
}

static void ref_avg(const pst_window_shape *s, const float *x, float *y) {
  for (int n = 0; n < s->n; n++)
    for (int oh = 0; oh < s->out_h; oh++)
      for (int ow = 0; ow < s->out_w; ow++)
        for (int c = 0; c < s->in_c; c++) {
          double sum = 0.0;
          int cells = 0;
          for (int i = 0; i < s->k_h; i++)
            for (int j = 0; j < s->k_w; j++) {
              int ih = oh * s->stride_h - s->pad_top + i, iw = ow * s->stride_w - s->pad_left + j;
              if (ih < 0 || ih >= s->in_h || iw < 0 || iw >= s->in_w) continue;
              sum += x[((n * s->in_h + ih) * s->in_w + iw) * s->in_c + c];
              cells++;
            }
          y[((n * s->out_h + oh) * s->out_w + ow) * s->in_c + c] = (float)(sum / cells);
        }
}

static double avg_loss(void *ctx) {
  pool_case *c = ctx;
  c->be->avgpool_forward(c->be, &c->s, c->x, c->y);
  double l = 0.0;
  for (size_t i = 0; i < c->ny; i++) l += (double)c->r[i] * c->y[i];
  return l;
}

static void run_avg_case(pst_backend *be, pst_window_shape s, uint64_t seed) {
  pool_case c = {.be = be, .s = s};
  size_t nx = (size_t)s.n * s.in_h * s.in_w * s.in_c;
  c.ny = (size_t)s.n * s.out_h * s.out_w * s.out_c;
  c.x = malloc(nx * 4), c.y = malloc(c.ny * 4), c.r = malloc(c.ny * 4);
  float *ry = malloc(c.ny * 4), *dx = malloc(nx * 4);
  t_fill(c.x, nx, seed, -1, 1);
  t_fill(c.r, c.ny, seed + 1, -1, 1);
  CHECK(be->avgpool_forward(be, &s, c.x, c.y) == 0);
  ref_avg(&s, c.x, ry);
  int bad = 0;
  for (size_t i = 0; i < c.ny; i++) bad += !t_close(c.y[i], ry[i], 1e-5, 1e-6);
  CHECK(bad == 0);
  memset(dx, 0x7f, nx * 4); /* dx is overwritten, not added to */
  CHECK(be->avgpool_backward(be, &s, c.r, dx) == 0);
  CHECK(t_gradcheck("avgpool dx", c.x, dx, nx, avg_loss, &c) == 0);
  free(c.x), free(c.y), free(c.r), free(ry), free(dx);
}

static void test_avg_padding(pst_backend *be) {
  /* 3x3 same on a 3x3 of ones: every mean is 1 (padding excluded from the count); with
   * the padding counted the corners would be 4/9. */
  pst_window_shape s = make_shape(1, 3, 3, 1, 3, 1, 1);
  float x[9], y[9];
  for (int i = 0; i < 9; i++) x[i] = 1.0f;
  CHECK(be->avgpool_forward(be, &s, x, y) == 0);
  int ok = 1;
  for (int i = 0; i < 9; i++) ok &= fabsf(y[i] - 1.0f) < 1e-6f;
  CHECK(ok);
  /* Global average pooling: the window is the whole map. */
  pst_window_shape g = make_shape(2, 3, 2, 2, 1, 1, 0);
  g.k_h = 3, g.k_w = 2, g.out_h = g.out_w = 1;
  float gx[24], gy[4];
  for (int i = 0; i < 24; i++) gx[i] = (float)i;
  CHECK(be->avgpool_forward(be, &g, gx, gy) == 0);
  CHECK(gy[0] == 5.0f && gy[1] == 6.0f && gy[2] == 17.0f && gy[3] == 18.0f);
  pst_window_shape bad = g;
  bad.out_c = 3;
  CHECK(be->avgpool_forward(be, &bad, gx, gy) == -EINVAL);
}

int main(void) {
  pst_backend *be = NULL;
  CHECK(pst_cpu_backend_create(1, &be) == 0);
  run_case(be, make_shape(2, 4, 4, 3, 2, 2, 0), 1);    /* 2x2, the usual */
  run_case(be, make_shape(2, 5, 5, 2, 2, 2, 0), 2);    /* odd size: last row unused */
  run_case(be, make_shape(1, 5, 6, 3, 2, 2, 1), 3);    /* same padding */
  run_case(be, make_shape(2, 6, 6, 2, 3, 2, 0), 4);    /* overlapping 3x3 stride 2 */
  run_case(be, make_shape(1, 7, 7, 300, 3, 3, 1), 5);  /* more channels than a block */
  test_ties_and_padding(be);
  run_avg_case(be, make_shape(2, 4, 4, 3, 2, 2, 0), 11);   /* 2x2, the usual */
  run_avg_case(be, make_shape(1, 5, 6, 3, 2, 2, 1), 12);   /* same, odd sizes */
  run_avg_case(be, make_shape(2, 6, 6, 2, 3, 2, 1), 13);   /* overlapping, padded */
  run_avg_case(be, make_shape(1, 7, 7, 5, 3, 1, 1), 14);   /* stride 1 same */
  pst_window_shape gs = make_shape(2, 5, 4, 3, 1, 1, 0);  /* global: window = map */
  gs.k_h = 5, gs.k_w = 4, gs.out_h = gs.out_w = 1;
  run_avg_case(be, gs, 15);
  test_avg_padding(be);
  be->destroy(be);
  return t_summary();
}
