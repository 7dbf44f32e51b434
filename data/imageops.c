/* Bilinear resizing, per-channel statistics, augmentation and batch preparation. */
#include "data/imageops.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pst_image_err(char *err, size_t errlen, const char *fmt, ...) {
  if (err == NULL || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* A whole decimal number in [lo, hi] spanning exactly [s, s + len). */
static int parse_int(const char *s, size_t len, int lo, int hi, int *out) {
  if (len == 0 || len > 9) return -1;
  int v = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int pst_image_parse_size(const char *text, int *height, int *width, char *err, size_t errlen) {
  *height = *width = 0;
  if (text == NULL || text[0] == '\0') return 0;
  const char *x = strchr(text, 'x');
  if (x == NULL || parse_int(text, (size_t)(x - text), 1, PST_IMAGE_MAX_SIDE, height) < 0 ||
      parse_int(x + 1, strlen(x + 1), 1, PST_IMAGE_MAX_SIDE, width) < 0) {
    *height = *width = 0;
    pst_image_err(err, errlen, "--image-size: '%.60s' is not HxW with sides 1..%d (e.g. 32x32)",
                  text, PST_IMAGE_MAX_SIDE);
    return -EINVAL;
  }
  return 0;
}

int pst_image_parse_augment(const char *text, int *flip, int *crop_pad, char *err,
                            size_t errlen) {
  *flip = *crop_pad = 0;
  if (text == NULL || text[0] == '\0' || strcmp(text, "none") == 0) return 0;
  const char *s = text;
  while (*s) {
    size_t len = strcspn(s, ",");
    int pad = 0;
    if (len == 4 && strncmp(s, "flip", 4) == 0) {
      *flip = 1;
    } else if (len > 5 && strncmp(s, "crop:", 5) == 0 &&
               parse_int(s + 5, len - 5, 1, PST_AUGMENT_MAX_PAD, &pad) == 0) {
      *crop_pad = pad;
    } else {
      *flip = *crop_pad = 0;
      pst_image_err(err, errlen,
                    "--augment: '%.*s' is not flip or crop:P (P 1..%d pixels of padding); e.g. "
                    "--augment flip,crop:4",
                    (int)(len > 60 ? 60 : len), s, PST_AUGMENT_MAX_PAD);
      return -EINVAL;
    }
    s += len;
    if (*s == ',') s++;
  }
  return 0;
}

int pst_image_parse_normalize(const char *text, int *normalize, char *err, size_t errlen) {
  if (strcmp(text, "none") == 0) {
    *normalize = 0;
  } else if (strcmp(text, "mean-std") == 0) {
    *normalize = 1;
  } else {
    pst_image_err(err, errlen, "--normalize: '%.60s' is not none or mean-std", text);
    return -EINVAL;
  }
  return 0;
}

/* The two source cells and the weight of the second for each output cell along one axis. */
static void axis_weights(int src, int dst, int *i0, int *i1, float *f) {
  double scale = (double)src / (double)dst;
  for (int o = 0; o < dst; o++) {
    double s = ((double)o + 0.5) * scale - 0.5;
    if (s < 0) s = 0;
    if (s > src - 1) s = src - 1;
    int a = (int)s;
    i0[o] = a;
    i1[o] = a + 1 < src ? a + 1 : a;
    f[o] = (float)(s - a);
  }
}

void pst_resize_bilinear(const float *src, int sh, int sw, int c, float *dst, int dh, int dw) {
  /* The per-axis tables are small (sides are capped), so they live on the stack. */
  int y0[PST_IMAGE_MAX_SIDE], y1[PST_IMAGE_MAX_SIDE], x0[PST_IMAGE_MAX_SIDE],
      x1[PST_IMAGE_MAX_SIDE];
  float fy[PST_IMAGE_MAX_SIDE], fx[PST_IMAGE_MAX_SIDE];
  axis_weights(sh, dh, y0, y1, fy);
  axis_weights(sw, dw, x0, x1, fx);
  for (int y = 0; y < dh; y++) {
    const float *r0 = src + (size_t)y0[y] * sw * c, *r1 = src + (size_t)y1[y] * sw * c;
    for (int x = 0; x < dw; x++) {
      for (int k = 0; k < c; k++) {
        float a = r0[(size_t)x0[x] * c + k], b = r0[(size_t)x1[x] * c + k];
        float d = r1[(size_t)x0[x] * c + k], e = r1[(size_t)x1[x] * c + k];
        float top = a + (b - a) * fx[x], bottom = d + (e - d) * fx[x];
        dst[((size_t)y * dw + x) * c + k] = top + (bottom - top) * fy[y];
      }
    }
  }
}

int pst_data_resize(pst_dataset *d, int h, int w, const char *name, char *err, size_t errlen) {
  if (h <= 0 || w <= 0 || (d->rows == h && d->cols == w)) return 0;
  int c = d->channels;
  size_t per = (size_t)h * (size_t)w * (size_t)c, old = (size_t)d->rows * d->cols * c;
  if ((size_t)d->n > PST_IMAGE_MAX_FLOATS / per) {
    pst_image_err(err, errlen, "%s: %d images of %dx%dx%d are more than the %zu floats allowed",
                  name, d->n, h, w, c, (size_t)PST_IMAGE_MAX_FLOATS);
    return -E2BIG;
  }
  float *out = malloc((size_t)d->n * per * sizeof(float));
  if (out == NULL) {
    pst_image_err(err, errlen, "%s: out of memory resizing %d images to %dx%d", name, d->n, h, w);
    return -ENOMEM;
  }
  for (int i = 0; i < d->n; i++)
    pst_resize_bilinear(d->images + (size_t)i * old, d->rows, d->cols, c, out + (size_t)i * per, h,
                        w);
  free(d->images);
  d->images = out;
  d->rows = h;
  d->cols = w;
  return 0;
}

void pst_data_channel_stats(const pst_dataset *d, float *mean, float *std) {
  int c = d->channels;
  double sum[3] = {0, 0, 0}, sq[3] = {0, 0, 0};
  size_t pixels = (size_t)d->n * d->rows * d->cols;
  for (size_t i = 0; i < pixels; i++)
    for (int k = 0; k < c; k++) {
      double v = d->images[i * c + k];
      sum[k] += v;
      sq[k] += v * v;
    }
  for (int k = 0; k < c; k++) {
    double m = pixels ? sum[k] / (double)pixels : 0;
    double var = pixels ? sq[k] / (double)pixels - m * m : 0;
    mean[k] = (float)m;
    std[k] = var > 1e-12 ? (float)sqrt(var) : 1e-6f;
  }
}

int pst_batch_prep_init(pst_batch_prep *p, const pst_dataset *data, const char *name,
                        int in_h, int in_w, int in_c, int input_size,
                        const pst_image_opts *o, const float *mean, const float *std,
                        uint64_t seed, int index, char *err, size_t errlen) {
  int h = data->rows, w = data->cols, c = data->channels;
  memset(p, 0, sizeof *p);
  if (in_h == 1 && in_w == 1) {
    /* A flat input ("input 784") takes the pixels as they are stored. */
    if ((size_t)h * w * c != (size_t)input_size) {
      pst_image_err(err, errlen, "the model takes %d inputs but %s has %dx%dx%d images (%d values)",
                    input_size, name, h, w, c, h * w * c);
      return -EINVAL;
    }
    p->out_c = c;
  } else {
    if (in_h != h || in_w != w) {
      pst_image_err(err, errlen,
                    "the model takes %dx%dx%d images (H x W x C) but %s has %dx%dx%d; give "
                    "--image-size %dx%d",
                    in_h, in_w, in_c, name, h, w, c, in_h, in_w);
      return -EINVAL;
    }
    if (!(in_c == c || (c == 1 && in_c == 3))) {
      pst_image_err(err, errlen,
                    "the model takes %dx%dx%d images (H x W x C) but %s has %dx%dx%d: only "
                    "grayscale (1 channel) can be turned into 3",
                    in_h, in_w, in_c, name, h, w, c);
      return -EINVAL;
    }
    p->out_c = in_c;
  }
  p->data = data;
  for (int k = 0; k < 3; k++) {
    p->mean[k] = o->normalize && k < c ? mean[k] : 0.0f;
    p->inv_std[k] = o->normalize && k < c ? 1.0f / std[k] : 1.0f;
  }
  p->flip = o->flip;
  p->crop_pad = o->crop_pad;
  p->seed = seed;
  p->index = index;
  return 0;
}

size_t pst_batch_features(const pst_batch_prep *p) {
  return (size_t)p->data->rows * p->data->cols * p->out_c;
}

/* A draw in [0, bound) from the top 32 bits (bias below 2^-32 for these small bounds). */
static int draw_below(pst_rng *r, int bound) {
  return (int)(((pst_rng_next(r) >> 32) * (uint64_t)bound) >> 32);
}

void pst_batch_fill(const pst_batch_prep *p, const int32_t *idx, int n, int augment,
                    uint64_t step, float *x, int32_t *y) {
  const pst_dataset *d = p->data;
  int h = d->rows, w = d->cols, c = d->channels, oc = p->out_c;
  int pad = augment ? p->crop_pad : 0, flips = augment && p->flip;
  int plain = !pad && !flips && oc == c;
  for (int k = 0; k < c; k++) plain = plain && p->mean[k] == 0.0f && p->inv_std[k] == 1.0f;
  if (plain) {
    pst_data_gather(d, idx, n, x, y);
    return;
  }
  /* One stream per (job, worker, step): the tag keeps it apart from the shuffle's. */
  pst_rng r;
  uint64_t key = p->seed * 0x9e3779b97f4a7c15ull + (uint64_t)p->index;
  pst_rng_seed(&r, (key * 0xbf58476d1ce4e5b9ull + step) ^ 0x6175676d656e74ull);
  size_t in_per = (size_t)h * w * c, out_per = (size_t)h * w * oc;
  for (int b = 0; b < n; b++) {
    const float *s = d->images + (size_t)idx[b] * in_per;
    float *o = x + (size_t)b * out_per;
    int flip = flips ? draw_below(&r, 2) : 0;
    int dy = pad ? draw_below(&r, 2 * pad + 1) - pad : 0;
    int dx = pad ? draw_below(&r, 2 * pad + 1) - pad : 0;
    for (int yy = 0; yy < h; yy++) {
      int sy = yy + dy;
      for (int xx = 0; xx < w; xx++) {
        /* Crop, then flip the crop: output column xx shows the crop's column w-1-xx. */
        int sx = (flip ? w - 1 - xx : xx) + dx;
        int inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
        const float *px = inside ? s + ((size_t)sy * w + sx) * c : NULL;
        for (int k = 0; k < oc; k++) {
          int sk = c == 1 ? 0 : k;
          float v = px ? px[sk] : 0.0f; /* the padding is black before normalising */
          o[((size_t)yy * w + xx) * oc + k] = (v - p->mean[sk]) * p->inv_std[sk];
        }
      }
    }
    if (y != NULL) y[b] = d->labels[idx[b]];
  }
}
