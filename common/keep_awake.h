/* Keeping the CPUs out of their sleep states while a GPU-like worker trains (--keep-awake).
 *
 * A worker whose device computes without the CPU spends its step handing work between
 * threads and waiting for the ps's chunks: a dozen wake-ups a step, each of a thread whose
 * CPU went idle. An idle CPU sleeps (a C-state on bare metal; on a virtual machine the vCPU
 * halts and the hypervisor deschedules it), and waking it costs 20-100 us, on the step's
 * critical path. This asks the kernel to keep its CPUs polling instead, the way
 * latency-sensitive services do (tuned's latency-performance profile, DPDK):
 *
 * - a PM QoS request of zero latency on /dev/cpu_dma_latency, held while the file is open
 *   (the kernel drops it when the process exits, however it exits); needs write access,
 *   which root has;
 * - otherwise one spinning thread per CPU the process may use, at SCHED_IDLE, the lowest
 *   priority there is: any other thread that becomes runnable takes its CPU at once, so they
 *   stand in for the idle loop. Never under a CPU quota (a cgroup's cpu.max: Kubernetes CPU
 *   limits, systemd's CPUQuota=), which the spinning would use up and so throttle the
 *   process's real threads; then nothing is done.
 *
 * Either way the CPUs draw more power while it is held. */
#ifndef PSTRAIN_COMMON_KEEP_AWAKE_H
#define PSTRAIN_COMMON_KEEP_AWAKE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#define PST_AWAKE_MAX_THREADS 64

typedef enum {
  PST_AWAKE_OFF = 0,  /* not held */
  PST_AWAKE_QOS,      /* the PM QoS request is held */
  PST_AWAKE_SPINNING, /* idle-priority threads spin */
} pst_awake_how;

typedef struct {
  pst_awake_how how;
  int qos_fd;                                  /* /dev/cpu_dma_latency, or -1 */
  int n_threads;                               /* spinning threads started */
  pthread_t threads[PST_AWAKE_MAX_THREADS];
  atomic_int stop;
  atomic_int idle, refused;                    /* threads at SCHED_IDLE, threads refused it */
} pst_keep_awake;

/* Options for tests: where the PM QoS file is (NULL: /dev/cpu_dma_latency) and the
 * cgroup v2 root (NULL: /sys/fs/cgroup). */
typedef struct {
  const char *qos_path;
  const char *cgroup_root;
} pst_awake_paths;

/* Holds the CPUs awake by the first way that works. Returns 0 with k->how set (PST_AWAKE_OFF
 * when neither could be used, which is not an error: the job only runs slower), and a
 * sentence for the log in note. */
int pst_keep_awake_start(pst_keep_awake *k, const pst_awake_paths *paths, char *note,
                         size_t notelen);

/* Lets the CPUs sleep again: closes the request, stops and joins the threads. Idempotent. */
void pst_keep_awake_stop(pst_keep_awake *k);

/* Whether the cgroup at PATH (relative to root, as /proc/self/cgroup names it) or one of its
 * ancestors has a CPU quota: 1, 0, or -errno when it cannot be read. */
int pst_cgroup_cpu_quota(const char *root, const char *path);

#endif
