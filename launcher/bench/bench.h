/* `pstrain bench`: transport figures of pstrain against a raw loopback TCP baseline.
 *
 * One cell is a tensor size S and a client count N. pstrain's side: a pstrain-ps with a
 * synthetic model of S bytes in sync mode and N pstrain-benchclient processes, each doing
 * rounds of push (S bytes) + pull (S bytes). The baseline: a plain server process and N
 * plain client processes on loopback TCP, each round writing S bytes in 1 MiB writes and
 * reading S bytes back, between S-byte buffers on both ends. */
#ifndef PSTRAIN_LAUNCHER_BENCH_H
#define PSTRAIN_LAUNCHER_BENCH_H

#include <stddef.h>

/* What one side of one cell measured. Rates are in bytes per second. */
typedef struct {
  long rounds;            /* timed rounds per client */
  double wall_s;          /* first timed round's start to last one's end, over all clients */
  double push_rate;       /* bytes pushed by all clients / mean per-client push time */
  double pull_rate;       /* bytes pulled by all clients / mean per-client pull time */
  double combined_rate;   /* bytes pushed + pulled by all clients / wall_s */
  double p50_s, p99_s;    /* round latency over every client's timed rounds */
  long peak_rss_kib;      /* the server's VmHWM (pstrain: the ps), -1 if unknown */
  double server_cpu_s;    /* the server's CPU seconds (user + system) over the timed rounds */
  double server_loop_cpu_s; /* of those, its main thread's (the ps's event loop), or -1 */
  double clients_cpu_s;   /* all clients' CPU seconds over their timed rounds */
} pl_bench_figs;

/* Per-client timings, filled by the clients of either side. */
typedef struct {
  double t_first, t_last; /* CLOCK_MONOTONIC seconds: first timed round begun, last ended */
  double push_s, pull_s;  /* summed over the timed rounds */
  long rounds;
  double server_cpu_s;    /* the server's CPU seconds over this client's timed rounds, or -1 */
  double server_loop_cpu_s; /* its main thread's, or -1 */
  double cpu_s;           /* this client's CPU seconds over its timed rounds */
  double *lat;            /* [rounds] seconds */
} pl_bench_client;

/* Turns N clients' timings into figures (bytes = S). */
void pl_bench_reduce(const pl_bench_client *c, int n, size_t bytes, pl_bench_figs *f);

/* A listening socket on 127.0.0.1 with a port of the kernel's choice, for a bench server
 * run in a child process: returns the fd with *port set, or a negative code with a one-line
 * reason in err. */
int pl_bench_listen(int *port, char *err, size_t errlen);

/* Runs the raw TCP baseline for one cell: `warmup` untimed rounds then `rounds` timed ones
 * per client. Returns 0, or a negative code with a one-line reason in err. */
int pl_bench_tcp(size_t bytes, int clients, long rounds, long warmup, pl_bench_figs *f,
                 char *err, size_t errlen);


#endif
