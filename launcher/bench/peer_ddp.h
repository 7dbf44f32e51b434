/* A real peer beside pstrain in `pstrain bench-train` (issue 39, point 7): PyTorch's
 * DistributedDataParallel on the gloo backend, run by tools/ddp_bench.py under Debian's
 * /usr/bin/python3 on the same job (the MLP 784-256-128-10, the same data shards, per-worker
 * batch, epochs, seed, threads and Adam learning rate). Calls nothing of the launcher but its
 * helpers. */
#ifndef PSTRAIN_LAUNCHER_BENCH_PEER_DDP_H
#define PSTRAIN_LAUNCHER_BENCH_PEER_DDP_H

#include <stddef.h>

#include "launcher/run/options.h"

/* Why the peer cannot run job o (a model other than the mlp, another optimizer, a GPU device,
 * changed input), or NULL when it can. */
const char *pl_peer_ddp_unfit(const pl_run_options *o);

/* Runs the peer with o->workers ranks, its log and summary.json in dir. 0 with the summary
 * (one line of JSON) in summary; PL_PEER_SKIPPED when PyTorch or its script is not there;
 * another non-zero value when it failed. why gets one line in both of the last cases. */
#define PL_PEER_SKIPPED 3
int pl_peer_ddp_run(const pl_run_options *o, const char *dir, char *summary, size_t cap,
                    char *why, size_t whylen);

#endif
