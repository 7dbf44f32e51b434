/* Optimizers applied on the ps, with PyTorch's torch.optim semantics:
 *   SGD:       g' = g + wd*w;              w -= lr*g'
 *   momentum:  g' = g + wd*w; buf = mu*buf + g';  w -= lr*buf
 *   Adam:      g' = g + wd*w; m = b1*m + (1-b1)*g'; v = b2*v + (1-b2)*g'^2;
 *              w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 * An update may be applied range by range (one chunk of the parameter vector at a time),
 * so that the ps applies a step while the rest of the gradient is still arriving.
 *
 * Model state (batchnorm's moving statistics, pst_model_state_ranges) lives in the same
 * vector but is not trained: in its ranges (pst_opt_set_state) the pushed value is not a
 * gradient but the change the workers ask for, and a step adds it, scaled like a gradient,
 * with no learning rate, no weight decay and no optimizer state: w += g * gscale. In sync
 * mode that sum is the mean of the step's workers' changes (kernels/net.h), in async mode
 * one worker's change. For the variance, the sync mean is the Keras update with the mean of
 * the workers' batch variances: the spread between the workers' batch means is left out, as
 * TensorFlow's per-replica batch normalisation leaves it out (each worker normalised with its
 * own statistics), and because the ps's chunked, sharded sum can only form means of what the
 * workers push (a mean and its variance may sit in different chunks or shards). */
#ifndef PSTRAIN_PS_OPTIM_H
#define PSTRAIN_PS_OPTIM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { PST_OPT_SGD = 0, PST_OPT_MOMENTUM, PST_OPT_ADAM } pst_opt_kind;

/* Model-state ranges an optimizer can hold: one per layer at most (model/model.h's
 * PST_MODEL_MAX_LAYERS, which this module does not include). */
#define PST_OPT_MAX_STATE 256

typedef struct {
  pst_opt_kind kind;
  float lr;
  float momentum;      /* momentum only */
  float beta1, beta2;  /* Adam */
  float eps;           /* Adam */
  float weight_decay;  /* L2 added to the gradient (all kinds) */
} pst_opt_config;

/* The state is double-buffered like the weights (ps/state/store.h): step t reads the slots of
 * step t-1 from slot[k][(t-1) & 1] and writes its own into slot[k][t & 1]. So while a step
 * is half applied (a sync step whose chunks are still arriving), the state before it is
 * still whole, and a checkpoint can copy a consistent (weights, slots, t) at any moment
 * (pst_opt_state). Every step writes every slot value, so the buffer a step writes never
 * holds anything that step needs. */
typedef struct {
  pst_opt_config cfg;
  size_t n;          /* parameters */
  float *slot1[2];   /* momentum buffer or Adam m; [2][n] */
  float *slot2[2];   /* Adam v; [2][n] */
  uint64_t t;        /* steps begun */
  int n_state;       /* model-state ranges, sorted, disjoint, inside [0, n) */
  size_t state_off[PST_OPT_MAX_STATE], state_end[PST_OPT_MAX_STATE];
  float bc1, bc2;    /* Adam bias corrections for step t */
  float lr_scale;    /* step t's learning rate is cfg.lr x this (pst_opt_begin_step_lr) */
} pst_optimizer;

/* Defaults: lr 1e-3, momentum 0.9, betas 0.9/0.999, eps 1e-8, no weight decay, Adam. */
void pst_opt_defaults(pst_opt_config *cfg);
/* Parses "sgd", "momentum" or "adam". */
int pst_opt_kind_parse(const char *s, pst_opt_kind *kind);
const char *pst_opt_kind_name(pst_opt_kind kind);
/* The settings as given (before they become floats) within the ranges that keep the float
 * update finite: 0 < lr <= 1000, 0 <= momentum < 1, 0 <= betas < 1, 0 < eps <= 1,
 * 0 <= weight decay <= 1 (a learning rate of 1e300 is not one). 0, or -EINVAL with the
 * reason (the ps's and an all-reduce rank's flags). */
int pst_opt_check_settings(double lr, double momentum, double beta1, double beta2, double eps,
                           double weight_decay, char *err, size_t errlen);
/* Number of parameter-sized state buffers the optimizer keeps (0, 1 or 2). */
int pst_opt_slots(pst_opt_kind kind);
/* Allocates and zeroes the state for n parameters. Returns 0 or -ENOMEM. */
int pst_opt_init(pst_optimizer *o, const pst_opt_config *cfg, size_t n);
void pst_opt_free(pst_optimizer *o);
/* Marks [off[i], off[i] + count[i]) for i < n as model state (see above), in this
 * optimizer's own coordinates (a ps shard's: the model's offsets minus the shard's first);
 * ranges must be sorted and disjoint and are clipped to [0, n). Replaces any earlier set.
 * The slots of these ranges stay zero. 0, or -EINVAL (too many, unsorted or overlapping). */
int pst_opt_set_state(pst_optimizer *o, const size_t *off, const size_t *count, int n);
/* Starts step t+1: call once per step before any pst_opt_apply for that step. */
void pst_opt_begin_step(pst_optimizer *o);
/* The same with the step's learning rate scaled by lr_scale (> 0: an async gradient's by its
 * staleness, ps/train/update.h); the model state's changes are not scaled. pst_opt_begin_step is
 * lr_scale 1, which changes no bit of a step. */
void pst_opt_begin_step_lr(pst_optimizer *o, float lr_scale);
/* The state after the last whole step: its step count and slot buffers (NULL for slots the
 * kind has not). `in_step`: a step has begun and not every value of it is applied yet, so
 * the state is the one before it. */
void pst_opt_state(const pst_optimizer *o, int in_step, uint64_t *t, const float **slot1,
                   const float **slot2);
/* A step that leaves [off, off+count) untouched: the weights and slots of that range go
 * from w_in to w_out unchanged (a sync step whose every share of a chunk was lost). */
void pst_opt_carry(pst_optimizer *o, const float *w_in, float *w_out, size_t off, size_t count);
/* Takes back a step begun with nothing applied yet (every worker of a sync step was lost
 * before any share of it arrived). */
void pst_opt_cancel_step(pst_optimizer *o);
/* Restores a state (a checkpoint's): t steps done, slots copied from slot1/slot2 ([n] each,
 * NULL where the kind has none). No step may be in progress. */
void pst_opt_restore(pst_optimizer *o, uint64_t t, const float *slot1, const float *slot2);
/* Whether step t's results over [off, off+count) are all finite: the weights w_out and the
 * slot values the step wrote there. A step whose values are not is carried instead
 * (pst_opt_carry, which restores the step before's: both are double-buffered). */
int pst_opt_step_finite(const pst_optimizer *o, const float *w_out, size_t off, size_t count);

/* Whether every value is finite: an exponent of all ones is a NaN or an infinity, and adding
 * one to the exponent field carries only such a value into bit 31. An integer AND, ADD and
 * OR per value, with no compare or branch, which GCC vectorises in every copy it inlines (a
 * compare form stayed scalar in some and cost as much as the optimizer pass). */
static inline int pst_all_finite(const float *x, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t b;
    memcpy(&b, &x[i], sizeof b);
    bad |= (b & 0x7f800000u) + 0x00800000u;
  }
  return (bad & 0x80000000u) == 0;
}

/* For i in [off, off+count): w_out[i] = update(w_in[i], grad[i - off] * gscale).
 * grad points at the chunk's first gradient value; w_in and w_out are whole vectors and
 * may be the same (in place). */
void pst_opt_apply(pst_optimizer *o, const float *w_in, float *w_out, const float *grad,
                   float gscale, size_t off, size_t count);

#endif
