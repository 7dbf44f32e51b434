/* CIFAR binary files. Every file's size is checked (a whole number of records, within the
 * caps) before anything is allocated, and the set is allocated once for all its files. */
#include "data/cifar.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/imageops.h"

#define MAX_BATCH_FILES 64
#define MAX_RECORDS 10000000ll          /* per set, as for IDX */
#define RECORDS_PER_READ 256

static int label_bytes(pst_cifar_kind kind) { return kind == PST_CIFAR_100 ? 2 : 1; }

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

pst_cifar_kind pst_cifar_detect(const char *dir) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/data_batch_1.bin", dir);
  if (exists(path)) return PST_CIFAR_10;
  snprintf(path, sizeof path, "%s/train.bin", dir);
  if (exists(path)) return PST_CIFAR_100;
  return PST_CIFAR_NONE;
}

/* The number of records in path, from its size. */
static int count_records(const char *path, int rec, long long *count, char *err, size_t errlen) {
  struct stat st;
  if (stat(path, &st) != 0) {
    pst_image_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -errno;
  }
  if (!S_ISREG(st.st_mode)) {
    pst_image_err(err, errlen, "%s: not a regular file", path);
    return -EINVAL;
  }
  if (st.st_size == 0 || st.st_size % rec != 0) {
    pst_image_err(err, errlen,
                  "%s: truncated: %lld bytes is not a whole number of %d-byte records (%d label "
                  "byte%s and %d pixel bytes each)",
                  path, (long long)st.st_size, rec, rec - PST_CIFAR_PIXELS,
                  rec - PST_CIFAR_PIXELS == 1 ? "" : "s", PST_CIFAR_PIXELS);
    return -EINVAL;
  }
  *count = st.st_size / rec;
  return 0;
}

/* Reads path's `count` records into images/labels (already sized for them). */
static int read_records(const char *path, pst_cifar_kind kind, long long count, float *images,
                        int32_t *labels, char *err, size_t errlen) {
  const int lb = label_bytes(kind), rec = lb + PST_CIFAR_PIXELS;
  const int side = PST_CIFAR_SIDE, plane = side * side;
  const int classes = kind == PST_CIFAR_100 ? 100 : 10;
  float lut[256];
  for (int i = 0; i < 256; i++) lut[i] = (float)i / 255.0f; /* as the IDX reader scales */
  FILE *f = fopen(path, "rb");
  unsigned char *buf = malloc((size_t)rec * RECORDS_PER_READ);
  int rc = 0;
  if (f == NULL || buf == NULL) {
    rc = f == NULL ? -errno : -ENOMEM;
    pst_image_err(err, errlen, "%s: cannot %s: %s", path, f == NULL ? "open" : "allocate",
                  strerror(-rc));
    goto done;
  }
  for (long long r0 = 0; r0 < count; r0 += RECORDS_PER_READ) {
    size_t want = (size_t)(count - r0 < RECORDS_PER_READ ? count - r0 : RECORDS_PER_READ);
    if (fread(buf, (size_t)rec, want, f) != want) {
      pst_image_err(err, errlen, "%s: read error at record %lld: %s", path, r0,
                    ferror(f) ? strerror(errno) : "the file shrank while being read");
      rc = -EIO;
      goto done;
    }
    for (size_t i = 0; i < want; i++) {
      const unsigned char *b = buf + i * (size_t)rec;
      long long r = r0 + (long long)i;
      if (kind == PST_CIFAR_100 && b[0] >= 20) {
        pst_image_err(err, errlen, "%s: coarse label %d of record %lld is out of range 0..19",
                      path, b[0], r);
        rc = -EINVAL;
        goto done;
      }
      int label = b[lb - 1];
      if (label >= classes) {
        pst_image_err(err, errlen, "%s: label %d of record %lld is out of range 0..%d", path,
                      label, r, classes - 1);
        rc = -EINVAL;
        goto done;
      }
      labels[r] = label;
      /* Planes R, G, B to interleaved H x W x C. */
      float *dst = images + (size_t)r * PST_CIFAR_PIXELS;
      const unsigned char *px = b + lb;
      for (int p = 0; p < plane; p++)
        for (int k = 0; k < 3; k++) dst[p * 3 + k] = lut[px[k * plane + p]];
    }
  }
done:
  free(buf);
  if (f != NULL) fclose(f);
  return rc;
}

static int load_files(char (*paths)[PATH_MAX], int n_paths, pst_cifar_kind kind,
                      pst_dataset *out, char *err, size_t errlen) {
  const int rec = label_bytes(kind) + PST_CIFAR_PIXELS;
  long long counts[MAX_BATCH_FILES], total = 0;
  memset(out, 0, sizeof *out);
  for (int i = 0; i < n_paths; i++) {
    int rc = count_records(paths[i], rec, &counts[i], err, errlen);
    if (rc < 0) return rc;
    total += counts[i];
    if (total > MAX_RECORDS) {
      pst_image_err(err, errlen, "%s: more than %lld images in the set", paths[i], MAX_RECORDS);
      return -E2BIG;
    }
  }
  float *images = malloc((size_t)total * PST_CIFAR_PIXELS * sizeof(float));
  int32_t *labels = malloc((size_t)total * sizeof(int32_t));
  if (images == NULL || labels == NULL) {
    free(images);
    free(labels);
    pst_image_err(err, errlen, "%s: out of memory for %lld images", paths[0], total);
    return -ENOMEM;
  }
  long long at = 0;
  for (int i = 0; i < n_paths; i++) {
    int rc = read_records(paths[i], kind, counts[i], images + (size_t)at * PST_CIFAR_PIXELS,
                          labels + at, err, errlen);
    if (rc < 0) {
      free(images);
      free(labels);
      return rc;
    }
    at += counts[i];
  }
  out->n = (int)total;
  out->rows = out->cols = PST_CIFAR_SIDE;
  out->channels = 3;
  out->images = images;
  out->labels = labels;
  return 0;
}

int pst_cifar_load_file(const char *path, pst_cifar_kind kind, pst_dataset *out, char *err,
                        size_t errlen) {
  char paths[1][PATH_MAX];
  snprintf(paths[0], sizeof paths[0], "%s", path);
  return load_files(paths, 1, kind, out, err, errlen);
}

int pst_cifar_load(const char *dir, pst_cifar_kind kind, int train, pst_dataset *out, char *err,
                   size_t errlen) {
  char(*paths)[PATH_MAX] = malloc(MAX_BATCH_FILES * sizeof *paths);
  int n = 0;
  if (paths == NULL) {
    pst_image_err(err, errlen, "%s: out of memory", dir);
    return -ENOMEM;
  }
  if (kind == PST_CIFAR_100) {
    snprintf(paths[n++], PATH_MAX, "%s/%s", dir, train ? "train.bin" : "test.bin");
  } else if (!train) {
    snprintf(paths[n++], PATH_MAX, "%s/test_batch.bin", dir);
  } else {
    for (int k = 1; k <= MAX_BATCH_FILES; k++) {
      snprintf(paths[n], PATH_MAX, "%s/data_batch_%d.bin", dir, k);
      if (k > 1 && !exists(paths[n])) break;
      n++;
    }
  }
  int rc = load_files(paths, n, kind, out, err, errlen);
  free(paths);
  return rc;
}
