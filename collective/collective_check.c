/* Checks collective.h over real ranks (run by mpirun; tests/collective_test.sh): a broadcast,
 * a blocking and a non-blocking sum of values whose float sums are exact, a gather, and the
 * description with the algorithm asked for (argv[1], default auto). Prints one line per
 * rank; exit 0 when every check held on this rank.
 *
 * argv[2] "nccl": the float sums through NCCL, each rank on the GPU of its rank's number
 * ("nccl-same": every rank on GPU 0, which NCCL cannot do and pst_coll_use_nccl refuses).
 * Where NCCL cannot be used (no library, no GPU, one GPU for two ranks) every rank prints
 * "NCCL refused: REASON", the same reason, and exits 3: no rank is left waiting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/collective.h"

int main(int argc, char **argv) {
  char err[256];
  pst_coll_alg alg = PST_COLL_ALG_AUTO;
  if (argc > 1 && pst_coll_alg_parse(argv[1], &alg) < 0) {
    fprintf(stderr, "collective_check: '%s' is no algorithm\n", argv[1]);
    return 2;
  }
  pst_coll *c;
  if (pst_coll_init(alg, &c, err, sizeof err) < 0) {
    fprintf(stderr, "collective_check: %s\n", err);
    return 1;
  }
  int rank = pst_coll_rank(c), size = pst_coll_size(c), bad = 0;
  enum { N = 100003 }; /* odd, and over Open MPI's segment sizes */
  /* a and b in one range, so that NCCL stages both (the started sums at their offsets). */
  float *ab = malloc(2 * N * sizeof *ab), *a = ab, *b = ab + N;
  if (argc > 2 && !strncmp(argv[2], "nccl", 4) &&
      pst_coll_use_nccl(c, strcmp(argv[2], "nccl-same") ? rank : 0, ab, 2 * N) < 0) {
    printf("rank %d of %d: NCCL refused: %s\n", rank, size, pst_coll_error(c));
    fflush(stdout);
    free(ab);
    pst_coll_finalize(c);
    return 3;
  }
  for (int i = 0; i < N; i++) a[i] = rank == 0 ? (float)(i % 977) : -1.0f;
  if (pst_coll_bcast_f32(c, a, N, 0) < 0) bad++;
  for (int i = 0; i < N; i++) bad += a[i] != (float)(i % 977);
  /* Small integers: every order of summing gives the same float. */
  for (int i = 0; i < N; i++) a[i] = (float)(rank + 1) * (float)(i % 101), b[i] = a[i];
  if (pst_coll_allreduce_f32(c, a, N) < 0 || pst_coll_iallreduce_f32(c, b, N / 2) < 0 ||
      pst_coll_iallreduce_f32(c, b + N / 2, N - N / 2) < 0)
    bad++;
  pst_coll_poke(c);
  if (pst_coll_wait_all(c) < 0) bad++;
  float ranks = (float)size * (float)(size + 1) / 2.0f;
  for (int i = 0; i < N; i++) bad += a[i] != ranks * (float)(i % 101) || b[i] != a[i];
  uint64_t all[256];
  if (size > 256 || pst_coll_allgather_u64(c, 1000u + (uint64_t)rank, all) < 0) bad++;
  for (int r = 0; r < size && r < 256; r++) bad += all[r] != 1000u + (uint64_t)r;
  double d[2] = {1.5, (double)rank};
  if (pst_coll_allreduce_f64(c, d, 2) < 0) bad++;
  bad += d[0] != 1.5 * size || d[1] != (double)size * (size - 1) / 2.0;
  char desc[512];
  pst_coll_describe(c, N * sizeof(float), desc, sizeof desc);
  printf("rank %d of %d: %s; %d wrong\n", rank, size, desc, bad);
  fflush(stdout);
  free(ab);
  pst_coll_finalize(c);
  return bad ? 1 : 0;
}
