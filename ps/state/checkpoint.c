/* The checkpoint file format: writing and checking safetensors files (checkpoint.h). */
#include "ps/state/checkpoint.h"

#include "common/fnv.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps/state/atomic_file.h"
#include "ps/state/checkpoint_internal.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoints store float32 little-endian straight from memory: little-endian hosts only"
#endif

#define FNV_INIT PST_FNV1A64_BASIS
#define MAX_TENSORS 65536
#define MAX_META 1024
/* Integers a JSON double holds exactly; cJSON parses every number as a double. */
#define MAX_JSON_INT ((uint64_t)1 << 53)

static const char *const k_reserved[] = {"format", "format_version", "data_fnv1a64",
                                         "header_fnv1a64"};

static uint64_t fnv(uint64_t h, const void *data, size_t len) {
  return pst_fnv1a64_more(h, data, len);
}

static uint64_t fnv_u64(uint64_t h, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  return fnv(h, b, 8);
}

/* The header hash described in checkpoint.h; t[] and begin[] in the JSON's order. */
static uint64_t header_hash(const pst_ckpt_kv *meta, int nmeta, const pst_ckpt_tensor *t,
                            const uint64_t *begin, int nt) {
  uint64_t h = FNV_INIT;
  static const unsigned char zero = 0, one = 1;
  for (int i = 0; i < nmeta; i++) {
    if (!strcmp(meta[i].key, "header_fnv1a64")) continue;
    h = fnv(h, meta[i].key, strlen(meta[i].key));
    h = fnv(h, &zero, 1);
    h = fnv(h, meta[i].value, strlen(meta[i].value));
    h = fnv(h, &zero, 1);
  }
  h = fnv(h, &one, 1);
  for (int i = 0; i < nt; i++) {
    unsigned char nd = (unsigned char)t[i].ndim;
    h = fnv(h, t[i].name, strlen(t[i].name));
    h = fnv(h, &zero, 1);
    h = fnv(h, "F32", 3);
    h = fnv(h, &zero, 1);
    h = fnv(h, &nd, 1);
    for (int d = 0; d < t[i].ndim; d++) h = fnv_u64(h, (uint64_t)t[i].shape[d]);
    h = fnv_u64(h, begin[i]);
    h = fnv_u64(h, begin[i] + 4 * (uint64_t)t[i].count);
  }
  return h;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that occurs twice among n, or NULL (NULL too when out of memory: the
 * caller's other checks still hold, and a duplicate is then caught by safetensors readers). */
static const char *duplicate(const char *const *names, int n) {
  if (n < 2) return NULL;
  const char **s = malloc((size_t)n * sizeof *s);
  if (!s) return NULL;
  memcpy(s, names, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_str);
  const char *dup = NULL;
  for (int i = 1; i < n && !dup; i++)
    if (!strcmp(s[i - 1], s[i])) dup = s[i];
  free(s);
  return dup;
}

/* Product of the dimensions, or -1 on overflow past SIZE_MAX / 4. */
static int64_t shape_count(const int64_t *shape, int ndim) {
  uint64_t c = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0) return -1;
    if (__builtin_mul_overflow(c, (uint64_t)shape[d], &c) || c > SIZE_MAX / 4 ||
        c > (uint64_t)INT64_MAX)
      return -1;
  }
  return (int64_t)c;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* ---------------------------------------------------------------- model-shaped vectors */

/* given: layers with a name= are named by it (what is written); 0: every layer by its
 * automatic Keras name, as builds before 2026-11-25 named them all (read as a fallback). */
static int model_tensors(const pst_model *m, const float *vec, const char *prefix, int given,
                         pst_ckpt_tensor *out, size_t *offs, int max) {
  int n = 0;
  size_t next = 0;
  for (int i = 1; i < m->n_layers; i++) {
    const pst_layer *L = &m->layers[i];
    if (L->kind != PST_LAYER_DENSE && L->kind != PST_LAYER_CONV2D &&
        L->kind != PST_LAYER_DEPTHWISE_CONV2D && L->kind != PST_LAYER_BATCHNORM)
      continue;
    char layer[PST_MODEL_MAX_NAME + 32];
    pst_model_layer_name(m, i, given, layer, sizeof layer);
    /* Parts: kernel, bias; batchnorm's gamma, beta, moving_mean, moving_variance (Keras's
     * names and order), the last two the halves of its state. */
    int bn = L->kind == PST_LAYER_BATCHNORM;
    for (int part = 0; part < (bn ? 4 : 2); part++) {
      size_t off = part == 0   ? L->w_offset
                   : part == 1 ? L->b_offset
                               : L->s_offset + (size_t)(part - 2) * (L->s_count / 2);
      size_t count = part == 0 ? L->w_count : part == 1 ? L->b_count : L->s_count / 2;
      if (count == 0) continue;
      /* The concatenation must be the vector itself (the weights checksum of a file is then
       * the ps's checksum of its vector); model/layer_line.c lays layers out so, check it anyway. */
      if (off != next) return -EINVAL;
      next += count;
      if (n >= max) return -ENOSPC;
      pst_ckpt_tensor *t = &out[n];
      memset(t, 0, sizeof *t);
      /* Keras names a depthwise layer's weights depthwise_kernel. */
      static const char *const bn_parts[] = {"gamma", "beta", "moving_mean", "moving_variance"};
      int len = snprintf(t->name, sizeof t->name, "%s%s/%s", prefix, layer,
                         bn                                      ? bn_parts[part]
                         : part                                  ? "bias"
                         : L->kind == PST_LAYER_DEPTHWISE_CONV2D ? "depthwise_kernel"
                                                                 : "kernel");
      if (len < 0 || (size_t)len >= sizeof t->name) return -ENAMETOOLONG;
      t->data = vec ? vec + off : NULL;
      t->count = count;
      if (part || bn) {
        t->ndim = 1;
        t->shape[0] = (int64_t)count;
      } else if (L->kind == PST_LAYER_DENSE) {
        t->ndim = 2;
        t->shape[0] = (int64_t)(count / (size_t)L->units);
        t->shape[1] = L->units;
      } else if (L->kind == PST_LAYER_DEPTHWISE_CONV2D) {
        /* [C, KH, KW, 1]: the conv2d layout (OHWI) with one input channel per filter. */
        t->ndim = 4;
        t->shape[0] = L->in_c;
        t->shape[1] = L->k_h;
        t->shape[2] = L->k_w;
        t->shape[3] = 1;
      } else {
        t->ndim = 4;
        t->shape[0] = L->filters;
        t->shape[1] = L->k_h;
        t->shape[2] = L->k_w;
        t->shape[3] = (int64_t)(count / ((size_t)L->filters * (size_t)L->k_h * (size_t)L->k_w));
      }
      if (shape_count(t->shape, t->ndim) != (int64_t)count) return -EINVAL;
      if (offs) offs[n] = off;
      n++;
    }
  }
  return next == m->n_params ? n : -EINVAL;
}

int pst_ckpt_model_tensors(const pst_model *m, const float *vec, const char *prefix,
                           pst_ckpt_tensor *out, int max) {
  return model_tensors(m, vec, prefix ? prefix : "", 1, out, NULL, max);
}

/* ---------------------------------------------------------------- writing */

static int check_tensors(const pst_ckpt_tensor *t, int nt, char *err, size_t errlen) {
  if (nt < 0 || nt > MAX_TENSORS) {
    snprintf(err, errlen, "%d tensors (at most %d)", nt, MAX_TENSORS);
    return -EINVAL;
  }
  const char **names = malloc(((size_t)nt + 1) * sizeof *names);
  if (!names) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  for (int i = 0; i < nt; i++) {
    const char *why = NULL;
    if (!memchr(t[i].name, '\0', sizeof t[i].name)) why = "name not terminated";
    else if (!t[i].name[0] || !strcmp(t[i].name, "__metadata__")) why = "name not allowed";
    else if (t[i].ndim < 0 || t[i].ndim > PST_CKPT_MAX_DIMS) why = "ndim out of range";
    else if (shape_count(t[i].shape, t[i].ndim) != (int64_t)t[i].count)
      why = "shape does not match count";
    else if (t[i].count && !t[i].data) why = "no data";
    if (why) {
      snprintf(err, errlen, "tensor %d ('%.*s'): %s", i, (int)sizeof t[i].name - 1,
               t[i].name, why);
      free(names);
      return -EINVAL;
    }
    names[i] = t[i].name;
  }
  const char *dup = duplicate(names, nt);
  if (dup) snprintf(err, errlen, "tensor '%s' given twice", dup);
  free(names);
  return dup ? -EINVAL : 0;
}

static int check_meta(const pst_ckpt_kv *meta, int nmeta, char *err, size_t errlen) {
  if (nmeta < 0 || nmeta > MAX_META - 4) {
    snprintf(err, errlen, "%d metadata entries (at most %d)", nmeta, MAX_META - 4);
    return -EINVAL;
  }
  const char *names[MAX_META];
  for (int i = 0; i < nmeta; i++) {
    if (!meta[i].key || !meta[i].key[0] || !meta[i].value) {
      snprintf(err, errlen, "metadata entry %d has no key or value", i);
      return -EINVAL;
    }
    for (size_t r = 0; r < sizeof k_reserved / sizeof k_reserved[0]; r++)
      if (!strcmp(meta[i].key, k_reserved[r])) {
        snprintf(err, errlen, "metadata key '%s' is the checkpoint module's own", k_reserved[r]);
        return -EINVAL;
      }
    names[i] = meta[i].key;
  }
  const char *dup = duplicate(names, nmeta);
  if (dup) {
    snprintf(err, errlen, "metadata key '%.100s' given twice", dup);
    return -EINVAL;
  }
  return 0;
}

/* The header JSON: metadata first (as Python's safetensors writes it), then the tensors. */
static char *header_json(const pst_ckpt_tensor *t, int nt, const uint64_t *begin,
                         const pst_ckpt_kv *meta, int nmeta) {
  cJSON *root = cJSON_CreateObject();
  cJSON *md = cJSON_AddObjectToObject(root, "__metadata__");
  int ok = root && md;
  for (int i = 0; ok && i < nmeta; i++)
    ok = cJSON_AddStringToObject(md, meta[i].key, meta[i].value) != NULL;
  for (int i = 0; ok && i < nt; i++) {
    cJSON *o = cJSON_AddObjectToObject(root, t[i].name);
    cJSON *dtype = o ? cJSON_AddStringToObject(o, "dtype", "F32") : NULL;
    cJSON *shape = dtype ? cJSON_AddArrayToObject(o, "shape") : NULL;
    cJSON *offs = shape ? cJSON_AddArrayToObject(o, "data_offsets") : NULL;
    ok = offs != NULL;
    for (int d = 0; ok && d < t[i].ndim; d++)
      ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
    ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)begin[i])) &&
         cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(begin[i] + 4 * t[i].count)));
  }
  char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  return text;
}

int pst_ckpt_write_faulty(const char *path, const pst_ckpt_tensor *t, int nt,
                          const pst_ckpt_kv *meta, int nmeta, int64_t fault_at,
                          int fault_renamed, char *err, size_t errlen) {
  int rc = check_tensors(t, nt, err, errlen);
  if (rc == 0) rc = check_meta(meta, nmeta, err, errlen);
  if (rc < 0) return rc;

  uint64_t *begin = malloc(((size_t)nt + 1) * sizeof *begin);
  pst_ckpt_kv *all = malloc(((size_t)nmeta + 4) * sizeof *all);
  if (!begin || !all) {
    free(begin);
    free(all);
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  uint64_t pos = 0, dh = FNV_INIT;
  for (int i = 0; i < nt; i++) {
    begin[i] = pos;
    pos += 4 * (uint64_t)t[i].count;
    if (t[i].count) dh = fnv(dh, t[i].data, 4 * t[i].count);
  }
  char dhex[17], hhex[17];
  snprintf(dhex, sizeof dhex, "%016" PRIx64, dh);
  if (nmeta) memcpy(all, meta, (size_t)nmeta * sizeof *all);
  all[nmeta] = (pst_ckpt_kv){"format", "pstrain-checkpoint"};
  all[nmeta + 1] = (pst_ckpt_kv){"format_version", "1"};
  all[nmeta + 2] = (pst_ckpt_kv){"data_fnv1a64", dhex};
  snprintf(hhex, sizeof hhex, "%016" PRIx64, header_hash(all, nmeta + 3, t, begin, nt));
  all[nmeta + 3] = (pst_ckpt_kv){"header_fnv1a64", hhex};
  char *text = header_json(t, nt, begin, all, nmeta + 4);
  free(begin);
  free(all);
  if (!text) {
    snprintf(err, errlen, "out of memory building the header");
    return -ENOMEM;
  }
  size_t len = strlen(text);
  uint64_t padded = ((uint64_t)len + 7) & ~(uint64_t)7;
  if (padded > PST_CKPT_MAX_HEADER) {
    snprintf(err, errlen, "header of %zu bytes is larger than the %" PRIu64 " readers accept",
             len, PST_CKPT_MAX_HEADER);
    cJSON_free(text);
    return -E2BIG;
  }

  pst_afile f;
  rc = pst_afile_open(&f, path, 0640, err, errlen);
  if (rc < 0) {
    cJSON_free(text);
    return rc;
  }
  f.fault_at = fault_at;
  f.fault_renamed = fault_renamed;
  unsigned char lenb[8];
  for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)(padded >> (8 * i));
  static const char spaces[8] = "        ";
  rc = pst_afile_write(&f, lenb, 8, err, errlen);
  if (rc == 0) rc = pst_afile_write(&f, text, len, err, errlen);
  if (rc == 0) rc = pst_afile_write(&f, spaces, (size_t)(padded - len), err, errlen);
  cJSON_free(text);
  for (int i = 0; rc == 0 && i < nt; i++)
    rc = pst_afile_write(&f, t[i].data, 4 * t[i].count, err, errlen);
  if (rc == 0) return pst_afile_commit(&f, err, errlen);
  pst_afile_discard(&f);
  return rc;
}

int pst_ckpt_write_file(const char *path, const pst_ckpt_tensor *t, int nt,
                        const pst_ckpt_kv *meta, int nmeta, char *err, size_t errlen) {
  return pst_ckpt_write_faulty(path, t, nt, meta, nmeta, -1, 0, err, errlen);
}

/* ---------------------------------------------------------------- loading */

static int pread_full(int fd, void *buf, size_t n, off_t off) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -errno;
    if (r == 0) return -EIO; /* the file shrank while being read */
    p += r;
    n -= (size_t)r;
    off += r;
  }
  return 0;
}

/* A JSON number that is an integer in [0, 2^53]. */
static int json_u64(const cJSON *j, uint64_t *v) {
  if (!cJSON_IsNumber(j)) return -1;
  double d = j->valuedouble;
  if (!(d >= 0 && d <= (double)MAX_JSON_INT) || d != (double)(uint64_t)d) return -1;
  *v = (uint64_t)d;
  return 0;
}

static int parse_hex64(const char *s, uint64_t *v) {
  if (!s || strlen(s) != 16) return -1;
  uint64_t x = 0;
  for (int i = 0; i < 16; i++) {
    int c = s[i], d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return -1;
    x = x << 4 | (uint64_t)d;
  }
  *v = x;
  return 0;
}

/* A tensor's place in the data section, sorted by offset (ties: by size, then file order,
 * so that zero-sized tensors sort deterministically). */
typedef struct {
  uint64_t begin, end;
  int idx;
} span;

static int cmp_span(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

#define FAIL(code, ...)                                         \
  do {                                                          \
    int n_ = snprintf(err, errlen, "%s: ", ck->file);           \
    if (n_ >= 0 && (size_t)n_ < errlen)                         \
      snprintf(err + n_, errlen - (size_t)n_, __VA_ARGS__);     \
    rc = (code);                                                \
    goto out;                                                   \
  } while (0)

/* Checks the header (hdr[hlen]) against the data section and fills ck; on failure ck keeps
 * nothing (the caller frees data). */
static int parse_header(pst_ckpt *ck, const char *hdr, size_t hlen, const unsigned char *data,
                        size_t dlen, char *err, size_t errlen) {
  int rc = 0, nt = 0, nmeta = 0;
  pst_ckpt_tensor *t = NULL;
  uint64_t *begin = NULL;
  span *order = NULL;
  const char **names = NULL;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(hdr, hlen, &end, 0);
  cJSON *md = NULL;
  if (!root || !cJSON_IsObject(root)) FAIL(-EINVAL, "header is not a JSON object (corrupt file?)");
  for (const char *p = end; p < hdr + hlen; p++)
    if (*p != ' ') FAIL(-EINVAL, "bytes after the header's JSON (corrupt file?)");
  for (cJSON *c = root->child; c; c = c->next) {
    if (strcmp(c->string, "__metadata__") != 0) nt++;
    else if (md) FAIL(-EINVAL, "two __metadata__ objects");
    else md = c;
  }
  if (nt > MAX_TENSORS) FAIL(-EINVAL, "%d tensors (at most %d)", nt, MAX_TENSORS);
  if (!md || !cJSON_IsObject(md)) FAIL(-EINVAL, "no __metadata__ object: not a pstrain checkpoint");
  for (cJSON *c = md->child; c; c = c->next, nmeta++)
    if (!cJSON_IsString(c)) FAIL(-EINVAL, "metadata '%.60s' is not a string", c->string);
  if (nmeta > MAX_META) FAIL(-EINVAL, "%d metadata entries (at most %d)", nmeta, MAX_META);

  t = calloc((size_t)nt + 1, sizeof *t);
  begin = calloc((size_t)nt + 1, sizeof *begin);
  order = calloc((size_t)nt + 1, sizeof *order);
  names = calloc((size_t)(nt > nmeta ? nt : nmeta) + 1, sizeof *names);
  ck->meta = calloc((size_t)nmeta + 1, sizeof *ck->meta);
  if (!t || !begin || !order || !names || !ck->meta) FAIL(-ENOMEM, "out of memory");
  int i = 0;
  for (cJSON *c = root->child; c; c = c->next) {
    if (c == md) continue;
    const char *name = c->string;
    if (strlen(name) >= PST_CKPT_NAME_MAX)
      FAIL(-EINVAL, "tensor name '%.60s...' longer than %d bytes", name, PST_CKPT_NAME_MAX - 1);
    snprintf(t[i].name, sizeof t[i].name, "%s", name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(c, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(c, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(c, "data_offsets");
    if (!cJSON_IsObject(c) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of))
      FAIL(-EINVAL, "tensor '%s' lacks dtype, shape or data_offsets", name);
    if (strcmp(dt->valuestring, "F32") != 0)
      FAIL(-EINVAL, "tensor '%s' has dtype %.20s, not F32", name, dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    if (nd > PST_CKPT_MAX_DIMS)
      FAIL(-EINVAL, "tensor '%s' has %d dimensions (at most %d)", name, nd, PST_CKPT_MAX_DIMS);
    t[i].ndim = nd;
    int d = 0;
    for (const cJSON *x = sh->child; x; x = x->next, d++) {
      uint64_t v;
      if (json_u64(x, &v) < 0) FAIL(-EINVAL, "tensor '%s' has a bad shape", name);
      t[i].shape[d] = (int64_t)v;
    }
    uint64_t b, e;
    if (cJSON_GetArraySize(of) != 2 || json_u64(of->child, &b) < 0 ||
        json_u64(of->child->next, &e) < 0 || e < b)
      FAIL(-EINVAL, "tensor '%s' has bad data_offsets", name);
    if (e > dlen)
      FAIL(-EINVAL,
           "tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] run past the %zu-byte data "
           "section (file truncated?)",
           name, b, e, dlen);
    int64_t count = shape_count(t[i].shape, nd);
    if (count < 0 || 4 * (uint64_t)count != e - b)
      FAIL(-EINVAL,
           "tensor '%s': its shape wants %" PRId64 " floats, its data_offsets hold %" PRIu64
           " bytes",
           name, count, e - b);
    t[i].count = (size_t)count;
    begin[i] = b;
    names[i] = t[i].name;
    i++;
  }
  const char *dup = duplicate(names, nt);
  if (dup) FAIL(-EINVAL, "tensor '%s' appears twice", dup);
  /* In data order the tensors must tile the data section exactly, as safetensors demands. */
  for (i = 0; i < nt; i++) order[i] = (span){begin[i], begin[i] + 4 * (uint64_t)t[i].count, i};
  qsort(order, (size_t)nt, sizeof *order, cmp_span);
  uint64_t pos = 0;
  for (i = 0; i < nt; i++) {
    if (order[i].begin < pos)
      FAIL(-EINVAL, "tensors '%s' and '%s' overlap", t[order[i - 1].idx].name,
           t[order[i].idx].name);
    if (order[i].begin > pos)
      FAIL(-EINVAL, "gap before tensor '%s' in the data section", t[order[i].idx].name);
    pos = order[i].end;
  }
  if (pos != dlen)
    FAIL(-EINVAL, "%" PRIu64 " stray bytes after the last tensor (corrupt file?)", dlen - pos);
  i = 0;
  for (cJSON *c = md->child; c; c = c->next, i++) {
    ck->meta[i].key = c->string;
    ck->meta[i].value = c->valuestring;
    names[i] = c->string;
  }
  ck->n_meta = nmeta;
  if ((dup = duplicate(names, nmeta)) != NULL) FAIL(-EINVAL, "metadata '%.60s' appears twice", dup);
  const char *fmt = pst_ckpt_meta(ck, "format"), *ver = pst_ckpt_meta(ck, "format_version");
  uint64_t want_dh, want_hh;
  if (!fmt || strcmp(fmt, "pstrain-checkpoint") != 0)
    FAIL(-EINVAL, "not a pstrain checkpoint (metadata 'format' is %s%.40s%s)", fmt ? "'" : "",
         fmt ? fmt : "missing", fmt ? "'" : "");
  if (!ver || strcmp(ver, "1") != 0)
    FAIL(-EINVAL, "checkpoint format_version '%.20s' is not 1 (written by a newer pstrain?)",
         ver ? ver : "(missing)");
  if (parse_hex64(pst_ckpt_meta(ck, "data_fnv1a64"), &want_dh) < 0 ||
      parse_hex64(pst_ckpt_meta(ck, "header_fnv1a64"), &want_hh) < 0)
    FAIL(-EINVAL, "metadata data_fnv1a64 or header_fnv1a64 missing or not 16 hex digits");

  if (header_hash(ck->meta, nmeta, t, begin, nt) != want_hh)
    FAIL(-EINVAL, "header checksum mismatch (file corrupt?)");
  if (fnv(FNV_INIT, data, dlen) != want_dh)
    FAIL(-EINVAL, "data checksum mismatch (file truncated or corrupt?)");

  ck->tensors = calloc((size_t)nt + 1, sizeof *ck->tensors);
  if (!ck->tensors) FAIL(-ENOMEM, "out of memory");
  for (i = 0; i < nt; i++) {
    ck->tensors[i] = t[order[i].idx];
    ck->tensors[i].data = (const float *)(data + order[i].begin);
  }
  ck->n_tensors = nt;
  ck->json_ = root;
  root = NULL;
out:
  if (rc < 0) {
    free(ck->meta);
    ck->meta = NULL;
    ck->n_meta = 0;
  }
  cJSON_Delete(root);
  free(t);
  free(begin);
  free(order);
  free(names);
  return rc;
}

int pst_ckpt_load(const char *path, pst_ckpt *ck, char *err, size_t errlen) {
  memset(ck, 0, sizeof *ck);
  snprintf(ck->file, sizeof ck->file, "%s", base_name(path));
  int rc = 0, fd;
  char *hdr = NULL;
  unsigned char *data = NULL;
  do {
    fd = open(path, O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    rc = -errno;
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return rc;
  }
  struct stat st;
  unsigned char lenb[8];
  if (fstat(fd, &st) != 0) {
    int e = errno;
    FAIL(-e, "cannot stat: %s", strerror(e));
  }
  if (!S_ISREG(st.st_mode)) FAIL(-EINVAL, "not a regular file");
  if (st.st_size < 8)
    FAIL(-EINVAL, "%lld bytes is too short for a checkpoint (truncated?)", (long long)st.st_size);
  if ((rc = pread_full(fd, lenb, 8, 0)) < 0) FAIL(rc, "cannot read: %s", strerror(-rc));
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenb[i];
  if (hlen < 2 || hlen > PST_CKPT_MAX_HEADER)
    FAIL(-EINVAL, "header length %" PRIu64 " is absurd (not a checkpoint, or corrupt)", hlen);
  if (hlen > (uint64_t)st.st_size - 8)
    FAIL(-EINVAL, "header length %" PRIu64 " runs past the end of the %lld-byte file (truncated?)",
         hlen, (long long)st.st_size);
  size_t dlen = (size_t)((uint64_t)st.st_size - 8 - hlen);
  hdr = malloc((size_t)hlen);
  data = malloc(dlen ? dlen : 1);
  if (!hdr || !data) FAIL(-ENOMEM, "out of memory for %zu bytes of tensors", dlen);
  if ((rc = pread_full(fd, hdr, (size_t)hlen, 8)) < 0 ||
      (rc = pread_full(fd, data, dlen, (off_t)(8 + hlen))) < 0)
    FAIL(rc, "cannot read: %s", rc == -EIO ? "file changed while being read" : strerror(-rc));
  rc = parse_header(ck, hdr, (size_t)hlen, data, dlen, err, errlen);
  if (rc == 0) {
    ck->data_ = data;
    ck->data_bytes = dlen;
    data = NULL;
  }
out:
  close(fd);
  free(hdr);
  free(data);
  return rc;
}

const char *pst_ckpt_meta(const pst_ckpt *ck, const char *key) {
  for (int i = 0; i < ck->n_meta; i++)
    if (!strcmp(ck->meta[i].key, key)) return ck->meta[i].value;
  return NULL;
}

const float *pst_ckpt_find(const pst_ckpt *ck, const char *name, size_t *count) {
  for (int i = 0; i < ck->n_tensors; i++)
    if (!strcmp(ck->tensors[i].name, name)) {
      if (count) *count = ck->tensors[i].count;
      return ck->tensors[i].data;
    }
  return NULL;
}

static void shape_text(const int64_t *shape, int ndim, char *out, size_t outlen) {
  size_t n = (size_t)snprintf(out, outlen, "[");
  for (int d = 0; d < ndim && n < outlen; d++)
    n += (size_t)snprintf(out + n, outlen - n, "%s%" PRId64, d ? ", " : "", shape[d]);
  if (n < outlen) snprintf(out + n, outlen - n, "]");
}

static const pst_ckpt_tensor *find_tensor(const pst_ckpt *ck, const char *name) {
  for (int j = 0; j < ck->n_tensors; j++)
    if (!strcmp(ck->tensors[j].name, name)) return &ck->tensors[j];
  return NULL;
}

int pst_ckpt_read_model(const pst_ckpt *ck, const pst_model *m, const char *prefix, float *vec,
                        char *err, size_t errlen) {
  pst_ckpt_tensor want[PST_CKPT_MAX_MODEL_TENSORS];
  size_t offs[PST_CKPT_MAX_MODEL_TENSORS];
  const char *pre = prefix ? prefix : "";
  int n = model_tensors(m, NULL, pre, 1, want, offs, PST_CKPT_MAX_MODEL_TENSORS);
  if (n < 0) {
    snprintf(err, errlen, "%s: cannot name the model's tensors: %s", ck->file, strerror(-n));
    return n;
  }
  pst_ckpt_tensor *autos = NULL; /* the automatic names, made when a name is missing */
  for (int i = 0; i < n; i++) {
    const pst_ckpt_tensor *have = find_tensor(ck, want[i].name);
    /* A checkpoint from a build that named every layer automatically, name= or not. */
    if (!have && !autos && (autos = malloc(PST_CKPT_MAX_MODEL_TENSORS * sizeof *autos)) != NULL &&
        model_tensors(m, NULL, pre, 0, autos, NULL, PST_CKPT_MAX_MODEL_TENSORS) != n) {
      free(autos);
      autos = NULL;
    }
    if (!have && autos) have = find_tensor(ck, autos[i].name);
    if (!have) {
      snprintf(err, errlen, "%s: no tensor '%s' (a checkpoint of another model?)", ck->file,
               want[i].name);
      free(autos);
      return -ENOENT;
    }
    int same = have->ndim == want[i].ndim;
    for (int d = 0; same && d < want[i].ndim; d++) same = have->shape[d] == want[i].shape[d];
    if (!same) {
      char a[80], b[80];
      shape_text(have->shape, have->ndim, a, sizeof a);
      shape_text(want[i].shape, want[i].ndim, b, sizeof b);
      snprintf(err, errlen, "%s: tensor '%s' has shape %s, the model wants %s", ck->file,
               want[i].name, a, b);
      free(autos);
      return -EINVAL;
    }
    memcpy(vec + offs[i], have->data, have->count * sizeof(float));
  }
  free(autos);
  return 0;
}

void pst_ckpt_free(pst_ckpt *ck) {
  free(ck->tensors);
  free(ck->meta);
  free(ck->data_);
  cJSON_Delete(ck->json_);
  ck->tensors = NULL;
  ck->meta = NULL;
  ck->data_ = NULL;
  ck->json_ = NULL;
  ck->n_tensors = ck->n_meta = 0;
  ck->data_bytes = 0;
}
