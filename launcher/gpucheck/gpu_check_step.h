/* gpu-check's figures of issue 41 (gpu_check_step.c): one GPU worker's step against the
 * emulated worker of the same rate, the ps's transport against raw TCP, and CPU workers over
 * the host's cores. Each check's verdict is whether its runs ran; the targets are
 * said beside the figures ("met", "NOT met", or not judged in the dry run). Calls checks.h,
 * gpu_check_tools.h and launcher/common only. */
#ifndef PSTRAIN_LAUNCHER_GPUCHECK_STEP_H
#define PSTRAIN_LAUNCHER_GPUCHECK_STEP_H

#include "launcher/gpucheck/checks.h"

/* For mlp and cnn2 (the dry run: mlp alone): 1 sync worker's share of its compute-only rate
 * at batch 256, and the share `--device null:RATE` reaches at that very rate. */
void pl_gc_check_step(pl_gc_ctx *g);
/* `pstrain bench` at 1 client, 1 and 16 MiB (the dry run: 1 MiB), against raw TCP. */
void pl_gc_check_transport(pl_gc_ctx *g);
/* Sync and async CPU workers on mlp at 1, 2, 4, 8 and 12 workers; not run (said why) on a
 * host of fewer than 16 cores, except as the dry run's one worker. */
void pl_gc_check_cpu_workers(pl_gc_ctx *g);

#endif
