/* The child processes of `pstrain local` (launcher/run/run_children.c): starting them,
 * restarting a worker that died, stopping them, and what their logs say when one fails. */
#ifndef PSTRAIN_LAUNCHER_RUN_CHILDREN_H
#define PSTRAIN_LAUNCHER_RUN_CHILDREN_H

#include <stddef.h>

#include "launcher/run/run_ctx.h"

/* Starts c with argv (behind --link, in its namespace), its output in c->log. 0 or a
 * negative error code, said on stderr. */
int pl_spawn(run_ctx *r, child *c, char **argv);
/* Tells c, or every process, to stop with sig: once each, except SIGKILL. */
void pl_stop_one(child *c, int sig);
void pl_stop_all(run_ctx *r, int sig);
/* Every ps shard has exited (or never started). */
int pl_ps_all_exited(const run_ctx *r);


/* Not a command for people: pl_spawn starts every child of a run as
 * "pstrain __child PPID PROGRAM ARGS..." (launcher/run/run_children.c), which asks for SIGTERM
 * when the launcher dies and then executes PROGRAM. */
#define PL_CHILD_CMD "__child"
int pl_child_main(int argc, char **argv);

#endif
