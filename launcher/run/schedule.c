/* `--workers MIN:MAX` and `--schedule` (launcher/run/run.h): an elastic job's worker counts,
 * parsed and checked before anything starts, so that a typo is one line and exit 2 rather
 * than a job that goes wrong half-way through. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "launcher/run/schedule.h"

static const char *skip_space(const char *p) {
  while (*p == ' ' || *p == '\t') p++;
  return p;
}

/* A decimal number without sign, exponent, "inf" or "nan" (strtod takes them all): what a
 * person writes for a point in training. Returns the end, or NULL. */
static const char *parse_epoch(const char *p, double *out) {
  const char *q = p;
  int digits = 0, dot = 0;
  for (; isdigit((unsigned char)*q) || (*q == '.' && !dot); q++) {
    if (*q == '.') dot = 1;
    else digits++;
  }
  if (!digits) return NULL;
  char buf[64];
  if ((size_t)(q - p) >= sizeof buf) return NULL;
  memcpy(buf, p, (size_t)(q - p));
  buf[q - p] = '\0';
  *out = strtod(buf, NULL);
  return q;
}

/* The length of one point's text, up to its comma (at most 60 characters shown). */
static int item_len(const char *item) {
  size_t n = strcspn(item, ",");
  return n > 60 ? 60 : (int)n;
}

int pl_parse_schedule(const char *s, pl_sched_point *out, int max, char *err, size_t errlen) {
  int n = 0;
  const char *p = s;
  for (;;) {
    const char *item = skip_space(p);
    const char *q = item;
    pl_sched_point pt;
    /* One point: "epoch X: +N" or "epoch X: -N". */
    if (strncmp(q, "epoch", 5) != 0) goto bad;
    q = skip_space(q + 5);
    if (!(q = parse_epoch(q, &pt.epoch))) goto bad;
    q = skip_space(q);
    if (*q != ':') goto bad;
    q = skip_space(q + 1);
    if (*q != '+' && *q != '-') goto bad;
    int sign = *q == '+' ? 1 : -1;
    q++;
    if (!isdigit((unsigned char)*q)) goto bad;
    char *end;
    errno = 0;
    long count = strtol(q, &end, 10);
    if (errno || count < 1 || count > PL_MAX_WORKERS) {
      snprintf(err, errlen, "--schedule: '%.*s': a point starts or stops 1..%d workers",
               item_len(item), item, PL_MAX_WORKERS);
      return -EINVAL;
    }
    pt.delta = sign * (int)count;
    q = skip_space(end);
    if (*q != ',' && *q != '\0') goto bad;
    if (n == max) {
      snprintf(err, errlen, "--schedule: more than %d points", max);
      return -EINVAL;
    }
    /* In order, so that the launcher follows them one after the other as training goes. */
    if (n > 0 && pt.epoch < out[n - 1].epoch) {
      snprintf(err, errlen, "--schedule: epoch %g comes after epoch %g: give the points in "
                            "order", pt.epoch, out[n - 1].epoch);
      return -EINVAL;
    }
    out[n++] = pt;
    if (*q == '\0') return n;
    p = q + 1;
    continue;
  bad:
    snprintf(err, errlen, "--schedule: '%.*s' is not 'epoch X: +N' or 'epoch X: -N' (points "
                          "separated by commas, e.g. \"epoch 1: +2, epoch 2.5: -2\")",
             *item ? item_len(item) : 9, *item ? item : "(nothing)");
    return -EINVAL;
  }
}

int pl_parse_workers_range(const char *s, int *min, int *max) {
  const char *colon = strchr(s, ':');
  int64_t lo, hi;
  if (!isdigit((unsigned char)*s) || (colon && !isdigit((unsigned char)colon[1]))) return -EINVAL;
  if (colon ? pst_parse_int_n(s, (size_t)(colon - s), 1, PL_MAX_WORKERS, &lo) < 0 ||
                  pst_parse_int(colon + 1, 1, PL_MAX_WORKERS, &hi) < 0
            : pst_parse_int(s, 1, PL_MAX_WORKERS, &lo) < 0)
    return -EINVAL;
  if (!colon) hi = lo;
  if (hi < lo) return -EINVAL;
  *min = (int)lo;
  *max = (int)hi;
  return 0;
}

int pl_schedule_processes(const pl_run_options *o) {
  int n = o->workers;
  for (int i = 0; i < o->n_sched; i++)
    if (o->sched[i].delta > 0) n += o->sched[i].delta;
  return n;
}

int pl_check_schedule(pl_run_options *o, char *err, size_t errlen, char *warn, size_t warnlen) {
  warn[0] = '\0';
  int running = o->workers, peak = running, lowest = running;
  double lowest_at = 0;
  for (int i = 0; i < o->n_sched; i++) {
    const pl_sched_point *p = &o->sched[i];
    if (p->epoch >= o->epochs) {
      snprintf(err, errlen, "--schedule: epoch %g is not before the end of training (--epochs "
                            "%d)", p->epoch, o->epochs);
      return -EINVAL;
    }
    running += p->delta;
    if (running < 1) {
      snprintf(err, errlen, "--schedule: at epoch %g it stops %d worker%s, but only %d would "
                            "be running (a job needs one to go on)", p->epoch, -p->delta,
               p->delta < -1 ? "s" : "", running - p->delta);
      return -EINVAL;
    }
    if (o->workers_max > 0 && running > o->workers_max) {
      snprintf(err, errlen, "--schedule: at epoch %g it would run %d workers, more than "
                            "--workers %d:%d admits", p->epoch, running, o->workers,
               o->workers_max);
      return -EINVAL;
    }
    if (running > peak) peak = running;
    if (running < lowest) {
      lowest = running;
      lowest_at = p->epoch;
    }
  }
  if (pl_schedule_processes(o) > PL_MAX_WORKERS) {
    snprintf(err, errlen, "--schedule: it starts %d worker processes in all, more than %d",
             pl_schedule_processes(o), PL_MAX_WORKERS);
    return -EINVAL;
  }
  /* A fixed --workers N with a schedule: N is the minimum, and the ps admits up to the
   * schedule's peak. */
  if (o->workers_max == 0) o->workers_max = peak;
  if (lowest < o->workers)
    snprintf(warn, warnlen, "warning: --schedule goes down to %d worker%s at epoch %g, below "
                            "--workers's minimum %d (the ps goes on with fewer)", lowest,
             lowest > 1 ? "s" : "", lowest_at, o->workers);
  return 0;
}
