/* The stages' devices (issue 40): a device spec opened as a backend of its own, CPU
 * virtual devices, "cpu:N" with --virtual-devices V: the machine's cores (those this
 * process may run on) cut into V disjoint sets, device N's thread pinned to set N, and
 * virtual GPU devices, "cuda:N.K": GPU N opened V times, each instance with its own
 * share of the memory, stream and handles (NOT RUN ON A GPU). */
#ifndef PSTRAIN_KERNELS_PIPELINE_DEVICES_H
#define PSTRAIN_KERNELS_PIPELINE_DEVICES_H

#include <stddef.h>

#include "kernels/backend.h"

#define PST_VDEV_MAX_CORES 1024

typedef struct {
  pst_backend *be;
  int pinned;                   /* a virtual device: its thread runs on cores[] only */
  int n_cores;
  int cores[64];                /* the first 64 of its cores */
  char spec[32];                /* as placed: "cpu", "cpu:1", "cuda:0" */
} pst_vdev;

/* Opens spec for a stage: "cpu:N" (a virtual device of virtual_devices), "cuda:N.K" (GPU
 * N's instance K of virtual_devices: a CUDA backend of its own, whose memory cap is
 * gpu_memory_limit_mib, the caller's share of the GPU, which must not be 0), or anything
 * pst_device_open takes (kernels/device.h). note gets the device's one line. 0, or a
 * negative code with one line in err (-EINVAL for a bad spec). */
int pst_vdev_open(const char *spec, int virtual_devices, int threads, size_t gpu_memory_limit_mib,
                  pst_vdev *d, char *note, size_t notelen, char *err, size_t errlen);
/* Pins the calling thread to d's cores (nothing for a device that is not virtual). */
void pst_vdev_pin(const pst_vdev *d);
/* Its cores as a list, "0-1" or "3" (or "any"). */
void pst_vdev_cores_text(const pst_vdev *d, char *out, size_t len);
void pst_vdev_close(pst_vdev *d);

#endif
