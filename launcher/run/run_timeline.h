/* A local job's timeline (issue 41, `pstrain local --timeline FILE`): each process writes its
 * own into the run directory (common/timeline.h), on its own clock; once the job has ended
 * they are merged into FILE on one clock, ps shard 0's. Each worker measured its offset to
 * every shard (its HELLO and the WELCOME's clock, proto/pstrain.proto): a worker's events
 * move by its offset to shard 0, shard k's by worker 0's offsets (to shard 0, minus to shard
 * k). The merged file's metadata gives each process's shift and its uncertainty. */
#ifndef PSTRAIN_LAUNCHER_RUN_TIMELINE_H
#define PSTRAIN_LAUNCHER_RUN_TIMELINE_H

#include <stddef.h>

#include "launcher/run/options.h"

/* The file of process `index` of `kind` ("ps": shard index; "worker": slot index). */
void pl_timeline_part(const pl_run_options *o, const char *kind, int index, char *buf,
                      size_t len);
/* Merges the parts of n_ps shards and `workers` workers into o->timeline. A part missing (a
 * process that did not end well) is left out and said in the metadata; no worker 0 part or
 * no ps shard 0 part is an error. 0, or a negative code with the reason in err. */
int pl_timeline_merge(const pl_run_options *o, int n_ps, int workers, char *err, size_t errlen);

#endif
