/* The bound on how long a sync step waits on one worker: ps/train/stepwatch.h says the rule. */
#include "ps/train/stepwatch.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pst_stepwatch_init(pst_stepwatch *w, int slots, double factor, double floor, double cap) {
  memset(w, 0, sizeof *w);
  if (slots < 1 || !(factor >= 0 && isfinite(factor)) || !(floor >= 0 && isfinite(floor)) ||
      !(cap >= 0 && isfinite(cap)))
    return -EINVAL;
  w->slot = calloc((size_t)slots, sizeof *w->slot);
  if (!w->slot) return -ENOMEM;
  w->slots = slots;
  w->factor = factor;
  w->floor = floor;
  w->cap = cap;
  return 0;
}

void pst_stepwatch_free(pst_stepwatch *w) {
  free(w->slot);
  w->slot = NULL;
  w->slots = 0;
}

static int valid(const pst_stepwatch *w, int i) { return w->slot && i >= 0 && i < w->slots; }

void pst_stepwatch_begin(pst_stepwatch *w, int i, double now, int evaluating) {
  if (!valid(w, i)) return;
  w->slot[i].began = now;
  w->slot[i].evaluating = evaluating != 0;
}

void pst_stepwatch_end(pst_stepwatch *w, int i, double now) {
  if (!valid(w, i)) return;
  pst_sw_slot *s = &w->slot[i];
  /* A step that included an evaluation is not a plain step's time. */
  if (s->began > 0 && !s->evaluating && now >= s->began) {
    s->recent[s->at] = (float)(now - s->began);
    s->at = (s->at + 1) % PST_SW_WINDOW;
    if (s->n < PST_SW_WINDOW) s->n++;
  }
  s->began = 0;
  s->evaluating = 0;
}

void pst_stepwatch_eval(pst_stepwatch *w, int i, double seconds) {
  if (!valid(w, i) || !(seconds > 0 && isfinite(seconds))) return;
  w->slot[i].eval_seconds = seconds;
  if (seconds > w->eval_longest) w->eval_longest = seconds;
}

void pst_stepwatch_forget(pst_stepwatch *w, int i) {
  if (!valid(w, i)) return;
  memset(&w->slot[i], 0, sizeof w->slot[i]);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median_of(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The median of slot i's plain steps, or 0 with none. */
static double slot_median(const pst_stepwatch *w, int i) {
  const pst_sw_slot *s = &w->slot[i];
  if (s->n == 0) return 0;
  double v[PST_SW_WINDOW];
  for (int k = 0; k < s->n; k++) v[k] = s->recent[k];
  return median_of(v, s->n);
}

/* The job's typical step: the median of the slots' medians (one vote a worker, so that one
 * slow worker does not loosen everyone's bound), or 0 with none. */
static double job_median(const pst_stepwatch *w) {
  double *v = malloc((size_t)w->slots * sizeof *v);
  if (!v) return 0;
  int n = 0;
  for (int i = 0; i < w->slots; i++) {
    double m = slot_median(w, i);
    if (m > 0) v[n++] = m;
  }
  double m = n > 0 ? median_of(v, n) : 0;
  free(v);
  return m;
}

/* Why the bound is the cap alone. */
static void say_cap(const pst_stepwatch *w, char *why, size_t whylen, const char *because) {
  if (!why || !whylen) return;
  if (w->cap > 0) snprintf(why, whylen, "--step-timeout %g s%s", w->cap, because);
  else snprintf(why, whylen, "no bound%s", because);
}

static double capped(const pst_stepwatch *w, double b) { return w->cap > 0 && b > w->cap ? w->cap : b; }

double pst_stepwatch_bound(const pst_stepwatch *w, int i, char *why, size_t whylen) {
  if (why && whylen) why[0] = '\0';
  if (!valid(w, i)) return 0;
  const pst_sw_slot *s = &w->slot[i];
  double own = slot_median(w, i), job = job_median(w);
  double typical = own > job ? own : job;
  if (w->factor <= 0 || typical <= 0) {
    /* No step of anyone's measured yet (the job's first), or no derived bound. */
    say_cap(w, why, whylen, w->factor <= 0 ? "" : ": no step measured yet");
    return w->cap;
  }
  /* A worker's first step also sets it up (its model, a device's first calls): it is given
   * PST_SW_FIRST_FLOORS floors. */
  double floor = s->n == 0 ? w->floor * PST_SW_FIRST_FLOORS : w->floor;
  double plain = w->factor * typical;
  if (plain < floor) plain = floor;
  if (!s->evaluating) {
    double b = capped(w, plain);
    if (why && whylen)
      snprintf(why, whylen, "%g x the typical step of %.1f ms, at least %g s%s", w->factor,
               typical * 1e3, floor, b < plain ? ", within --step-timeout" : "");
    return b;
  }
  /* An evaluation first: what its own last one took, else the longest anyone's took scaled
   * by how much slower this worker's steps are than the job's. */
  double ev = s->eval_seconds;
  if (ev <= 0 && w->eval_longest > 0) ev = w->eval_longest * (job > 0 && own > job ? own / job : 1.0);
  if (ev <= 0) {
    say_cap(w, why, whylen, ": an evaluation, none measured yet");
    return w->cap;
  }
  double b = capped(w, plain + w->factor * ev);
  if (why && whylen)
    snprintf(why, whylen, "%g x the typical step of %.1f ms and the evaluation of %.2f s, at "
             "least %g s", w->factor, typical * 1e3, ev, floor);
  return b;
}

double pst_stepwatch_held(const pst_stepwatch *w, int i, double now) {
  if (!valid(w, i) || w->slot[i].began <= 0 || now < w->slot[i].began) return 0;
  return now - w->slot[i].began;
}
