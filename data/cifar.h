/* The CIFAR-10 and CIFAR-100 binary formats.
 *
 * CIFAR-10: data_batch_1.bin .. data_batch_5.bin (training) and test_batch.bin, records of
 * 1 label byte (0..9) and 3072 pixel bytes. CIFAR-100: train.bin and test.bin, records of
 * 2 label bytes (coarse 0..19, fine 0..99; the fine label is used) and 3072 pixel bytes.
 * The pixels are three 32x32 planes, R then G then B, each row-major. */
#ifndef PSTRAIN_DATA_CIFAR_H
#define PSTRAIN_DATA_CIFAR_H

#include <stddef.h>

#include "data/data.h"

#define PST_CIFAR_SIDE 32
#define PST_CIFAR_PIXELS (3 * PST_CIFAR_SIDE * PST_CIFAR_SIDE) /* bytes per record's image */

typedef enum { PST_CIFAR_NONE = 0, PST_CIFAR_10, PST_CIFAR_100 } pst_cifar_kind;

/* Which CIFAR format dir holds, judged by its file names (data_batch_1.bin: CIFAR-10,
 * train.bin: CIFAR-100), or PST_CIFAR_NONE. */
pst_cifar_kind pst_cifar_detect(const char *dir);
/* Loads the training (train != 0) or test split into out: 32x32x3 images, HWC, in [0, 1].
 * CIFAR-10's training set is every data_batch_K.bin from K = 1 up to the first missing.
 * Errors are one line naming the file, e.g. "/d/test_batch.bin: truncated: 5000 bytes is
 * not a whole number of 3073-byte records". */
int pst_cifar_load(const char *dir, pst_cifar_kind kind, int train, pst_dataset *out, char *err,
                   size_t errlen);
/* Loads one CIFAR file (what pst_cifar_load does for each), appending nothing: for tests. */
int pst_cifar_load_file(const char *path, pst_cifar_kind kind, pst_dataset *out, char *err,
                        size_t errlen);

#endif
