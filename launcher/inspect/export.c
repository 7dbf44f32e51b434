/* `pstrain export`: a checkpoint's weights (every tensor not under "optimizer/") for
 * inference elsewhere, as safetensors or as NumPy's npz, written atomically.
 *
 * npz is a ZIP archive of .npy files. The entries are stored (not compressed), so that each
 * tensor's bytes are copied once, and the archive is plain ZIP (no ZIP64): weights are at
 * most 1 GiB (model/layer_line.c), well under ZIP's 4 GiB offsets; anything larger is refused
 * rather than written wrong. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "model/model.h"
#include "kernels/partition.h"
#include "launcher/commands.h"
#include "ps/state/atomic_file.h"
#include "ps/state/checkpoint.h"

#define OPT_PREFIX "optimizer/"
#define NPY_ALIGN 64
#define ZIP_MAX 0xFFFFFFFFull
/* 1980-01-01 00:00, the earliest DOS date: a fixed time keeps exports byte-reproducible. */
#define DOS_TIME 0
#define DOS_DATE ((1 << 5) | 1)

static void usage(FILE *out) {
  fprintf(out,
          "usage: pstrain export CHECKPOINT [--format safetensors|npz] [--out FILE]\n"
          "       pstrain export SHARD0 SHARD1 ... [--format ...] [--out FILE]\n\n"
          "Writes the weights of a checkpoint (every tensor not under optimizer/) for inference\n"
          "elsewhere. A job with ps shards has one checkpoint per shard (DIR/shard-I-of-K):\n"
          "give the K checkpoints of one version, in any order, and they are joined into the\n"
          "model's tensors.\n"
          "  safetensors  one safetensors file (default); the metadata model_spec,\n"
          "               (model_)fingerprint and version are kept\n"
          "  npz          NumPy's format: one NAME.npy per tensor (dense/kernel.npy, ...), for\n"
          "               numpy.load\n"
          "--out defaults to the checkpoint's base name with the format's extension, in the\n"
          "current directory. Shapes are pstrain's layouts: dense kernel [in, out], conv2d\n"
          "kernel [Cout, KH, KW, Cin], depthwise_conv2d depthwise_kernel [C, KH, KW, 1],\n"
          "bias [out].\n");
}

static void put16(unsigned char *p, unsigned v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* The .npy v1.0 header for a little-endian float32 C-order array: magic, version, length,
 * then the dict padded with spaces and a newline so that the data starts 64-byte aligned. */
static size_t npy_header(const pst_ckpt_tensor *t, unsigned char *out, size_t outlen) {
  char shape[128] = "";
  size_t n = 0;
  for (int d = 0; d < t->ndim; d++)
    n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", d ? ", " : "",
                          (long long)t->shape[d]);
  if (t->ndim == 1) snprintf(shape + n, sizeof shape - n, ",");
  char dict[256];
  int dl = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }",
                    shape);
  size_t total = 10 + (size_t)dl + 1;
  size_t pad = (NPY_ALIGN - total % NPY_ALIGN) % NPY_ALIGN;
  size_t hlen = (size_t)dl + pad + 1;
  if (10 + hlen > outlen) return 0;
  memcpy(out, "\x93NUMPY\x01\x00", 8);
  put16(out + 8, (unsigned)hlen);
  memcpy(out + 10, dict, (size_t)dl);
  memset(out + 10 + dl, ' ', pad);
  out[10 + hlen - 1] = '\n';
  return 10 + hlen;
}

static uLong crc_bytes(uLong crc, const void *p, size_t n) {
  const Bytef *b = p;
  while (n > 0) {
    uInt piece = n > (1u << 30) ? (1u << 30) : (uInt)n;
    crc = crc32(crc, b, piece);
    b += piece;
    n -= piece;
  }
  return crc;
}

typedef struct {
  char name[PST_CKPT_NAME_MAX + 8];
  uLong crc;
  uint64_t size, offset;
} zip_entry;

static int write_npz(const char *path, const pst_ckpt_tensor *t, int nt, char *err, size_t errlen) {
  zip_entry *e = calloc((size_t)nt + 1, sizeof *e);
  if (!e) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  pst_afile f;
  int rc = pst_afile_open(&f, path, 0644, err, errlen);
  if (rc < 0) {
    free(e);
    return rc;
  }
  unsigned char hdr[512], npy[512];
  for (int i = 0; rc == 0 && i < nt; i++) {
    size_t hl = npy_header(&t[i], npy, sizeof npy);
    snprintf(e[i].name, sizeof e[i].name, "%s.npy", t[i].name);
    size_t nl = strlen(e[i].name);
    e[i].crc = crc_bytes(crc_bytes(crc32(0, Z_NULL, 0), npy, hl), t[i].data, 4 * t[i].count);
    e[i].size = hl + 4 * (uint64_t)t[i].count;
    e[i].offset = f.written;
    if (!hl || e[i].offset + 30 + nl + e[i].size > ZIP_MAX) {
      snprintf(err, errlen, "tensor %s: too large for an npz without ZIP64", t[i].name);
      rc = -EFBIG;
      break;
    }
    put32(hdr, 0x04034b50);   /* local file header */
    put16(hdr + 4, 20);       /* version needed: 2.0 */
    put16(hdr + 6, 0);        /* flags */
    put16(hdr + 8, 0);        /* stored */
    put16(hdr + 10, DOS_TIME);
    put16(hdr + 12, DOS_DATE);
    put32(hdr + 14, e[i].crc);
    put32(hdr + 18, e[i].size); /* compressed = uncompressed */
    put32(hdr + 22, e[i].size);
    put16(hdr + 26, (unsigned)nl);
    put16(hdr + 28, 0);       /* no extra field */
    memcpy(hdr + 30, e[i].name, nl);
    rc = pst_afile_write(&f, hdr, 30 + nl, err, errlen);
    if (rc == 0) rc = pst_afile_write(&f, npy, hl, err, errlen);
    if (rc == 0) rc = pst_afile_write(&f, t[i].data, 4 * t[i].count, err, errlen);
  }
  uint64_t cd_start = f.written;
  for (int i = 0; rc == 0 && i < nt; i++) {
    size_t nl = strlen(e[i].name);
    put32(hdr, 0x02014b50);   /* central directory header */
    put16(hdr + 4, 0x0314);   /* made by: Unix, 2.0 */
    put16(hdr + 6, 20);
    put16(hdr + 8, 0);
    put16(hdr + 10, 0);
    put16(hdr + 12, DOS_TIME);
    put16(hdr + 14, DOS_DATE);
    put32(hdr + 16, e[i].crc);
    put32(hdr + 20, e[i].size);
    put32(hdr + 24, e[i].size);
    put16(hdr + 28, (unsigned)nl);
    put16(hdr + 30, 0);       /* extra */
    put16(hdr + 32, 0);       /* comment */
    put16(hdr + 34, 0);       /* disk */
    put16(hdr + 36, 0);       /* internal attributes */
    put32(hdr + 38, (uint64_t)0100644 << 16); /* a regular file, rw-r--r-- */
    put32(hdr + 42, e[i].offset);
    memcpy(hdr + 46, e[i].name, nl);
    rc = pst_afile_write(&f, hdr, 46 + nl, err, errlen);
  }
  if (rc == 0 && (f.written + 22 > ZIP_MAX || nt > 0xFFFF)) {
    snprintf(err, errlen, "too large for an npz without ZIP64");
    rc = -EFBIG;
  }
  if (rc == 0) {
    put32(hdr, 0x06054b50);   /* end of central directory */
    put16(hdr + 4, 0);
    put16(hdr + 6, 0);
    put16(hdr + 8, (unsigned)nt);
    put16(hdr + 10, (unsigned)nt);
    put32(hdr + 12, f.written - cd_start);
    put32(hdr + 16, cd_start);
    put16(hdr + 20, 0);
    rc = pst_afile_write(&f, hdr, 22, err, errlen);
  }
  free(e);
  if (rc == 0) return pst_afile_commit(&f, err, errlen);
  pst_afile_discard(&f);
  return rc;
}

/* --out's default: the checkpoint's base name with `ext` for its extension. */
static void default_out(const char *ckpt, const char *ext, char *out, size_t outlen) {
  const char *base = strrchr(ckpt, '/');
  base = base ? base + 1 : ckpt;
  const char *dot = strrchr(base, '.');
  size_t stem = dot && dot != base ? (size_t)(dot - base) : strlen(base);
  snprintf(out, outlen, "%.*s.%s", (int)stem, base, ext);
}

/* Flags as "--name VALUE" or "--name=VALUE": the value, or NULL when argv[*i] is another. */
static const char *flag_value(int argc, char **argv, int *i, const char *name, int *missing) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] != '\0') return NULL;
  if (*i + 1 >= argc) {
    *missing = 1;
    return NULL;
  }
  return argv[++*i];
}

/* The weights of K shard checkpoints of one version, joined into the model's tensors
 * (kernels/partition.h says which floats each holds). On success *vec and *m hold the whole
 * vector and its model, and w[0..*nw) its tensors; 0, or -1 after a one-line message. */
static int join_shards(pst_ckpt *cks, int k, pst_model *m, float **vec, pst_ckpt_tensor *w,
                       int *nw, int wmax) {
  char err[1024];
  const char *spec = pst_ckpt_meta(&cks[0], "model_spec");
  const char *ver = pst_ckpt_meta(&cks[0], "version");
  if (!spec || !ver || pst_model_parse(spec, cks[0].file, m, err, sizeof err) < 0) {
    fprintf(stderr, "pstrain export: %s: no usable model_spec or version\n", cks[0].file);
    return -1;
  }
  *vec = calloc(m->n_params, sizeof(float));
  char *seen = calloc((size_t)k, 1);
  int rc = *vec && seen ? 0 : -1;
  if (rc < 0) fprintf(stderr, "pstrain export: out of memory\n");
  for (int c = 0; c < k && rc == 0; c++) {
    const char *sh = pst_ckpt_meta(&cks[c], "shard");
    const char *v = pst_ckpt_meta(&cks[c], "version");
    const char *sp = pst_ckpt_meta(&cks[c], "model_spec");
    int i, kk;
    size_t lo, n, count = 0;
    const float *data = pst_ckpt_find(&cks[c], "shard", &count);
    if (!sh || pst_partition_parse(sh, &i, &kk) < 0 || kk != k || seen[i]) {
      fprintf(stderr, "pstrain export: %s is not one of %d different shards (its shard: %s)\n",
              cks[c].file, k, sh ? sh : "none");
      rc = -1;
    } else if (!v || strcmp(v, ver) || !sp || strcmp(sp, spec)) {
      fprintf(stderr, "pstrain export: %s holds version %s of %s model, %s version %s\n",
              cks[c].file, v ? v : "?", sp && !strcmp(sp, spec) ? "the same" : "another",
              cks[0].file, ver);
      rc = -1;
    } else if (pst_partition_range(m->n_params, k, i, &lo, &n) < 0 || !data || count != n) {
      fprintf(stderr, "pstrain export: %s: its tensor \"shard\" is not shard %d/%d's part\n",
              cks[c].file, i, k);
      rc = -1;
    } else {
      seen[i] = 1;
      memcpy(*vec + lo, data, n * sizeof(float));
    }
  }
  free(seen);
  if (rc == 0 && (*nw = pst_ckpt_model_tensors(m, *vec, "", w, wmax)) < 0) {
    fprintf(stderr, "pstrain export: cannot name the model's tensors\n");
    rc = -1;
  }
  return rc;
}

int pl_cmd_export(int argc, char **argv) {
  const char *ckpt = NULL, *format = "safetensors", *out = NULL;
  const char *shards[PST_MAX_SHARDS];
  int n_shards = 0;
  for (int i = 1; i < argc; i++) {
    const char *v;
    int missing = 0;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if ((v = flag_value(argc, argv, &i, "--format", &missing)) != NULL) {
      format = v;
    } else if ((v = flag_value(argc, argv, &i, "--out", &missing)) != NULL) {
      out = v;
    } else if (missing) {
      fprintf(stderr, "pstrain export: %s needs a value (try pstrain export --help)\n", argv[i]);
      return 2;
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      fprintf(stderr, "pstrain export: unknown option '%.60s' (try pstrain export --help)\n",
              argv[i]);
      return 2;
    } else if (n_shards == PST_MAX_SHARDS) {
      fprintf(stderr, "pstrain export: more than %d checkpoints\n", PST_MAX_SHARDS);
      return 2;
    } else {
      shards[n_shards++] = argv[i];
      if (!ckpt) ckpt = argv[i];
    }
  }
  if (!ckpt) {
    usage(stderr);
    return 2;
  }
  int npz = !strcmp(format, "npz");
  if (!npz && strcmp(format, "safetensors") != 0) {
    fprintf(stderr, "pstrain export: unknown format '%.60s' (want safetensors or npz)\n", format);
    return 2;
  }
  char def[PATH_MAX];
  if (!out || !*out) {
    default_out(ckpt, npz ? "npz" : "safetensors", def, sizeof def);
    out = def;
  }
  /* The default name of a safetensors export run beside the checkpoint is the checkpoint. */
  struct stat a, b;
  if (stat(ckpt, &a) == 0 && stat(out, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
    fprintf(stderr, "pstrain export: %.200s would replace the checkpoint itself (give --out)\n",
            out);
    return 2;
  }

  char err[1024];
  static pst_ckpt cks[PST_MAX_SHARDS];
  for (int c = 0; c < n_shards; c++)
    if (pst_ckpt_load(shards[c], &cks[c], err, sizeof err) != 0) {
      fprintf(stderr, "pstrain export: %s\n", err);
      for (int j = 0; j < c; j++) pst_ckpt_free(&cks[j]);
      return 1;
    }
  pst_ckpt ck = cks[0];
  int sharded = pst_ckpt_meta(&ck, "shard") != NULL;
  if (sharded != (n_shards > 1)) {
    fprintf(stderr, "pstrain export: %s\n",
            sharded ? "this is one ps shard's checkpoint: give every shard's checkpoint of its "
                      "version (DIR/shard-*-of-K/ckpt-VERSION.safetensors)"
                    : "one checkpoint at a time, unless they are the shards of one job");
    for (int c = 0; c < n_shards; c++) pst_ckpt_free(&cks[c]);
    return 2;
  }
  pst_ckpt_tensor *w = calloc((size_t)ck.n_tensors + PST_CKPT_MAX_MODEL_TENSORS + 1, sizeof *w);
  int nw = 0, rc;
  static pst_model model;
  float *whole = NULL;
  if (!w) {
    for (int c = 0; c < n_shards; c++) pst_ckpt_free(&cks[c]);
    fprintf(stderr, "pstrain export: out of memory\n");
    return 1;
  }
  if (sharded) {
    if (join_shards(cks, n_shards, &model, &whole, w, &nw, PST_CKPT_MAX_MODEL_TENSORS) < 0) {
      for (int c = 0; c < n_shards; c++) pst_ckpt_free(&cks[c]);
      free(whole);
      free(w);
      return 1;
    }
  } else {
    for (int i = 0; i < ck.n_tensors; i++)
      if (strncmp(ck.tensors[i].name, OPT_PREFIX, strlen(OPT_PREFIX)) != 0) w[nw++] = ck.tensors[i];
  }
  if (npz) {
    rc = write_npz(out, w, nw, err, sizeof err);
  } else {
    /* The ps names its fingerprint "model_fingerprint"; "fingerprint" is kept too. */
    static const char *const keep[] = {"model_spec", "fingerprint", "model_fingerprint",
                                       "version"};
    pst_ckpt_kv meta[4];
    int nmeta = 0;
    for (int k = 0; k < 4; k++) {
      const char *v = pst_ckpt_meta(&ck, keep[k]);
      if (v) meta[nmeta++] = (pst_ckpt_kv){keep[k], v};
    }
    rc = pst_ckpt_write_file(out, w, nw, meta, nmeta, err, sizeof err);
  }
  size_t floats = 0;
  for (int i = 0; i < nw; i++) floats += w[i].count;
  if (rc == 0)
    printf("exported %d tensors (%zu floats) from %s%s to %s\n", nw, floats, ckpt,
           n_shards > 1 ? " and the other shards" : "", out);
  else
    fprintf(stderr, "pstrain export: %s\n", err);
  free(w);
  free(whole);
  for (int c = 0; c < n_shards; c++) pst_ckpt_free(&cks[c]);
  return rc == 0 ? 0 : 1;
}
