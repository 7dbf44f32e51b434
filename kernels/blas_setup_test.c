/* The OpenBLAS kernel choice (feature sets in, core name out), a user's OPENBLAS_CORETYPE
 * left alone, and denormals flushed in the CPU backend's threads, OpenBLAS's pool included. */
#include <stdlib.h>
#include <string.h>

#include "common/fpenv.h"
#include "kernels/backend.h"
#include "kernels/blas_setup.h"
#include "kernels/testing.h"

static int same(const char *a, const char *b) {
  return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static void test_pick(void) {
  pst_cpu_features none = {0}, avx = {0}, avx2 = {.avx2 = 1, .fma = 1},
                   avx512 = {.avx2 = 1, .fma = 1, .avx512f = 1, .avx512bw = 1, .avx512dq = 1,
                             .avx512vl = 1},
                   knl = {.avx2 = 1, .fma = 1, .avx512f = 1}; /* AVX-512F alone: Xeon Phi */
  char why[160];
  /* The case that started it: an AVX-512 VM whose model OpenBLAS did not know. */
  CHECK(same(pst_blas_pick_core(&avx512, "Prescott", why, sizeof why), "SkylakeX"));
  CHECK(strstr(why, "Prescott") != NULL && strstr(why, "AVX-512") != NULL);
  CHECK(same(pst_blas_pick_core(&avx512, "Sandybridge", NULL, 0), "SkylakeX"));
  CHECK(same(pst_blas_pick_core(&avx512, "Haswell", NULL, 0), "SkylakeX"));
  CHECK(same(pst_blas_pick_core(&avx512, "Zen", NULL, 0), "SkylakeX"));
  /* OpenBLAS's own AVX-512 choices stand. */
  CHECK(same(pst_blas_pick_core(&avx512, "SkylakeX", NULL, 0), NULL));
  CHECK(same(pst_blas_pick_core(&avx512, "Cooperlake", why, sizeof why), NULL));
  CHECK(strstr(why, "own choice") != NULL);
  CHECK(same(pst_blas_pick_core(&avx512, "SapphireRapids", NULL, 0), NULL));
  /* AVX2 machines: Haswell kernels unless OpenBLAS already has AVX2 ones. */
  CHECK(same(pst_blas_pick_core(&avx2, "Prescott", NULL, 0), "Haswell"));
  CHECK(same(pst_blas_pick_core(&avx2, "Core2", NULL, 0), "Haswell"));
  CHECK(same(pst_blas_pick_core(&avx2, "Zen", NULL, 0), NULL));
  CHECK(same(pst_blas_pick_core(&avx2, "Haswell", NULL, 0), NULL));
  CHECK(same(pst_blas_pick_core(&knl, "Prescott", NULL, 0), "Haswell"));
  /* Nothing better to offer: OpenBLAS's choice stands, whatever it is. */
  CHECK(same(pst_blas_pick_core(&none, "Prescott", why, sizeof why), NULL));
  CHECK(strstr(why, "neither") != NULL);
  CHECK(same(pst_blas_pick_core(&avx, "Sandybridge", NULL, 0), NULL));
  CHECK(same(pst_blas_pick_core(&avx2, NULL, NULL, 0), "Haswell"));
}

/* A user's OPENBLAS_CORETYPE wins: nothing is set and nothing runs again. */
static void test_user_env(void) {
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  char note[256];
  CHECK(pst_blas_choose(note, sizeof note) == 0);
  CHECK(strcmp(getenv("OPENBLAS_CORETYPE"), "Prescott") == 0);
  CHECK(strstr(note, "as OPENBLAS_CORETYPE=Prescott asks") != NULL);
  unsetenv("OPENBLAS_CORETYPE");
}

/* The tests' stand-in for OpenBLAS's choice: on a CPU with AVX2 and FMA, "Prescott" makes
 * pstrain set OPENBLAS_CORETYPE and ask to run again, and the process run again says the
 * kernels are pstrain's choice; a user's OPENBLAS_CORETYPE still wins over the stand-in. */
static void test_stand_in(void) {
  char note[320];
  setenv(PST_BLAS_TEST_CORE_ENV, "Prescott", 1);
  setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  CHECK(pst_blas_choose(note, sizeof note) == 0);
  CHECK(strcmp(getenv("OPENBLAS_CORETYPE"), "Haswell") == 0);
  unsetenv("OPENBLAS_CORETYPE");
  pst_cpu_features f;
  pst_cpu_features_detect(&f);
  const char *want = pst_blas_pick_core(&f, "Prescott", NULL, 0);
  int rc = pst_blas_choose(note, sizeof note);
  if (want == NULL) {
    /* Nothing better than Prescott's kernels runs here: the stand-in changes nothing. */
    fprintf(stderr, "no AVX2 with FMA here: the stand-in's re-run is not exercised\n");
    CHECK(rc == 0 && getenv("OPENBLAS_CORETYPE") == NULL);
  } else {
    CHECK(rc == PST_BLAS_REEXEC);
    CHECK(getenv("OPENBLAS_CORETYPE") && strcmp(getenv("OPENBLAS_CORETYPE"), want) == 0);
    CHECK(strstr(note, PST_BLAS_TEST_CORE_ENV " stands in") != NULL);
    /* As in the process run again, which finds the variable pstrain set. */
    CHECK(pst_blas_choose(note, sizeof note) == PST_BLAS_CHOSEN);
    CHECK(strstr(note, "set by pstrain") != NULL && strstr(note, "Prescott, as ") != NULL);
    unsetenv("OPENBLAS_CORETYPE");
  }
  unsetenv(PST_BLAS_TEST_CORE_ENV);
}

/* By its bits: with DAZ on, a comparison reads a denormal as zero. */
static int is_denormal(float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return (u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0;
}

/* y = x . w with x all denormal and w all ones: every output is a sum of denormals, 0 in a
 * thread that flushes them and a denormal (or a tiny normal) in one that does not. The GEMM
 * is large enough for OpenBLAS to split it over its threads, so a pool thread made before
 * main (with the default environment) would leave non-zero rows. */
static void test_threads_flush(void) {
  pst_backend *be = NULL;
  CHECK(pst_cpu_backend_create(2, &be) == 0);
  if (be == NULL) return;
  CHECK(pst_fp_flushing());
  enum { N = 512 };
  float *x = malloc(sizeof(float) * N * N), *w = malloc(sizeof(float) * N * N),
        *y = malloc(sizeof(float) * N * N), *bias = calloc(N, sizeof(float));
  for (int i = 0; i < N * N; i++) x[i] = 1e-39f, w[i] = 1.0f;
  CHECK(is_denormal(x[0]));
  CHECK(be->dense_forward(be, x, w, bias, y, N, N, N) == 0);
  int nonzero = 0;
  for (int i = 0; i < N * N; i++) nonzero += y[i] != 0.0f;
  if (nonzero) fprintf(stderr, "%d of %d outputs are not zero\n", nonzero, N * N);
  CHECK(nonzero == 0);
  free(x);
  free(w);
  free(y);
  free(bias);
  be->destroy(be);
}

int main(void) {
  test_pick();
  test_user_env();
  test_stand_in();
  test_threads_flush();
  return t_summary();
}
