/* The loop's wiring (ps/server.c): starting the ps on a libuv loop, stopping it, freeing
 * it, and the kick that moves held-back chunks and waiting pulls. The state it wires is
 * ps/ps.h's. */
#ifndef PSTRAIN_PS_SERVER_H
#define PSTRAIN_PS_SERVER_H

#include <stddef.h>
#include <uv.h>

#include "model/model.h"
#include "ps/ps.h"

/* Sets up everything and starts listening. init_params holds this shard's opt->shard_floats
 * floats (the whole vector without shards). Returns 0 or a negative code with a one-line
 * reason in err (e.g. the address is in use). */
int ps_server_start(ps_server *s, uv_loop_t *loop, const ps_options *opt, const pst_model *model,
                    const float *init_params, char *err, size_t errlen);
/* Tells every worker why, closes every handle; the loop then ends by itself. `failed`: the
 * job was aborted; s->life.stop_requested: stopped on request (the workers exit, not restart). */
void ps_server_stop(ps_server *s, const char *reason, int failed, int exit_code);
/* The ps's exit code once the loop has ended: how the run ended (PST_EXIT_*), and whether
 * its final checkpoint and summary were written. */
int ps_server_exit_code(const ps_server *s);
/* Re-offers every held-back chunk and answers every pull that became answerable, until
 * nothing moves (the rooms call it through ps_server.net.kick). */
void ps_server_kick(ps_server *s);
/* Frees what remains after the loop has ended. */
void ps_server_free(ps_server *s);

#endif
