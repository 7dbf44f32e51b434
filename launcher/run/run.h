/* Running a whole training job on this machine: one pstrain-ps and N pstrain-worker
 * processes on 127.0.0.1, followed through the ps's metrics file, stopped together.
 * `pstrain local` is one run; `pstrain compare` is several. */
#ifndef PSTRAIN_LAUNCHER_RUN_H
#define PSTRAIN_LAUNCHER_RUN_H

#include "launcher/run/options.h"

/* Runs the job to the end. Returns 0 when it succeeded; otherwise non-zero with the reason
 * printed (one line, plus the tail of the failing process's log). */
int pl_run_local(const pl_run_options *o, pl_run_result *res);

#endif
