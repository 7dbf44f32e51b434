/* A delay line for `--link` on kernels without netem (issue 27, point 1).
 *
 * netem is the kernel's own way to delay and drop a link's packets; kernels built without it
 * (the sch_netem module is absent from the VMs and GPU hosts these runs get) still have the
 * netfilter queue, which hands each packet a rule selects to a process and holds it in the
 * kernel until that process gives its verdict. The delay line is that process, as a thread:
 * it gives each packet of queue i its verdict delay[i] after the packet reached the queue,
 * in arrival order, and drops loss[i] of them (decided at arrival, uniformly at random), so
 * the packets themselves wait, as on a link, and TCP sees the round trip and the losses.
 * Which packets reach a queue is the caller's rule (launcher/links/link.c: what worker i sent, in
 * the ps's namespace's INPUT hook; what the ps sent it, in worker i's INPUT hook).
 *
 * Queue packets where they arrive, not where they leave: until a packet leaves its host
 * (a veth or the loopback orphans it) it counts against its socket's TCP small queues, so a
 * delay in the sender's OUTPUT hook would throttle TCP as a slow host does, not as a long
 * link does (BBR, which sets a small limit, moved a tenth of the link's rate so).
 *
 * A packet the kernel cannot hand over (the queue full, the socket's buffer full) is dropped
 * by the kernel, as a router drops what its buffer cannot hold. Segmentation-offloaded
 * packets are handed over whole (NFQA_CFG_F_GSO), as netem takes them. */
#ifndef PSTRAIN_LAUNCHER_DELAYLINE_H
#define PSTRAIN_LAUNCHER_DELAYLINE_H

#include <stddef.h>
#include <stdint.h>

typedef struct pl_delayline pl_delayline;

typedef struct {
  const char *ns_path; /* the queue's network namespace ("/run/netns/NAME"; NULL: the caller's) */
  int queue;           /* its number there, 0..65535 */
  double delay_s;      /* each packet's wait, seconds (0: none) */
  double loss;         /* the share of packets dropped, 0..1 */
} pl_delay_spec;

/* What the line did: packets seen and dropped, and how late verdicts came against the
 * delay asked for (the thread's scheduling: what the emulation adds to the delay): on
 * average, the median and 90th percentile (within 2%, 1 us at least), and at most. */
typedef struct {
  uint64_t packets, dropped;
  double late_mean_s, late_p50_s, late_p90_s, late_max_s;
  int realtime; /* whether the thread ran at a real-time priority (SCHED_FIFO) */
  /* Why they were late: the share of one core the line's thread used over its life (near 1:
   * it could not keep up), and the share of the machine's CPU time the host took meanwhile
   * (steal: the vCPUs taken away, the line with them). */
  double cpu_share, steal_share;
} pl_delayline_stats;

/* Runs fn(arg) on the calling thread inside the network namespace at ns_path
 * ("/run/netns/NAME"), then brings the thread back (setns moves the calling thread only; a
 * socket made meanwhile stays in that namespace). fn's result, or a negative error code
 * when the namespace cannot be entered. A thread that cannot come back aborts: nothing it
 * did after could be trusted. */
int pl_in_netns(const char *ns_path, int (*fn)(void *), void *arg);

/* Opens the n netfilter queues of spec, each in its namespace, and starts the thread that
 * serves them. 0, or a negative error code with a one-line reason in err (no netfilter
 * queue in this kernel, not allowed, a namespace that is not there). The calling thread
 * stays in its own namespace. */
int pl_delayline_start(pl_delayline **out, int n, const pl_delay_spec *spec, char *err,
                       size_t errlen);
/* Stops the thread, lets every packet still held through, and frees the line; its figures
 * into st (may be NULL). NULL is a no-op. */
void pl_delayline_stop(pl_delayline *d, pl_delayline_stats *st);

#endif
