/* Image data beyond IDX: the worker's data options, bilinear resizing, per-channel
 * normalisation, training augmentation, and the preparation of one batch from a data set.
 *
 * Samples are stored as floats in [0, 1], H x W x C per sample (NHWC, the layout of the
 * model's input layer "input HxWxC"), at the size the options ask for and with the data's
 * own channels (1 for grayscale, 3 for RGB). Turning 1 channel into 3, normalising and
 * augmenting happen per batch (pst_batch_fill), on the prefetch thread, so a grayscale
 * set is never stored three times over and the model's wishes (known only after WELCOME)
 * need no reload. */
#ifndef PSTRAIN_DATA_IMAGEOPS_H
#define PSTRAIN_DATA_IMAGEOPS_H

#include <stddef.h>
#include <stdint.h>

#include "data/data.h"

#define PST_IMAGE_MAX_SIDE 4096   /* --image-size and decoded images, per side */
#define PST_AUGMENT_MAX_PAD 64    /* crop:P */
/* The most floats a loaded set may hold (16 GiB), checked before allocating. */
#define PST_IMAGE_MAX_FLOATS ((size_t)1 << 32)

/* The defaults of the worker's data flags, in one place (worker/main.c's option table
 * and the tests use these). */
#define PST_IMAGE_DEFAULT_TEST_FRACTION "0.2"
#define PST_IMAGE_DEFAULT_SPLIT_SEED "42"
#define PST_IMAGE_DEFAULT_NORMALIZE "none"

typedef struct {
  int height, width;     /* --image-size HxW; 0 x 0: each format's own size */
  double test_fraction;  /* image folders without train/ and test/: share held out */
  uint64_t split_seed;   /* image folders: the seeded train/test split */
  int normalize;         /* 0: pixels in [0, 1]; 1: per channel (x - mean) / std of the training set */
  int flip;              /* --augment flip: random horizontal flips (training only) */
  int crop_pad;          /* --augment crop:P: random crops of the image padded by P zeros */
} pst_image_opts;

/* Writes one error line into err (which may be NULL) for the data modules. */
void pst_image_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "HxW" (e.g. "32x32"), or "" for none. */
int pst_image_parse_size(const char *text, int *height, int *width, char *err, size_t errlen);
/* "flip,crop:4", "crop:4", "flip", "none" or "". */
int pst_image_parse_augment(const char *text, int *flip, int *crop_pad, char *err, size_t errlen);
/* "none" or "mean-std". */
int pst_image_parse_normalize(const char *text, int *normalize, char *err, size_t errlen);

/* Bilinear resize of one image src[sh, sw, c] into dst[dh, dw, c], with half-pixel
 * centres (TensorFlow 2's tf.image.resize, OpenCV's INTER_LINEAR): the source coordinate
 * of output pixel x is (x + 0.5) * sw / dw - 0.5, clamped to the image. */
void pst_resize_bilinear(const float *src, int sh, int sw, int c, float *dst, int dh, int dw);
/* Resizes every sample of d to h x w in place (a new buffer); nothing when already so. */
int pst_data_resize(pst_dataset *d, int h, int w, const char *name, char *err, size_t errlen);
/* Per-channel mean and standard deviation over every pixel of d (sums in double, in one
 * fixed order, so every worker computes the same bits). std is at least 1e-6. */
void pst_data_channel_stats(const pst_dataset *d, float *mean, float *std);

/* How batches are made from one data set for one model. */
typedef struct {
  const pst_dataset *data;  /* samples [n, h, w, data->channels] */
  int out_c;                /* channels the model takes: data->channels, or 3 from 1 */
  float mean[3], inv_std[3];/* per data channel; 0 and 1 when not normalising */
  int flip, crop_pad;       /* augmentation of training batches */
  uint64_t seed;            /* the job's seed */
  int index;                /* the worker's index */
} pst_batch_prep;

/* Checks that data (h x w x c images) fits the model's input layer in_h x in_w x in_c
 * (or a flat input of input_size floats) and fills p. Grayscale data goes to a model that
 * wants 3 channels by repeating the channel. On a mismatch: -EINVAL and one line, e.g.
 * "the model takes 32x32x3 images but /data has 28x28x1; give --image-size 32x32". */
int pst_batch_prep_init(pst_batch_prep *p, const pst_dataset *data, const char *name,
                        int in_h, int in_w, int in_c, int input_size,
                        const pst_image_opts *o, const float *mean, const float *std,
                        uint64_t seed, int index, char *err, size_t errlen);
/* The floats per sample of a prepared batch. */
size_t pst_batch_features(const pst_batch_prep *p);
/* Gathers samples idx[0..n) into x[n, h, w, out_c] and y[n]. With augment set, the flips
 * and crops are drawn from (seed, index, step) alone, so the same step gives the same
 * bytes on every run and whichever thread prepares it. */
void pst_batch_fill(const pst_batch_prep *p, const int32_t *idx, int n, int augment,
                    uint64_t step, float *x, int32_t *y);

#endif
