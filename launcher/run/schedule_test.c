/* launcher/run/schedule.c in-process: --schedule and --workers MIN:MAX parsed, and a schedule
 * checked against the job, without starting anything. */
#include <errno.h>
#include <string.h>

#include "common/check.h"
#include "launcher/run/options.h"
#include "launcher/run/schedule.h"

int main(void) {
  pl_sched_point p[PL_MAX_SCHEDULE];
  char err[300], warn[300];

  /* Points in order, with spaces or without. */
  CHECK(pl_parse_schedule("epoch 1: +2, epoch 2.5: -2", p, PL_MAX_SCHEDULE, err, sizeof err) == 2);
  CHECK(p[0].epoch == 1 && p[0].delta == 2 && p[1].epoch == 2.5 && p[1].delta == -2);
  CHECK(pl_parse_schedule("epoch 0.5:+1", p, PL_MAX_SCHEDULE, err, sizeof err) == 1);
  CHECK(p[0].epoch == 0.5 && p[0].delta == 1);
  /* Bad points: a reason each. */
  CHECK(pl_parse_schedule("", p, PL_MAX_SCHEDULE, err, sizeof err) == -EINVAL);
  CHECK(strstr(err, "(nothing)") != NULL);
  CHECK(pl_parse_schedule("epoch 1: 2", p, PL_MAX_SCHEDULE, err, sizeof err) == -EINVAL);
  CHECK(pl_parse_schedule("epoch -1: +2", p, PL_MAX_SCHEDULE, err, sizeof err) == -EINVAL);
  CHECK(pl_parse_schedule("epoch inf: +2", p, PL_MAX_SCHEDULE, err, sizeof err) == -EINVAL);
  CHECK(pl_parse_schedule("epoch 1: +0", p, PL_MAX_SCHEDULE, err, sizeof err) == -EINVAL);
  CHECK(strstr(err, "1..256") != NULL);
  CHECK(pl_parse_schedule("epoch 2: +1, epoch 1: -1", p, PL_MAX_SCHEDULE, err, sizeof err) ==
        -EINVAL);
  CHECK(strstr(err, "in order") != NULL);
  CHECK(pl_parse_schedule("epoch 1: +1, epoch 2: +1", p, 1, err, sizeof err) == -EINVAL);
  CHECK(strstr(err, "more than 1 points") != NULL);

  /* --workers N and MIN:MAX. */
  int lo = 0, hi = 0;
  CHECK(pl_parse_workers_range("3", &lo, &hi) == 0 && lo == 3 && hi == 3);
  CHECK(pl_parse_workers_range("2:4", &lo, &hi) == 0 && lo == 2 && hi == 4);
  CHECK(pl_parse_workers_range("4:2", &lo, &hi) == -EINVAL);
  CHECK(pl_parse_workers_range("0", &lo, &hi) == -EINVAL);
  CHECK(pl_parse_workers_range("2:", &lo, &hi) == -EINVAL);
  CHECK(pl_parse_workers_range("257", &lo, &hi) == -EINVAL);

  /* A schedule against the job: a fixed --workers N takes the schedule's peak as its MAX. */
  pl_run_options o;
  pl_run_defaults(&o);
  o.workers = 2;
  o.epochs = 3;
  o.n_sched = pl_parse_schedule("epoch 1: +2, epoch 2: -3", o.sched, PL_MAX_SCHEDULE, err,
                                sizeof err);
  CHECK(o.n_sched == 2);
  CHECK(pl_check_schedule(&o, err, sizeof err, warn, sizeof warn) == 0);
  CHECK(o.workers_max == 4);
  CHECK(strstr(warn, "goes down to 1 worker at epoch 2") != NULL);
  CHECK(pl_schedule_processes(&o) == 4);
  /* A point at or after the end, a count above MAX, none left running. */
  o.workers_max = 0;
  o.epochs = 2;
  CHECK(pl_check_schedule(&o, err, sizeof err, warn, sizeof warn) == -EINVAL);
  CHECK(strstr(err, "not before the end") != NULL);
  o.epochs = 3;
  o.workers_max = 3;
  CHECK(pl_check_schedule(&o, err, sizeof err, warn, sizeof warn) == -EINVAL);
  CHECK(strstr(err, "more than --workers 2:3") != NULL);
  o.workers_max = 0;
  o.n_sched = pl_parse_schedule("epoch 1: -2", o.sched, PL_MAX_SCHEDULE, err, sizeof err);
  CHECK(pl_check_schedule(&o, err, sizeof err, warn, sizeof warn) == -EINVAL);
  CHECK(strstr(err, "a job needs one to go on") != NULL);

  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
