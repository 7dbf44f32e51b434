/* Fuzzes the IDX reader (data/data.h: pst_data_load and pst_data_load_split) on files
 * written from the input.
 *
 * Input: one flags byte, two bytes (little-endian) of image file length L, L bytes of
 * image file, and the rest is the label file.
 *   bit 0: the image file is gzip'd by the harness (deflated, as the real data is)
 *   bit 1: the label file is gzip'd by the harness
 *   bit 2: files under the names pst_data_load_split looks for (<split>-images-idx3-ubyte
 *          and <split>-labels-idx1-ubyte, with .gz when gzip'd), loaded by split name
 * Without bits 0-1 the bytes are written as they are, so the fuzzer also reaches zlib's
 * own gzip parsing (a file that starts with the gzip magic) and the plain-file path.
 *
 * Checks besides "no crash, no leak, no UB": a refusal is a negative code with one line
 * naming the file; a success has n >= 1 samples of rows x cols pixels in [0, 1] and labels
 * 0..9, and the loaded set can be sharded and gathered. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/data.h"

#define CHECK(cond, ...)                                       \
  do {                                                         \
    if (!(cond)) {                                             \
      fprintf(stderr, "fuzz_idx: check failed: %s: ", #cond); \
      fprintf(stderr, __VA_ARGS__);                            \
      fprintf(stderr, "\n");                                   \
      abort();                                                 \
    }                                                          \
  } while (0)

static char dir[64];

static void write_file(const char *path, const uint8_t *p, size_t n, int gz) {
  if (gz) {
    /* Level 1: the fuzzer's inputs are small and speed matters more than size here. */
    gzFile f = gzopen(path, "wb1");
    CHECK(f != NULL, "gzopen %s", path);
    CHECK(n == 0 || gzwrite(f, p, (unsigned)n) == (int)n, "gzwrite");
    CHECK(gzclose(f) == Z_OK, "gzclose");
    return;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  CHECK(fd >= 0, "%s: %s", path, strerror(errno));
  CHECK(write(fd, p, n) == (ssize_t)n, "write");
  close(fd);
}

static void check_err(const char *err, const char *images, const char *labels) {
  CHECK(err[0] != '\0', "no error message");
  CHECK(strchr(err, '\n') == NULL, "a multi-line error: \"%s\"", err);
  CHECK(strstr(err, images) == err || strstr(err, labels) == err || strstr(err, dir) == err,
        "the error does not start with the file's name: \"%s\"", err);
}

static void check_set(const pst_dataset *d) {
  CHECK(d->n >= 1 && d->rows >= 1 && d->cols >= 1, "%d samples of %dx%d", d->n, d->rows, d->cols);
  size_t px = (size_t)d->n * (size_t)d->rows * (size_t)d->cols;
  for (size_t i = 0; i < px; i++)
    CHECK(d->images[i] >= 0.0f && d->images[i] <= 1.0f, "pixel %zu is %g", i, d->images[i]);
  for (int i = 0; i < d->n; i++)
    CHECK(d->labels[i] >= 0 && d->labels[i] <= 9, "label %d is %d", i, d->labels[i]);
  /* Two shards, each gathered in a shuffled order, as a worker does. */
  size_t features = (size_t)d->rows * (size_t)d->cols;
  int covered = 0;
  for (int s = 0; s < 2; s++) {
    int b, e;
    pst_data_shard_range(d->n, s, 2, &b, &e);
    CHECK(b == covered && e >= b && e <= d->n, "shard %d is [%d, %d)", s, b, e);
    covered = e;
    int m = e - b;
    if (m == 0) continue;
    int32_t *idx = malloc((size_t)m * sizeof *idx), *y = malloc((size_t)m * sizeof *y);
    float *x = malloc((size_t)m * features * sizeof *x);
    CHECK(idx && y && x, "malloc");
    for (int i = 0; i < m; i++) idx[i] = b + i;
    pst_rng rng;
    pst_rng_seed(&rng, (uint64_t)d->n);
    pst_rng_shuffle(&rng, idx, m);
    pst_data_gather(d, idx, m, x, y);
    for (int i = 0; i < m; i++)
      CHECK(idx[i] >= b && idx[i] < e && y[i] == d->labels[idx[i]], "gathered %d", i);
    free(idx);
    free(y);
    free(x);
  }
  CHECK(covered == d->n, "shards cover %d of %d", covered, d->n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) {
    /* One directory per fuzzing process (-jobs/-workers run several side by side), in
     * memory where there is a tmpfs: on disk, writing the files was most of a run. */
    snprintf(dir, sizeof dir, "%s/fuzz_idx.%d", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
             (int)getpid());
    mkdir(dir, 0700);
  }
  if (size < 3) return 0;
  uint8_t flags = data[0];
  size_t ilen = (size_t)data[1] | (size_t)data[2] << 8;
  data += 3;
  size -= 3;
  if (ilen > size) ilen = size;
  int gz_i = flags & 1, gz_l = (flags >> 1) & 1, split = (flags >> 2) & 1;

  char images[128], labels[128];
  if (split) {
    snprintf(images, sizeof images, "%s/fz-images-idx3-ubyte%s", dir, gz_i ? ".gz" : "");
    snprintf(labels, sizeof labels, "%s/fz-labels-idx1-ubyte%s", dir, gz_l ? ".gz" : "");
  } else {
    snprintf(images, sizeof images, "%s/images%s", dir, gz_i ? ".gz" : "");
    snprintf(labels, sizeof labels, "%s/labels%s", dir, gz_l ? ".gz" : "");
  }
  write_file(images, data, ilen, gz_i);
  write_file(labels, data + ilen, size - ilen, gz_l);

  pst_dataset d;
  char err[1024];
  int rc = split ? pst_data_load_split(dir, "fz", &d, err, sizeof err)
                 : pst_data_load(images, labels, &d, err, sizeof err);
  if (rc < 0) {
    check_err(err, images, labels);
    CHECK(d.images == NULL && d.labels == NULL && d.n == 0, "a refusal left data behind");
  } else {
    CHECK(rc == 0, "rc %d", rc);
    check_set(&d);
    pst_data_free(&d);
  }
  /* The split names must not see the other form's file next time. */
  unlink(images);
  unlink(labels);
  return 0;
}
