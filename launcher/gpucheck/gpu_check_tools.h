/* `pstrain gpu-check`'s tools (launcher/gpucheck/gpu_check_tools.c): running a program with a
 * deadline, a subset of the data, reading figures back. */
#ifndef PSTRAIN_LAUNCHER_GPUCHECK_TOOLS_H
#define PSTRAIN_LAUNCHER_GPUCHECK_TOOLS_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* Runs argv[0] (a path) with env's NAME=VALUE strings added to the environment and its
 * output in log, for at most timeout_s seconds (then SIGTERM to its process group, and
 * SIGKILL 10 s later; *timed_out says so). Returns its exit status, 128 + the signal that
 * ended it, or a negative errno when it could not be started. */
int pl_gc_run_child(char *const argv[], const char *const *env, const char *log, double timeout_s,
                    int *timed_out);
/* Copies the first `train` training and `test` test samples of the IDX data set in `from`
 * (Fashion-MNIST's four files, gzip'd or not) into `to`, gzip'd. 0, or a negative errno with
 * one line in err. */
int pl_gc_subset_data(const char *from, const char *to, long train, long test, char *err,
                      size_t errlen);
/* A number field of o, or NAN. */
double pl_gc_num(const cJSON *o, const char *key);
/* The losses of the "train" records of a metrics file (JSON lines), in order, at most max.
 * Returns how many. */
int pl_gc_train_losses(const char *metrics, double *loss, int max);
/* The last line of log that starts with prefix and does not contain skip (NULL: none), or
 * "" in out. */
void pl_gc_last_line(const char *log, const char *prefix, const char *skip, char *out,
                     size_t outlen);

#endif
