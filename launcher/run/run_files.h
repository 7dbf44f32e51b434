#ifndef PSTRAIN_LAUNCHER_RUN_FILES_H
#define PSTRAIN_LAUNCHER_RUN_FILES_H

#include <stddef.h>

/* launcher/run/run_files.c: files a local job makes or checks before anything starts. Each
 * returns 0 (pl_lock_dir: a descriptor) or a negative code with a one-line reason in err. */
#define PL_SECRET_NAME "secret"             /* the job's cluster secret, in its run directory */
#define PL_LOCK_NAME ".pstrain-local.lock"  /* in a checkpoint directory a job uses */
/* The outputs are checked with ps/state/atomic_file.h's pst_check_output_file and _dir. */
/* Locks dir for one job: the descriptor returned is inherited by every process the job
 * starts, so the lock lasts until the last of them has gone; -EBUSY when another job's
 * processes hold it. */
int pl_lock_dir(const char *dir, char *err, size_t errlen);
/* 32 random bytes, hex, in dir/PL_SECRET_NAME with mode 600, written beside and renamed in;
 * path gets its name. */
int pl_make_secret(const char *dir, char *path, size_t pathlen, char *err, size_t errlen);
/* Before k ps shards resume from their parts of checkpoint directory dir: when their newest
 * checkpoints are not of one version (a job stopped between one shard's step and another's,
 * or killed while they saved), each sets aside the ones newer than the newest version they
 * all have (ps/state/checkpoint.h, pst_ckpt_abandon_after), so that every shard resumes from that
 * one. Returns 1 with what was done in note, 0 when nothing needed doing, or a negative code
 * with the reason in note. */
int pl_align_shard_checkpoints(const char *dir, int k, char *note, size_t notelen);

/* Makes a fresh run directory (mkdtemp under /tmp) unless dir is set; out gets the path. */
int pl_make_run_dir(const char *dir, char *out, size_t outlen);

#endif
