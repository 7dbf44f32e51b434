/* The pipeline's flags (issue 40): --stages, --place, --micro-batches, --virtual-devices and
 * --device-mem as given, and every check that needs nothing but them (syntax, ranges, the
 * devices' names, micro-batches against the batch, stages against the devices), so that a
 * bad one is refused where the flags are read (the worker's main, `pstrain local`) before
 * anything connects or starts. The checks that need the model (its layers, its memory
 * need) take it when it is known. Pure functions: no device is opened and no backend is
 * linked here. */
#ifndef PSTRAIN_KERNELS_PIPELINE_FLAGS_H
#define PSTRAIN_KERNELS_PIPELINE_FLAGS_H

#include <stddef.h>

#include "model/model.h"

#define PST_PIPE_MAX_STAGES 16
#define PST_PIPE_MAX_VDEVS 256
#define PST_PIPE_DEVICE_LEN 32

typedef struct {
  const char *device;          /* the worker's --device: every stage's, unless placed */
  int threads;                 /* CPU backend threads of each device */
  size_t gpu_memory_limit_mib; /* --gpu-memory-limit (CUDA) */
  int stages;                  /* --stages N: 0 or 1 for one stage */
  const char *place;           /* --place LAYERS=DEVICE,...: the stages by hand, or NULL */
  int micro_batches;           /* --micro-batches M: 0 or 1 for none */
  int virtual_devices;         /* --virtual-devices V: CPU devices cpu:0 .. cpu:V-1 on
                                  disjoint cores, or with a CUDA --device cuda:N the GPU
                                  split into cuda:N.0 .. cuda:N.V-1, each a backend
                                  instance of its own with its own memory cap, stream and
                                  handles (0: none) */
  size_t device_mem_mib;       /* --device-mem: each device's memory cap (0: none) */
  int copy_cuts;               /* not a flag, for tests: stages in host memory hand their
                                  cuts off by copying into buffers of their own, as stages
                                  on CUDA devices do (the same code, with the CPU backend's
                                  copy_from), instead of reading each other's */
} pst_pipe_options;

/* The memory cap of a stage's device spec, in MiB (0: none): --device-mem, and for a
 * virtual GPU device cuda:N.K the GPU's --gpu-memory-limit split evenly among the
 * --virtual-devices (the smaller of the two where both are given), as TensorFlow's
 * VirtualDeviceConfiguration(memory_limit=...) gives each logical GPU its own. */
size_t pst_pipe_device_cap_mib(const pst_pipe_options *o, const char *spec);
/* Virtual device s of --virtual-devices: cuda:N.s with a CUDA --device (cuda, cuda:N),
 * else cpu:s. Writes out and returns it. */
const char *pst_pipe_virtual_device(const pst_pipe_options *o, int s, char *out, size_t len);

typedef struct {
  int n;                                   /* stages */
  int lo[PST_PIPE_MAX_STAGES + 1];         /* stage s runs layers [lo[s], lo[s + 1]);
                                              lo[0] = 1, lo[n] = n_layers */
  char device[PST_PIPE_MAX_STAGES][PST_PIPE_DEVICE_LEN]; /* its device ("" until chosen) */
} pst_stage_plan;

/* Parses --place "A-B=DEVICE,C-D=DEVICE,..." (layer indices as the placement log and the
 * summary number them, 1 .. n_layers - 1; "A" alone is one layer): contiguous, in order,
 * from layer 1, and with a model m, covering every layer (m NULL: the last layer is not
 * known yet, and lo[n] is left 0). 0, or -EINVAL with one line in err. The devices' names
 * are checked by pst_pipe_check_flags. */
int pst_plan_parse_place(const pst_model *m, const char *text, pst_stage_plan *plan, char *err,
                         size_t errlen);

/* Every check of o that needs only the flags, and with m (NULL: not known yet) the layer
 * counts too; batch is the per-worker batch size where known (0: not known yet):
 *   --stages 0 .. 16 (0 and 1: one stage), and with m at most the model's layers;
 *   --micro-batches 0 .. batch; --virtual-devices 0 .. 256;
 *   --place well formed, its stages as many as --stages (when that is above 1), each device
 *   a spec the loader takes, or cpu:N or cuda:N.K with N (K) below --virtual-devices;
 *   --stages N above the --virtual-devices there are (each stage needs its own);
 *   two stages on one CUDA device (the same cuda:N, or cuda:N and one of its cuda:N.K):
 *   refused, each stage needs a device of its own (--virtual-devices splits a GPU);
 *   stages on CPU and CUDA devices together: refused (that hand-off is not written);
 *   virtual GPU devices without a memory cap (--gpu-memory-limit to split, or --device-mem).
 * 0, or -EINVAL with one line in err, naming the flag. */
int pst_pipe_check_flags(const pst_pipe_options *o, const pst_model *m, int batch, char *err,
                         size_t errlen);

#endif
