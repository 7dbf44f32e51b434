/* A model split into stages, one device each, with micro-batches pipelined through them
 * (issue 40): the worker's only entry to compute. One stage and one micro-batch (the
 * default) is the net of kernels/net.h on one device, called as before; everything here
 * mirrors net.h's functions and keeps their meaning, so the worker drives either alike.
 *
 * Stages: the layers are cut into N contiguous stages (plan.h), each a net of its own
 * (kernels/net_stage.h) on a device of its own with its own backend instance, run by a
 * thread of its own. Schedule: GPipe's fill and drain. Each step's batch is cut into M
 * micro-batches; stage s runs the forward passes of micro-batches 0 .. M-1 as they come
 * from stage s-1, then their backward passes as their gradients come from stage s+1; the
 * last stage runs each micro-batch's backward pass right after its forward pass. The
 * gradient is the sum over the micro-batches (each with the whole batch's loss scale), so
 * it is the whole batch's. GPipe rather than 1F1B: the ps's step is a flush anyway, both
 * have the same bubble, (N-1)/(M+N-1) of a step, and 1F1B's gain, fewer micro-batches'
 * activations held at once, is none here, where a stage's activation buffers are the
 * whole batch's rows (as one device's would be) and each micro-batch uses its own rows.
 *
 * Devices: CPU stages read the activations of the stage below where it keeps them (host
 * memory: no copy) and write their input gradients into an outbox the stage below reads.
 * Virtual devices (devices.h) pin each CPU device's thread to disjoint cores. Stages on
 * devices with memory of their own (CUDA, and virtual GPU devices cuda:N.K) keep buffers
 * of their own for their cuts, which each micro-batch's rows are copied into by the
 * receiving backend's copy_from (kernels/backend.h); NOT RUN ON A GPU. Stages on CPU and
 * CUDA devices together are refused. */
#ifndef PSTRAIN_KERNELS_PIPELINE_PIPELINE_H
#define PSTRAIN_KERNELS_PIPELINE_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/net.h"
#include "kernels/pipeline/flags.h"
#include "kernels/pipeline/plan.h"
#include "model/model.h"

typedef struct pst_pipe pst_pipe;

/* pst_pipe_options: kernels/pipeline/flags.h. */

/* Builds the stages of model m for batches up to max_batch: parses and checks the options
 * (pst_pipe_check_flags with the model and the batch: a bad one is -EINVAL with one line
 * in err), opens each stage's device, balances --stages
 * by the layers' measured times within each device's cap, or refuses (-ENOSPC) a model
 * whose stage needs more than its device's cap, with the figures and the --stages that
 * would fit. note gets one line on what was chosen (the device's note with one stage).
 * 0 or a negative code with the reason in err. */
int pst_pipe_create(const pst_model *m, const pst_pipe_options *o, int max_batch,
                    pst_pipe **out, char *note, size_t notelen, char *err, size_t errlen);
void pst_pipe_destroy(pst_pipe *p);

/* As pst_net_load_params, pst_net_load_params_streamed (each stage waits for its own
 * layers' weights, on its own thread), pst_net_set_seed, pst_net_train_step,
 * pst_net_on_grad_ready (each stage announces its layers' gradients when its last
 * backward pass is done; the calls come from the stages' threads, `from` only going
 * down; the last, from = 0, on the calling thread), pst_net_evaluate, pst_net_error and
 * pst_net_log_placement (also each layer's stage and device). */
int pst_pipe_load_params(pst_pipe *p, const float *params);
int pst_pipe_load_params_streamed(pst_pipe *p, const float *params, pst_params_wait_fn wait,
                                  void *ctx);
void pst_pipe_set_seed(pst_pipe *p, uint64_t seed);
int pst_pipe_train_step(pst_pipe *p, const float *x, const int32_t *labels, int batch,
                        float loss_scale, float *grad, double *loss_sum, int *correct);
void pst_pipe_on_grad_ready(pst_pipe *p, pst_grad_ready_fn fn, void *ctx);
/* pst_net_set_row_cuts for a model on one device without micro-batches; nothing to do on
 * stages (net.h says why). */
int pst_pipe_set_row_cuts(pst_pipe *p, const size_t *cuts, size_t n);
/* pst_net_on_grad_part for a model on one device without micro-batches (stages run their
 * layers whole). */
void pst_pipe_on_grad_part(pst_pipe *p, pst_grad_part_fn fn, void *ctx);
int pst_pipe_evaluate(pst_pipe *p, const float *x, const int32_t *labels, int batch,
                      double *loss_sum, int *correct);
const char *pst_pipe_error(const pst_pipe *p);
void pst_pipe_log_placement(pst_pipe *p);

/* The first stage's backend (the worker's host buffers and device name come from it). */
pst_backend *pst_pipe_backend(const pst_pipe *p);
int pst_pipe_stages(const pst_pipe *p);
/* Stage s's layers [*lo, *hi) and device, as placed (for a --place that repeats them). */
void pst_pipe_stage_layers(const pst_pipe *p, int s, int *lo, int *hi, const char **device);
/* Stage s's device memory: what its net allocated plus its backend's workspace estimate
 * (plan.h), in bytes. */
size_t pst_pipe_stage_peak(const pst_pipe *p, int s);

/* Stage s's seconds in its forward and backward passes since the pipeline was made (the
 * pipelined path only: one stage with one micro-batch is the plain net's step and counts
 * nothing), by the wall clock (*busy) and by its thread's CPU clock (*cpu) over the same
 * spans. A step's busiest stage bounds its time; cpu well below busy means the stage's
 * thread waited for its core (other work on it), not for the other stages. Read between
 * steps. */
void pst_pipe_stage_seconds(const pst_pipe *p, int s, double *busy, double *cpu);

#endif
