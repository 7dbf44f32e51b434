/* The launcher's subcommands: each takes the arguments after its name and returns the
 * process exit code. */
#ifndef PSTRAIN_LAUNCHER_COMMANDS_H
#define PSTRAIN_LAUNCHER_COMMANDS_H

#include "model/model.h"
#include "launcher/run/run.h"

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

/* Parses the options shared by `local` and `compare` into o and loads the model spec they
 * name into model (whose optimizer line sets --optimizer and --lr where no flag, file or
 * environment variable did); the rest of argv is left for the command. Returns 0, 1 for
 * --help or --print-config (printed), or 2 on a bad flag or spec (message printed). */
int pl_parse_run_flags(const char *cmd, int argc, char **argv, pl_run_options *o,
                       pst_model *model, const char *extra_usage);
/* Splits a command's own flags from the run flags: each of names[0..n) takes one value,
 * stored in *values[i]; everything else is appended to rest (which must hold argc entries
 * more than *nrest) for pl_parse_run_flags. Returns 0, or 2 with a message when one of the
 * command's flags has no value. */
int pl_split_flags(const char *cmd, int argc, char **argv, const char *const *names,
                   const char **const *values, int n, char **rest, int *nrest);
/* Makes a fresh run directory (mkdtemp under /tmp) unless dir is set; out gets the path. */
int pl_make_run_dir(const char *dir, char *out, size_t outlen);

/* Not a command for people: pl_spawn starts every child of a run as
 * "pstrain __child PPID PROGRAM ARGS..." (launcher/run/run_children.c), which asks for SIGTERM
 * when the launcher dies and then executes PROGRAM. */
#define PL_CHILD_CMD "__child"
int pl_child_main(int argc, char **argv);

#endif
