/* Image folders: one sub-folder per class, PNG and JPEG files inside (decoded with libpng
 * and libjpeg-turbo), as Keras's image_dataset_from_directory reads them.
 *
 *   DIR/cats/001.png, DIR/dogs/a.jpg, ...            split by a seeded fraction, or
 *   DIR/train/cats/..., DIR/test/cats/..., ...        split by the folders
 *
 * Classes are the sub-folder names in byte order (label 0 is the first); files whose names
 * end in .png, .jpg or .jpeg (any case) are images, anything else is skipped. Every image
 * is resized (bilinear) to one size: --image-size, else the first training image's. The
 * set is stored as RGB, or as 1 channel when every image is grayscale. */
#ifndef PSTRAIN_DATA_IMAGEFOLDER_H
#define PSTRAIN_DATA_IMAGEFOLDER_H

#include <stddef.h>

#include "data/data.h"
#include "data/imageops.h"

#define PST_IMAGE_MAX_FILE_BYTES ((size_t)64 << 20) /* one encoded image */
#define PST_IMAGE_MAX_PIXELS (64 << 20)             /* one decoded image */
#define PST_IMAGEFOLDER_MAX_CLASSES 10000

/* Whether dir has sub-folders (so it can only be an image folder). */
int pst_imagefolder_detect(const char *dir);

/* Decodes one PNG or JPEG file (told apart by its first bytes) into rgb[h, w, 3], bytes,
 * malloc'd; *gray says that the image itself has no colour. A corrupt or truncated image,
 * a libjpeg warning included, is an error naming the file. */
int pst_image_decode(const char *path, unsigned char **rgb, int *h, int *w, int *gray,
                     char *err, size_t errlen);

/* Loads dir into train and test; *classes is the number of class folders, and desc gets
 * a one-line summary for the log (class names, counts, size). */
int pst_imagefolder_load(const char *dir, const pst_image_opts *o, pst_dataset *train,
                         pst_dataset *test, int *classes, char *desc, size_t desclen,
                         char *err, size_t errlen);

#endif
