/* Where a model's layers go (issue 40): the stages' layer ranges and devices, by hand
 * (--place) or balanced (--stages N), and what each stage needs of its device's memory.
 * Pure functions of the model and the figures given: no device is opened here. */
#ifndef PSTRAIN_KERNELS_PIPELINE_PLAN_H
#define PSTRAIN_KERNELS_PIPELINE_PLAN_H

#include <stddef.h>

#include "kernels/pipeline/flags.h" /* pst_stage_plan, pst_plan_parse_place */
#include "model/model.h"

/* A stage's need of its device, in bytes: the net's buffers (kernels/net_stage.h) and the
 * backend's workspace, an estimate of the CPU backend's scratch for the stage's largest
 * convolution at the micro-batch size. */
typedef struct {
  size_t weights, gradients, activations, workspace, total;
} pst_plan_need;
int pst_plan_stage_need(const pst_model *m, int lo, int hi, int max_batch, int slots, int host_memory,
                  pst_plan_need *need);

/* Cuts the layers into n stages minimising the slowest stage's cost (cost[i]: layer i's
 * measured seconds, or any weight; NULL: equal weights), each stage's need within cap
 * bytes (0: no cap). 0, -EINVAL (n outside 1 .. the layers), or -ENOSPC when no cut into n
 * fits the cap. */
int pst_plan_balance(const pst_model *m, const double *cost, int n, size_t cap, int max_batch,
                     int slots, int host_memory, pst_stage_plan *plan);

#endif
