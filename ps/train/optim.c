/* Optimizers with torch.optim semantics (see optim.h for the formulas).
 *
 * pst_opt_apply is the ps's hot loop: it runs once per parameter per step. Each optimizer
 * has two plain element-wise kernels, one in place and one out of place, whose pointers are
 * declared restrict so that the compiler vectorises them without runtime alias checks.
 * Both kernels expand the same macro, and every element is computed by the same sequence of
 * float operations whatever its position, so applying a step range by range, in place or
 * out of place, gives the same bits as applying it to the whole vector at once. */
#include "ps/train/optim.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Slots are aligned for full-width vector loads. */
#define SLOT_ALIGN 64

void pst_opt_defaults(pst_opt_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->kind = PST_OPT_ADAM;
  cfg->lr = 1e-3f;
  cfg->momentum = 0.9f;
  cfg->beta1 = 0.9f;
  cfg->beta2 = 0.999f;
  cfg->eps = 1e-8f;
  cfg->weight_decay = 0.0f;
}

int pst_opt_check_settings(double lr, double momentum, double beta1, double beta2, double eps,
                           double weight_decay, char *err, size_t errlen) {
  if (!(lr > 0 && lr <= 1e3) || !(momentum >= 0 && momentum < 1) || !(beta1 >= 0) ||
      beta1 >= 1 || !(beta2 >= 0) || beta2 >= 1 || !(eps > 0 && eps <= 1) ||
      !(weight_decay >= 0 && weight_decay <= 1)) {
    snprintf(err, errlen, "optimizer settings out of range (0 < lr <= 1000, 0 <= momentum < 1, "
                          "0 <= betas < 1, 0 < eps <= 1, 0 <= weight decay <= 1)");
    return -EINVAL;
  }
  return 0;
}

int pst_opt_kind_parse(const char *s, pst_opt_kind *kind) {
  if (s == NULL) return -EINVAL;
  if (strcmp(s, "sgd") == 0) {
    *kind = PST_OPT_SGD;
  } else if (strcmp(s, "momentum") == 0) {
    *kind = PST_OPT_MOMENTUM;
  } else if (strcmp(s, "adam") == 0) {
    *kind = PST_OPT_ADAM;
  } else {
    return -EINVAL;
  }
  return 0;
}

const char *pst_opt_kind_name(pst_opt_kind kind) {
  switch (kind) {
    case PST_OPT_SGD: return "sgd";
    case PST_OPT_MOMENTUM: return "momentum";
    case PST_OPT_ADAM: return "adam";
  }
  return "unknown";
}

int pst_opt_slots(pst_opt_kind kind) {
  switch (kind) {
    case PST_OPT_SGD: return 0;
    case PST_OPT_MOMENTUM: return 1;
    case PST_OPT_ADAM: return 2;
  }
  return 0;
}

/* Returns a zeroed, aligned buffer of n floats, or NULL. aligned_alloc wants a size that is
 * a multiple of the alignment, so the size is rounded up. */
static float *alloc_slot(size_t n) {
  size_t bytes = (n * sizeof(float) + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
  float *p = aligned_alloc(SLOT_ALIGN, bytes);
  if (p != NULL) memset(p, 0, bytes);
  return p;
}

int pst_opt_init(pst_optimizer *o, const pst_opt_config *cfg, size_t n) {
  memset(o, 0, sizeof *o);
  if (cfg->kind != PST_OPT_SGD && cfg->kind != PST_OPT_MOMENTUM && cfg->kind != PST_OPT_ADAM)
    return -EINVAL;
  /* The rounding in alloc_slot must not overflow. */
  if (n > (SIZE_MAX - SLOT_ALIGN) / sizeof(float)) return -ENOMEM;
  o->cfg = *cfg;
  o->n = n;
  o->t = 0;
  /* Neutral corrections, so that a misuse (apply before begin_step) cannot divide by zero. */
  o->bc1 = 1.0f;
  o->bc2 = 1.0f;
  o->lr_scale = 1.0f;
  int slots = pst_opt_slots(cfg->kind);
  for (int b = 0; b < 2; b++) {
    if (slots >= 1 && (o->slot1[b] = alloc_slot(n)) == NULL) goto nomem;
    if (slots >= 2 && (o->slot2[b] = alloc_slot(n)) == NULL) goto nomem;
  }
  return 0;
nomem:
  pst_opt_free(o);
  return -ENOMEM;
}

void pst_opt_free(pst_optimizer *o) {
  for (int b = 0; b < 2; b++) {
    free(o->slot1[b]);
    free(o->slot2[b]);
    o->slot1[b] = NULL;
    o->slot2[b] = NULL;
  }
  o->n = 0;
}

static void set_corrections(pst_optimizer *o) {
  if (o->cfg.kind == PST_OPT_ADAM && o->t > 0) {
    /* Computed in double, as PyTorch does, then rounded once. */
    o->bc1 = (float)(1.0 - pow((double)o->cfg.beta1, (double)o->t));
    o->bc2 = (float)(1.0 - pow((double)o->cfg.beta2, (double)o->t));
  }
}

void pst_opt_state(const pst_optimizer *o, int in_step, uint64_t *t, const float **slot1,
                   const float **slot2) {
  uint64_t done = in_step && o->t > 0 ? o->t - 1 : o->t;
  *t = done;
  *slot1 = o->slot1[done & 1];
  *slot2 = o->slot2[done & 1];
}

void pst_opt_restore(pst_optimizer *o, uint64_t t, const float *slot1, const float *slot2) {
  o->t = t;
  if (o->slot1[t & 1] && slot1) memcpy(o->slot1[t & 1], slot1, o->n * sizeof(float));
  if (o->slot2[t & 1] && slot2) memcpy(o->slot2[t & 1], slot2, o->n * sizeof(float));
  set_corrections(o);
}

void pst_opt_begin_step_lr(pst_optimizer *o, float lr_scale) {
  o->t++;
  o->lr_scale = lr_scale > 0 ? lr_scale : 1.0f;
  set_corrections(o);
}

void pst_opt_begin_step(pst_optimizer *o) { pst_opt_begin_step_lr(o, 1.0f); }

void pst_opt_cancel_step(pst_optimizer *o) {
  if (o->t == 0) return;
  o->t--;
  o->lr_scale = 1.0f;
  set_corrections(o);
}

void pst_opt_carry(pst_optimizer *o, const float *w_in, float *w_out, size_t off, size_t count) {
  if (off >= o->n || count == 0) return;
  if (count > o->n - off) count = o->n - off;
  int rd = (int)((o->t + 1) & 1), wr = (int)(o->t & 1);
  if (w_in != w_out) memcpy(w_out + off, w_in + off, count * sizeof(float));
  if (o->slot1[0]) memcpy(o->slot1[wr] + off, o->slot1[rd] + off, count * sizeof(float));
  if (o->slot2[0]) memcpy(o->slot2[wr] + off, o->slot2[rd] + off, count * sizeof(float));
}

int pst_opt_step_finite(const pst_optimizer *o, const float *w_out, size_t off, size_t count) {
  if (off >= o->n || count == 0) return 1;
  if (count > o->n - off) count = o->n - off;
  int wr = (int)(o->t & 1);
  return pst_all_finite(w_out + off, count) &&
         (!o->slot1[wr] || pst_all_finite(o->slot1[wr] + off, count)) &&
         (!o->slot2[wr] || pst_all_finite(o->slot2[wr] + off, count));
}

/* The kernels. WI and WO name the input and output weight arrays (the same array in place);
 * g is the chunk's gradient, n its length; the rest are the step's constants. */
#define SGD_BODY(WI, WO)                        \
  for (size_t i = 0; i < n; i++) {              \
    float gi = g[i] * gs + wd * WI[i];          \
    WO[i] = WI[i] - lr * gi;                    \
  }

#define MOMENTUM_BODY(WI, WO)                   \
  for (size_t i = 0; i < n; i++) {              \
    float gi = g[i] * gs + wd * WI[i];          \
    float b = mu * bi[i] + gi;                  \
    bo[i] = b;                                  \
    WO[i] = WI[i] - lr * b;                     \
  }

#define ADAM_BODY(WI, WO)                                \
  for (size_t i = 0; i < n; i++) {                       \
    float gi = g[i] * gs + wd * WI[i];                   \
    float mi = b1 * m_in[i] + c1 * gi;                   \
    float vi = b2 * v_in[i] + c2 * (gi * gi);            \
    m_out[i] = mi;                                       \
    v_out[i] = vi;                                       \
    float mhat = mi * ibc1;                              \
    float vhat = vi * ibc2;                              \
    WO[i] = WI[i] - lr * mhat / (sqrtf(vhat) + eps);     \
  }

static void sgd_inplace(float *restrict w, const float *restrict g, size_t n, float gs, float lr,
                        float wd) {
  SGD_BODY(w, w)
}

static void sgd_copy(const float *restrict wi, float *restrict wo, const float *restrict g,
                     size_t n, float gs, float lr, float wd) {
  SGD_BODY(wi, wo)
}

static void momentum_inplace(float *restrict w, const float *restrict g,
                             const float *restrict bi, float *restrict bo, size_t n, float gs,
                             float lr, float wd, float mu) {
  MOMENTUM_BODY(w, w)
}

static void momentum_copy(const float *restrict wi, float *restrict wo, const float *restrict g,
                          const float *restrict bi, float *restrict bo, size_t n, float gs,
                          float lr, float wd, float mu) {
  MOMENTUM_BODY(wi, wo)
}

static void adam_inplace(float *restrict w, const float *restrict g, const float *restrict m_in,
                         float *restrict m_out, const float *restrict v_in, float *restrict v_out,
                         size_t n, float gs, float lr, float wd, float b1, float b2, float c1,
                         float c2, float ibc1, float ibc2, float eps) {
  ADAM_BODY(w, w)
}

static void adam_copy(const float *restrict wi, float *restrict wo, const float *restrict g,
                      const float *restrict m_in, float *restrict m_out,
                      const float *restrict v_in, float *restrict v_out, size_t n, float gs,
                      float lr, float wd, float b1, float b2, float c1, float c2, float ibc1,
                      float ibc2, float eps) {
  ADAM_BODY(wi, wo)
}

int pst_opt_set_state(pst_optimizer *o, const size_t *off, const size_t *count, int n) {
  if (n < 0 || n > PST_OPT_MAX_STATE) return -EINVAL;
  int k = 0;
  size_t prev_end = 0;
  for (int i = 0; i < n; i++) {
    if (off[i] < prev_end || count[i] > SIZE_MAX - off[i]) return -EINVAL;
    prev_end = off[i] + count[i];
    size_t a = off[i], b = off[i] + count[i];
    if (b > o->n) b = o->n;
    if (a >= b) continue;
    o->state_off[k] = a;
    o->state_end[k] = b;
    k++;
  }
  o->n_state = k;
  return 0;
}

/* Model state over [off, off + count): w_out = w_in + g * gs, the slots carried over (they
 * stay zero: nothing else writes them), so that every step still writes every slot value. */
static void state_apply(pst_optimizer *o, const float *w_in, float *w_out, const float *g,
                        float gs, size_t off, size_t count) {
  for (size_t i = 0; i < count; i++) w_out[off + i] = w_in[off + i] + g[i] * gs;
  int rd = (int)((o->t + 1) & 1), wr = (int)(o->t & 1);
  if (o->slot1[0]) memcpy(o->slot1[wr] + off, o->slot1[rd] + off, count * sizeof(float));
  if (o->slot2[0]) memcpy(o->slot2[wr] + off, o->slot2[rd] + off, count * sizeof(float));
}

static void opt_apply(pst_optimizer *o, const float *w_in, float *w_out, const float *grad,
                      float gscale, size_t off, size_t count);

void pst_opt_apply(pst_optimizer *o, const float *w_in, float *w_out, const float *grad,
                   float gscale, size_t off, size_t count) {
  /* Clamp the range to the vector, so that a bad range cannot write out of bounds. */
  if (off >= o->n || count == 0) return;
  if (count > o->n - off) count = o->n - off;
  /* Split around the model-state ranges (none in a model without batchnorm: one call). */
  size_t end = off + count;
  for (int r = 0; r < o->n_state && off < end; r++) {
    size_t a = o->state_off[r], b = o->state_end[r];
    if (b <= off) continue;
    if (a >= end) break;
    if (a > off) {
      opt_apply(o, w_in, w_out, grad, gscale, off, a - off);
      grad += a - off;
      off = a;
    }
    size_t stop = b < end ? b : end;
    state_apply(o, w_in, w_out, grad, gscale, off, stop - off);
    grad += stop - off;
    off = stop;
  }
  if (off < end) opt_apply(o, w_in, w_out, grad, gscale, off, end - off);
}

/* The optimizer proper over [off, off + count), inside the vector. */
static void opt_apply(pst_optimizer *o, const float *w_in, float *w_out, const float *grad,
                      float gscale, size_t off, size_t count) {
  pst_opt_config cfg = o->cfg;
  const pst_opt_config *c = &cfg;
  /* The step's own learning rate: x 1 leaves every bit as it was. */
  cfg.lr *= o->lr_scale;
  const float *wi = w_in + off;
  float *wo = w_out + off;
  int inplace = (w_in == w_out);
  /* Step t reads the slots of step t-1 and writes its own (see optim.h). */
  int rd = (int)((o->t + 1) & 1), wr = (int)(o->t & 1);
  switch (c->kind) {
    case PST_OPT_SGD:
      if (inplace)
        sgd_inplace(wo, grad, count, gscale, c->lr, c->weight_decay);
      else
        sgd_copy(wi, wo, grad, count, gscale, c->lr, c->weight_decay);
      break;
    case PST_OPT_MOMENTUM:
      if (inplace)
        momentum_inplace(wo, grad, o->slot1[rd] + off, o->slot1[wr] + off, count, gscale, c->lr,
                         c->weight_decay, c->momentum);
      else
        momentum_copy(wi, wo, grad, o->slot1[rd] + off, o->slot1[wr] + off, count, gscale, c->lr,
                      c->weight_decay, c->momentum);
      break;
    case PST_OPT_ADAM: {
      /* Per-step constants, so the loop has one division and one square root per element. */
      float c1 = 1.0f - c->beta1, c2 = 1.0f - c->beta2;
      float ibc1 = 1.0f / o->bc1, ibc2 = 1.0f / o->bc2;
      if (inplace)
        adam_inplace(wo, grad, o->slot1[rd] + off, o->slot1[wr] + off, o->slot2[rd] + off,
                     o->slot2[wr] + off, count, gscale, c->lr, c->weight_decay, c->beta1,
                     c->beta2, c1, c2, ibc1, ibc2, c->eps);
      else
        adam_copy(wi, wo, grad, o->slot1[rd] + off, o->slot1[wr] + off, o->slot2[rd] + off,
                  o->slot2[wr] + off, count, gscale, c->lr, c->weight_decay, c->beta1, c->beta2,
                  c1, c2, ibc1, ibc2, c->eps);
      break;
    }
  }
}
