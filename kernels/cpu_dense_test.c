/* Dense layer on the CPU backend: forward against naive loops, backward against finite
 * differences of L = sum(r * y) (so dL/dy = r). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/testing.h"

typedef struct {
  pst_backend *be;
  int batch, in, out;
  float *x, *w, *bias, *y, *r;
} dense_case;

static double dense_loss(void *ctx) {
  dense_case *c = ctx;
  c->be->dense_forward(c->be, c->x, c->w, c->bias, c->y, c->batch, c->in, c->out);
  double l = 0.0;
  for (int i = 0; i < c->batch * c->out; i++) l += (double)c->r[i] * c->y[i];
  return l;
}

static void run_case(pst_backend *be, int batch, int in, int out, uint64_t seed) {
  dense_case c = {.be = be, .batch = batch, .in = in, .out = out};
  size_t nx = (size_t)batch * in, nw = (size_t)in * out, ny = (size_t)batch * out;
  c.x = malloc(nx * 4);
  c.w = malloc(nw * 4);
  c.bias = malloc(out * 4);
  c.y = malloc(ny * 4);
  c.r = malloc(ny * 4);
  float *dx = malloc(nx * 4), *dw = malloc(nw * 4), *db = malloc(out * 4);
  t_fill(c.x, nx, seed, -1, 1);
  t_fill(c.w, nw, seed + 1, -1, 1);
  t_fill(c.bias, out, seed + 2, -1, 1);
  t_fill(c.r, ny, seed + 3, -1, 1);

  CHECK(be->dense_forward(be, c.x, c.w, c.bias, c.y, batch, in, out) == 0);
  int bad = 0;
  for (int b = 0; b < batch; b++)
    for (int j = 0; j < out; j++) {
      double ref = c.bias[j];
      for (int k = 0; k < in; k++) ref += (double)c.x[b * in + k] * c.w[k * out + j];
      bad += !t_close(c.y[b * out + j], ref, 1e-5, 1e-5);
    }
  CHECK(bad == 0);

  /* Gradients are overwritten, not accumulated: start from garbage. */
  memset(dw, 0x7f, nw * 4);
  memset(db, 0x7f, out * 4);
  CHECK(be->dense_backward(be, c.x, c.w, c.r, dx, dw, db, batch, in, out) == 0);
  CHECK(t_gradcheck("dx", c.x, dx, nx, dense_loss, &c) == 0);
  CHECK(t_gradcheck("dw", c.w, dw, nw, dense_loss, &c) == 0);
  CHECK(t_gradcheck("db", c.bias, db, out, dense_loss, &c) == 0);

  /* dx may be NULL (first layer) and must then leave dw and db the same. */
  float *dw2 = malloc(nw * 4), *db2 = malloc(out * 4);
  CHECK(be->dense_backward(be, c.x, c.w, c.r, NULL, dw2, db2, batch, in, out) == 0);
  CHECK(memcmp(dw, dw2, nw * 4) == 0 && memcmp(db, db2, out * 4) == 0);
  free(dw2);
  free(db2);

  /* In pieces of rows (backend.h): the forward's pieces ascending with the bias on the last,
   * within rounding of the whole layer (the sum's order differs); the backward's pieces
   * descending, each writing only its rows of dw and its columns of dx: within rounding too
   * (each element is the same dot product, but OpenBLAS's kernels for a narrower matrix may
   * sum it in another order: 8x33x17 differs in its last bits), db bit for bit. */
  int raw[] = {0, in / 3, in - in / 4, in}, cut[4], pieces = 0;
  cut[0] = 0;
  for (int k = 1; k < 4; k++)
    if (raw[k] > cut[pieces]) cut[++pieces] = raw[k];
  float *yp = malloc(ny * 4), *dxp = malloc(nx * 4), *dwp = malloc(nw * 4), *dbp = malloc(out * 4);
  memset(dxp, 0x7f, nx * 4);
  memset(dwp, 0x7f, nw * 4);
  /* The whole layer again (the gradient checks above moved the inputs and put them back). */
  CHECK(be->dense_forward(be, c.x, c.w, c.bias, c.y, batch, in, out) == 0);
  CHECK(be->dense_backward(be, c.x, c.w, c.r, dx, dw, db, batch, in, out) == 0);
  for (int k = 0; k < pieces; k++)
    CHECK(be->dense_forward_rows(be, c.x, c.w, k == pieces - 1 ? c.bias : NULL, yp, batch, in,
                                 out, cut[k], cut[k + 1]) == 0);
  int far = 0;
  for (size_t i = 0; i < ny; i++) far += !t_close(yp[i], c.y[i], 1e-5, 1e-5);
  CHECK(far == 0);
  for (int k = pieces - 1; k >= 0; k--)
    CHECK(be->dense_backward_rows(be, c.x, c.w, c.r, dxp, dwp, k == pieces - 1 ? dbp : NULL,
                                  batch, in, out, cut[k], cut[k + 1]) == 0);
  for (size_t i = 0; i < nw; i++) far += !t_close(dwp[i], dw[i], 1e-5, 1e-5);
  for (size_t i = 0; i < nx; i++) far += !t_close(dxp[i], dx[i], 1e-5, 1e-5);
  CHECK(far == 0 && memcmp(dbp, db, out * 4) == 0);
  /* Rows outside the layer, or none, are refused. */
  CHECK(be->dense_forward_rows(be, c.x, c.w, NULL, yp, batch, in, out, 0, in + 1) == -EINVAL);
  CHECK(be->dense_backward_rows(be, c.x, c.w, c.r, NULL, dwp, NULL, batch, in, out, 1, 1) ==
        -EINVAL);
  free(yp), free(dxp), free(dwp), free(dbp);
  free(c.x), free(c.w), free(c.bias), free(c.y), free(c.r), free(dx), free(dw), free(db);
}

int main(void) {
  pst_backend *be = NULL;
  CHECK(pst_cpu_backend_create(1, &be) == 0 && be != NULL);
  CHECK(be->host_memory == 1 && strcmp(be->name, "cpu") == 0);
  pst_backend *none = NULL;
  CHECK(pst_cpu_backend_create(0, &none) == -EINVAL && none == NULL);
  run_case(be, 1, 1, 1, 10);
  run_case(be, 3, 7, 5, 20);
  run_case(be, 8, 33, 17, 30);
  float x = 1, w = 1, y;
  CHECK(be->dense_forward(be, &x, &w, NULL, &y, 0, 1, 1) < 0);
  CHECK(be->dense_forward(be, &x, &w, NULL, &y, 1, 1, 1) == 0 && y == 1.0f);
  be->destroy(be);
  return t_summary();
}
