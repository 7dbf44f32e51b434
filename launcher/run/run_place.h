/* A local job's placement behind --link (issue 39, launcher/run/run_place.c): --ps-placement
 * checked and planned before anything starts, and at the end the bytes the busiest link
 * carried per step set beside the bytes model's (launcher/links/place.h). Called by run.c;
 * calls launcher/links/ and launcher/common/. */
#ifndef PSTRAIN_LAUNCHER_RUN_PLACE_H
#define PSTRAIN_LAUNCHER_RUN_PLACE_H

#include "launcher/links/link.h"
#include "launcher/links/place.h"
#include "launcher/run/options.h"

/* The job's plan: its placement (o->ps_placement) for n_ps shards of `workers` workers, or
 * an all-reduce job's ranks, with or without links. 0, or 2 with one line printed. */
int pl_place_prepare(const pl_run_options *o, int workers, int n_ps, int allreduce, int linked,
                     pl_place_plan *plan);
/* At the end of a linked run, before its namespaces go: the bytes each link carried, the
 * busiest link's per step (steps and training seconds from summary_json, the ps's or rank
 * 0's) beside the model's, said in one line (unless quiet) and kept in res; then the links
 * go, with links.json written. Without links, only the placement is kept in res. */
void pl_place_finish(const pl_run_options *o, const pl_place_plan *plan, int allreduce,
                     pl_links *L, pl_run_result *res);

#endif
