#include "common/proc.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double stat_cpu_s(const char *path) {
  char buf[1024];
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* The fields after the command name (which may hold spaces) start after its ')'. */
  char *p = strrchr(buf, ')');
  unsigned long ut = 0, st = 0;
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

double pst_proc_cpu_s(long pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  return stat_cpu_s(path);
}

double pst_proc_thread_cpu_s(long pid, long tid) {
  char path[96];
  snprintf(path, sizeof path, "/proc/%ld/task/%ld/stat", pid, tid);
  return stat_cpu_s(path);
}

double pst_proc_self_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

long pst_proc_status_kib(long pid, const char *key) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%ld/status", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long v = -1;
  size_t klen = strlen(key);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, klen) && line[klen] == ':') v = strtol(line + klen + 1, NULL, 10);
  fclose(f);
  return v;
}

int pst_proc_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return 1;
}
