/* keep_awake.h: the PM QoS request written and held, the idle-priority threads when it
 * cannot be, none under a CPU quota, and stopping (twice, or never started). */
#include "common/keep_awake.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"

static char g_tmp[] = "/tmp/keep_awake_test.XXXXXX";

static void put(const char *rel, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s%s", g_tmp, rel);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static void mkdir_in(const char *rel) {
  char path[512];
  snprintf(path, sizeof path, "%s%s", g_tmp, rel);
  CHECK(mkdir(path, 0700) == 0);
}

/* Threads of this process whose scheduling policy is SCHED_IDLE (/proc's stat, field 41). */
static int idle_threads(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[300], buf[1024];
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = '\0';
    char *p = strrchr(buf, ')'); /* the name may hold spaces; the fields follow it */
    if (!p) continue;
    int field = 2;
    long policy = -1;
    for (char *tok = strtok(p + 1, " "); tok; tok = strtok(NULL, " "))
      if (++field == 41) policy = strtol(tok, NULL, 10);
    n += policy == SCHED_IDLE;
  }
  closedir(d);
  return n;
}

static int usable_cpus(void) {
  cpu_set_t set;
  CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
  int n = CPU_COUNT(&set);
  return n > PST_AWAKE_MAX_THREADS ? PST_AWAKE_MAX_THREADS : n;
}

static void test_quota(void) {
  mkdir_in("/q");
  mkdir_in("/q/a");
  mkdir_in("/q/a/b");
  char root[300];
  snprintf(root, sizeof root, "%s/q", g_tmp);
  CHECK(pst_cgroup_cpu_quota(root, "/a/b") == 0); /* no cpu.max anywhere: no quota */
  put("/q/a/b/cpu.max", "max 100000\n");
  CHECK(pst_cgroup_cpu_quota(root, "/a/b") == 0);
  put("/q/a/cpu.max", "200000 100000\n"); /* an ancestor's quota throttles b too */
  CHECK(pst_cgroup_cpu_quota(root, "/a/b") == 1);
  CHECK(pst_cgroup_cpu_quota(root, "/a") == 1);
  put("/q/a/cpu.max", "max 100000\n");
  put("/q/cpu.max", "50000 100000\n"); /* a container's own cgroup, seen as its root */
  CHECK(pst_cgroup_cpu_quota(root, "/a/b") == 1);
  CHECK(pst_cgroup_cpu_quota(root, "/") == 1);
  put("/q/cpu.max", "max 100000\n");
  CHECK(pst_cgroup_cpu_quota(root, "/") == 0);
  CHECK(pst_cgroup_cpu_quota(root, "") == 0);
}

static void test_qos(void) {
  char qos[300];
  snprintf(qos, sizeof qos, "%s/qos", g_tmp);
  put("/qos", "");
  pst_keep_awake k;
  char note[512];
  pst_awake_paths paths = {.qos_path = qos};
  CHECK(pst_keep_awake_start(&k, &paths, note, sizeof note) == 0);
  CHECK(k.how == PST_AWAKE_QOS && k.n_threads == 0);
  CHECK(strstr(note, "PM QoS") != NULL);
  struct stat st;
  CHECK(stat(qos, &st) == 0 && st.st_size == 4); /* one int32: 0 us */
  int fd = k.qos_fd;
  CHECK(fd >= 0 && fcntl(fd, F_GETFD) >= 0);
  pst_keep_awake_stop(&k);
  CHECK(fcntl(fd, F_GETFD) < 0); /* the request is let go with its file */
  CHECK(k.how == PST_AWAKE_OFF);
  pst_keep_awake_stop(&k); /* twice: nothing */
}

static void test_spinning(void) {
  char qos[300], root[300];
  snprintf(qos, sizeof qos, "%s/no-such-file", g_tmp);
  snprintf(root, sizeof root, "%s/empty-cgroupfs", g_tmp);
  mkdir_in("/empty-cgroupfs");
  pst_awake_paths paths = {.qos_path = qos, .cgroup_root = root};
  int before = idle_threads();
  pst_keep_awake k;
  char note[512];
  CHECK(pst_keep_awake_start(&k, &paths, note, sizeof note) == 0);
  CHECK(k.how == PST_AWAKE_SPINNING);
  CHECKF(k.n_threads == usable_cpus(), "%d threads for %d CPUs", k.n_threads, usable_cpus());
  CHECK(strstr(note, "SCHED_IDLE") != NULL);
  /* Each thread lowers itself as it starts; wait up to 2 s for all of them. */
  int seen = 0;
  for (int i = 0; i < 200 && seen < before + k.n_threads; i++) {
    seen = idle_threads();
    nanosleep(&(struct timespec){0, 10000000}, NULL);
  }
  CHECKF(seen == before + k.n_threads, "%d threads at SCHED_IDLE, %d expected", seen,
         before + k.n_threads);
  pst_keep_awake_stop(&k);
  CHECK(k.n_threads == 0 && k.how == PST_AWAKE_OFF);
  CHECK(idle_threads() == before); /* joined */
}

static void test_quota_stops_spinning(void) {
  char qos[300], root[300];
  snprintf(qos, sizeof qos, "%s/no-such-file", g_tmp);
  snprintf(root, sizeof root, "%s/quota-cgroupfs", g_tmp);
  mkdir_in("/quota-cgroupfs");
  /* The quota at the root of the tree is every cgroup's ancestor, whatever ours is named. */
  put("/quota-cgroupfs/cpu.max", "100000 100000\n");
  pst_awake_paths paths = {.qos_path = qos, .cgroup_root = root};
  pst_keep_awake k;
  char note[512];
  CHECK(pst_keep_awake_start(&k, &paths, note, sizeof note) == 0);
  CHECK(k.how == PST_AWAKE_OFF && k.n_threads == 0);
  CHECK(strstr(note, "quota") != NULL);
  pst_keep_awake_stop(&k);
}

int main(void) {
  if (!mkdtemp(g_tmp)) {
    perror("mkdtemp");
    return 1;
  }
  /* A zeroed struct, never started, closes nothing: its qos_fd is 0, here a file of ours. */
  if (fcntl(0, F_GETFD) < 0 && open("/dev/null", O_RDONLY) != 0) return 1;
  pst_keep_awake never;
  memset(&never, 0, sizeof never);
  pst_keep_awake_stop(&never);
  CHECK(fcntl(0, F_GETFD) >= 0);
  test_quota();
  test_qos();
  test_spinning();
  test_quota_stops_spinning();
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
  printf("keep_awake_test: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
