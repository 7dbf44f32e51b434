/* `pstrain gpu-check`'s report (launcher/gpucheck/gpu_check_report.c). */
#ifndef PSTRAIN_LAUNCHER_GPUCHECK_REPORT_H
#define PSTRAIN_LAUNCHER_GPUCHECK_REPORT_H

#include "launcher/gpucheck/checks.h"

/* Writes <out>/report.json (cJSON) and <out>/report.md from run. 0 or a negative errno. */
int pl_gc_write_report(const pl_gc_run *run);
/* 1 when every check passed. */
int pl_gc_all_pass(const pl_gc_run *run);

#endif
