/* Tests for ps/state/checkpoint.c: round trips on the presets, names and shapes, retention and
 * stale temporary files, corrupt files refused with a reason (every single-bit flip of a
 * small file among them), and 100 writes killed at random points by the fault hook, after
 * each of which the newest valid checkpoint is exactly the old one or, only when the kill
 * came after the rename, exactly the new one. */
#include "ps/state/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"

#define MAXT (3 * PST_CKPT_MAX_MODEL_TENSORS)

static char g_root[512];
/* A model small enough that a file is about 1.3 KB, so that random offsets and single-bit
 * flips land in the header as often as in the data. */
static char g_tiny[600];
static const char *k_tiny_spec = "input 4x4x1\nconv2d 2 3x3 relu\nflatten\ndense 3 softmax\n";

static uint64_t rnd(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void fill(float *p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (float)((double)(rnd(&seed) >> 11) / 9007199254740992.0 - 0.5);
}

static void rm_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

static void sub_dir(const char *name, char *out, size_t outlen) {
  snprintf(out, outlen, "%s/%s", g_root, name);
  rm_dir(out);
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int exists(const char *dir, const char *name) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
  closedir(d);
  return n;
}

static unsigned char *read_all(const char *path, long *len) {
  *len = file_size(path);
  FILE *f = fopen(path, "rb");
  if (!f || *len < 0) {
    if (f) fclose(f);
    return NULL;
  }
  unsigned char *b = malloc((size_t)*len + 1);
  if (b && fread(b, 1, (size_t)*len, f) != (size_t)*len) {
    free(b);
    b = NULL;
  }
  fclose(f);
  return b;
}

static int write_all(const char *path, const void *b, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(b, 1, len, f) == len;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* A model-shaped checkpoint: weights, two optimizer slots, three metadata entries. */
typedef struct {
  pst_model m;
  float *w, *s1, *s2;
  pst_ckpt_tensor t[MAXT];
  int nt, per_prefix;
  char fp[17];
  pst_ckpt_kv meta[3];
} fixture;

static int fixture_init(fixture *f, const char *model, uint64_t seed, const char *version) {
  char err[256];
  if (pst_model_load(model, &f->m, err, sizeof err) != 0) {
    fprintf(stderr, "model %s: %s\n", model, err);
    return -1;
  }
  size_t n = f->m.n_params;
  f->w = malloc(n * sizeof(float));
  f->s1 = malloc(n * sizeof(float));
  f->s2 = malloc(n * sizeof(float));
  fill(f->w, n, seed);
  fill(f->s1, n, seed + 1);
  fill(f->s2, n, seed + 2);
  int a = pst_ckpt_model_tensors(&f->m, f->w, "", f->t, MAXT);
  int b = pst_ckpt_model_tensors(&f->m, f->s1, "optimizer/m/", f->t + a, MAXT - a);
  int c = pst_ckpt_model_tensors(&f->m, f->s2, "optimizer/v/", f->t + a + b, MAXT - a - b);
  if (a <= 0 || b != a || c != a) return -1;
  f->nt = a + b + c;
  f->per_prefix = a;
  snprintf(f->fp, sizeof f->fp, "%016" PRIx64, f->m.fingerprint);
  f->meta[0] = (pst_ckpt_kv){"model_spec", f->m.text};
  f->meta[1] = (pst_ckpt_kv){"fingerprint", f->fp};
  f->meta[2] = (pst_ckpt_kv){"version", version};
  return 0;
}

static void fixture_free(fixture *f) {
  free(f->w);
  free(f->s1);
  free(f->s2);
}

/* ck holds exactly f's three vectors and metadata, bit for bit. */
static int same_as(const pst_ckpt *ck, const fixture *f) {
  size_t n = f->m.n_params;
  float *x = malloc(n * sizeof(float));
  char err[256];
  int ok = ck->n_tensors == f->nt;
  const float *want[3] = {f->w, f->s1, f->s2};
  const char *pre[3] = {"", "optimizer/m/", "optimizer/v/"};
  for (int k = 0; ok && k < 3; k++)
    ok = pst_ckpt_read_model(ck, &f->m, pre[k], x, err, sizeof err) == 0 &&
         memcmp(x, want[k], n * sizeof(float)) == 0;
  for (int i = 0; ok && i < 3; i++) {
    const char *v = pst_ckpt_meta(ck, f->meta[i].key);
    ok = v && !strcmp(v, f->meta[i].value);
  }
  free(x);
  return ok;
}

static void check_shape(const pst_ckpt *ck, const char *name, int ndim, int64_t d0, int64_t d1,
                        int64_t d2, int64_t d3) {
  const int64_t want[4] = {d0, d1, d2, d3};
  const pst_ckpt_tensor *t = NULL;
  for (int i = 0; i < ck->n_tensors; i++)
    if (!strcmp(ck->tensors[i].name, name)) t = &ck->tensors[i];
  int ok = t && t->ndim == ndim;
  for (int d = 0; ok && d < ndim; d++) ok = t->shape[d] == want[d];
  if (!ok) fprintf(stderr, "  tensor %s: missing or wrong shape\n", name);
  CHECK(ok);
}

static void test_round_trip(const char *model) {
  fixture f;
  CHECK(fixture_init(&f, model, 7, "120") == 0);
  char dir[600], path[1024], want[1024], err[512];
  sub_dir(model, dir, sizeof dir);
  CHECK(pst_ckpt_write(dir, 120, f.t, f.nt, f.meta, 3, 3, path, sizeof path, err, sizeof err) == 0);
  snprintf(want, sizeof want, "%s/ckpt-000000000120.safetensors", dir);
  CHECK(!strcmp(path, want));

  /* The layout: u64 N, N bytes of JSON padded with spaces to a multiple of 8, the data. */
  long len;
  unsigned char *b = read_all(path, &len);
  CHECK(b != NULL);
  uint64_t hlen = 0;
  for (int i = 7; b && i >= 0; i--) hlen = hlen << 8 | b[i];
  CHECK(hlen % 8 == 0 && b[8] == '{');
  CHECK((uint64_t)len == 8 + hlen + 3 * f.m.n_params * sizeof(float));
  free(b);

  pst_ckpt ck;
  CHECK(pst_ckpt_load(path, &ck, err, sizeof err) == 0);
  CHECK(same_as(&ck, &f));
  CHECK(!strcmp(pst_ckpt_meta(&ck, "format"), "pstrain-checkpoint"));
  CHECK(!strcmp(pst_ckpt_meta(&ck, "format_version"), "1"));
  CHECK(strlen(pst_ckpt_meta(&ck, "data_fnv1a64")) == 16);
  CHECK(pst_ckpt_meta(&ck, "nope") == NULL);
  /* Data order is the order written: the weights first, each in parameter order. */
  for (int i = 0; i < f.nt; i++) CHECK(!strcmp(ck.tensors[i].name, f.t[i].name));
  size_t cnt = 0;
  CHECK(pst_ckpt_find(&ck, "optimizer/v/dense_1/bias", &cnt) != NULL &&
        cnt == (strcmp(model, "mlp") ? 10u : 128u));
  CHECK(pst_ckpt_find(&ck, "dense_9/bias", &cnt) == NULL);
  if (!strcmp(model, "mlp")) {
    CHECK(f.m.n_params == 235146 && f.per_prefix == 6);
    check_shape(&ck, "dense/kernel", 2, 784, 256, 0, 0);
    check_shape(&ck, "dense/bias", 1, 256, 0, 0, 0);
    check_shape(&ck, "dense_1/kernel", 2, 256, 128, 0, 0);
    check_shape(&ck, "dense_1/bias", 1, 128, 0, 0, 0);
    check_shape(&ck, "dense_2/kernel", 2, 128, 10, 0, 0);
    check_shape(&ck, "optimizer/m/dense_2/bias", 1, 10, 0, 0, 0);
    CHECK(!strcmp(ck.tensors[0].name, "dense/kernel") &&
          !strcmp(ck.tensors[6].name, "optimizer/m/dense/kernel"));
  } else {
    CHECK(f.m.n_params == 220234 && f.per_prefix == 8);
    check_shape(&ck, "conv2d/kernel", 4, 32, 3, 3, 1);
    check_shape(&ck, "conv2d/bias", 1, 32, 0, 0, 0);
    check_shape(&ck, "conv2d_1/kernel", 4, 64, 3, 3, 32);
    check_shape(&ck, "conv2d_1/bias", 1, 64, 0, 0, 0);
    check_shape(&ck, "dense/kernel", 2, 7 * 7 * 64, 64, 0, 0);
    check_shape(&ck, "dense_1/kernel", 2, 64, 10, 0, 0);
    check_shape(&ck, "optimizer/v/conv2d_1/kernel", 4, 64, 3, 3, 32);
  }

  /* Reading it as another model, or a slot it lacks, fails with a reason. */
  pst_model other;
  CHECK(pst_model_load(strcmp(model, "mlp") ? "mlp" : "cnn2", &other, err, sizeof err) == 0);
  float *x = malloc(other.n_params * sizeof(float));
  err[0] = '\0';
  int rc = pst_ckpt_read_model(&ck, &other, "", x, err, sizeof err);
  CHECK((rc == -ENOENT || rc == -EINVAL) && strstr(err, "ckpt-000000000120.safetensors: "));
  CHECK(pst_ckpt_read_model(&ck, &f.m, "optimizer/x/", f.w, err, sizeof err) == -ENOENT &&
        strstr(err, "optimizer/x/") != NULL);
  free(x);
  pst_ckpt_free(&ck);
  pst_ckpt_free(&ck); /* twice is harmless */
  fixture_free(&f);
}

static void test_api_edges(void) {
  fixture f;
  char dir[600], err[512];
  CHECK(fixture_init(&f, "cnn2", 3, "1") == 0);
  pst_ckpt_tensor few[4];
  CHECK(pst_ckpt_model_tensors(&f.m, f.w, "", few, 4) == -ENOSPC);
  char longp[120];
  memset(longp, 'p', sizeof longp - 1);
  longp[sizeof longp - 1] = '\0';
  pst_ckpt_tensor scratch[MAXT];
  CHECK(pst_ckpt_model_tensors(&f.m, f.w, longp, scratch, MAXT) == -ENAMETOOLONG);
  CHECK(pst_ckpt_model_tensors(&f.m, NULL, "", few, 4) == -ENOSPC);
  sub_dir("edges", dir, sizeof dir);
  pst_ckpt_kv bad[1] = {{"format", "mine"}};
  err[0] = '\0';
  CHECK(pst_ckpt_write(dir, 1, f.t, 2, bad, 1, 3, NULL, 0, err, sizeof err) == -EINVAL && err[0]);
  pst_ckpt_tensor dup[2] = {f.t[0], f.t[0]};
  CHECK(pst_ckpt_write(dir, 1, dup, 2, NULL, 0, 3, NULL, 0, err, sizeof err) == -EINVAL &&
        strstr(err, "twice"));
  pst_ckpt_tensor wrong = f.t[0];
  wrong.count--;
  CHECK(pst_ckpt_write(dir, 1, &wrong, 1, NULL, 0, 3, NULL, 0, err, sizeof err) == -EINVAL);
  setenv("PSTRAIN_CKPT_FAULT_AT", "soon", 1);
  CHECK(pst_ckpt_write(dir, 1, f.t, 2, NULL, 0, 3, NULL, 0, err, sizeof err) == -EINVAL);
  unsetenv("PSTRAIN_CKPT_FAULT_AT");
  /* No tensors and a scalar are valid safetensors too. */
  float one = 1.5f;
  pst_ckpt_tensor s = {.name = "step", .data = &one, .count = 1, .ndim = 0};
  char path[1024];
  pst_ckpt ck;
  CHECK(pst_ckpt_write(dir, 5, &s, 1, NULL, 0, 3, path, sizeof path, err, sizeof err) == 0);
  size_t cnt = 0;
  CHECK(pst_ckpt_load(path, &ck, err, sizeof err) == 0 && ck.n_tensors == 1 &&
        *pst_ckpt_find(&ck, "step", &cnt) == 1.5f && cnt == 1 && ck.tensors[0].ndim == 0);
  pst_ckpt_free(&ck);
  CHECK(pst_ckpt_write(dir, 6, NULL, 0, NULL, 0, 3, path, sizeof path, err, sizeof err) == 0);
  CHECK(pst_ckpt_load(path, &ck, err, sizeof err) == 0 && ck.n_tensors == 0 && ck.data_bytes == 0);
  pst_ckpt_free(&ck);
  uint64_t v = 0;
  CHECK(pst_ckpt_parse_name("ckpt-000000000120.safetensors", &v) == 0 && v == 120);
  CHECK(pst_ckpt_parse_name("ckpt-.safetensors", &v) < 0);
  CHECK(pst_ckpt_parse_name("ckpt-12.safetensors.tmp.5", &v) < 0);
  CHECK(pst_ckpt_parse_name(".ckpt-12.safetensors", &v) < 0);
  fixture_free(&f);
}

static void test_retention(void) {
  fixture f;
  char dir[600], err[512];
  CHECK(fixture_init(&f, "cnn", 5, "1") == 0);
  sub_dir("retention", dir, sizeof dir);
  for (uint64_t v = 1; v <= 6; v++)
    CHECK(pst_ckpt_write(dir, v, f.t, f.nt, NULL, 0, 3, NULL, 0, err, sizeof err) == 0);
  CHECK(count_entries(dir) == 3 && exists(dir, "ckpt-000000000004.safetensors") &&
        exists(dir, "ckpt-000000000006.safetensors"));
  /* Stale temporaries of crashed writes go; other files stay. */
  char p[1024];
  const char *junk[] = {".ckpt-000000000007.safetensors.tmp.99999",
                        ".ckpt-000000000003.safetensors.tmp.1", "notes.txt",
                        ".other.safetensors.tmp.5"};
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, junk[i]);
    CHECK(write_all(p, "junk", 4) == 0);
  }
  CHECK(pst_ckpt_write(dir, 7, f.t, f.nt, NULL, 0, 3, NULL, 0, err, sizeof err) == 0);
  CHECK(!exists(dir, junk[0]) && !exists(dir, junk[1]) && exists(dir, junk[2]) &&
        exists(dir, junk[3]));
  CHECK(!exists(dir, "ckpt-000000000004.safetensors") &&
        exists(dir, "ckpt-000000000005.safetensors") &&
        exists(dir, "ckpt-000000000007.safetensors"));
  /* An older version than those present is still kept: it is the one just written. */
  CHECK(pst_ckpt_write(dir, 2, f.t, f.nt, NULL, 0, 3, NULL, 0, err, sizeof err) == 0);
  CHECK(exists(dir, "ckpt-000000000002.safetensors") &&
        exists(dir, "ckpt-000000000005.safetensors"));
  /* keep <= 0 keeps everything. */
  CHECK(pst_ckpt_write(dir, 8, f.t, f.nt, NULL, 0, 0, NULL, 0, err, sizeof err) == 0);
  CHECK(count_entries(dir) == 7);
  fixture_free(&f);
}

/* ---------------------------------------------------------------- corrupt files */

typedef struct {
  int n;
  char last[1024];
  char reason[512];
} skips;

static void on_skip(const char *path, const char *reason, void *arg) {
  skips *s = arg;
  s->n++;
  snprintf(s->last, sizeof s->last, "%s", path);
  snprintf(s->reason, sizeof s->reason, "%s", reason);
}

/* path must be refused with a reason containing `want`, and load_latest must fall back to
 * the older valid checkpoint in the same directory, reporting the skip. */
static void expect_refused(const char *dir, const char *path, const char *want,
                           const fixture *old) {
  pst_ckpt ck;
  char err[512] = "", got[1024];
  int rc = pst_ckpt_load(path, &ck, err, sizeof err);
  int ok = rc < 0 && strstr(err, want) && !strchr(err, '\n') && ck.n_tensors == 0;
  if (!ok) fprintf(stderr, "  want a refusal with '%s', got rc %d: %s\n", want, rc, err);
  CHECK(ok);
  pst_ckpt_free(&ck);
  skips s = {0};
  CHECK(pst_ckpt_load_latest(dir, NULL, on_skip, &s, &ck, got, sizeof got, err, sizeof err) == 0);
  CHECK(s.n == 1 && !strcmp(s.last, path) && strstr(s.reason, want));
  CHECK(strstr(got, "ckpt-000000000001.safetensors") && same_as(&ck, old));
  pst_ckpt_free(&ck);
}

static void write_header(const char *path, cJSON *root, const void *data, size_t dlen) {
  char *text = cJSON_PrintUnformatted(root);
  size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
  unsigned char *b = calloc(1, 8 + padded + dlen);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  memset(b + 8, ' ', padded);
  memcpy(b + 8, text, len);
  if (dlen) memcpy(b + 8 + padded, data, dlen);
  CHECK(write_all(path, b, 8 + padded + dlen) == 0);
  free(b);
  free(text);
  cJSON_Delete(root);
}

static cJSON *tensor_json(cJSON *root, const char *name, const char *dtype, int n, int b, int e) {
  cJSON *o = cJSON_AddObjectToObject(root, name);
  cJSON_AddStringToObject(o, "dtype", dtype);
  cJSON_AddItemToObject(o, "shape", cJSON_CreateIntArray(&n, 1));
  int offs[2] = {b, e};
  cJSON_AddItemToObject(o, "data_offsets", cJSON_CreateIntArray(offs, 2));
  return o;
}

static int only_v1(const pst_ckpt *c, void *arg, char *why, size_t whylen) {
  const char *v = pst_ckpt_meta(c, "version");
  if (v && !strcmp(v, "1")) return 0;
  snprintf(why, whylen, "not version 1");
  return 1;
}

static void test_corrupt(void) {
  fixture a, b;
  char dir[600], err[512], pa[1024], pb[1024];
  CHECK(fixture_init(&a, g_tiny, 11, "1") == 0 && fixture_init(&b, g_tiny, 12, "2") == 0);
  sub_dir("corrupt", dir, sizeof dir);
  CHECK(pst_ckpt_write(dir, 1, a.t, a.nt, a.meta, 3, 3, pa, sizeof pa, err, sizeof err) == 0);
  CHECK(pst_ckpt_write(dir, 2, b.t, b.nt, b.meta, 3, 3, pb, sizeof pb, err, sizeof err) == 0);
  long len;
  unsigned char *good = read_all(pb, &len), *x = malloc((size_t)len);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | good[i];

  CHECK(write_all(pb, good, (size_t)len - 100) == 0);
  expect_refused(dir, pb, "truncated", &a);
  CHECK(write_all(pb, good, 100) == 0);
  expect_refused(dir, pb, "truncated", &a);
  CHECK(write_all(pb, good, 5) == 0);
  expect_refused(dir, pb, "too short", &a);
  memcpy(x, good, (size_t)len);
  x[len - 3] ^= 0x10;
  CHECK(write_all(pb, x, (size_t)len) == 0);
  expect_refused(dir, pb, "data checksum mismatch (file truncated or corrupt?)", &a);
  memcpy(x, good, (size_t)len);
  x[8 + 40] ^= 0x02; /* inside the metadata's model_spec value */
  CHECK(write_all(pb, x, (size_t)len) == 0);
  expect_refused(dir, pb, "ckpt-000000000002.safetensors: ", &a);
  memcpy(x, good, (size_t)len);
  x[5] = 0x10; /* a header length of about 2^44 */
  CHECK(write_all(pb, x, (size_t)len) == 0);
  expect_refused(dir, pb, "absurd", &a);

  float data[6] = {1, 2, 3, 4, 5, 6};
  cJSON *r = cJSON_CreateObject();
  cJSON *md = cJSON_AddObjectToObject(r, "__metadata__");
  cJSON_AddStringToObject(md, "format", "pstrain-checkpoint");
  cJSON_AddStringToObject(md, "format_version", "1");
  tensor_json(r, "w", "F16", 3, 0, 12);
  tensor_json(r, "b", "F32", 3, 12, 24);
  write_header(pb, r, data, sizeof data);
  expect_refused(dir, pb, "dtype F16, not F32", &a);
  r = cJSON_CreateObject();
  md = cJSON_AddObjectToObject(r, "__metadata__");
  cJSON_AddStringToObject(md, "format", "pstrain-checkpoint");
  cJSON_AddStringToObject(md, "format_version", "1");
  tensor_json(r, "w", "F32", 4, 0, 16);
  tensor_json(r, "b", "F32", 2, 8, 16);
  write_header(pb, r, data, 16);
  expect_refused(dir, pb, "overlap", &a);
  r = cJSON_CreateObject(); /* a plain safetensors file, not ours */
  tensor_json(r, "w", "F32", 6, 0, 24);
  write_header(pb, r, data, sizeof data);
  expect_refused(dir, pb, "not a pstrain checkpoint", &a);

  /* Every single-bit flip anywhere in the file is refused (the header hash covers what the
   * data hash does not); one flip per byte, cycling through the bit positions. */
  CHECK(len < 4096);
  int refused = 0;
  for (long i = 0; i < len; i++) {
    memcpy(x, good, (size_t)len);
    x[i] ^= (unsigned char)(1u << (i % 8));
    CHECK(write_all(pb, x, (size_t)len) == 0);
    pst_ckpt ck;
    if (pst_ckpt_load(pb, &ck, err, sizeof err) < 0)
      refused++;
    else
      fprintf(stderr, "  flip at byte %ld (header is %" PRIu64 ") went unnoticed\n", i, hlen);
    pst_ckpt_free(&ck);
  }
  CHECK(refused == len);

  /* An accept callback may refuse the newest (say, another model's); the older one loads. */
  CHECK(write_all(pb, good, (size_t)len) == 0);
  pst_ckpt ck;
  skips s = {0};
  char got[1024];
  CHECK(pst_ckpt_load_latest(dir, only_v1, on_skip, &s, &ck, got, sizeof got, err, sizeof err) ==
        0);
  CHECK(s.n == 1 && !strcmp(s.last, pb) && !strcmp(s.reason, "not version 1") && same_as(&ck, &a));
  pst_ckpt_free(&ck);
  CHECK(pst_ckpt_load_latest(dir, NULL, NULL, NULL, &ck, NULL, 0, err, sizeof err) == 0 &&
        same_as(&ck, &b));
  pst_ckpt_free(&ck);
  /* Nothing valid, no checkpoint at all, no directory: -ENOENT with a reason. */
  unlink(pa);
  CHECK(write_all(pb, good, 9) == 0);
  s.n = 0;
  CHECK(pst_ckpt_load_latest(dir, NULL, on_skip, &s, &ck, got, sizeof got, err, sizeof err) ==
            -ENOENT &&
        s.n == 1 && strstr(err, "no valid checkpoint") && strstr(err, "1 skipped"));
  unlink(pb);
  CHECK(pst_ckpt_load_latest(dir, NULL, on_skip, &s, &ck, got, sizeof got, err, sizeof err) ==
            -ENOENT &&
        strstr(err, "no checkpoint in"));
  rm_dir(dir);
  CHECK(pst_ckpt_load_latest(dir, NULL, on_skip, &s, &ck, got, sizeof got, err, sizeof err) ==
            -ENOENT &&
        strstr(err, "no checkpoint directory"));
  CHECK(pst_ckpt_load(pb, &ck, err, sizeof err) == -ENOENT && strstr(err, "cannot open"));
  free(good);
  free(x);
  fixture_free(&a);
  fixture_free(&b);
}

/* ---------------------------------------------------------------- crash trials */

/* The temporary file a killed write left in dir, and its size (-1: none). */
static long temp_left(const char *dir) {
  DIR *d = opendir(dir);
  long size = -1;
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL)
    if (!strncmp(de->d_name, ".ckpt-", 6)) {
      char p[1024];
      snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
      size = file_size(p);
    }
  if (d) closedir(d);
  return size;
}

static void test_crashes(void) {
  char dir[600], scratch[600], err[512], path[1024];
  fixture a, b;
  CHECK(fixture_init(&a, g_tiny, 21, "1") == 0 && fixture_init(&b, g_tiny, 22, "2") == 0);
  sub_dir("scratch", scratch, sizeof scratch);
  CHECK(pst_ckpt_write(scratch, 2, b.t, b.nt, b.meta, 3, 3, path, sizeof path, err, sizeof err) ==
        0);
  long size = file_size(path);
  rm_dir(scratch);
  uint64_t seed = 20240601;
  int n_a = 0, n_b = 0, n_header = 0, n_data = 0, n_full = 0;
  for (int trial = 0; trial < 100; trial++) {
    sub_dir("crash", dir, sizeof dir);
    CHECK(pst_ckpt_write(dir, 1, a.t, a.nt, a.meta, 3, 3, NULL, 0, err, sizeof err) == 0);
    /* Every tenth trial dies right after the rename, every tenth (another) with the file
     * complete but not renamed, at a byte in [S, S + 8]; the others at a byte in [0, S + 8]. */
    int renamed = trial % 10 == 9;
    long at = renamed ? -1 : (long)(rnd(&seed) % (uint64_t)(size + 9));
    if (trial % 10 == 8) at = size + (long)(rnd(&seed) % 9);
    char at_s[32];
    snprintf(at_s, sizeof at_s, renamed ? "renamed" : "%ld", at);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_DUMPABLE, 0); /* no core files from the intended aborts */
      setenv("PSTRAIN_CKPT_FAULT_AT", at_s, 1);
      pst_ckpt_write(dir, 2, b.t, b.nt, b.meta, 3, 3, NULL, 0, err, sizeof err);
      _exit(3); /* the hook did not fire */
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    long left = temp_left(dir);
    if (renamed)
      CHECK(left == -1);
    else
      CHECK(left == (at <= size ? at : size)); /* the hook's documented semantics */
    if (!renamed && at < size - (long)(3 * a.m.n_params * sizeof(float)))
      n_header++;
    else if (!renamed && at < size)
      n_data++;
    else if (!renamed)
      n_full++;

    pst_ckpt ck;
    skips s = {0};
    int rc = pst_ckpt_load_latest(dir, NULL, on_skip, &s, &ck, path, sizeof path, err, sizeof err);
    CHECK(rc == 0 && s.n == 0);
    if (rc != 0) continue;
    if (renamed) {
      CHECK(same_as(&ck, &b) && strstr(path, "ckpt-000000000002.safetensors"));
      n_b++;
    } else {
      int ok = same_as(&ck, &a) && strstr(path, "ckpt-000000000001.safetensors");
      if (!ok)
        fprintf(stderr, "  trial %d (fault at %s of %ld): not checkpoint A\n", trial, at_s, size);
      CHECK(ok);
      n_a++;
    }
    pst_ckpt_free(&ck);
  }
  /* One more kill mid-file, then a clean write must remove its temporary file. */
  sub_dir("crash", dir, sizeof dir);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_DUMPABLE, 0);
    setenv("PSTRAIN_CKPT_FAULT_AT", "700", 1);
    pst_ckpt_write(dir, 2, b.t, b.nt, b.meta, 3, 3, NULL, 0, err, sizeof err);
    _exit(3);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
  printf(
      "crash trials: %d gave A, %d gave B (killed after the rename); killed in the header %d, "
      "in the data %d, after the last byte %d times (file %ld bytes)\n",
      n_a, n_b, n_header, n_data, n_full, size);
  CHECK(n_a == 90 && n_b == 10 && n_header > 0 && n_data > 0 && n_full >= 10);
  /* A write after a crash removes the crashed write's temporary file. */
  CHECK(temp_left(dir) == 700);
  CHECK(pst_ckpt_write(dir, 3, b.t, b.nt, b.meta, 3, 3, NULL, 0, err, sizeof err) == 0);
  CHECK(temp_left(dir) == -1);
  rm_dir(dir);
  fixture_free(&a);
  fixture_free(&b);
}

int main(void) {
  const char *base = getenv("TEST_TMPDIR");
  snprintf(g_root, sizeof g_root, "%s/ckpt-test-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(g_root)) {
    perror("mkdtemp");
    return 1;
  }
  unsetenv("PSTRAIN_CKPT_FAULT_AT");
  snprintf(g_tiny, sizeof g_tiny, "%s/tiny.spec", g_root);
  if (write_all(g_tiny, k_tiny_spec, strlen(k_tiny_spec)) != 0) {
    perror(g_tiny);
    return 1;
  }
  test_round_trip("mlp");
  test_round_trip("cnn2");
  test_api_edges();
  test_retention();
  test_corrupt();
  test_crashes();
  const char *subs[] = {"mlp", "cnn2", "edges", "retention", "corrupt", "crash", "scratch"};
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    char d[600];
    sub_dir(subs[i], d, sizeof d);
  }
  unlink(g_tiny);
  rmdir(g_root);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
