/* gpu-check's all-reduce checks (issue 39): GPU ranks of `--mode allreduce`, and NCCL
 * (collective/nccl.h) where the host has two GPUs or more; said "not run", with why, where it
 * lacks them or Open MPI. Calls checks.h and gpu_check_tools.h only. */
#ifndef PSTRAIN_LAUNCHER_GPUCHECK_ALLREDUCE_H
#define PSTRAIN_LAUNCHER_GPUCHECK_ALLREDUCE_H

#include "launcher/gpucheck/checks.h"

void pl_gc_check_allreduce(pl_gc_ctx *g);

#endif
