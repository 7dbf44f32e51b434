/* Emulated links for `pstrain local --link` (issue 27, point 1): each worker in a network
 * namespace of its own, joined to the ps's namespace by a veth pair whose two ends are shaped
 * with tc (a token bucket for the rate, netem for the delay and loss), so that bytes queue as
 * on a real link, both ways. On a kernel without netem the delay and the loss are the delay
 * line's (launcher/links/delayline.h): iptables sends every packet between the ps's namespace and
 * worker I's to netfilter queue I, which a thread of the launcher holds for the delay.
 *
 * Layout: namespace pstlink-PID-ps holds the ps (every shard) and a bridge, br0, at
 * 10.214.0.1/24; namespace pstlink-PID-wI holds worker I, whose eth0 (10.214.0.(I+2)) is
 * the peer of wkI, a port of br0. eth0's egress carries worker I's pushes, wkI's its pulls;
 * both get the link's shaping. Those addresses exist only inside the namespaces made here;
 * nothing is sent anywhere else. Deleting the namespaces takes the veths and the bridge with
 * them: pl_links_down, at the end of the run whatever happened, and a later run sweeps the
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

typedef struct {
  int up;
  int workers;
  char ip[256];                      /* iproute2's ip, found on PATH or in /usr/sbin, /sbin */
  char ns_ps[48];
  char ns_w[PL_MAX_WORKERS][48];
  int made_ps, made_w;               /* namespaces made so far (deleted by pl_links_down) */
  pl_link_spec spec[PL_MAX_WORKERS]; /* worker i's link (spec[i].set: shaped) */
  pl_delay_by delay_by;              /* PL_DELAY_NONE: no link delays or drops */
  pl_delayline *dl;                  /* the delay line, when it is the delay_by */
  double rtt_s[PL_MAX_WORKERS];      /* worker i's round trip to the ps, measured at setup */
} pl_links;

/* Makes the namespaces, the bridge, the veths and the shaping: link per[i] for worker i when
 * set, else all (which must be set). Returns 0, or 2 with a one-line reason in err (not
 * root, no ip or tc, a kernel without a qdisc); what was made is removed again. */
int pl_links_up(pl_links *L, int workers, const pl_link_spec *all, const pl_link_spec *per,
                char *err, size_t errlen);
/* One line for the log: the workers' links, what delays them, their round trips. */
void pl_links_describe(const pl_links *L, char *out, size_t outlen);
/* Deletes every namespace made (idempotent). Before that, when run_dir is not NULL, writes
 * run_dir/links.json: each worker's link as asked and its round trip as measured, and what
 * the delay line did (packets, losses, how late its verdicts came). */
void pl_links_down(pl_links *L, const char *run_dir);
/* argv run inside the ps's namespace (worker -1) or worker i's: "ip netns exec NS argv...",
 * into out[cap] (pointers into argv and L). Returns the new argc, or -1 when it does not fit. */
int pl_links_wrap(const pl_links *L, int worker, char **argv, char **out, int cap);

#endif
