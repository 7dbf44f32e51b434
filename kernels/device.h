/* Choosing the compute device: the worker's only entry to a backend.
 *
 * The CUDA backend lives in libpstrain_cuda.so, which this loader dlopen()s on demand, so
 * the worker binary links no CUDA library and runs unchanged on machines without a GPU.
 * The library is looked up, first hit wins:
 *   1. $PSTRAIN_CUDA_LIB (a path; when set, nothing else is tried),
 *   2. next to the running executable (dirname of /proc/self/exe),
 *   3. ../kernels/cuda/ from the executable's directory (the bazel-bin layout, e.g.
 *      bazel-bin/worker/pstrain-worker and bazel-bin/kernels/cuda/libpstrain_cuda.so),
 *   4. the plain soname through the dynamic loader's path (LD_LIBRARY_PATH, ld.so.cache).
 * CUDA_VISIBLE_DEVICES is honoured by the CUDA runtime: "cuda:N" indexes visible devices. */
#ifndef PSTRAIN_KERNELS_DEVICE_H
#define PSTRAIN_KERNELS_DEVICE_H

#include <stddef.h>
#include <stdio.h>

#include "kernels/backend.h"
#include "kernels/device_spec.h" /* pst_device_check_spec */

/* Opens a backend for spec:
 *   "cpu"     the CPU backend on cpu_threads threads;
 *   "cuda"    = "cuda:0";
 *   "cuda:N"  visible CUDA device N; an error (-ENODEV, -ENOENT, ...) when it is not usable;
 *   "auto"    cuda:0 when usable, else the CPU backend;
 *   "null"    no compute at all (kernels/null_backend.c): the ceiling of any device;
 *   "null:R"  the same, paced like a device that trains R samples a second.
 * mem_limit_mib caps the device memory of the CUDA backend (0 = no cap; the CPU backend
 * ignores it). note[notelen] always receives one line (no newline): on success what was
 * chosen (and, for "auto" falling back, why: "no CUDA driver (libcuda.so.1 not found);
 * using the CPU backend"), on failure the reason. Returns 0 or a negative errno code;
 * bad specs give -EINVAL. */
int pst_device_open(const char *spec, size_t mem_limit_mib, int cpu_threads, pst_backend **out,
                    char *note, size_t notelen);


/* Prints one line per visible CUDA device ("cuda:0: NVIDIA H100 80GB HBM3, 79.1 GiB,
 * compute capability 9.0"), or a single "no CUDA devices: <why>". Returns the number of
 * devices listed (0 when none). */
int pst_device_list(FILE *out);

/* Loads libpstrain_cuda.so (once; later calls return the first outcome) and resolves its
 * entry points. Returns 0 and the path it came from in where[wherelen], or a negative errno
 * code and why it could not be loaded. For diagnostics and tests. */
int pst_device_load_cuda(char *where, size_t wherelen);

#endif
