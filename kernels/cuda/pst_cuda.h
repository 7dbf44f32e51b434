/* The entry points of libpstrain_cuda.so, the CUDA backend.
 *
 * The worker never links this library: kernels/device.c dlopen()s it and looks these
 * symbols up, so that a worker binary built on a machine with CUDA still starts on one
 * without a GPU or driver. This header is plain C and pulls in no CUDA header; the
 * typedefs are what the loader casts dlsym() results to. */
#ifndef PSTRAIN_KERNELS_CUDA_PST_CUDA_H
#define PSTRAIN_KERNELS_CUDA_PST_CUDA_H

#include <stddef.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible CUDA devices (CUDA_VISIBLE_DEVICES applies), or a negative errno code
 * when there is no usable driver or runtime. */
int pst_cuda_device_count(void);
typedef int (*pst_cuda_device_count_fn)(void);

/* Like pst_cuda_device_count, and on failure (or zero devices) writes one line saying why
 * into why[whylen], e.g. "CUDA driver version is insufficient for CUDA runtime version". */
int pst_cuda_probe(char *why, size_t whylen);
typedef int (*pst_cuda_probe_fn)(char *why, size_t whylen);

/* One line about visible device i: "cuda:0: NVIDIA H100 80GB HBM3, 79.1 GiB, compute
 * capability 9.0". Returns 0, or a negative errno code with the reason in out. */
int pst_cuda_describe_device(int i, char *out, size_t outlen);
typedef int (*pst_cuda_describe_device_fn)(int i, char *out, size_t outlen);

/* Creates the backend on visible device `device`. mem_limit_bytes caps what the backend
 * allocates on the device (0 = no cap). On failure returns a negative errno code and one
 * line in err. */
int pst_cuda_backend_create(int device, size_t mem_limit_bytes, pst_backend **out, char *err,
                            size_t errlen);
typedef int (*pst_cuda_backend_create_fn)(int device, size_t mem_limit_bytes, pst_backend **out,
                                          char *err, size_t errlen);

/* Routes the library's log lines (errors from CUDA_CHECK and friends, the memory cap) to
 * fn(level, line), level as in common/log.h (3 = error, 4 = warning, 6 = info). Until it is
 * called, or with fn == NULL, lines go to stderr as "pstrain-cuda: ...". */
typedef void (*pst_cuda_log_fn)(int level, const char *line);
void pst_cuda_set_log(pst_cuda_log_fn fn);
typedef void (*pst_cuda_set_log_fn)(pst_cuda_log_fn fn);

#ifdef __cplusplus
}
#endif

#endif
