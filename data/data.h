/* Training data: IDX files (the MNIST format), gzip or plain, read through zlib. */
#ifndef PSTRAIN_DATA_DATA_H
#define PSTRAIN_DATA_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common/shard.h"

#define PST_DATA_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

typedef struct {
  int n;            /* samples */
  int rows, cols;   /* image geometry */
  int channels;     /* 1 (IDX, grayscale) or 3 (RGB); features = rows * cols * channels */
  float *images;    /* [n, rows, cols, channels], pixels scaled to [0, 1] */
  int32_t *labels;  /* [n], 0..classes-1 (0..9 for IDX) */
} pst_dataset;

/* Loads an IDX image file (magic 0x00000803) and its label file (0x00000801).
 * On error returns a negative code and writes one line naming the file and the problem,
 * e.g. "/x/train-images-idx3-ubyte.gz: truncated: expected 47040016 bytes, got 1000". */
int pst_data_load(const char *images_path, const char *labels_path, pst_dataset *out,
                  char *err, size_t errlen);
/* Loads "train" or "t10k" from dir, accepting the .gz or the plain file names. */
int pst_data_load_split(const char *dir, const char *split, pst_dataset *out, char *err,
                        size_t errlen);
void pst_data_free(pst_dataset *d);

/* Shards: pst_data_shard_range (common/shard.h), shared with the ps. */

/* A small seeded PRNG (xoshiro256**), so shuffles are the same on every machine. */
typedef struct { uint64_t s[4]; } pst_rng;
void pst_rng_seed(pst_rng *r, uint64_t seed);
uint64_t pst_rng_next(pst_rng *r);
/* Fisher-Yates shuffle of idx[n]. */
void pst_rng_shuffle(pst_rng *r, int32_t *idx, int n);
/* The sample order of epoch `epoch` (1-based) over n samples when the ps hands out the data
 * (issue 28, ps/train/handout.h): a permutation of [0, n) that depends on the job seed and the
 * epoch alone, so that the ps's ranges of positions name the same samples on every worker. */
void pst_epoch_order(uint64_t seed, uint32_t epoch, int32_t *idx, int n);

/* Gathers the samples idx[0..batch) into x[batch, features] and y[batch]. */
void pst_data_gather(const pst_dataset *d, const int32_t *idx, int batch, float *x, int32_t *y);

#endif
