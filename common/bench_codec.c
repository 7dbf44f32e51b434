/* `bazel run //common:bench_codec`: how fast each path of common/codec.h encodes (with error
 * feedback, as a worker's push) and decodes in place (as the ps's), over 4M values (16 MiB of
 * float32, more than the caches hold), in GB/s of float32 handled. Best of 5 rounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/codec.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void) {
  enum { N = 4 << 20, ROUNDS = 5 };
  float *x = malloc(N * sizeof *x), *r = calloc(N, sizeof *r), *d = malloc(N * sizeof *d);
  uint16_t *o = malloc(N * sizeof *o);
  if (!x || !r || !d || !o) return 1;
  for (size_t i = 0; i < N; i++) x[i] = (float)((int)(i * 2654435761u % 20001) - 10000) * 1e-7f;
  static const char *const isa_names[] = {"scalar", "AVX2+F16C", "AVX-512"};
  printf("| path | encoding | encode with feedback GB/s | decode in place GB/s |\n|---|---|---|---|\n");
  for (int isa = PST_ISA_SCALAR; isa <= PST_ISA_AVX512; isa++) {
    if (pst_codec_use((pst_isa)isa) < 0) continue;
    for (int e = PST_ENC_FP16; e <= PST_ENC_BF16; e++) {
      double enc = 1e9, dec = 1e9;
      for (int k = 0; k < ROUNDS; k++) {
        double t0 = now();
        pst_enc_encode((pst_enc)e, x, r, o, N);
        double t1 = now();
        memcpy(d, o, (size_t)N * 2);
        double t2 = now();
        pst_enc_decode_inplace((pst_enc)e, d, N);
        double t3 = now();
        if (t1 - t0 < enc) enc = t1 - t0;
        if (t3 - t2 < dec) dec = t3 - t2;
      }
      printf("| %s | %s | %.2f | %.2f |\n", isa_names[isa], pst_enc_name((pst_enc)e),
             N * 4.0 / enc / 1e9, N * 4.0 / dec / 1e9);
    }
  }
  /* Top-k with feedback over one mlp-sized chunk (200,960 values), as a worker's push. */
  {
    enum { M = 200960 };
    uint32_t *scratch = malloc(M * sizeof *scratch);
    uint8_t *pairs = malloc(M * 4 + 8);
    if (!scratch || !pairs) return 1;
    memset(r, 0, M * sizeof *r);
    for (int f = 0; f < 2; f++) {
      double fraction = f ? 0.1 : 0.01, best = 1e9;
      for (int k = 0; k < ROUNDS; k++) {
        double t0 = now();
        pst_topk_encode(x, r, M, pst_topk_k(fraction, M), scratch, pairs);
        double t1 = now();
        if (t1 - t0 < best) best = t1 - t0;
      }
      printf("| top-k %g, 200,960 values | encode with feedback: %.2f ms (%.2f GB/s) |\n",
             fraction, best * 1e3, M * 4.0 / best / 1e9);
    }
    free(scratch);
    free(pairs);
  }
  /* An int8 push of an mlp's 235,146 values with feedback, on the scalar path and the best;
   * a delta pull's chunk over as many, as the ps makes it for each worker, and as the worker
   * adds it. */
  {
    enum { M = 235146 };
    uint8_t *p8 = malloc(M + 4);
    if (!p8) return 1;
    for (int best = 0; best < 2; best++) {
      pst_codec_use(best ? PST_ISA_BEST : PST_ISA_SCALAR);
      double t = 1e9;
      for (int k = 0; k < ROUNDS; k++) {
        double t0 = now();
        pst_int8_encode(x, r, M, p8);
        double t1 = now();
        if (t1 - t0 < t) t = t1 - t0;
      }
      printf("| int8 push, 235,146 values, %s path | encode with feedback: %.3f ms (%.2f GB/s) |\n",
             best ? "best" : "scalar", t * 1e3, M * 4.0 / t / 1e9);
    }
    free(p8);
  }
  {
    enum { M = 235146 };
    float *held = calloc(M, sizeof *held);
    uint8_t *q = malloc(M + 4);
    if (!held || !q) return 1;
    double best = 1e9, add = 1e9;
    for (int k = 0; k < ROUNDS; k++) {
      double t0 = now();
      pst_int8_delta(x, held, M, q);
      double t1 = now();
      pst_int8_add(q, M + 4, d, M);
      double t2 = now();
      if (t1 - t0 < best) best = t1 - t0;
      if (t2 - t1 < add) add = t2 - t1;
    }
    printf("| delta pull, 235,146 values | ps: %.3f ms (%.2f GB/s); worker's add: %.3f ms |\n",
           best * 1e3, M * 4.0 / best / 1e9, add * 1e3);
    free(held);
    free(q);
  }
  free(x);
  free(r);
  free(d);
  free(o);
  return 0;
}
