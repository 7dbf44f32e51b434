/* Tests for data/data.c: IDX loading (good, real and broken files), shards and shuffles. */
#include "data/data.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/check.h"

static char g_dir[PATH_MAX];

/* A file name inside the test's temporary directory (a static buffer per call slot). */
static const char *tmp_path(int slot, const char *name) {
  static char paths[4][PATH_MAX + 64];
  snprintf(paths[slot], sizeof paths[slot], "%s/%s", g_dir, name);
  return paths[slot];
}

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* Writes bytes to path, gzip-compressed when gz is set. */
static void write_file(const char *path, const void *data, size_t len, int gz) {
  if (gz) {
    gzFile f = gzopen(path, "wb");
    if (f == NULL || (len > 0 && gzwrite(f, data, (unsigned)len) != (int)len)) abort();
    gzclose(f);
  } else {
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, len, f) != len) abort();
    fclose(f);
  }
}

/* Writes an IDX image file: header (magic, n, rows, cols) and `len` bytes of pixels
 * (pixel i = (i * 7) % 256), whatever the header says, so that bad files can be made. */
static void write_images(const char *path, uint32_t magic, uint32_t n, uint32_t rows,
                         uint32_t cols, size_t len, int gz) {
  unsigned char *b = malloc(16 + len);
  put_be32(b, magic);
  put_be32(b + 4, n);
  put_be32(b + 8, rows);
  put_be32(b + 12, cols);
  for (size_t i = 0; i < len; i++) b[16 + i] = (unsigned char)((i * 7) % 256);
  write_file(path, b, 16 + len, gz);
  free(b);
}

/* Writes an IDX label file with `len` labels, label i = i % 10 unless bad_at names one to
 * set to 10. */
static void write_labels(const char *path, uint32_t magic, uint32_t n, size_t len, long bad_at,
                         int gz) {
  unsigned char *b = malloc(8 + len);
  put_be32(b, magic);
  put_be32(b + 4, n);
  for (size_t i = 0; i < len; i++) b[8 + i] = (unsigned char)(i % 10);
  if (bad_at >= 0) b[8 + bad_at] = 10;
  write_file(path, b, 8 + len, gz);
  free(b);
}

/* Expects a failed load whose one-line message starts with "path: " and contains want. */
static void expect_error(int rc, const char *err, const char *path, const char *want) {
  size_t pl = strlen(path);
  int ok = rc < 0 && strncmp(err, path, pl) == 0 && err[pl] == ':' && strstr(err, want) != NULL &&
           strchr(err, '\n') == NULL;
  if (!ok) fprintf(stderr, "  rc=%d err=\"%s\"; wanted \"%s: ...%s...\"\n", rc, err, path, want);
  CHECK(ok);
}

static void test_good_files(void) {
  for (int gz = 0; gz <= 1; gz++) {
    const char *img = tmp_path(0, gz ? "good-images.gz" : "good-images");
    const char *lbl = tmp_path(1, gz ? "good-labels.gz" : "good-labels");
    write_images(img, 0x803, 5, 3, 4, 5 * 3 * 4, gz);
    write_labels(lbl, 0x801, 5, 5, -1, gz);
    pst_dataset d;
    char err[512] = "";
    int rc = pst_data_load(img, lbl, &d, err, sizeof err);
    if (rc != 0) fprintf(stderr, "  %s\n", err);
    CHECK(rc == 0);
    if (rc != 0) continue;
    CHECK(d.n == 5 && d.rows == 3 && d.cols == 4);
    int pix_ok = 1, lab_ok = 1;
    for (int i = 0; i < 60; i++) pix_ok &= d.images[i] == (float)((i * 7) % 256) / 255.0f;
    for (int i = 0; i < 5; i++) lab_ok &= d.labels[i] == i % 10;
    CHECK(pix_ok);
    CHECK(lab_ok);

    /* Gather a batch in a shuffled order. */
    int32_t idx[3] = {4, 0, 2};
    float x[3 * 12];
    int32_t y[3];
    pst_data_gather(&d, idx, 3, x, y);
    CHECK(y[0] == 4 && y[1] == 0 && y[2] == 2);
    CHECK(memcmp(x, d.images + 4 * 12, 12 * sizeof(float)) == 0);
    CHECK(memcmp(x + 24, d.images + 2 * 12, 12 * sizeof(float)) == 0);
    pst_data_free(&d);
    CHECK(d.images == NULL && d.labels == NULL && d.n == 0);
  }

  /* 255 is exactly 1.0 and 0 exactly 0.0. */
  {
    unsigned char b[16 + 2];
    put_be32(b, 0x803);
    put_be32(b + 4, 1);
    put_be32(b + 8, 1);
    put_be32(b + 12, 2);
    b[16] = 0;
    b[17] = 255;
    const char *img = tmp_path(0, "edge-images");
    const char *lbl = tmp_path(1, "edge-labels");
    write_file(img, b, sizeof b, 0);
    write_labels(lbl, 0x801, 1, 1, -1, 0);
    pst_dataset d;
    char err[512];
    CHECK(pst_data_load(img, lbl, &d, err, sizeof err) == 0);
    CHECK(d.images != NULL && d.images[0] == 0.0f && d.images[1] == 1.0f);
    pst_data_free(&d);
  }
}

static void test_split_names(void) {
  char sub[PATH_MAX + 16];
  snprintf(sub, sizeof sub, "%s/split", g_dir);
  CHECK(mkdir(sub, 0700) == 0);
  char img[PATH_MAX + 64], lbl[PATH_MAX + 64];
  /* "train" as .gz, "t10k" as plain files. */
  snprintf(img, sizeof img, "%s/train-images-idx3-ubyte.gz", sub);
  snprintf(lbl, sizeof lbl, "%s/train-labels-idx1-ubyte.gz", sub);
  write_images(img, 0x803, 7, 2, 2, 28, 1);
  write_labels(lbl, 0x801, 7, 7, -1, 1);
  snprintf(img, sizeof img, "%s/t10k-images-idx3-ubyte", sub);
  snprintf(lbl, sizeof lbl, "%s/t10k-labels-idx1-ubyte", sub);
  write_images(img, 0x803, 3, 2, 2, 12, 0);
  write_labels(lbl, 0x801, 3, 3, -1, 0);

  pst_dataset d;
  char err[512] = "";
  CHECK(pst_data_load_split(sub, "train", &d, err, sizeof err) == 0);
  CHECK(d.n == 7 && d.rows == 2 && d.cols == 2);
  pst_data_free(&d);
  CHECK(pst_data_load_split(sub, "t10k", &d, err, sizeof err) == 0);
  CHECK(d.n == 3);
  pst_data_free(&d);

  /* A missing split names the .gz file it looked for. */
  char want[PATH_MAX + 64];
  snprintf(want, sizeof want, "%s/valid-images-idx3-ubyte.gz", sub);
  int rc = pst_data_load_split(sub, "valid", &d, err, sizeof err);
  expect_error(rc, err, want, ": cannot open: No such file or directory");
  CHECK(rc == -ENOENT);
}

static void test_bad_files(void) {
  pst_dataset d;
  char err[512];
  const char *img = tmp_path(0, "ok-images.gz");
  const char *lbl = tmp_path(1, "ok-labels.gz");
  write_images(img, 0x803, 5, 3, 4, 60, 1);
  write_labels(lbl, 0x801, 5, 5, -1, 1);

  /* Missing files. */
  char missing[PATH_MAX + 32];
  snprintf(missing, sizeof missing, "%s/no-such-file.gz", g_dir);
  int rc = pst_data_load(missing, lbl, &d, err, sizeof err);
  expect_error(rc, err, missing, ": cannot open: No such file or directory");
  CHECK(rc == -ENOENT && d.images == NULL && d.labels == NULL);
  rc = pst_data_load(img, missing, &d, err, sizeof err);
  expect_error(rc, err, missing, ": cannot open: No such file or directory");

  /* A directory is not a file. */
  rc = pst_data_load(g_dir, lbl, &d, err, sizeof err);
  expect_error(rc, err, g_dir, ": ");

  /* Wrong magic: a label file given as images, and the other way round. */
  rc = pst_data_load(lbl, img, &d, err, sizeof err);
  expect_error(rc, err, lbl, "bad magic 0x00000801: expected 0x00000803");
  rc = pst_data_load(img, img, &d, err, sizeof err);
  expect_error(rc, err, img, "bad magic 0x00000803: expected 0x00000801");

  /* Truncated header, plain and gzip, and an empty file. */
  const char *bad = tmp_path(2, "bad.gz");
  {
    unsigned char h[10] = {0, 0, 8, 3, 0, 0, 0, 5, 0, 0};
    write_file(bad, h, sizeof h, 1);
    rc = pst_data_load(bad, lbl, &d, err, sizeof err);
    expect_error(rc, err, bad, "truncated header: expected 16 bytes, got 10");
    unsigned char hl[6] = {0, 0, 8, 1, 0, 0};
    write_file(bad, hl, sizeof hl, 0);
    rc = pst_data_load(img, bad, &d, err, sizeof err);
    expect_error(rc, err, bad, "truncated header: expected 8 bytes, got 6");
    write_file(bad, h, 0, 0);
    rc = pst_data_load(bad, lbl, &d, err, sizeof err);
    expect_error(rc, err, bad, "truncated header: expected 16 bytes, got 0");
  }

  /* Truncated data. */
  for (int gz = 0; gz <= 1; gz++) {
    write_images(bad, 0x803, 5, 3, 4, 50, gz);
    rc = pst_data_load(bad, lbl, &d, err, sizeof err);
    expect_error(rc, err, bad, ": truncated: expected 60 bytes of pixel data, got 50");
    CHECK(rc == -EINVAL && d.images == NULL);
    write_labels(bad, 0x801, 5, 4, -1, gz);
    rc = pst_data_load(img, bad, &d, err, sizeof err);
    expect_error(rc, err, bad, ": truncated: expected 5 bytes of label data, got 4");
  }

  /* A gzip stream cut short in the middle of the deflate data. */
  {
    const char *full = tmp_path(3, "full.gz");
    write_images(full, 0x803, 50, 28, 28, 50 * 28 * 28, 1);
    FILE *f = fopen(full, "rb");
    unsigned char buf[65536];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    write_file(bad, buf, len / 2, 0);
    write_labels(tmp_path(3, "labels50"), 0x801, 50, 50, -1, 0);
    rc = pst_data_load(bad, tmp_path(3, "labels50"), &d, err, sizeof err);
    expect_error(rc, err, bad, "");
    CHECK(strstr(err, "truncated") != NULL || strstr(err, "read error") != NULL);
  }

  /* Corrupt gzip data. */
  {
    unsigned char junk[64] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    for (int i = 10; i < 64; i++) junk[i] = (unsigned char)(i * 37 + 11);
    write_file(bad, junk, sizeof junk, 0);
    rc = pst_data_load(bad, lbl, &d, err, sizeof err);
    expect_error(rc, err, bad, "");
  }

  /* Data after the payload. */
  write_images(bad, 0x803, 5, 3, 4, 61, 1);
  rc = pst_data_load(bad, lbl, &d, err, sizeof err);
  expect_error(rc, err, bad, "unexpected data after the 60 bytes of pixel data");

  /* Label count mismatch, named on the labels file. */
  write_labels(bad, 0x801, 4, 4, -1, 1);
  rc = pst_data_load(img, bad, &d, err, sizeof err);
  expect_error(rc, err, bad, "holds 4 labels but");
  CHECK(strstr(err, img) != NULL && strstr(err, "holds 5 images") != NULL);

  /* Label out of range. */
  write_labels(bad, 0x801, 5, 5, 3, 0);
  rc = pst_data_load(img, bad, &d, err, sizeof err);
  expect_error(rc, err, bad, "label 10 at index 3 is out of range 0..9");

  /* Absurd dimensions fail on the header alone. */
  const uint32_t absurd[][3] = {{0xffffffffu, 28, 28}, {10000001, 1, 1}, {0, 28, 28},
                                {5, 0, 4},             {5, 4097, 4}, {5, 4, 0x80000000u}};
  for (size_t i = 0; i < sizeof absurd / sizeof absurd[0]; i++) {
    write_images(bad, 0x803, absurd[i][0], absurd[i][1], absurd[i][2], 60, 1);
    rc = pst_data_load(bad, lbl, &d, err, sizeof err);
    expect_error(rc, err, bad, "implausible dimensions");
  }
  write_labels(bad, 0x801, 0xfffffff0u, 5, -1, 0);
  rc = pst_data_load(img, bad, &d, err, sizeof err);
  expect_error(rc, err, bad, "implausible label count");

  /* Sizes within the limits but far beyond this machine's memory (10M x 4096 x 4096 is 640
   * TiB of floats, 10M x 28 x 28 is 31 GiB): the buffers grow only as data arrives, so a
   * short file is reported as truncated, never as out of memory. */
  const uint32_t huge[][3] = {{10000000, 4096, 4096}, {10000000, 28, 28}};
  for (size_t i = 0; i < 2; i++) {
    write_images(bad, 0x803, huge[i][0], huge[i][1], huge[i][2], 1000, 1);
    write_labels(tmp_path(3, "huge-labels"), 0x801, huge[i][0], 10, -1, 1);
    rc = pst_data_load(bad, tmp_path(3, "huge-labels"), &d, err, sizeof err);
    expect_error(rc, err, tmp_path(3, "huge-labels"), "truncated: expected 10000000 bytes");
    write_labels(tmp_path(3, "huge-labels"), 0x801, huge[i][0], huge[i][0], -1, 1);
    rc = pst_data_load(bad, tmp_path(3, "huge-labels"), &d, err, sizeof err);
    expect_error(rc, err, bad, "truncated: expected ");
    CHECK(strstr(err, "got 1000") != NULL);
  }

  /* A NULL error buffer is allowed. */
  CHECK(pst_data_load(missing, lbl, &d, NULL, 0) == -ENOENT);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The real Fashion-MNIST files, when the machine has them. */
static void test_fashion_mnist(void) {
  char probe[PATH_MAX];
  snprintf(probe, sizeof probe, "%s/train-images-idx3-ubyte.gz", PST_DATA_DEFAULT_DIR);
  if (access(probe, R_OK) != 0) {
    printf("skipping Fashion-MNIST checks: %s not found\n", probe);
    return;
  }
  const char *splits[2] = {"train", "t10k"};
  const int sizes[2] = {60000, 10000};
  for (int s = 0; s < 2; s++) {
    pst_dataset d;
    char err[512] = "";
    double t0 = now_s();
    int rc = pst_data_load_split(PST_DATA_DEFAULT_DIR, splits[s], &d, err, sizeof err);
    double dt = now_s() - t0;
    if (rc != 0) fprintf(stderr, "  %s\n", err);
    CHECK(rc == 0);
    if (rc != 0) continue;
    printf("loaded %s: %d x %d x %d in %.3f s\n", splits[s], d.n, d.rows, d.cols, dt);
    CHECK(d.n == sizes[s] && d.rows == 28 && d.cols == 28);
    /* Fashion-MNIST's first sample is an ankle boot (class 9) in both splits. */
    CHECK(d.labels[0] == 9);
    int counts[10] = {0};
    for (int i = 0; i < d.n; i++) counts[d.labels[i]]++;
    int balanced = 1;
    for (int c = 0; c < 10; c++) balanced &= counts[c] == d.n / 10;
    CHECK(balanced);
    float lo = 1.0f, hi = 0.0f;
    double sum = 0;
    size_t total = (size_t)d.n * 784;
    for (size_t i = 0; i < total; i++) {
      float p = d.images[i];
      if (p < lo) lo = p;
      if (p > hi) hi = p;
      sum += p;
    }
    CHECK(lo == 0.0f && hi == 1.0f);
    /* Fashion-MNIST's mean pixel is about 0.286. */
    double mean = sum / (double)total;
    CHECK(mean > 0.27 && mean < 0.30);
    pst_data_free(&d);
  }
}

static void test_shards(void) {
  int ok = 1;
  for (int total = 0; total <= 300; total++) {
    for (int count = 1; count <= 40; count++) {
      int expect_begin = 0, minsz = total, maxsz = 0;
      for (int i = 0; i < count; i++) {
        int b, e;
        pst_data_shard_range(total, i, count, &b, &e);
        ok &= b == expect_begin && e >= b;
        if (e - b < minsz) minsz = e - b;
        if (e - b > maxsz) maxsz = e - b;
        expect_begin = e;
      }
      ok &= expect_begin == total && maxsz - minsz <= 1;
    }
  }
  CHECK(ok);
  /* Large totals and counts do not overflow. */
  int b, e;
  pst_data_shard_range(2000000000, 99999, 100000, &b, &e);
  CHECK(b == 1999980000 && e == 2000000000);
  pst_data_shard_range(60000, 3, 7, &b, &e);
  CHECK(b == 25716 && e == 34287);
  /* Bad arguments give an empty range. */
  pst_data_shard_range(100, 5, 5, &b, &e);
  CHECK(b == 0 && e == 0);
  pst_data_shard_range(100, 0, 0, &b, &e);
  CHECK(b == 0 && e == 0);
}

static int is_permutation(const int32_t *idx, int n) {
  char *seen = calloc((size_t)n + 1, 1);
  int ok = 1;
  for (int i = 0; i < n; i++) {
    if (idx[i] < 0 || idx[i] >= n || seen[idx[i]]) ok = 0;
    else seen[idx[i]] = 1;
  }
  free(seen);
  return ok;
}

static void test_rng(void) {
  /* xoshiro256** reference outputs for the state {1, 2, 3, 4}. */
  pst_rng r = {{1, 2, 3, 4}};
  const uint64_t ref[6] = {11520u, 0u, 1509978240u, 1215971899390074240u,
                           1216172134540287360u, 607988272756665600u};
  int ok = 1;
  for (int i = 0; i < 6; i++) ok &= pst_rng_next(&r) == ref[i];
  CHECK(ok);
  /* Seeding through splitmix64 (values from an independent Python implementation). */
  pst_rng_seed(&r, 42);
  CHECK(pst_rng_next(&r) == 0x15780b2e0c2ec716ull);
  CHECK(pst_rng_next(&r) == 0x6104d9866d113a7eull);
  CHECK(pst_rng_next(&r) == 0xae17533239e499a1ull);
  pst_rng_seed(&r, 0);
  CHECK(r.s[0] != 0 || r.s[1] != 0 || r.s[2] != 0 || r.s[3] != 0);

  enum { N = 60000 };
  static int32_t a[N], b[N], c[N];
  for (int i = 0; i < N; i++) a[i] = b[i] = c[i] = i;
  pst_rng ra, rb, rc;
  pst_rng_seed(&ra, 7);
  pst_rng_seed(&rb, 7);
  pst_rng_seed(&rc, 8);
  pst_rng_shuffle(&ra, a, N);
  pst_rng_shuffle(&rb, b, N);
  pst_rng_shuffle(&rc, c, N);
  CHECK(is_permutation(a, N));
  CHECK(is_permutation(c, N));
  CHECK(memcmp(a, b, sizeof a) == 0);
  CHECK(memcmp(a, c, sizeof a) != 0);
  int fixed = 0;
  for (int i = 0; i < N; i++) fixed += a[i] == i;
  CHECK(fixed < 20); /* about one fixed point is expected */
  /* Shuffling again continues the stream: a second epoch differs from the first. */
  memcpy(b, a, sizeof a);
  pst_rng_shuffle(&ra, a, N);
  CHECK(is_permutation(a, N) && memcmp(a, b, sizeof a) != 0);
  pst_rng_shuffle(&ra, a, 0);
  pst_rng_shuffle(&ra, a, 1);

  /* Each of the 6 orders of 3 items is about equally likely (chi-square, 5 degrees of
   * freedom; 30 is far beyond the 0.1% point of 20.5). */
  int hist[6] = {0};
  const int trials = 60000;
  for (int t = 0; t < trials; t++) {
    int32_t p[3] = {0, 1, 2};
    pst_rng_shuffle(&ra, p, 3);
    hist[p[0] * 2 + (p[1] > p[2])]++;
  }
  double chi2 = 0;
  for (int k = 0; k < 6; k++) {
    double dlt = hist[k] - trials / 6.0;
    chi2 += dlt * dlt / (trials / 6.0);
  }
  CHECK(chi2 < 30.0);
}

int main(void) {
  const char *base = getenv("TEST_TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/data_test.XXXXXX", base && *base ? base : "/tmp");
  if (mkdtemp(g_dir) == NULL) {
    perror("mkdtemp");
    return 2;
  }
  test_good_files();
  test_split_names();
  test_bad_files();
  test_fashion_mnist();
  test_shards();
  test_rng();
  char cmd[PATH_MAX + 32];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
