/* The worker's data sets, whatever their format, and the data flags.
 *
 * --data-dir is read as, in this order: IDX files (train-images-idx3-ubyte[.gz] and the
 * rest, Fashion-MNIST's format, the default), CIFAR-10 (data_batch_1.bin), CIFAR-100
 * (train.bin), an image folder (sub-folders, data/imagefolder.h). A directory with none
 * of them is read as IDX, so the error names the IDX file that is missing. */
#ifndef PSTRAIN_DATA_DATASET_H
#define PSTRAIN_DATA_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "data/data.h"
#include "data/imageops.h"

/* The data flags as the option table holds them (strings where a format is parsed). */
typedef struct {
  char image_size[PST_CFG_STR_MAX];
  char augment[PST_CFG_STR_MAX];
  char normalize[PST_CFG_STR_MAX];
  double test_fraction;
  int64_t split_seed;
} pst_data_flags;

/* The data flags' entries of an option table (worker/main.c). */
#define PST_DATA_OPTS(f)                                                                       \
  PST_OPT("image-size", PST_CFG_STRING, (f).image_size, "",                                    \
          "resize every image to HxW, bilinear (e.g. 32x32; default: the data's own size)", 0, \
          0),                                                                                  \
  PST_OPT("augment", PST_CFG_STRING, (f).augment, "none",                                      \
          "training augmentation: flip, crop:P (P pixels of zero padding) or both, "           \
          "comma-separated (e.g. flip,crop:4), or none", 0, 0),                                \
  PST_OPT("normalize", PST_CFG_STRING, (f).normalize, PST_IMAGE_DEFAULT_NORMALIZE,             \
          "none (pixels in [0, 1]) or mean-std (per channel, the training set's)", 0, 0),      \
  PST_OPT("test-fraction", PST_CFG_DOUBLE, &(f).test_fraction,                                 \
          PST_IMAGE_DEFAULT_TEST_FRACTION,                                                     \
          "image folders without train/ and test/: the share of each class held out", 0, 0),   \
  PST_OPT("split-seed", PST_CFG_INT, &(f).split_seed, PST_IMAGE_DEFAULT_SPLIT_SEED,            \
          "image folders: seed of the train/test split", 0, INT64_MAX)

/* Checks the flags and turns them into options; -EINVAL with one line on a bad value. */
int pst_data_flags_parse(const pst_data_flags *f, pst_image_opts *o, char *err, size_t errlen);

/* Loads dir's training and test sets in whichever format it holds, resized to the options'
 * size, and their per-channel statistics when normalising (mean and std get 3 floats; 0 and
 * 1 otherwise). desc gets a one-line summary for the log. */
int pst_dataset_open(const char *dir, const pst_image_opts *o, pst_dataset *train,
                     pst_dataset *test, float *mean, float *std, char *desc, size_t desclen,
                     char *err, size_t errlen);

#endif
