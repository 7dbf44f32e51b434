/* `pstrain local --mode allreduce` (issue 39): no ps; the workers are the ranks of one
 * mpirun job on this machine (worker/allreduce/), and the launcher follows that one process
 * as it follows a ps. Called by run.c; calls run_args.h's types and launcher/common/. */
#ifndef PSTRAIN_LAUNCHER_RUN_ALLREDUCE_H
#define PSTRAIN_LAUNCHER_RUN_ALLREDUCE_H

#include <stddef.h>

#include "launcher/run/options.h"
#include "launcher/run/run_args.h"

/* Whether the job is an all-reduce one. */
int pl_ar_mode(const pl_run_options *o);
/* The flags an all-reduce job cannot honour (a ps's: shards, elastic workers, links, TLS,
 * compression, checkpoints, ...): 0, or 2 with one line printed. */
int pl_ar_check(const pl_run_options *o);
/* The job's command line: mpirun (found on PATH) with its flags for this machine (loopback
 * only; as root, --allow-run-as-root; --oversubscribe) and -np workers, then
 * pstrain-worker --mode=allreduce with the job's flags. with_mpirun 0: the worker's part
 * alone (to check its flags). 0, or 2 with one line printed. */
int pl_ar_argv(const pl_run_options *o, const pl_job *j, int with_mpirun, pl_argv *a);
/* Why the job failed, in one line, from mpirun's log: the rank whose process ended on a
 * signal (mpirun's line), or the rank that stalled (the one of `ranks` that did not say it
 * waited past the stall limit), or a rank's own error, and where training stood (step of
 * total, from the metrics). */
void pl_ar_failure(const char *log, int ranks, long step, long total, char *out,
                   size_t outlen);

#endif
