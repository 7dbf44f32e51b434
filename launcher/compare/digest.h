/* `pstrain compare`: what one run left in its directory, read back into its record
 * (launcher/compare/digest.c). */
#ifndef PSTRAIN_LAUNCHER_COMPARE_DIGEST_H
#define PSTRAIN_LAUNCHER_COMPARE_DIGEST_H

#include "launcher/compare/records.h"
#include "launcher/run/options.h"

/* Reads a run's metrics: its evaluations (dense ones when there are any, else the epochs'),
 * the staleness its training reports carried, and its summary; with --link, its links'
 * figures; for an elastic run, its throughput.dat and workers.dat beside them. */
void pl_cmp_digest(mode_run *m, run_rec *r, const pl_run_options *o, const double *targets,
                   int ntargets);

#endif
