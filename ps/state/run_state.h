/* What a checkpoint holds of the run besides its tensors (ps/state/run_state.c): internal to
 * ps/state/checkpointing.c, which writes and reads checkpoints. */
#ifndef PSTRAIN_PS_STATE_RUN_STATE_H
#define PSTRAIN_PS_STATE_RUN_STATE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "ps/ps.h"

/* The settings a checkpoint is made with (they must be a resuming run's), as JSON text; NULL
 * when out of memory. cJSON_free it. */
char *ps_ckpt_settings_json(const ps_server *s);
/* The "state" object: each slot's position, the evaluations so far, the figures and (the data
 * handed out) the handout's position, as JSON text; NULL when out of memory. */
char *ps_ckpt_state_json(const ps_server *s);
/* Reads the state's "data" back into the handout. 0, or -EINVAL with a one-line reason. */
int ps_ckpt_restore_data_position(ps_server *s, const cJSON *st, const char *path, char *err,
                                  size_t errlen);
/* A number of object o (0 when missing), and whether its key is true. */
double ps_ckpt_jnum(const cJSON *o, const char *key);
int ps_ckpt_jbool(const cJSON *o, const char *key);

#endif
