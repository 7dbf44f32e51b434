/* checkpoint_tool: writes a checkpoint of known vectors, for tests/checkpoint_format_test.sh
 * (which reads it back with tests/read_safetensors.py and `pstrain export`).
 *
 *   checkpoint_tool DIR VERSION MODEL SEED RAWPREFIX
 *
 * writes DIR/ckpt-<VERSION>.safetensors holding MODEL's weights initialised from SEED and
 * two Adam-like optimizer slots (seeded fills, "optimizer/m/" and "optimizer/v/"), with the
 * metadata model_spec, model_fingerprint and version the ps writes; writes the three flat
 * vectors raw (float32 little-endian) to RAWPREFIX.w, .m and .v; and prints one line: the
 * checkpoint's path and the FNV-1a 64 of the weights vector (the ps's weights checksum). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fnv.h"
#include "model/model.h"
#include "ps/state/checkpoint.h"


static void fill(float *p, size_t n, uint64_t s) {
  for (size_t i = 0; i < n; i++) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    p[i] = (float)((double)((z ^ (z >> 31)) >> 40) / 16777216.0) * 0.01f;
  }
}

static int write_raw(const char *prefix, const char *ext, const float *v, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s.%s", prefix, ext);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(v, sizeof(float), n, f) == n;
  return fclose(f) == 0 && ok ? 0 : -1;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: checkpoint_tool DIR VERSION MODEL SEED RAWPREFIX\n");
    return 2;
  }
  char err[512];
  pst_model m;
  if (pst_model_load(argv[3], &m, err, sizeof err) != 0) {
    fprintf(stderr, "checkpoint_tool: %s\n", err);
    return 2;
  }
  uint64_t version = strtoull(argv[2], NULL, 10), seed = strtoull(argv[4], NULL, 10);
  size_t n = m.n_params;
  float *w = malloc(n * sizeof *w), *s1 = malloc(n * sizeof *s1), *s2 = malloc(n * sizeof *s2);
  if (!w || !s1 || !s2) return 1;
  pst_model_init_params(&m, seed, w);
  fill(s1, n, seed + 1);
  fill(s2, n, seed + 2);
  pst_ckpt_tensor t[3 * PST_CKPT_MAX_MODEL_TENSORS];
  int nt = 0;
  const float *vecs[3] = {w, s1, s2};
  const char *prefixes[3] = {"", "optimizer/m/", "optimizer/v/"};
  for (int k = 0; k < 3; k++) {
    int got = pst_ckpt_model_tensors(&m, vecs[k], prefixes[k], t + nt,
                                     3 * PST_CKPT_MAX_MODEL_TENSORS - nt);
    if (got < 0) {
      fprintf(stderr, "checkpoint_tool: cannot name the tensors (%d)\n", got);
      return 1;
    }
    nt += got;
  }
  char fp[17], path[4096];
  snprintf(fp, sizeof fp, "%016" PRIx64, m.fingerprint);
  pst_ckpt_kv meta[3] = {
      {"model_spec", m.text}, {"model_fingerprint", fp}, {"version", argv[2]}};
  if (pst_ckpt_write(argv[1], version, t, nt, meta, 3, 3, path, sizeof path, err,
                     sizeof err) != 0) {
    fprintf(stderr, "checkpoint_tool: %s\n", err);
    return 1;
  }
  if (write_raw(argv[5], "w", w, n) || write_raw(argv[5], "m", s1, n) ||
      write_raw(argv[5], "v", s2, n)) {
    fprintf(stderr, "checkpoint_tool: cannot write %s.*\n", argv[5]);
    return 1;
  }
  printf("%s %016" PRIx64 "\n", path, pst_fnv1a64(w, n * sizeof *w));
  free(w);
  free(s1);
  free(s2);
  return 0;
}
