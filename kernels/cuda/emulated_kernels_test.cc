// The plain CUDA kernels of batch norm, the column sums and pooling, run on the CPU through
// kernels/cuda/emulate.h and compared with the CPU backend: the device code of
// reduce.cuh, norm_kernels.cuh and pool_kernels.cuh, unchanged, on grids of the launchers'
// shapes (the column sums' from pst_colsum_plan, with their barriers; the element-wise
// passes on small grids, so that their grid-stride loops go round). The launchers'
// sequences of passes (norm.cu) are repeated here as they are there. Also the column sums'
// grids at the largest shapes (2^31 - 1 rows, 4096 and 2^31 - 1 channels) against the
// launch limits, without running them. This shows the indexing, the barriers and the
// arithmetic on machines without a GPU; it does not show anything of a real device
// (cuda_parity_test does, on one).
#include "kernels/cuda/emulate.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

extern "C" {
#include "kernels/backend.h"
#include "kernels/testing.h"
}

#include "kernels/cuda/norm_kernels.cuh"
#include "kernels/cuda/pool_kernels.cuh"
#include "kernels/cuda/reduce.cuh"

namespace {

pst_backend *g_cpu;
uint64_t g_seed = 1;

std::vector<float> rand_floats(size_t n, double lo, double hi) {
  std::vector<float> v(n ? n : 1);
  t_fill(v.data(), n, g_seed++, lo, hi);
  return v;
}

double rel_err(const float *a, const float *ref, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    double e = (double)a[i] - ref[i];
    d += e * e;
    r += (double)ref[i] * ref[i];
  }
  return std::sqrt(d) / (std::sqrt(r) > 1e-20 ? std::sqrt(r) : 1.0);
}

void compare(const char *what, const char *tensor, const float *got, const float *ref, size_t n,
             double tol) {
  double e = rel_err(got, ref, n);
  CHECK(e <= tol);
  if (!(e <= tol)) fprintf(stderr, "  %s: %s: relative error %.3g > %.0e\n", what, tensor, e, tol);
}

// pst_colsum's two passes, emulated: the partial sums on its own grid with barriers, the
// final pass on a small grid.
template <int K, typename F, typename E>
void colsum(F f, E epilogue, size_t rows, int cols) {
  const pst_colsum_grid g = pst_colsum_plan(rows, cols);
  std::vector<double> part((size_t)g.chunks * K * (size_t)cols);
  double *p = part.data();
  pst_emulate(dim3(g.col_blocks, g.chunks), dim3(g.tile, g.lanes), true,
              [&] { pst_colsum_partial<K>(f, rows, cols, g.rows_per_chunk, p); });
  pst_emulate(dim3(2), dim3(32), false, [&] { pst_colsum_final<K>(p, g.chunks, cols, epilogue); });
}

// An element-wise pass on a grid much smaller than its data.
template <typename C>
void elementwise(C call) {
  pst_emulate(dim3(3), dim3(64), false, call);
}

struct plain_sum {
  const float *x;
  void operator()(size_t i, int, double *acc) const { acc[0] += x[i]; }
};
struct store_sum {
  double *out;
  void operator()(int col, const double *s) const { out[col] = s[0]; }
};

// Column sums against a direct sum in double, row by row.
void test_colsum(size_t rows, int cols) {
  std::vector<float> x = rand_floats(rows * (size_t)cols, -1, 1);
  std::vector<double> got((size_t)cols), want((size_t)cols, 0.0);
  colsum<1>(plain_sum{x.data()}, store_sum{got.data()}, rows, cols);
  double worst = 0;
  for (size_t r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) want[(size_t)c] += x[r * (size_t)cols + (size_t)c];
  for (int c = 0; c < cols; c++)
    worst = std::max(worst, std::fabs(got[(size_t)c] - want[(size_t)c]) /
                                std::max(1.0, std::fabs(want[(size_t)c])));
  CHECK(worst <= 1e-12);
  if (!(worst <= 1e-12)) fprintf(stderr, "  colsum %zu x %d: error %.3g\n", rows, cols, worst);
}

// The column sums' grid for every shape stays within the launch limits and covers the rows.
void test_plans() {
  const size_t rows[] = {1, 2, 255, 256, 2049, 65536, 86528, (1u << 24) + 1, 2147483647u};
  const int cols[] = {1, 2, 3, 31, 32, 33, 96, 1280, 4096, 65535, 2147483647};
  int bad = 0;
  for (size_t r : rows)
    for (int c : cols) {
      pst_colsum_grid g = pst_colsum_plan(r, c);
      int ok = g.tile >= 1 && g.tile <= 32 && (g.tile & (g.tile - 1)) == 0 &&
               g.tile * g.lanes == PST_COLSUM_THREADS && g.chunks >= 1 &&
               g.chunks <= PST_COLSUM_MAX_CHUNKS && g.col_blocks >= 1 &&
               (size_t)g.col_blocks * g.tile >= (size_t)c && g.col_blocks <= 2147483647u &&
               (size_t)g.chunks * g.rows_per_chunk >= r &&
               (size_t)(g.chunks - 1) * g.rows_per_chunk < r;
      if (!ok) {
        bad++;
        fprintf(stderr, "  plan %zu x %d: tile %u lanes %u blocks %u x %u, %zu rows each\n", r,
                c, g.tile, g.lanes, g.col_blocks, g.chunks, g.rows_per_chunk);
      }
    }
  CHECK(bad == 0);
}

// norm.cu's three entry points, pass for pass, against cpu_norm.c.
void test_batchnorm(int rows, int C, double offset) {
  char what[96];
  snprintf(what, sizeof what, "batchnorm %d x %d (offset %g)", rows, C, offset);
  const size_t n = (size_t)rows * (size_t)C;
  const float eps = 1e-3f, k = 0.005f;
  std::vector<float> x = rand_floats(n, offset - 1, offset + 2), dy = rand_floats(n, -1, 1);
  std::vector<float> gamma = rand_floats((size_t)C, 0.5, 1.5), beta = rand_floats((size_t)C, -0.5, 0.5);
  std::vector<float> moving = rand_floats(2 * (size_t)C, 0.2, 1.5);
  // The CPU backend's results.
  std::vector<float> y0(n), yi0(n), dx0(n), saved0(2 * (size_t)C), dmov0(2 * (size_t)C);
  std::vector<float> dg0((size_t)C), db0((size_t)C);
  int rc = g_cpu->batchnorm_forward_train(g_cpu, x.data(), gamma.data(), beta.data(), y0.data(),
                                          rows, C, eps, moving.data(), k, saved0.data(),
                                          dmov0.data());
  rc |= g_cpu->batchnorm_backward(g_cpu, x.data(), gamma.data(), saved0.data(), dy.data(),
                                  dx0.data(), dg0.data(), db0.data(), rows, C, eps);
  rc |= g_cpu->batchnorm_forward_infer(g_cpu, x.data(), gamma.data(), beta.data(), moving.data(),
                                       yi0.data(), rows, C, eps);
  CHECK(rc == 0);
  // The kernels', as pst_cuda_batchnorm_forward_train runs them.
  std::vector<double> coef(3 * (size_t)C);
  double *mean = coef.data(), *scale = mean + C, *shift = scale + C;
  std::vector<float> y(n), yi(n), dx(n), saved(2 * (size_t)C), dmov(2 * (size_t)C);
  std::vector<float> dg((size_t)C), db((size_t)C), dg1((size_t)C), db1((size_t)C);
  colsum<1>(sum_x{x.data()}, store_mean{mean, rows}, (size_t)rows, C);
  finish_statistics fin = {gamma.data(), beta.data(), moving.data(), mean,  scale, shift,
                           saved.data(), dmov.data(),   rows,          C,     eps,   k};
  colsum<1>(squared_deviation{x.data(), mean}, fin, (size_t)rows, C);
  elementwise([&] { bn_affine_kernel(x.data(), scale, shift, y.data(), n, C); });
  // pst_cuda_batchnorm_backward, with dx and without.
  double *g = coef.data(), *bx = g + C, *c0 = bx + C;
  finish_backward fb = {gamma.data(), saved.data(), dg.data(), db.data(), g, bx, c0, rows, C};
  colsum<2>(backward_terms{x.data(), dy.data(), saved.data(), C}, fb, (size_t)rows, C);
  elementwise([&] { bn_dx_kernel(x.data(), dy.data(), g, bx, c0, dx.data(), n, C); });
  finish_backward fb1 = {gamma.data(), saved.data(), dg1.data(), db1.data(), nullptr, bx, c0,
                         rows, C};
  colsum<2>(backward_terms{x.data(), dy.data(), saved.data(), C}, fb1, (size_t)rows, C);
  // pst_cuda_batchnorm_forward_infer.
  double *iscale = coef.data(), *ishift = iscale + C;
  elementwise([&] {
    bn_infer_coef_kernel(gamma.data(), beta.data(), moving.data(), iscale, ishift, C, eps);
  });
  elementwise([&] { bn_affine_kernel(x.data(), iscale, ishift, yi.data(), n, C); });
  // Double arithmetic on both sides: only the order of the sums differs.
  const double tol = 1e-6;
  compare(what, "y", y.data(), y0.data(), n, tol);
  compare(what, "saved", saved.data(), saved0.data(), 2 * (size_t)C, tol);
  compare(what, "dmoving mean", dmov.data(), dmov0.data(), (size_t)C, tol);
  compare(what, "dmoving var", dmov.data() + C, dmov0.data() + C, (size_t)C, tol);
  compare(what, "dx", dx.data(), dx0.data(), n, tol);
  compare(what, "dgamma", dg.data(), dg0.data(), (size_t)C, tol);
  compare(what, "dbeta", db.data(), db0.data(), (size_t)C, tol);
  compare(what, "dgamma without dx", dg1.data(), dg0.data(), (size_t)C, tol);
  compare(what, "dbeta without dx", db1.data(), db0.data(), (size_t)C, tol);
  compare(what, "y (inference)", yi.data(), yi0.data(), n, tol);
  // One row: the variance is 0 exactly, so its change is -moving * k, finite.
  if (rows == 1)
    for (int c = 0; c < C; c++) CHECK(dmov[(size_t)(C + c)] == (float)((0.0 - moving[(size_t)(C + c)]) * k));
}

// Keras geometry, as the parity tests build it.
pst_window_shape window(int n, int h, int w, int c, int k, int stride, int same) {
  pst_window_shape s = {};
  s.n = n, s.in_h = h, s.in_w = w, s.in_c = c, s.k_h = k, s.k_w = k;
  s.stride_h = s.stride_w = stride, s.out_c = c;
  auto dim = [&](int in, int *out, int *pad) {
    if (same) {
      *out = (in + stride - 1) / stride;
      int total = (*out - 1) * stride + k - in;
      *pad = total > 0 ? total / 2 : 0;
    } else {
      *out = (in - k) / stride + 1;
      *pad = 0;
    }
  };
  dim(h, &s.out_h, &s.pad_top);
  dim(w, &s.out_w, &s.pad_left);
  return s;
}

// Max pooling (forward exactly, backward exactly: the same first maximum, the same order of
// additions) and average pooling against cpu_pool.c; ties put several maxima in a window.
void test_pool(pst_window_shape s, int ties) {
  char what[96];
  snprintf(what, sizeof what, "pool n=%d %dx%dx%d k=%d s=%d pad=%d,%d%s", s.n, s.in_h, s.in_w,
           s.in_c, s.k_h, s.stride_h, s.pad_top, s.pad_left, ties ? " ties" : "");
  const size_t nx = (size_t)s.n * s.in_h * s.in_w * s.in_c, ny = (size_t)s.n * s.out_h * s.out_w * s.out_c;
  std::vector<float> x = rand_floats(nx, -1, 1), dy = rand_floats(ny, -1, 1);
  for (size_t i = 0; ties && i < nx; i++) x[i] = std::floor(x[i] * 2.0f) / 2.0f;
  std::vector<float> y0(ny), dx0(nx), a0(ny), da0(nx), y(ny), dx(nx), a(ny), da(nx);
  int rc = g_cpu->maxpool_forward(g_cpu, &s, x.data(), y0.data());
  rc |= g_cpu->maxpool_backward(g_cpu, &s, x.data(), y0.data(), dy.data(), dx0.data());
  rc |= g_cpu->avgpool_forward(g_cpu, &s, x.data(), a0.data());
  rc |= g_cpu->avgpool_backward(g_cpu, &s, dy.data(), da0.data());
  CHECK(rc == 0);
  elementwise([&] { maxpool_forward_kernel(s, x.data(), y.data(), ny); });
  elementwise([&] { maxpool_backward_kernel(s, x.data(), y.data(), dy.data(), dx.data(), nx); });
  elementwise([&] { avgpool_forward_kernel(s, x.data(), a.data(), ny); });
  elementwise([&] { avgpool_backward_kernel(s, dy.data(), da.data(), nx); });
  CHECK(memcmp(y.data(), y0.data(), ny * 4) == 0);
  CHECK(memcmp(dx.data(), dx0.data(), nx * 4) == 0);
  if (memcmp(dx.data(), dx0.data(), nx * 4) != 0) compare(what, "maxpool dx", dx.data(), dx0.data(), nx, 0);
  compare(what, "avgpool y", a.data(), a0.data(), ny, 1e-6);
  compare(what, "avgpool dx", da.data(), da0.data(), nx, 1e-6);
}

}  // namespace

int main() {
  CHECK(pst_cpu_backend_create(1, &g_cpu) == 0);
  if (g_cpu == nullptr) return t_summary();
  test_plans();
  test_colsum(1, 1);
  test_colsum(1, 4096);
  test_colsum(37, 33);
  test_colsum(5000, 3);
  test_colsum(20003, 1);
  test_batchnorm(1, 5, 0.0);
  test_batchnorm(1, 1, 0.0);
  test_batchnorm(32, 10, 0.0);
  test_batchnorm(37, 33, 0.0);
  test_batchnorm(500, 7, 50.0);
  test_batchnorm(3, 300, 0.0);
  test_batchnorm(9000, 2, 1.0);
  test_pool(window(3, 8, 8, 4, 2, 2, 0), 0);
  test_pool(window(2, 7, 7, 3, 2, 2, 1), 0);
  test_pool(window(2, 9, 9, 3, 3, 2, 1), 1);
  test_pool(window(3, 8, 8, 5, 2, 2, 0), 1);
  test_pool(window(1, 6, 6, 2, 3, 1, 1), 1);
  test_pool(window(2, 5, 5, 7, 5, 1, 0), 0); /* global: one window over the map */
  g_cpu->destroy(g_cpu);
  return t_summary();
}
