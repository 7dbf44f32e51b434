/* The launcher's subcommands: each takes the arguments after its name and returns the
 * process exit code. */
#ifndef PSTRAIN_LAUNCHER_COMMANDS_H
#define PSTRAIN_LAUNCHER_COMMANDS_H

int pl_cmd_local(int argc, char **argv);
int pl_cmd_compare(int argc, char **argv);
int pl_cmd_bench(int argc, char **argv);
/* launcher/bench/bench_train.c: samples/s for 1, 2, 4, 8 workers beside their compute-only rate. */
int pl_cmd_bench_train(int argc, char **argv);
/* launcher/inspect/export.c: a checkpoint's weights as safetensors or npz. */
int pl_cmd_export(int argc, char **argv);

/* launcher/inspect/status.c: a running ps's status over its own protocol, as a table or JSON. */
int pl_cmd_status(int argc, char **argv);

/* launcher/gpucheck/gpu_check.c: everything GPU-related checked on this host, with a report. */
int pl_cmd_gpu_check(int argc, char **argv);

#endif
