/* The harness the CUDA backend's tests share: the backend under test and the CPU reference,
 * a skip without a usable GPU, and comparisons to a relative error. Header-only, like
 * kernels/testing.h, whose pass and fail counters it uses.
 *
 * Without a usable GPU (no driver, no device, library not loadable) a test prints
 * "SKIP: <reason>" and passes, unless PSTRAIN_REQUIRE_GPU=1 (for GPU CI, where a skip would
 * hide a broken build). PSTRAIN_PARITY_DEVICE overrides the device compared with the CPU
 * ("cuda:1", or "cpu" to exercise the harness itself on a machine without GPU).
 * PSTRAIN_PARITY_SMALL=1 leaves out the cases that need gigabytes (and, for the presets,
 * runs batch 2 instead of 256): what `pstrain gpu-check --device cpu` runs, to try the
 * plumbing in seconds. */
#ifndef PSTRAIN_KERNELS_CUDA_PARITY_H
#define PSTRAIN_KERNELS_CUDA_PARITY_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/device.h"
#include "kernels/testing.h"

#define PST_PARITY_RTOL 1e-4

/* The device under test: PSTRAIN_PARITY_DEVICE, or cuda:0. */
static inline const char *pst_parity_device(void) {
  const char *spec = getenv("PSTRAIN_PARITY_DEVICE");
  return spec && spec[0] ? spec : "cuda:0";
}

/* Whether to leave out the large cases (PSTRAIN_PARITY_SMALL=1); says so once. */
static inline int pst_parity_small(void) {
  const char *v = getenv("PSTRAIN_PARITY_SMALL");
  int small = v && strcmp(v, "1") == 0;
  static int said;
  if (small && !said++) printf("PSTRAIN_PARITY_SMALL=1: the large cases are left out\n");
  return small;
}

/* Opens the backend under test and the CPU backend. 0: both are open; 1: no usable GPU,
 * the skip said on stdout (the test passes); -1: a failure said on stderr. */
static inline int pst_parity_open(pst_backend **dut, pst_backend **ref) {
  const char *spec = pst_parity_device();
  const char *req = getenv("PSTRAIN_REQUIRE_GPU");
  char note[512];
  if (pst_device_open(spec, 0, 1, dut, note, sizeof note) != 0) {
    if (req && strcmp(req, "1") == 0) {
      fprintf(stderr, "FAIL: PSTRAIN_REQUIRE_GPU=1 but %s\n", note);
      return -1;
    }
    printf("SKIP: %s\n", note);
    return 1;
  }
  printf("%s\n", note);
  if (pst_cpu_backend_create(1, ref) != 0) {
    fprintf(stderr, "cannot create the CPU backend\n");
    return -1;
  }
  return 0;
}

/* Why an operation of b failed: its backend's reason (backend.h, last_error), else the
 * code's text. */
static inline const char *pst_parity_reason(pst_backend *b, int rc) {
  const char *why = b->last_error ? b->last_error(b) : NULL;
  return why && why[0] ? why : strerror(rc < 0 ? -rc : rc);
}

static inline float *pst_parity_zeros(size_t n) {
  float *p = calloc(n ? n : 1, sizeof(float));
  if (!p) exit(1);
  return p;
}

/* ||a - ref|| / ||ref||, with an absolute floor so that all-zero references compare. */
static inline double pst_parity_rel_err(const float *a, const float *ref, size_t n) {
  double d = 0.0, r = 0.0;
  for (size_t i = 0; i < n; i++) {
    double e = (double)a[i] - (double)ref[i];
    d += e * e;
    r += (double)ref[i] * ref[i];
  }
  return sqrt(d) / (sqrt(r) > 1e-20 ? sqrt(r) : 1.0);
}

/* Checks got against ref to PST_PARITY_RTOL, saying which tensor of what on a mismatch. */
static inline void pst_parity_compare(const char *what, const char *tensor, const float *got,
                                      const float *ref, size_t n) {
  double e = pst_parity_rel_err(got, ref, n);
  int ok = e <= PST_PARITY_RTOL && !isnan(e);
  CHECK(ok);
  if (!ok)
    fprintf(stderr, "  %s: %s: relative error %.3g > %.0e\n", what, tensor, e, PST_PARITY_RTOL);
}

#endif
