/* The flags of `pstrain local`, which `compare` and `bench-train` share (launcher/run/local.c). */
#ifndef PSTRAIN_LAUNCHER_RUN_LOCAL_H
#define PSTRAIN_LAUNCHER_RUN_LOCAL_H

#include "launcher/run/options.h"
#include "model/model.h"

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

#endif
