/* TensorBoard event files (--tensorboard DIR): the ps's scalars in TensorBoard's own
 * format, so that `tensorboard --logdir DIR` shows a run's curves.
 *
 * A file is a sequence of TFRecords, each
 *   uint64 length, uint32 masked CRC32C of those 8 bytes, length bytes of data,
 *   uint32 masked CRC32C of the data            (all little-endian)
 * whose data is one Event message (proto/tensorboard.proto, wire-compatible with
 * TensorFlow's event.proto and summary.proto). The first record says the file's version
 * ("brain.Event:2"); every later one carries scalars for one step. The file is named
 * events.out.tfevents.<unix seconds>.<host name>, as TensorFlow names its own, and each
 * record is flushed as it is written, so TensorBoard shows a run while it trains. */
#ifndef PSTRAIN_PS_TENSORBOARD_H
#define PSTRAIN_PS_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
  FILE *file;              /* NULL: no event file */
  char path[1024];
  int failed;              /* a write failed (a full disk): the rest are skipped */
} pst_tb;

/* CRC32C (Castagnoli) of n bytes, and the masked form TFRecords store. */
uint32_t pst_crc32c(const void *data, size_t n);
uint32_t pst_tb_mask_crc(uint32_t crc);

/* Creates dir if needed and a new event file in it, with its version record. 0, or a
 * negative code with a one-line reason in err. */
int pst_tb_open(pst_tb *tb, const char *dir, char *err, size_t errlen);
/* One step's scalars: tags[i] = values[i]. Does nothing without a file. 0 or -EIO. */
int pst_tb_scalars(pst_tb *tb, int64_t step, const char *const *tags, const double *values,
                   int n);
void pst_tb_close(pst_tb *tb);

#endif
