#include "common/prom.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT_DEFAULT_MAX (16u << 20)

void pst_text_init(pst_text *t, size_t max) {
  memset(t, 0, sizeof *t);
  t->max = max ? max : TEXT_DEFAULT_MAX;
}

void pst_text_free(pst_text *t) {
  free(t->data);
  t->data = NULL;
  t->len = t->cap = 0;
}

/* Room for n more bytes and a NUL; 0 or -1 (failed is then set). */
static int text_reserve(pst_text *t, size_t n) {
  if (t->failed) return -1;
  if (t->len + n + 1 <= t->cap) return 0;
  size_t cap = t->cap ? t->cap : 4096;
  while (cap < t->len + n + 1) cap *= 2;
  if (cap > t->max) cap = t->max;
  if (t->len + n + 1 > cap) {
    t->failed = 1;
    return -1;
  }
  char *p = realloc(t->data, cap);
  if (!p) {
    t->failed = 1;
    return -1;
  }
  t->data = p;
  t->cap = cap;
  return 0;
}

void pst_text_append(pst_text *t, const char *s, size_t n) {
  if (text_reserve(t, n) < 0) return;
  memcpy(t->data + t->len, s, n);
  t->len += n;
  t->data[t->len] = '\0';
}

void pst_text_printf(pst_text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    t->failed = 1;
    return;
  }
  if ((size_t)n < sizeof small) {
    pst_text_append(t, small, (size_t)n);
    return;
  }
  if (text_reserve(t, (size_t)n) < 0) return;
  va_start(ap, fmt);
  vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  t->len += (size_t)n;
}

static void hist_init(pst_hist *h, const double *bounds, int n) {
  memset(h, 0, sizeof *h);
  h->n = n < PST_HIST_MAX_BOUNDS ? n : PST_HIST_MAX_BOUNDS;
  memcpy(h->bounds, bounds, (size_t)h->n * sizeof *bounds);
}

void pst_hist_init_seconds(pst_hist *h) {
  static const double b[] = {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05,
                             0.1,  0.25,   0.5,  1,    2.5,    5,    10,   30,    60};
  hist_init(h, b, (int)(sizeof b / sizeof b[0]));
}

void pst_hist_init_staleness(pst_hist *h) {
  static const double b[] = {0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256};
  hist_init(h, b, (int)(sizeof b / sizeof b[0]));
}

void pst_hist_observe(pst_hist *h, double v) {
  if (isnan(v)) return;
  int i = 0;
  while (i < h->n && v > h->bounds[i]) i++;
  h->counts[i]++;
  h->count++;
  h->sum += v;
}

/* Bucket 0 holds everything up to QUANT_MIN; bucket i > 0 holds (QUANT_MIN x
 * QUANT_STEP^(i-1), QUANT_MIN x QUANT_STEP^i]. */
#define QUANT_MIN 1e-6
#define QUANT_STEP 1.02

void pst_quant_observe(pst_quant *q, double seconds) {
  if (isnan(seconds)) return;
  int i = 0;
  if (seconds > QUANT_MIN) {
    double k = ceil(log(seconds / QUANT_MIN) / log(QUANT_STEP));
    i = k >= PST_QUANT_BUCKETS - 1 ? PST_QUANT_BUCKETS - 1 : k < 1 ? 1 : (int)k;
  }
  if (q->counts[i] < UINT32_MAX) q->counts[i]++;
  q->n++;
}

double pst_quant_value(const pst_quant *q, double p) {
  if (q->n == 0) return 0;
  if (!(p > 0)) p = 0;
  if (p > 1) p = 1;
  uint64_t rank = (uint64_t)ceil(p * (double)q->n), seen = 0;
  if (rank < 1) rank = 1;
  for (int i = 0; i < PST_QUANT_BUCKETS; i++) {
    seen += q->counts[i];
    if (seen < rank) continue;
    /* The geometric middle of the bucket: within 1% of anything in it. */
    return i == 0 ? QUANT_MIN : QUANT_MIN * pow(QUANT_STEP, i - 0.5);
  }
  return QUANT_MIN * pow(QUANT_STEP, PST_QUANT_BUCKETS - 1.5);
}

static const char *type_name(pst_prom_type type) {
  return type == PST_PROM_COUNTER ? "counter" : type == PST_PROM_GAUGE ? "gauge" : "histogram";
}

void pst_prom_family(pst_text *t, const char *name, pst_prom_type type, const char *help) {
  /* HELP text escapes only backslashes and newlines; ours are fixed strings without them. */
  pst_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type_name(type));
}

/* A double in the fewest digits that read back as the same value (0.1, not
 * 0.10000000000000001); the specials as the format names them. */
static void format_double(char *buf, size_t len, double v) {
  if (isnan(v)) {
    snprintf(buf, len, "NaN");
  } else if (isinf(v)) {
    snprintf(buf, len, v > 0 ? "+Inf" : "-Inf");
  } else {
    for (int prec = 15; prec <= 17; prec++) {
      snprintf(buf, len, "%.*g", prec, v);
      if (strtod(buf, NULL) == v) break;
    }
  }
}

static void put_value(pst_text *t, double v) {
  char buf[40];
  format_double(buf, sizeof buf, v);
  pst_text_append(t, buf, strlen(buf));
}

void pst_prom_sample(pst_text *t, const char *name, const char *labels, double value) {
  if (labels && labels[0])
    pst_text_printf(t, "%s{%s} ", name, labels);
  else
    pst_text_printf(t, "%s ", name);
  put_value(t, value);
  pst_text_append(t, "\n", 1);
}

void pst_prom_gauge(pst_text *t, const char *name, const char *help, double value) {
  pst_prom_family(t, name, PST_PROM_GAUGE, help);
  pst_prom_sample(t, name, "", value);
}

void pst_prom_counter(pst_text *t, const char *name, const char *help, double value) {
  pst_prom_family(t, name, PST_PROM_COUNTER, help);
  pst_prom_sample(t, name, "", value);
}

void pst_prom_hist(pst_text *t, const char *name, const char *help, const pst_hist *h) {
  pst_prom_family(t, name, PST_PROM_HISTOGRAM, help);
  uint64_t cum = 0;
  for (int i = 0; i <= h->n; i++) {
    cum += h->counts[i];
    if (i < h->n) {
      char le[40];
      format_double(le, sizeof le, h->bounds[i]);
      pst_text_printf(t, "%s_bucket{le=\"%s\"} %llu\n", name, le, (unsigned long long)cum);
    } else {
      pst_text_printf(t, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
  }
  pst_text_printf(t, "%s_sum ", name);
  put_value(t, h->sum);
  pst_text_printf(t, "\n%s_count %llu\n", name, (unsigned long long)h->count);
}

char *pst_prom_label(char *out, size_t len, const char *key, const char *value) {
  size_t n = (size_t)snprintf(out, len, "%s=\"", key);
  for (const char *p = value ? value : ""; *p && n + 3 < len; p++) {
    if (*p == '\\' || *p == '"') {
      out[n++] = '\\';
      out[n++] = *p;
    } else if (*p == '\n') {
      out[n++] = '\\';
      out[n++] = 'n';
    } else {
      out[n++] = *p;
    }
  }
  if (n + 2 > len) n = len - 2;
  out[n++] = '"';
  out[n] = '\0';
  return out;
}

double pst_prom_float(float f) {
  char buf[40];
  for (int prec = 6; prec <= 9; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
    if ((float)strtod(buf, NULL) == f) break;
  }
  return strtod(buf, NULL);
}
