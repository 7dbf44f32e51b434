/* `pstrain gpu-check`'s slow-links check (launcher/gpucheck/gpu_check_links.c). */
#ifndef PSTRAIN_LAUNCHER_GPUCHECK_LINKS_H
#define PSTRAIN_LAUNCHER_GPUCHECK_LINKS_H

#include "launcher/gpucheck/checks.h"

/* launcher/gpucheck/gpu_check_links.c: issue 27's measurement, 4 sync cnn2 workers on the device over
 * emulated links with float32, fp16 and top-k, against the targets. */
void pl_gc_check_links(pl_gc_ctx *g);

#endif
