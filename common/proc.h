/* Figures about a process from /proc, for benchmarks and the memory tests: CPU time and
 * the memory lines of /proc/PID/status. Linux only, like the rest of pstrain. */
#ifndef PSTRAIN_COMMON_PROC_H
#define PSTRAIN_COMMON_PROC_H

/* CPU seconds (user + system) that process pid has used, or -1 if unknown. */
double pst_proc_cpu_s(long pid);
/* The same for one thread of it (tid == pid: its main thread, where the daemons run their
 * event loop), or -1. */
double pst_proc_thread_cpu_s(long pid, long tid);
/* The cores this process may run on (its CPU affinity), at least 1. */
int pst_proc_cores(void);
/* CPU seconds (user + system) this process has used. */
double pst_proc_self_cpu_s(void);
/* One "Key:   123 kB" figure of /proc/PID/status (VmRSS, VmHWM, ...) in KiB, or -1. */
long pst_proc_status_kib(long pid, const char *key);

#endif
