/* How the server asks for its own evaluation of an epoch (--eval-on ps) without linking what
 * evaluates it: ps/train/evaluate.h does the work and ps/main.c binds it (ps_eval_bind). */
#ifndef PSTRAIN_PS_EVAL_HOOK_H
#define PSTRAIN_PS_EVAL_HOOK_H

#include <stdint.h>
#include <uv.h>

/* What an evaluation found (rc < 0: it failed, reason in why). */
typedef struct {
  uint32_t epoch;
  uint64_t version;
  int rc;
  double loss_sum;
  uint64_t correct, samples;
  double seconds;
  char why[256];
} ps_eval_result;
typedef void (*ps_eval_done_fn)(void *arg, const ps_eval_result *r);

typedef struct {
  void *ctx;
  /* Evaluates a copy of weights (the model's n_params floats, copied before it returns) as
   * epoch's evaluation; done runs on the loop when it is over. 0, -EBUSY while one runs. */
  int (*start)(void *ctx, uv_loop_t *loop, const float *weights, uint32_t epoch,
               uint64_t version, ps_eval_done_fn done, void *arg);
  int (*busy)(const void *ctx);
} ps_eval_hook;

#endif
