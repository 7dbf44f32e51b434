/* Where a linked job's processes sit (issue 39): the ps shards' placement behind `--link`,
 * the namespaces it needs, and the bytes model that says what the busiest link carries per
 * step. Pure functions: nothing is set up here (launcher/links/link.h does that).
 *
 * The placements, after BytePS (OSDI 2020), for n workers and a model of M bytes:
 *   one-host   every shard in the hub's namespace (the bridge's), behind no link of its own:
 *              the ps is a machine with unbounded bandwidth, and each worker's link carries
 *              M each way per step (today's behaviour, and the default);
 *   colocated  shard i in worker i's namespace (K must equal n), sharing its link: a link
 *              carries 2(n-1)/n M each way, a ring all-reduce's figure;
 *   separate   each shard in a namespace of its own behind a link of --link's rate (k extra
 *              machines): a shard's link carries nM/k each way, a worker's M.
 * An all-reduce job has no ps: its ranks sit in the workers' namespaces and the ring moves
 * 2(n-1)/n M each way per link. */
#ifndef PSTRAIN_LAUNCHER_PLACE_H
#define PSTRAIN_LAUNCHER_PLACE_H

#include <stddef.h>

#define PL_PLACE_MAX_SHARDS 64 /* as kernels/partition.h's PST_MAX_SHARDS */

typedef enum { PL_PLACE_ONE_HOST = 0, PL_PLACE_COLOCATED, PL_PLACE_SEPARATE } pl_placement;

/* "one-host" (or "one"), "colocated" or "separate": 0, or -EINVAL. */
int pl_placement_parse(const char *s, pl_placement *p);
/* "one-host", "colocated", "separate". */
const char *pl_placement_name(pl_placement p);

/* Where each process of a linked job sits. Nodes are the namespaces behind a link of their
 * own: 0..workers-1 are the workers' (an all-reduce job's ranks), workers..workers+extra-1
 * the separate shards'; node -1 is the hub (the bridge's namespace, one-host shards and
 * mpirun). Node k's address is 10.214.0.(k+2), the hub's 10.214.0.1. */
typedef struct {
  pl_placement placement;
  int workers, shards;              /* shards: 1 for one ps (0 for an all-reduce job) */
  int extra;                        /* namespaces of separate shards */
  int shard_node[PL_PLACE_MAX_SHARDS]; /* each shard's node (-1: the hub) */
  int peers;                        /* nodes talk to nodes, not only to the hub */
} pl_place_plan;

/* The plan of a job: placement p for `shards` ps shards (ignored for an all-reduce job, whose
 * placement must be one-host), with or without links. 0, or -EINVAL with a one-line reason:
 * colocated or separate without --link, colocated with shards != workers, a placement with
 * --mode allreduce, more nodes than a /24 holds. */
int pl_place_plan_make(pl_placement p, int workers, int shards, int allreduce, int linked,
                       pl_place_plan *out, char *err, size_t errlen);
/* Node k's address (k = -1: the hub's). */
void pl_place_addr(int node, char *out, size_t outlen);

/* The time model of one sync step (or one all-reduce step), on full-duplex links: each link
 * carries rate_bits_per_s each way at once and delays each packet delay_s each way; a packet
 * between two nodes crosses two links (2 delay_s), one between a node and the hub one.
 *
 * A step is compute, then two transfer phases that do not overlap in time: a sync ps's
 * pushes, then its pulls once every gradient is summed (a chunk's new weights go out once
 * every worker's push of it is in, and the workers' pushes end nearly together); a ring's reduce-scatter, then its all-gather. A phase lasts as long as its busiest
 * link's busier direction takes at the rate (the two directions run at once, so they are
 * not added). On top come the latency-bound hops a step waits for in sequence, whatever the
 * rate: a ps's push then its reply (two one-way crossings of the path between a worker and
 * a shard), a ring's 2(n-1) steps of one one-way crossing each, every step waiting for its
 * neighbour's piece. Compute is measured, not modelled: the same job's time per step behind
 * links fast enough to cost nothing (compare's --compute-link), which holds the workers'
 * forward and backward passes, the ps's sums and the network stacks' copies.
 *
 *   scheme          phase bytes (busier direction)   hops   path delay
 *   one-host ps     M                               2      d
 *   colocated       (n-1)/n M                       2      2d
 *   separate, k     max(M, nM/k)                    2      2d
 *   ring            (n-1)/n M                       2(n-1) 2d
 * seconds = compute + 2 x phase x 8 / rate + hops x path delay. */
typedef struct {
  double link_bytes;     /* the busiest link's bytes per step, in its busier direction */
  double phase_bytes[2]; /* of which in each phase */
  double transfer_s;     /* the phases at the rate: (phase_bytes[0] + phase_bytes[1]) x 8 / rate */
  int hops;              /* one-way crossings a step waits for in sequence */
  double hop_delay_s;    /* each one's delay: delay_s, or 2 delay_s between two nodes */
  double latency_s;      /* hops x hop_delay_s */
  double compute_s;      /* the measured compute term (0: none given) */
  double seconds;        /* compute_s + transfer_s + latency_s */
  const char *formula;   /* e.g. "2(n-1)/n M" */
} pl_bytes_model;

/* The model for n workers, `shards` ps shards placed by p (or a ring all-reduce), a model
 * of model_bytes (as pushed and pulled: float32, 4 bytes a parameter), links of
 * rate_bits_per_s and delay_s each way, and a measured compute_s per step (0 for the
 * communication alone). 0, or -EINVAL (n < 1, a rate <= 0, compute_s < 0, colocated with
 * shards != n). */
int pl_bytes_model_of(pl_placement p, int allreduce, int n, int shards, double model_bytes,
                      double rate_bits_per_s, double delay_s, double compute_s,
                      pl_bytes_model *out);
/* BytePS's best time for n workers and k extra CPU machines (its section 3.2: each summation
 * service splits between the workers' machines and the extra ones as the traffic balances):
 * 2n(n-1)M / ((n^2 + kn - 2k) B), B in bytes/s. For the docs' comparison. */
double pl_byteps_seconds(int n, int k, double model_bytes, double rate_bytes_per_s);

#endif
