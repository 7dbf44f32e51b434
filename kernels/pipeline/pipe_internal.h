/* Inside kernels/pipeline: the pipeline's state, shared by pipe_setup.c (creation,
 * placement, the end) and pipe.c (the stages at work), which pipe_setup.c calls and which
 * calls nothing of it. Not for other modules. */
#ifndef PSTRAIN_KERNELS_PIPELINE_PIPE_INTERNAL_H
#define PSTRAIN_KERNELS_PIPELINE_PIPE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "kernels/net.h"
#include "kernels/pipeline/devices.h"
#include "kernels/pipeline/pipeline.h"
#include "kernels/pipeline/plan.h"

struct pst_pipe;

typedef struct {
  struct pst_pipe *pipe;
  pst_vdev dev;             /* its device and backend */
  pst_net *net;             /* layers [lo, hi) */
  int lo, hi;
  pst_plan_need need;       /* predicted, with the backend's workspace */
  /* Stages on devices that share no memory (CUDA): this stage's own buffers for its cuts,
   * on its device, that the hand-off copies into (pipe.c): in[j] [max_batch, floats(j)]
   * for tensor j of its lower cut (the stage below's rows), gup[j] the same for the
   * gradient of tensor j of its upper cut (the stage above's outbox rows); their bytes in
   * cut_bytes. NULL where the stages share host memory and read each other's buffers. */
  float *in[PST_MODEL_MAX_LAYERS];
  float *gup[PST_MODEL_MAX_LAYERS];
  size_t cut_bytes;
  pthread_t thread;
  int started;
  /* Written by its own thread only, read between jobs: seconds in its forward and
   * backward passes since creation, by the wall clock and by its thread's CPU clock. */
  double busy, cpu;
} pst_stage;

struct pst_pipe {
  pst_model *m;             /* a copy, for the placement log */
  int n;                    /* stages */
  int micro;                /* --micro-batches */
  int max_batch;
  int copies;               /* the stages hand their cuts off by copying (CUDA devices) */
  pst_stage st[PST_PIPE_MAX_STAGES];
  uint64_t seed;
  pst_grad_ready_fn grad_ready;
  void *grad_ready_ctx;
  /* The job under way, set by the calling thread before it is posted. */
  const float *x;           /* host [batch, input_size] */
  const int32_t *labels;    /* host [batch] */
  float *grad;              /* host [n_params] */
  int batch, mb, kind;
  float scale;
  int *row;                 /* [micro + 1]: micro-batch k is rows [row[k], row[k + 1]) */
  double *loss_k;           /* [micro]: the last stage's loss sums */
  int *correct_k;           /* [micro] */
  /* Under mu: the job's number, the stages done with it, the micro-batches each stage
   * has passed forward and backward, the first failure. cv wakes every waiter. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int sync_made;
  uint64_t job;
  int done, quit, failed;
  int fwd[PST_PIPE_MAX_STAGES], bwd[PST_PIPE_MAX_STAGES];
  char err[900];
};

/* Starts the stage threads (none with one stage): 0 or a negative code. */
int pst_pipe_start(pst_pipe *p);
/* Stops and joins them (safe when none started). */
void pst_pipe_stop(pst_pipe *p);

#endif
