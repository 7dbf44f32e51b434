/* The bound on a sync step one worker holds open (ps/train/stepwatch.h), driven with made-up
 * times: it follows each worker's own steps and the job's, gives a newcomer and an
 * evaluation more room, falls back to the cap, and records only plain steps. */
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "ps/train/stepwatch.h"

#include "common/check.h"

/* n plain steps of `secs` each for slot i, starting at *t. */
static void steps(pst_stepwatch *w, int i, int n, double secs, double *t) {
  for (int k = 0; k < n; k++) {
    pst_stepwatch_begin(w, i, *t, 0);
    *t += secs;
    pst_stepwatch_end(w, i, *t);
  }
}

int main(void) {
  pst_stepwatch w;
  char why[200];
  CHECK(pst_stepwatch_init(&w, 0, 20, 5, 600) == -EINVAL);
  CHECK(pst_stepwatch_init(&w, 3, -1, 5, 600) == -EINVAL);
  CHECK(pst_stepwatch_init(&w, 3, 20, 5, 600) == 0);

  /* Nothing measured: the cap alone, and no step in progress holds anything. */
  CHECK(pst_stepwatch_bound(&w, 0, why, sizeof why) == 600);
  CHECK(pst_stepwatch_held(&w, 0, 100) == 0);

  /* Quick steps (10 ms): the floor (5 s) bounds them. */
  double t = 1;
  for (int i = 0; i < 3; i++) steps(&w, i, 10, 0.010, &t);
  CHECK(pst_stepwatch_bound(&w, 0, why, sizeof why) == 5.0);
  pst_stepwatch_begin(&w, 0, 100, 0);
  CHECK(pst_stepwatch_held(&w, 0, 104) == 4.0);
  CHECK(pst_stepwatch_held(&w, 0, 106) == 6.0); /* past 5 s: over the bound */

  /* A slow worker (2 s a step, a slower device) is bounded by its own steps: 40 s. */
  pst_stepwatch_end(&w, 0, 100.01);
  steps(&w, 2, 32, 2.0, &t);
  CHECK(pst_stepwatch_bound(&w, 2, why, sizeof why) == 40.0);
  /* The others are not: the job's median is of every step together, still quick. */
  CHECK(pst_stepwatch_bound(&w, 1, why, sizeof why) == 5.0);

  /* A step with an evaluation first: before anyone reported one, the cap; then the plain
   * bound plus factor x its own last evaluation's time. */
  pst_stepwatch_begin(&w, 1, 200, 1);
  CHECK(pst_stepwatch_bound(&w, 1, why, sizeof why) == 600);
  pst_stepwatch_eval(&w, 0, 0.5);
  /* Slot 1 has reported none: the longest anyone's (0.5 s) x its relative speed (1). */
  CHECK(pst_stepwatch_bound(&w, 1, why, sizeof why) == 5.0 + 20 * 0.5);
  pst_stepwatch_eval(&w, 1, 1.0);
  CHECK(pst_stepwatch_bound(&w, 1, why, sizeof why) == 5.0 + 20 * 1.0);
  /* The slow slot, evaluating for the first time: the longest evaluation scaled by how much
   * slower its steps are than the job's (2 s against the job's median). */
  pst_stepwatch_begin(&w, 2, 300, 1);
  double b2 = pst_stepwatch_bound(&w, 2, why, sizeof why);
  CHECK(b2 > 40.0 + 20 * 1.0 && b2 <= 600);
  /* A step that evaluated is not a plain step's figure. */
  pst_stepwatch_end(&w, 2, 400);
  CHECK(pst_stepwatch_bound(&w, 2, why, sizeof why) == 40.0);
  pst_stepwatch_end(&w, 1, 230);

  /* A newcomer on slot 1: no steps of its own, the job's figure (the median of slot 0's
   * 10 ms and slot 2's 2 s) with three floors at least. */
  pst_stepwatch_forget(&w, 1);
  double b1 = pst_stepwatch_bound(&w, 1, why, sizeof why);
  CHECKF(fabs(b1 - 20 * (0.010 + 2.0) / 2) < 1e-3, "%g (%s)", b1, why);
  pst_stepwatch_forget(&w, 2);
  CHECK(pst_stepwatch_bound(&w, 1, why, sizeof why) == 5.0 * PST_SW_FIRST_FLOORS);
  steps(&w, 1, 1, 0.010, &t);
  CHECK(pst_stepwatch_bound(&w, 1, why, sizeof why) == 5.0);

  /* The cap bounds the derived bound; factor 0 leaves only the cap. */
  pst_stepwatch_free(&w);
  CHECK(pst_stepwatch_init(&w, 2, 20, 5, 30) == 0);
  t = 1;
  steps(&w, 0, 5, 2.0, &t);
  CHECK(pst_stepwatch_bound(&w, 0, why, sizeof why) == 30.0);
  pst_stepwatch_free(&w);
  CHECK(pst_stepwatch_init(&w, 2, 0, 5, 30) == 0);
  steps(&w, 0, 5, 0.01, &t);
  CHECK(pst_stepwatch_bound(&w, 0, why, sizeof why) == 30.0);
  pst_stepwatch_free(&w);
  CHECK(pst_stepwatch_init(&w, 2, 0, 5, 0) == 0);
  CHECK(pst_stepwatch_bound(&w, 0, why, sizeof why) == 0); /* no bound at all */
  pst_stepwatch_free(&w);
  printf("stepwatch_test: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail != 0;
}
