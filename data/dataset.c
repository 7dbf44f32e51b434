/* Format detection and the common steps after loading (resizing, statistics). */
#include "data/dataset.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "data/cifar.h"
#include "data/imagefolder.h"

int pst_data_flags_parse(const pst_data_flags *f, pst_image_opts *o, char *err, size_t errlen) {
  memset(o, 0, sizeof *o);
  if (pst_image_parse_size(f->image_size, &o->height, &o->width, err, errlen) < 0 ||
      pst_image_parse_augment(f->augment, &o->flip, &o->crop_pad, err, errlen) < 0 ||
      pst_image_parse_normalize(f->normalize, &o->normalize, err, errlen) < 0)
    return -EINVAL;
  if (!(f->test_fraction >= 0 && f->test_fraction < 1)) {
    pst_image_err(err, errlen, "--test-fraction: %g is not in [0, 1)", f->test_fraction);
    return -EINVAL;
  }
  o->test_fraction = f->test_fraction;
  o->split_seed = (uint64_t)f->split_seed;
  return 0;
}

static int has_idx(const char *dir) {
  char path[PATH_MAX];
  struct stat st;
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
  if (stat(path, &st) == 0) return 1;
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
  return stat(path, &st) == 0;
}

int pst_dataset_open(const char *dir, const pst_image_opts *o, pst_dataset *train,
                     pst_dataset *test, float *mean, float *std, char *desc, size_t desclen,
                     char *err, size_t errlen) {
  int rc, classes = 0;
  pst_cifar_kind cifar = PST_CIFAR_NONE;
  memset(train, 0, sizeof *train);
  memset(test, 0, sizeof *test);
  desc[0] = '\0';
  if (!has_idx(dir) && (cifar = pst_cifar_detect(dir)) != PST_CIFAR_NONE) {
    rc = pst_cifar_load(dir, cifar, 1, train, err, errlen);
    if (rc == 0) rc = pst_cifar_load(dir, cifar, 0, test, err, errlen);
    snprintf(desc, desclen, "%s binary files in %s", cifar == PST_CIFAR_10 ? "CIFAR-10" : "CIFAR-100",
             dir);
  } else if (!has_idx(dir) && pst_imagefolder_detect(dir)) {
    rc = pst_imagefolder_load(dir, o, train, test, &classes, desc, desclen, err, errlen);
  } else {
    rc = pst_data_load_split(dir, "train", train, err, errlen);
    if (rc == 0) rc = pst_data_load_split(dir, "t10k", test, err, errlen);
    snprintf(desc, desclen, "IDX files in %s", dir);
  }
  if (rc == 0) rc = pst_data_resize(train, o->height, o->width, dir, err, errlen);
  if (rc == 0) rc = pst_data_resize(test, o->height, o->width, dir, err, errlen);
  if (rc < 0) {
    pst_data_free(train);
    pst_data_free(test);
    return rc;
  }
  for (int k = 0; k < 3; k++) {
    mean[k] = 0.0f;
    std[k] = 1.0f;
  }
  if (o->normalize) pst_data_channel_stats(train, mean, std);
  size_t len = strlen(desc);
  if (classes == 0) /* the image folder's line has its counts already */
    snprintf(desc + len, desclen - len, ": %d training and %d test images of %dx%dx%d", train->n,
             test->n, train->rows, train->cols, train->channels);
  if (o->normalize) {
    /* One mean and one std per channel the data has. */
    const char *what[2] = {", normalised by the training set's mean", " and std"};
    const float *v[2] = {mean, std};
    for (int i = 0; i < 2; i++)
      for (int k = -1; k < train->channels; k++) {
        len = strlen(desc);
        if (k < 0)
          snprintf(desc + len, desclen - len, "%s", what[i]);
        else
          snprintf(desc + len, desclen - len, " %.4f", v[i][k]);
      }
  }
  return 0;
}
