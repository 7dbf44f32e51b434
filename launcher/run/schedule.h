/* An elastic job's worker counts (launcher/run/schedule.c): `--workers MIN:MAX` and
 * `--schedule`, parsed and checked before anything starts. */
#ifndef PSTRAIN_LAUNCHER_RUN_SCHEDULE_H
#define PSTRAIN_LAUNCHER_RUN_SCHEDULE_H

#include <stddef.h>

#include "launcher/run/options.h"

/* launcher/run/schedule.c: `--schedule "epoch 1: +2, epoch 2.5: -2"` into out (at most max
 * points, in non-decreasing order of epoch). Returns how many, or -EINVAL with a one-line
 * reason in err. */
int pl_parse_schedule(const char *s, pl_sched_point *out, int max, char *err, size_t errlen);
/* `--workers` as N or MIN:MAX: *min and *max (equal for N). Returns 0, or -EINVAL when it is
 * neither (1 <= MIN <= MAX <= PL_MAX_WORKERS). */
int pl_parse_workers_range(const char *s, int *min, int *max);
/* The schedule checked against the job: starting from o->workers, each point's count must
 * stay in 1..MAX (MAX: o->workers_max, or, for a fixed --workers N, the schedule's peak,
 * which it then sets), no point may lie at or after o->epochs, and every process the job may
 * start must fit PL_MAX_WORKERS. Returns 0, or -EINVAL with a one-line reason in err; a
 * count below MIN is allowed (the ps goes on with fewer) and said in warn ("" when none). */
int pl_check_schedule(pl_run_options *o, char *err, size_t errlen, char *warn, size_t warnlen);
/* The processes a job with this schedule may start in all: MIN plus every +N. */
int pl_schedule_processes(const pl_run_options *o);

#endif
