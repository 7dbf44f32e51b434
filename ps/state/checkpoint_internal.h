/* Shared between checkpoint.c (the file format) and checkpoint_dir.c (directories of
 * checkpoints); not part of the module's API. */
#ifndef PSTRAIN_PS_CHECKPOINT_INTERNAL_H
#define PSTRAIN_PS_CHECKPOINT_INTERNAL_H

#include <stdint.h>

#include "ps/state/checkpoint.h"

/* pst_ckpt_write_file with the test-only fault hook of pst_ckpt_write (fault_at < 0: off). */
int pst_ckpt_write_faulty(const char *path, const pst_ckpt_tensor *t, int nt,
                          const pst_ckpt_kv *meta, int nmeta, int64_t fault_at,
                          int fault_renamed, char *err, size_t errlen);

#endif
