/* An elastic `pstrain local` job (issue 28, launcher/run/run_elastic.c). */
#ifndef PSTRAIN_LAUNCHER_RUN_ELASTIC_H
#define PSTRAIN_LAUNCHER_RUN_ELASTIC_H

#include "launcher/run/options.h"

/* This run is elastic: --workers MIN:MAX or a schedule (launcher/run/run_elastic.c). */
int pl_elastic(const pl_run_options *o);

struct pl_run_ctx;
/* A metrics record that concerns an elastic job (the data handout's and the "workers"
 * records); 1 when it was one. */
int pl_elastic_record(struct pl_run_ctx *r, const char *event, const void *record);
/* Acts on the schedule's points that training has reached: called from the run's timer. */
void pl_elastic_tick(struct pl_run_ctx *r);
/* At the end: the workers over time on stdout (unless quiet) and, with every process's
 * outcome, in run_dir/elastic.json; fills res's figures. */
void pl_elastic_report(struct pl_run_ctx *r, pl_run_result *res);

#endif
