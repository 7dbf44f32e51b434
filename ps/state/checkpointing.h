/* The ps's checkpoints and resume (ps/state/checkpointing.c): when to save, what the ps's state
 * is in a checkpoint's metadata, and putting it back. The file format is ps/state/checkpoint.h. */
#ifndef PSTRAIN_PS_CHECKPOINTING_H
#define PSTRAIN_PS_CHECKPOINTING_H

#include <stddef.h>

#include "ps/ps.h"

/* Sets up checkpoints (--checkpoint-dir) and resumes from one (--resume): the weights, the
 * optimizer, the slots' positions and the evaluations so far. 0, or a negative code with
 * a one-line reason (a --resume PATH that cannot be used, a checkpoint of this model made
 * with other settings). */
int ps_ckpt_open(ps_server *s, char *err, size_t errlen);
/* Puts the resumed run's figures into the metrics (opened after ps_ckpt_open). */
void ps_ckpt_restore_metrics(ps_server *s);
/* A version was published: saves one every --checkpoint-every steps. */
void ps_ckpt_published(ps_server *s);
/* Called by the watch timer: saves one every --checkpoint-seconds. */
void ps_ckpt_tick(ps_server *s);
/* The run ends (finished, stopped or aborted): saves the current version unless it is saved
 * already. The write finishes on the threadpool before the event loop can end. Returns 1
 * when a write is under way, and then calls done(s) on the loop once it has ended (written
 * or not); 0 when there is nothing to wait for (no directory, already written, or a write
 * that could not even start). Either way ps_ckpt_final_error says afterwards whether the
 * final save failed. */
int ps_ckpt_final(ps_server *s, const char *why, void (*done)(ps_server *s));
/* Why the final save was not written, or NULL when it was (or none was due). */
const char *ps_ckpt_final_error(const ps_server *s);
/* The newest checkpoint written (or resumed from) by this process, or "": never a file that
 * was only meant to be written. */
const char *ps_ckpt_last_path(const ps_server *s);
void ps_ckpt_free(ps_server *s);

#endif
