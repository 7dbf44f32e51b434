/* `pstrain bench`: one cell of the sweep, and pstrain's side of it (launcher/bench/bench_ps.c). */
#ifndef PSTRAIN_LAUNCHER_BENCH_PS_H
#define PSTRAIN_LAUNCHER_BENCH_PS_H

#include <stddef.h>

#include "launcher/bench/bench.h"

#define PL_BENCH_MAX_SUITES 4 /* --tls-suites */

typedef struct pl_bench_cell {
  size_t bytes;           /* actual model size: (A + 1) x K floats */
  int clients;
  int input, units;       /* the synthetic model */
  long rounds;
  pl_bench_figs ps, raw;
  long bound_kib;         /* 2 x weights + 32 MiB */
  int ps_ok, raw_ok;
  char why[256];
  /* --tls: the libuv echo, plain and with each suite. */
  pl_bench_figs uv, tls[PL_BENCH_MAX_SUITES];
  char suite[PL_BENCH_MAX_SUITES][64];
  int uv_ok;
} pl_bench_cell;

/* The ps's side of the sweep: --shards, --chunk-kib and --ps-threads as given. */
typedef struct {
  int shards;
  long long chunk_kib, ps_threads;
} pl_bench_ps_opts;

/* Runs pstrain's side of cell ce: the ps processes (ps_bin) and the clients (cl_bin), each
 * with `warmup` untimed rounds and ce->rounds timed ones, their files and logs under dir.
 * Returns 0 with the figures in out, or a negative code with the reason in ce->why. */
int pl_bench_pstrain(pl_bench_cell *ce, const pl_bench_ps_opts *o, const char *dir,
                     const char *ps_bin, const char *cl_bin, long warmup, pl_bench_figs *out);

#endif
