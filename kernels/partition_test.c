/* The shard assignment: ranges tile the vector in order, are balanced and aligned, the
 * parser refuses what is not "I/K", and the description names split tensors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "kernels/partition.h"
#include "kernels/testing.h"

/* CHECK with the case it is about, printed when it fails; cond is evaluated once. */
#define CHECK_WHY(cond, ...)                                    \
  do {                                                          \
    int ok_ = (cond);                                           \
    CHECK(ok_);                                                 \
    if (!ok_) {                                                 \
      fprintf(stderr, "  %s: ", #cond);                         \
      fprintf(stderr, __VA_ARGS__);                             \
      fprintf(stderr, "\n");                                    \
    }                                                           \
  } while (0)

static void check_tiling(size_t n, int k) {
  size_t next = 0, min = (size_t)-1, max = 0;
  for (int i = 0; i < k; i++) {
    size_t lo, count;
    int rc = pst_partition_range(n, k, i, &lo, &count);
    CHECK_WHY(rc == 0, "n %zu k %d i %d: rc %d", n, k, i, rc);
    if (rc) return;
    CHECK_WHY(lo == next, "n %zu k %d: shard %d starts at %zu, not %zu", n, k, i, lo, next);
    CHECK_WHY(lo % PST_PARTITION_ALIGN == 0, "n %zu k %d: shard %d at %zu is unaligned", n, k, i, lo);
    next = lo + count;
    if (count < min) min = count;
    if (count > max) max = count;
  }
  CHECK_WHY(next == n, "n %zu k %d: the shards end at %zu", n, k, next);
  /* Balanced: sizes differ by less than one alignment unit plus the rounding of n / k. */
  CHECK_WHY(max - min <= 2 * PST_PARTITION_ALIGN, "n %zu k %d: sizes %zu..%zu", n, k, min, max);
}

int main(void) {
  size_t sizes[] = {10, 32, 64, 100, 1000, 235146, 1u << 20, 3000017};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (int k = 1; k <= 8; k++)
      if (k == 1 || sizes[s] / (size_t)k >= 2 * PST_PARTITION_ALIGN) check_tiling(sizes[s], k);
  check_tiling(235146, PST_MAX_SHARDS);

  size_t lo, count;
  CHECK_WHY(pst_partition_range(10, 1, 0, &lo, &count) == 0 && lo == 0 && count == 10, "k 1");
  CHECK_WHY(pst_partition_range(40, 2, 0, &lo, &count) < 0, "a vector too short for 2 shards");
  CHECK_WHY(pst_partition_range(1000, 2, 2, &lo, &count) < 0, "shard 2 of 2");
  CHECK_WHY(pst_partition_range(1000, 0, 0, &lo, &count) < 0, "0 shards");
  CHECK_WHY(pst_partition_range(100000, PST_MAX_SHARDS + 1, 0, &lo, &count) < 0, "too many shards");

  int i, k;
  CHECK_WHY(pst_partition_parse("1/3", &i, &k) == 0 && i == 1 && k == 3, "1/3");
  CHECK_WHY(pst_partition_parse("0/1", &i, &k) == 0 && i == 0 && k == 1, "0/1");
  const char *bad[] = {"", "1", "3/3", "-1/2", "1/-2", "1/0", "a/2", "1/2x", "1 /2", "+1/2",
                       "1/65", "99999999999999999999/2", "/2", "1/"};
  for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
    CHECK_WHY(pst_partition_parse(bad[b], &i, &k) < 0, "'%s' was accepted", bad[b]);

  /* The mlp preset split in two: the first dense kernel is cut, the rest whole. */
  pst_model m;
  char err[256], line[1024];
  CHECK_WHY(pst_model_load("mlp", &m, err, sizeof err) == 0, "mlp: %s", err);
  CHECK_WHY(pst_partition_range(m.n_params, 2, 0, &lo, &count) == 0, "mlp 0/2");
  pst_partition_describe(&m, lo, count, line, sizeof line);
  CHECK_WHY(strncmp(line, "dense/kernel[0:", 15) == 0, "mlp 0/2: %s", line);
  CHECK_WHY(pst_partition_range(m.n_params, 2, 1, &lo, &count) == 0, "mlp 1/2");
  pst_partition_describe(&m, lo, count, line, sizeof line);
  CHECK_WHY(strstr(line, "dense_1/kernel") && strstr(line, "dense/bias"), "mlp 1/2: %s", line);
  pst_partition_describe(&m, 0, m.n_params, line, sizeof line);
  CHECK_WHY(!strchr(line, '['), "mlp whole: %s", line);
  /* batchnorm's four tensors, named as checkpoints name them, cut like any other. */
  CHECK_WHY(pst_model_parse("input 4\ndense 3 relu\nbatchnorm\ndense 2 softmax\n", "s", &m, err,
                            sizeof err) == 0, "bn: %s", err);
  pst_partition_describe(&m, 0, m.n_params, line, sizeof line);
  CHECK_WHY(strcmp(line, "dense/kernel, dense/bias, batch_normalization/gamma, "
                         "batch_normalization/beta, batch_normalization/moving_mean, "
                         "batch_normalization/moving_variance, dense_1/kernel, dense_1/bias") == 0,
            "bn whole: %s", line);
  pst_partition_describe(&m, 20, 5, line, sizeof line); /* moving_mean [21, 24) */
  CHECK_WHY(strcmp(line, "batch_normalization/beta[2:3) of 3, batch_normalization/moving_mean, "
                         "batch_normalization/moving_variance[0:1) of 3") == 0,
            "bn part: %s", line);
  return t_summary();
}
