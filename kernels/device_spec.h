/* A device spec's syntax (the --device and --place names): the one parser of "auto", "cpu",
 * "cuda", "cuda:N", "null" and "null:RATE", apart from the loader (device.h) so that
 * checks made before any device is opened (the launcher's, the worker's flags) link no
 * backend. */
#ifndef PSTRAIN_KERNELS_DEVICE_SPEC_H
#define PSTRAIN_KERNELS_DEVICE_SPEC_H

#include <stddef.h>

typedef enum { PST_SPEC_AUTO, PST_SPEC_CPU, PST_SPEC_CUDA, PST_SPEC_NULL } pst_spec_kind;

/* Parses spec (NULL is "auto"): its kind, the CUDA index (0 unless "cuda:N") and the null
 * device's RATE (0 unless "null:RATE"). 0, or -EINVAL on anything else. */
int pst_device_spec_parse(const char *spec, pst_spec_kind *kind, int *index, double *rate);

/* A virtual GPU device (issue 40), "cuda:N.K": instance K of visible GPU N, one of the
 * --virtual-devices instances the GPU is split into (kernels/pipeline/devices.h), each a
 * backend of its own with its own memory cap, stream and library handles. N and K are
 * plain decimal numbers (no sign, no space; N at most 4095 as for cuda:N, K at most 255).
 * 1 with *gpu and *instance set when spec is one; 0 when spec is not of the form
 * "cuda:N." at all (anything else: cuda:N, cpu:N, ...); -EINVAL for "cuda:N." followed by
 * anything but such a K. pst_device_open does not take these: a virtual device exists
 * only as a pipeline stage's. */
int pst_device_spec_virtual_gpu(const char *spec, int *gpu, int *instance);

/* Whether spec is one pst_device_open takes (it opens nothing): 0, or -EINVAL with a
 * one-line reason in err, for a configuration check before any work. */
int pst_device_check_spec(const char *spec, char *err, size_t errlen);

#endif
