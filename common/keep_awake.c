/* See keep_awake.h. */
#include "common/keep_awake.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define QOS_PATH "/dev/cpu_dma_latency"
#define CGROUP_ROOT "/sys/fs/cgroup"

/* The spin-wait hint: lets a sibling hyperthread run and tells a hypervisor the vCPU spins. */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("pause" ::: "memory");
#elif defined(__aarch64__)
  __asm__ volatile("yield" ::: "memory");
#else
  __asm__ volatile("" ::: "memory");
#endif
}

static void *spin(void *arg) {
  pst_keep_awake *k = arg;
  /* Only ever at the lowest priority: a spinning thread at any other would take CPU time
   * from the threads it is there to serve. (pthread attributes cannot name SCHED_IDLE.) */
  struct sched_param sp = {0};
  int ok = sched_setscheduler(0, SCHED_IDLE, &sp) == 0;
  atomic_fetch_add(ok ? &k->idle : &k->refused, 1);
  if (!ok) return NULL;
  while (!atomic_load_explicit(&k->stop, memory_order_relaxed))
    for (int i = 0; i < 64; i++) cpu_relax();
  return NULL;
}

int pst_cgroup_cpu_quota(const char *root, const char *path) {
  char dir[1024];
  if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) return -ENAMETOOLONG;
  for (;;) {
    char file[1200], line[128];
    snprintf(file, sizeof file, "%s%s/cpu.max", root, dir);
    FILE *f = fopen(file, "r");
    if (f) {
      /* "max 100000": no quota; "200000 100000": two CPUs' worth. */
      int quota = fgets(line, sizeof line, f) && strncmp(line, "max", 3) != 0;
      fclose(f);
      if (quota) return 1;
    } else if (errno != ENOENT) {
      return -errno;
    }
    char *slash = strrchr(dir, '/');
    if (!slash || dir[0] == '\0' || (slash == dir && dir[1] == '\0')) return 0;
    if (slash == dir) slash[1] = '\0'; /* up to the root, "/" */
    else *slash = '\0';
  }
}

/* The process's cgroup v2 path from /proc/self/cgroup ("0::/system.slice/x.service"), or
 * -ENOENT on a cgroup v1 machine. */
static int own_cgroup(char *path, size_t len) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return -errno;
  char line[1024];
  int rc = -ENOENT;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "0::", 3) == 0) {
      line[strcspn(line, "\n")] = '\0';
      snprintf(path, len, "%s", line + 3);
      rc = 0;
      break;
    }
  fclose(f);
  return rc;
}

static int cpus_usable(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  int n = CPU_COUNT(&set);
  return n < 1 ? 1 : n > PST_AWAKE_MAX_THREADS ? PST_AWAKE_MAX_THREADS : n;
}

int pst_keep_awake_start(pst_keep_awake *k, const pst_awake_paths *paths, char *note,
                         size_t notelen) {
  memset(k, 0, sizeof *k);
  k->qos_fd = -1;
  atomic_init(&k->stop, 0);
  atomic_init(&k->idle, 0);
  atomic_init(&k->refused, 0);
  const char *qos = paths && paths->qos_path ? paths->qos_path : QOS_PATH;
  const char *root = paths && paths->cgroup_root ? paths->cgroup_root : CGROUP_ROOT;
  int fd = open(qos, O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    int32_t zero = 0;
    if (write(fd, &zero, sizeof zero) == (ssize_t)sizeof zero) {
      k->qos_fd = fd;
      k->how = PST_AWAKE_QOS;
      snprintf(note, notelen, "keeping the CPUs awake: a PM QoS request of "
                              "0 us on %s", qos);
      return 0;
    }
    close(fd);
  }
  int qos_errno = errno;
  char cg[1024];
  int quota = own_cgroup(cg, sizeof cg) == 0 ? pst_cgroup_cpu_quota(root, cg) : 0;
  if (quota != 0) {
    snprintf(note, notelen, "not keeping the CPUs awake: %s (%s) and %s", qos,
             strerror(qos_errno), quota > 0 ? "a CPU quota on this process's cgroup, which "
                                              "spinning threads would use up"
                                            : "the cgroup's CPU quota unreadable");
    return 0;
  }
  int n = cpus_usable();
  for (int i = 0; i < n; i++) {
    if (pthread_create(&k->threads[i], NULL, spin, k) != 0) break;
    k->n_threads++;
  }
  /* Each thread says whether it could lower itself (a seccomp filter may refuse the call):
   * wait for all of them, so that the note says what runs. */
  while (atomic_load(&k->idle) + atomic_load(&k->refused) < k->n_threads) sched_yield();
  if (atomic_load(&k->idle) == 0) {
    int started = k->n_threads;
    pst_keep_awake_stop(k);
    snprintf(note, notelen, "not keeping the CPUs awake: %s (%s), and %s", qos,
             strerror(qos_errno), started ? "the threads may not lower themselves to SCHED_IDLE"
                                          : "no thread could be started");
    return 0;
  }
  k->how = PST_AWAKE_SPINNING;
  snprintf(note, notelen, "keeping the CPUs awake: %d spinning thread%s at "
                          "SCHED_IDLE (%s: %s)", atomic_load(&k->idle),
           atomic_load(&k->idle) == 1 ? "" : "s",
           qos, strerror(qos_errno));
  return 0;
}

void pst_keep_awake_stop(pst_keep_awake *k) {
  /* A zeroed struct, never started, has qos_fd 0: only a held request is closed. */
  if (k->how == PST_AWAKE_QOS && k->qos_fd >= 0) close(k->qos_fd);
  k->qos_fd = -1;
  atomic_store(&k->stop, 1);
  for (int i = 0; i < k->n_threads; i++) pthread_join(k->threads[i], NULL);
  k->n_threads = 0;
  k->how = PST_AWAKE_OFF;
}
