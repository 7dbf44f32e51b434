#include "kernels/partition.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t cut(size_t n, int k, int i) {
  if (i <= 0) return 0;
  if (i >= k) return n;
  /* n * i / k without overflow for any vector that fits in memory. */
  size_t c = (size_t)((unsigned __int128)n * (unsigned)i / (unsigned)k);
  return c - c % PST_PARTITION_ALIGN;
}

int pst_partition_range(size_t n, int k, int i, size_t *lo, size_t *count) {
  if (k < 1 || k > PST_MAX_SHARDS || i < 0 || i >= k) return -EINVAL;
  if (k > 1 && n / (size_t)k < 2 * PST_PARTITION_ALIGN) return -EINVAL;
  size_t a = cut(n, k, i), b = cut(n, k, i + 1);
  *lo = a;
  *count = b - a;
  return 0;
}

int pst_partition_parse(const char *text, int *i, int *k) {
  char *end;
  errno = 0;
  long a = strtol(text, &end, 10);
  if (errno || end == text || *end != '/' || text[0] == '-' || text[0] == '+') return -EINVAL;
  const char *q = end + 1;
  long b = strtol(q, &end, 10);
  if (errno || end == q || *end || q[0] == '-' || q[0] == '+') return -EINVAL;
  if (b < 1 || b > PST_MAX_SHARDS || a < 0 || a >= b) return -EINVAL;
  *i = (int)a;
  *k = (int)b;
  return 0;
}

void pst_partition_describe(const pst_model *m, size_t lo, size_t count, char *buf, size_t len) {
  size_t hi = lo + count, used = 0;
  buf[0] = 0;
  for (int l = 1; l < m->n_layers; l++) {
    const pst_layer *L = &m->layers[l];
    /* As checkpoints name them: batchnorm's four, Keras's names, the other layers' two. */
    static const char *const bn_parts[] = {"gamma", "beta", "moving_mean", "moving_variance"};
    int bn = L->kind == PST_LAYER_BATCHNORM;
    for (int part = 0; part < (bn ? 4 : 2); part++) {
      size_t off = part == 0   ? L->w_offset
                   : part == 1 ? L->b_offset
                               : L->s_offset + (size_t)(part - 2) * (L->s_count / 2);
      size_t n = part == 0 ? L->w_count : part == 1 ? L->b_count : L->s_count / 2;
      if (n == 0 || off + n <= lo || off >= hi) continue;
      char name[48];
      pst_model_layer_name(m, l, 1, name, sizeof name);
      const char *tensor = bn                                      ? bn_parts[part]
                           : part                                  ? "bias"
                           : L->kind == PST_LAYER_DEPTHWISE_CONV2D ? "depthwise_kernel"
                                                                   : "kernel";
      size_t a = off > lo ? 0 : lo - off, b = off + n < hi ? n : hi - off;
      int w;
      if (a == 0 && b == n)
        w = snprintf(buf + used, len - used, "%s%s/%s", used ? ", " : "", name, tensor);
      else
        w = snprintf(buf + used, len - used, "%s%s/%s[%zu:%zu) of %zu", used ? ", " : "", name,
                     tensor, a, b, n);
      if (w < 0 || (size_t)w >= len - used) return; /* cut short: still one line */
      used += (size_t)w;
    }
  }
}
