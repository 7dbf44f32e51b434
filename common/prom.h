/* The Prometheus text exposition format (version 0.0.4), written into a growable buffer.
 *
 * A daemon renders its figures into a pst_text on each scrape: the families are written
 * one at a time (pst_prom_family: the # HELP and # TYPE lines, then its samples), so a
 * family's samples stay together as the format requires. Histograms keep their own
 * cumulative state (pst_hist), observed on the daemon's loop and rendered as the
 * _bucket{le=...}, _sum and _count series. Names are the caller's; they follow Prometheus'
 * conventions (pstrain_ prefix, base units, _total for counters). */
#ifndef PSTRAIN_COMMON_PROM_H
#define PSTRAIN_COMMON_PROM_H

#include <stddef.h>
#include <stdint.h>

/* A growable text buffer. A failed allocation sets `failed` and drops later writes, so a
 * renderer checks once at the end instead of after every line. */
typedef struct {
  char *data;
  size_t len, cap;
  size_t max;   /* the buffer never grows past this many bytes (0: 16 MiB) */
  int failed;
} pst_text;

void pst_text_init(pst_text *t, size_t max);
void pst_text_free(pst_text *t);
void pst_text_printf(pst_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pst_text_append(pst_text *t, const char *s, size_t n);

/* A cumulative histogram with fixed upper bounds (the +Inf bucket is implicit). */
#define PST_HIST_MAX_BOUNDS 20
typedef struct {
  int n;                                /* bounds in use */
  double bounds[PST_HIST_MAX_BOUNDS];   /* ascending upper bounds */
  uint64_t counts[PST_HIST_MAX_BOUNDS + 1]; /* per bucket (not cumulative); last: +Inf */
  uint64_t count;
  double sum;
} pst_hist;

/* Bounds for durations in seconds (100 us .. 60 s) and for staleness (versions, 0 .. 256). */
void pst_hist_init_seconds(pst_hist *h);
void pst_hist_init_staleness(pst_hist *h);
void pst_hist_observe(pst_hist *h, double v);

/* Quantiles of durations (the round trip's p50 and p99, issue 26): counts in buckets 2%
 * wide from 1 us to about 48 minutes, so that a quantile comes out within 1% of the value
 * it stands for, in a fixed 4.4 KiB. Shorter durations count as 1 us, longer ones as the
 * last bucket's. */
#define PST_QUANT_BUCKETS 1100
typedef struct {
  uint32_t counts[PST_QUANT_BUCKETS];
  uint64_t n;
} pst_quant;

void pst_quant_observe(pst_quant *q, double seconds);
/* The p-quantile (0 <= p <= 1) of what was observed, in seconds: the middle of the bucket
 * the ceil(p x n)-th smallest value fell in (the smallest for p = 0). 0 when nothing was. */
double pst_quant_value(const pst_quant *q, double p);

typedef enum { PST_PROM_COUNTER, PST_PROM_GAUGE, PST_PROM_HISTOGRAM } pst_prom_type;

/* The # HELP and # TYPE lines of one family. */
void pst_prom_family(pst_text *t, const char *name, pst_prom_type type, const char *help);
/* One sample: labels is "" or a ready label list such as `worker="3"` (label values from
 * outside pass through pst_prom_label first). NaN and infinities are written as the format
 * spells them. */
void pst_prom_sample(pst_text *t, const char *name, const char *labels, double value);
/* A family with a single unlabelled sample. */
void pst_prom_gauge(pst_text *t, const char *name, const char *help, double value);
void pst_prom_counter(pst_text *t, const char *name, const char *help, double value);
/* A histogram family: name_bucket{le=...}, name_sum and name_count. */
void pst_prom_hist(pst_text *t, const char *name, const char *help, const pst_hist *h);
/* The double that the shortest decimal of a float reads as (0.002f gives 0.002, not
 * 0.0020000000949949026): float settings shown as they were given. */
double pst_prom_float(float f);
/* Writes key="value" into out[len] with value escaped as the format requires (\\, \" and
 * \n); returns out. */
char *pst_prom_label(char *out, size_t len, const char *key, const char *value);

#endif
