/* The ps's own evaluation (--eval-on ps, issue 23): each epoch's weights are evaluated on the
 * test set by the ps itself, on its CPU, so that the job's test accuracy never rests on
 * figures a worker reports. The ps loads the data as a worker does (data/dataset.h, the
 * same flags), and runs the model's forward passes with the CPU backend on libuv's thread
 * pool, from a copy of the weights taken on the loop, so that neither the loop nor the next
 * steps wait for it. One evaluation runs at a time. */
#ifndef PSTRAIN_PS_EVALUATE_H
#define PSTRAIN_PS_EVALUATE_H

#include <stdint.h>
#include <uv.h>

#include "model/model.h"
#include "ps/train/eval_hook.h"
#include "data/imageops.h"

typedef struct ps_evaluator ps_evaluator;

typedef struct {
  const char *data_dir;
  pst_image_opts image;   /* the data flags, as the workers are given them */
  int threads;            /* CPU threads for the forward passes */
  int batch;              /* samples per forward pass */
  uint64_t seed;          /* the job's */
} ps_eval_config;

/* Loads the data and builds a CPU net for m. Returns 0 or a negative code with one line in
 * err (the data's own error, or a model the data does not fit). desc gets a line for the
 * log. */
int ps_eval_open(const ps_eval_config *cfg, const pst_model *m, ps_evaluator **out,
                 char *desc, size_t desclen, char *err, size_t errlen);
/* The data facts the workers must share: training and test samples, classes. */
void ps_eval_data_facts(const ps_evaluator *e, uint32_t *train, uint32_t *test,
                        uint32_t *classes);

/* Evaluates a copy of weights (the model's n_params floats, copied before this returns) as
 * epoch's evaluation; done runs on the loop when it is over. -EBUSY while one runs. */
int ps_eval_start(ps_evaluator *e, uv_loop_t *loop, const float *weights, uint32_t epoch,
                  uint64_t version, ps_eval_done_fn done, void *arg);
int ps_eval_busy(const ps_evaluator *e);
/* The server's hook (ps/train/eval_hook.h) on e. */
void ps_eval_bind(ps_evaluator *e, ps_eval_hook *hook);
/* After the loop has ended (no evaluation can be running then). NULL is allowed. */
void ps_eval_free(ps_evaluator *e);

#endif
