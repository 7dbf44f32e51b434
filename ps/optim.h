/* Optimizers applied on the ps, with PyTorch's torch.optim semantics:
 *   SGD:       g' = g + wd*w;              w -= lr*g'
 *   momentum:  g' = g + wd*w; buf = mu*buf + g';  w -= lr*buf
 *   Adam:      g' = g + wd*w; m = b1*m + (1-b1)*g'; v = b2*v + (1-b2)*g'^2;
 *              w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 * An update may be applied range by range (one chunk of the parameter vector at a time),
 * so that the ps applies a step while the rest of the gradient is still arriving. */
#ifndef PSTRAIN_PS_OPTIM_H
#define PSTRAIN_PS_OPTIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum { PST_OPT_SGD = 0, PST_OPT_MOMENTUM, PST_OPT_ADAM } pst_opt_kind;

typedef struct {
  pst_opt_kind kind;
  float lr;
  float momentum;      /* momentum only */
  float beta1, beta2;  /* Adam */
  float eps;           /* Adam */
  float weight_decay;  /* L2 added to the gradient (all kinds) */
} pst_opt_config;

typedef struct {
  pst_opt_config cfg;
  size_t n;          /* parameters */
  float *slot1;      /* momentum buffer or Adam m; [n] */
  float *slot2;      /* Adam v; [n] */
  uint64_t t;        /* steps begun */
  float bc1, bc2;    /* Adam bias corrections for step t */
} pst_optimizer;

/* Defaults: lr 1e-3, momentum 0.9, betas 0.9/0.999, eps 1e-8, no weight decay, Adam. */
void pst_opt_defaults(pst_opt_config *cfg);
/* Parses "sgd", "momentum" or "adam". */
int pst_opt_kind_parse(const char *s, pst_opt_kind *kind);
const char *pst_opt_kind_name(pst_opt_kind kind);
/* Number of parameter-sized state buffers the optimizer keeps (0, 1 or 2). */
int pst_opt_slots(pst_opt_kind kind);
/* Allocates and zeroes the state for n parameters. Returns 0 or -ENOMEM. */
int pst_opt_init(pst_optimizer *o, const pst_opt_config *cfg, size_t n);
void pst_opt_free(pst_optimizer *o);
/* Starts step t+1: call once per step before any pst_opt_apply for that step. */
void pst_opt_begin_step(pst_optimizer *o);
/* For i in [off, off+count): w_out[i] = update(w_in[i], grad[i - off] * gscale).
 * grad points at the chunk's first gradient value; w_in and w_out are whole vectors and
 * may be the same (in place). */
void pst_opt_apply(pst_optimizer *o, const float *w_in, float *w_out, const float *grad,
                   float gscale, size_t off, size_t count);

#endif
