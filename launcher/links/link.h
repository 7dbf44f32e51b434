/* Emulated links for `pstrain local --link` (issue 27, point 1): each worker in a network
 * namespace of its own, joined to the ps's namespace by a veth pair whose two ends are shaped
 * with tc (a token bucket for the rate, netem for the delay and loss), so that bytes queue as
 * on a real link, both ways. On a kernel without netem the delay and the loss are the delay
 * line's (launcher/links/delayline.h): iptables sends every packet between the ps's namespace and
 * worker I's to netfilter queue I, which a thread of the launcher holds for the delay.
 *
 * Layout: namespace pstlink-PID-ps, the hub, holds a bridge, br0, at 10.214.0.1/24, and the
 * ps shards placed one-host (launcher/links/place.h) or an all-reduce job's mpirun; namespace
 * pstlink-PID-wI holds worker I (or rank I), whose eth0 (10.214.0.(I+2)) is the peer of wkI,
 * a port of br0; with separate shards, namespace pstlink-PID-sS holds shard S, whose eth0
 * (10.214.0.(workers+S+2)) is the peer of psS. These are the nodes, each behind a link of its
 * own: eth0's egress carries what the node sends, the hub's end's egress what it receives;
 * both get the link's shaping. Traffic between two nodes (colocated or separate shards, an
 * all-reduce ring) crosses the sender's link and then the receiver's, as between machines
 * on one switch. Those addresses exist only inside the namespaces made here; nothing is sent
 * anywhere else. Deleting the namespaces takes the veths and the bridge with them:
 * pl_links_down, at the end of the run whatever happened, and a later run sweeps the
 * namespaces of a launcher that was killed outright (its PID gone).
 *
 * Needs root and iproute2's ip and tc (and iptables for the delay line); without them
 * pl_links_up says so in one line. */
#ifndef PSTRAIN_LAUNCHER_LINK_H
#define PSTRAIN_LAUNCHER_LINK_H

#include <stddef.h>

#include "launcher/links/delayline.h"
#include "launcher/common/helpers.h"

/* One link's shaping, as tc takes it: rate "100mbit", delay "1ms" ("" none), loss_text
 * "0.1%" ("" none); and as numbers. */
typedef struct {
  int set;
  char rate[32], delay[32], loss_text[32];
  double bits_per_sec; /* the rate as a number */
  double delay_s;      /* the delay, each way, in seconds */
  double loss;         /* the share of packets lost, each way, 0..1 */
} pl_link_spec;

/* Parses RATE[,DELAY[,LOSS]]: RATE a number with bit, kbit, mbit or gbit (per second),
 * DELAY a number with us or ms, LOSS a percentage with %. 0, or -EINVAL with a reason. */
int pl_link_parse(const char *s, pl_link_spec *l, char *err, size_t errlen);
/* Parses --link-worker's I:RATE[,DELAY[,LOSS]][;I:...] into per[I] (I < workers). */
int pl_link_parse_workers(const char *s, int workers, pl_link_spec *per, char *err,
                          size_t errlen);

#define PL_LINK_PS_ADDR "10.214.0.1"

/* What delays and drops the links' packets. */
typedef enum { PL_DELAY_NONE = 0, PL_DELAY_NETEM, PL_DELAY_LINE } pl_delay_by;
/* "none", "netem" or "delay line" (links.json's delay_by). */
const char *pl_delay_by_name(pl_delay_by d);

/* The nodes (workers and separate shards) a /24 leaves room for. */
#define PL_MAX_NODES 250

typedef struct {
  int up;
  int workers;
  int nodes;                         /* workers, then separate shards' namespaces */
  int peers;                         /* nodes talk to each other (place.h's plan) */
  char ip[256];                      /* iproute2's ip, found on PATH or in /usr/sbin, /sbin */
  char ns_ps[48];                    /* the hub */
  char ns_w[PL_MAX_NODES][48];       /* node i's namespace */
  char port[PL_MAX_NODES][16];       /* node i's veth end in the hub: wkI, or psS */
  int made_ps, made_w;               /* namespaces made so far (deleted by pl_links_down) */
  pl_link_spec spec[PL_MAX_NODES];   /* node i's link (spec[i].set: shaped) */
  pl_delay_by delay_by;              /* PL_DELAY_NONE: no link delays or drops */
  pl_delayline *dl;                  /* the delay line, when it is the delay_by */
  double rtt_s[PL_MAX_NODES];        /* node i's round trip to the hub, measured at setup */
  /* The bytes each node's link carried, from the node's side (sent: its egress), read from
   * the hub's end of its veth just before the namespaces go (-1: not read); and the
   * busiest link (the node, -1 for none) and its bytes in its busier direction. */
  double sent[PL_MAX_NODES], received[PL_MAX_NODES];
  int busiest;
  double busiest_bytes;
} pl_links;

/* Makes the namespaces, the bridge, the veths and the shaping for `workers` workers and
 * `extra` separate shards (nodes workers..workers+extra-1, each with link all): link per[i]
 * for worker i when set, else all (which must be set). peers: the nodes talk to each other
 * (the delay line then delays those packets too). Returns 0, or 2 with a one-line reason in
 * err (not root, no ip or tc, a kernel without a qdisc); what was made is removed again. */
int pl_links_up(pl_links *L, int workers, int extra, int peers, const pl_link_spec *all,
                const pl_link_spec *per, char *err, size_t errlen);
/* One line for the log: the workers' links, what delays them, their round trips. */
void pl_links_describe(const pl_links *L, char *out, size_t outlen);
/* What the run says of itself for links.json: its placement, its steps and the bytes model's
 * figures (launcher/links/place.h), to set beside the bytes the links carried. */
typedef struct {
  const char *placement;   /* "one-host", "colocated", "separate" */
  double steps;            /* sync steps or all-reduce steps (<= 0: unknown) */
  double model_bytes;      /* the model's busiest link's bytes per step (<= 0: no model) */
  const char *formula;     /* the model's, e.g. "2(n-1)/n M" */
  double model_seconds;    /* the model's communication per step, transfer and latency, without
                            * compute (<= 0: none): pstrain compare adds a measured compute */
  double model_transfer_seconds, model_latency_seconds; /* of which the bytes at the rate, and
                                                         * the hops' delays */
  int model_hops;          /* the latency-bound one-way crossings of a step */
  double step_seconds;     /* the run's training seconds per step (<= 0: unknown) */
} pl_links_note;

/* Reads each node's bytes (sent, received; busiest) from the hub's ends of the veths. 0, or a
 * negative error code. pl_links_down does it itself when it was not done. */
int pl_links_count(pl_links *L);
/* Deletes every namespace made (idempotent). Before that, when run_dir is not NULL, writes
 * run_dir/links.json: each node's link as asked, its round trip as measured and the bytes it
 * carried, what the delay line did (packets, losses, how late its verdicts came), and, with
 * note, the placement and the busiest link's bytes per step beside the model's. */
void pl_links_down(pl_links *L, const char *run_dir, const pl_links_note *note);
/* argv run inside the hub's namespace (node -1) or node i's: "ip netns exec NS argv...",
 * into out[cap] (pointers into argv and L). Returns the new argc, or -1 when it does not fit. */
int pl_links_wrap(const pl_links *L, int node, char **argv, char **out, int cap);
/* The name a node's namespace has without its index: "pstlink-PID-w" (rank I's is it with I
 * appended), for a wrapper that picks the namespace from the rank. */
void pl_links_worker_prefix(const pl_links *L, char *out, size_t outlen);

#endif
