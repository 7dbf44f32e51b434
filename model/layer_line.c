/* One layer line of a model spec (model/model_internal.h): its words read into a pst_layer,
 * the layer's options checked, its per-sample shapes derived from its input's (so that a
 * shape problem is reported on the line that causes it), and its parameters placed in the
 * flat vector. model.c calls spec_parse_layer for each layer line, once the graph's own
 * options (name=, inputs=) are taken out; errors go through spec_errors.c. */
#include "model/model_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Limits that keep every derived size far from integer overflow. */
#define MAX_DIM 4096           /* input height/width */
#define MAX_UNITS 65536        /* dense units, conv filters, input channels */
#define MAX_KERNEL 64          /* conv kernel, pool window, strides */
#define MAX_ACT ((size_t)1 << 24)    /* floats per sample in one layer's output */
#define MAX_PARAMS ((size_t)1 << 28) /* floats in the whole parameter vector (1 GiB) */

/* A positive decimal number no larger than max; leading zeros and signs are refused. */
static int parse_num(const char *s, size_t n, int max, int *out) {
  if (n == 0 || n > 9 || s[0] == '0') return -1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v > max) return -1;
  *out = (int)v;
  return 0;
}

/* Parses "A", "AxB" or "AxBxC" into up to `max_parts` numbers; returns how many. */
static int parse_dims(const char *tok, int max_parts, int max, int *dims) {
  int parts = 0;
  const char *s = tok;
  for (;;) {
    const char *x = strchr(s, 'x');
    size_t n = x ? (size_t)(x - s) : strlen(s);
    if (parts == max_parts || parse_num(s, n, max, &dims[parts]) != 0) return -1;
    parts++;
    if (x == NULL) return parts;
    s = x + 1;
  }
}

/* Options shared by conv2d, maxpool and dense: stride=, padding= and an activation. */
typedef struct {
  int stride_h, stride_w, have_stride;
  int same, have_padding;
  pst_activation act;
  int have_act;
  int no_bias, have_bias;  /* bias=no|yes: dense, conv2d and depthwise_conv2d */
} layer_opts;

static int parse_opts(parse_ctx *p, const char *kind, char **tok, int ntok, int allow_window,
                      int allow_act, layer_opts *o) {
  char b[32];
  for (int i = 0; i < ntok; i++) {
    const char *t = tok[i];
    if (allow_window && strncmp(t, "stride=", 7) == 0) {
      int d[2];
      int n = parse_dims(t + 7, 2, MAX_KERNEL, d);
      if (o->have_stride) return spec_fail(p, "%s: stride given twice", kind);
      if (n < 1) return spec_fail(p, "%s: bad stride '%s' (want S or SxS, 1..%d)", kind,
                                  spec_shown(t + 7, b, sizeof b), MAX_KERNEL);
      o->stride_h = d[0];
      o->stride_w = n == 2 ? d[1] : d[0];
      o->have_stride = 1;
    } else if (allow_window && strncmp(t, "padding=", 8) == 0) {
      if (o->have_padding) return spec_fail(p, "%s: padding given twice", kind);
      if (strcmp(t + 8, "valid") == 0)
        o->same = 0;
      else if (strcmp(t + 8, "same") == 0)
        o->same = 1;
      else
        return spec_fail(p, "%s: bad padding '%s' (want valid or same)", kind,
                         spec_shown(t + 8, b, sizeof b));
      o->have_padding = 1;
    } else if (allow_act && (strcmp(t, "relu") == 0 || strcmp(t, "relu6") == 0 ||
                             strcmp(t, "linear") == 0 || strcmp(t, "softmax") == 0)) {
      if (o->have_act) return spec_fail(p, "%s: activation given twice", kind);
      o->act = strcmp(t, "relu6") == 0 ? PST_ACT_RELU6
               : t[0] == 'r'           ? PST_ACT_RELU
               : t[0] == 'l'           ? PST_ACT_LINEAR
                                       : PST_ACT_SOFTMAX;
      o->have_act = 1;
    } else if (allow_act && strncmp(t, "bias=", 5) == 0) {
      /* Keras's use_bias=False, for a convolution that a batch norm follows (its beta is
       * the bias), as in MobileNetV2. */
      if (o->have_bias) return spec_fail(p, "%s: bias given twice", kind);
      if (strcmp(t + 5, "no") != 0 && strcmp(t + 5, "yes") != 0)
        return spec_fail(p, "%s: bad bias '%s' (want yes or no)", kind,
                         spec_shown(t + 5, b, sizeof b));
      o->no_bias = t[5] == 'n';
      o->have_bias = 1;
    } else {
      return spec_fail(p, "%s: unknown option '%s'", kind, spec_shown(t, b, sizeof b));
    }
  }
  return 0;
}

/* Output size along one axis; 0 when the window does not fit. Same padding follows
 * TensorFlow: out = ceil(in / stride), the odd padding cell goes after the data. */
static int window_out(int in, int k, int stride, int same, int *pad_before) {
  if (same) {
    int out = (in + stride - 1) / stride;
    int total = (out - 1) * stride + k - in;
    if (total < 0) total = 0;
    *pad_before = total / 2;
    return out;
  }
  *pad_before = 0;
  return in < k ? 0 : (in - k) / stride + 1;
}

/* A layer's output shape as the spec writes it: "784" (flat) or "28x28x1". */
static const char *shape_of(const pst_layer *L, char *buf, size_t len) {
  if (L->flat)
    snprintf(buf, len, "%d", L->out_c);
  else
    snprintf(buf, len, "%dx%dx%d", L->out_h, L->out_w, L->out_c);
  return buf;
}

/* The shapes of add and concatenate from their inputs (all named: merges take no
 * implicit input). add: all equal; concatenate: all flat, or all images of one H and W. */
static int merge_shape(parse_ctx *p, const char *kind, const pst_model *m, const int *inputs,
                       int n_inputs, pst_layer *L) {
  const pst_layer *a = &m->layers[inputs[0]];
  char sa[48], sb[48];
  L->out_h = a->out_h;
  L->out_w = a->out_w;
  L->out_c = a->out_c;
  for (int t = 1; t < n_inputs; t++) {
    const pst_layer *x = &m->layers[inputs[t]];
    if (kind[0] == 'a') {
      if (x->flat != a->flat || x->out_h != a->out_h || x->out_w != a->out_w ||
          x->out_c != a->out_c)
        return spec_fail(p, "add: input '%s' is %s but '%s' is %s (add needs equal shapes)",
                         x->name, shape_of(x, sb, sizeof sb), a->name, shape_of(a, sa, sizeof sa));
    } else {
      if (x->flat != a->flat || x->out_h != a->out_h || x->out_w != a->out_w)
        return spec_fail(p, "concatenate: input '%s' is %s but '%s' is %s (concatenate needs %s)",
                         x->name, shape_of(x, sb, sizeof sb), a->name, shape_of(a, sa, sizeof sa),
                         a->flat ? "flat vectors" : "images of the same height and width");
      L->out_c += x->out_c;
    }
  }
  return 0;
}

/* "momentum=M eps=E", both optional, into L (defaults as Keras). The canonical text writes
 * both, so a spec that names the defaults and one that does not are the same model. */
static int parse_batchnorm(parse_ctx *p, char **tok, int ntok, pst_layer *L) {
  char b[32];
  int have_m = 0, have_e = 0;
  L->momentum = PST_BATCHNORM_MOMENTUM;
  L->eps = PST_BATCHNORM_EPS;
  for (int i = 0; i < ntok; i++) {
    int is_m = strncmp(tok[i], "momentum=", 9) == 0, is_e = strncmp(tok[i], "eps=", 4) == 0;
    if (!is_m && !is_e)
      return spec_fail(p, "batchnorm: unknown option '%s' (want momentum= or eps=)",
                       spec_shown(tok[i], b, sizeof b));
    if ((is_m && have_m) || (is_e && have_e))
      return spec_fail(p, "batchnorm: %s given twice", is_m ? "momentum" : "eps");
    const char *val = tok[i] + (is_m ? 9 : 4);
    char *end = NULL;
    double v = strtod(val, &end);
    /* The float must keep the range too: a momentum just below 1 may round to 1. */
    float f = (float)v;
    if (val[0] == '\0' || *end != '\0' || !isfinite(v) ||
        (is_m && !(v >= 0.0 && f < 1.0f)) || (is_e && !(f > 0.0f && v <= 1.0)))
      return spec_fail(p, "batchnorm: bad %s '%s' (want %s)", is_m ? "momentum" : "eps",
                       spec_shown(val, b, sizeof b),
                       is_m ? "a number in [0, 1)" : "a number in (0, 1]");
    if (is_m) {
      L->momentum = f;
      have_m = 1;
    } else {
      L->eps = f;
      have_e = 1;
    }
  }
  return 0;
}

/* Parses one non-empty line into m->layers[m->n_layers], whose inputs are the layers
 * inputs[0 .. n_inputs) (none for the input layer). `flat` says whether inputs[0]'s output
 * is a flat vector (dense may follow) or an image (conv2d, maxpool), and is set to what
 * this layer's output is. */
int spec_parse_layer(parse_ctx *p, char **tok, int ntok, pst_model *m, const int *inputs,
                            int n_inputs, int *flat) {
  char b[32];
  const char *kind = tok[0];
  int first = m->n_layers == 0;
  if (first && strcmp(kind, "input") != 0)
    return spec_fail(p, "the model must start with an input layer, got '%s'",
                     spec_shown(kind, b, sizeof b));
  if (m->n_layers == PST_MODEL_MAX_LAYERS)
    return spec_fail(p, "too many layers (at most %d, input included)", PST_MODEL_MAX_LAYERS);
  int merge = strcmp(kind, "add") == 0 || strcmp(kind, "concatenate") == 0;
  if (merge && n_inputs < 2)
    return spec_fail(p, "%s needs inputs= naming two or more layers, like inputs=a,b", kind);
  if (!merge && n_inputs > 1)
    return spec_fail(p, "%s takes one input (inputs= names %d)", spec_shown(kind, b, sizeof b),
                     n_inputs);

  pst_layer *L = &m->layers[m->n_layers];
  memset(L, 0, sizeof *L);
  L->stride_h = L->stride_w = 1;
  L->n_inputs = n_inputs;
  memcpy(L->inputs, inputs, (size_t)n_inputs * sizeof inputs[0]);
  if (!first) {
    const pst_layer *prev = &m->layers[inputs[0]];
    L->in_h = prev->out_h;
    L->in_w = prev->out_w;
    L->in_c = prev->out_c;
  }
  layer_opts o = {.stride_h = 1, .stride_w = 1, .act = PST_ACT_LINEAR};

  if (strcmp(kind, "input") == 0) {
    int d[3];
    if (!first) return spec_fail(p, "only the first layer may be input");
    if (ntok != 2) return spec_fail(p, "input needs one shape like 28x28x1 or 784");
    int n = parse_dims(tok[1], 3, MAX_UNITS, d);
    if (n == 1) {
      L->in_h = L->in_w = 1;
      L->in_c = d[0];
      *flat = 1;
    } else if (n == 3 && d[0] <= MAX_DIM && d[1] <= MAX_DIM) {
      L->in_h = d[0];
      L->in_w = d[1];
      L->in_c = d[2];
      *flat = 0;
    } else {
      return spec_fail(p, "bad input shape '%s' (want HxWxC or N)",
                       spec_shown(tok[1], b, sizeof b));
    }
    if ((size_t)L->in_h * L->in_w * L->in_c > MAX_ACT)
      return spec_fail(p, "input of %dx%dx%d is too large", L->in_h, L->in_w, L->in_c);
    L->kind = PST_LAYER_INPUT;
    L->out_h = L->in_h;
    L->out_w = L->in_w;
    L->out_c = L->in_c;
  } else if (strcmp(kind, "dense") == 0) {
    if (ntok < 2 || parse_num(tok[1], strlen(tok[1]), MAX_UNITS, &L->units) != 0)
      return spec_fail(p, "dense needs a number of units (1..%d)", MAX_UNITS);
    if (parse_opts(p, "dense", tok + 2, ntok - 2, 0, 1, &o) != 0) return -EINVAL;
    if (!*flat)
      return spec_fail(p, "dense needs a flat input but gets %dx%dx%d; add flatten before it",
                       L->in_h, L->in_w, L->in_c);
    L->kind = PST_LAYER_DENSE;
    L->out_h = L->out_w = 1;
    L->out_c = L->units;
    L->w_count = (size_t)L->in_c * L->units;
    L->b_count = o.no_bias ? 0 : (size_t)L->units;
  } else if (strcmp(kind, "conv2d") == 0) {
    int d[2];
    if (ntok < 2 || parse_num(tok[1], strlen(tok[1]), MAX_UNITS, &L->filters) != 0)
      return spec_fail(p, "conv2d needs a number of filters (1..%d)", MAX_UNITS);
    if (ntok < 3 || parse_dims(tok[2], 2, MAX_KERNEL, d) != 2)
      return spec_fail(p, "conv2d needs a kernel like 3x3");
    L->k_h = d[0];
    L->k_w = d[1];
    if (parse_opts(p, "conv2d", tok + 3, ntok - 3, 1, 1, &o) != 0) return -EINVAL;
    if (o.act == PST_ACT_SOFTMAX) return spec_fail(p, "conv2d cannot use softmax");
    if (*flat) return spec_fail(p, "conv2d needs an image input (HxWxC), not a flat vector");
    L->kind = PST_LAYER_CONV2D;
    L->out_c = L->filters;
    L->w_count = (size_t)L->filters * L->k_h * L->k_w * L->in_c;
    L->b_count = o.no_bias ? 0 : (size_t)L->filters;
  } else if (strcmp(kind, "depthwise_conv2d") == 0) {
    int d[2];
    if (ntok < 2 || parse_dims(tok[1], 2, MAX_KERNEL, d) != 2)
      return spec_fail(p, "depthwise_conv2d needs a kernel like 3x3");
    L->k_h = d[0];
    L->k_w = d[1];
    if (parse_opts(p, kind, tok + 2, ntok - 2, 1, 1, &o) != 0) return -EINVAL;
    if (o.act == PST_ACT_SOFTMAX) return spec_fail(p, "depthwise_conv2d cannot use softmax");
    if (*flat)
      return spec_fail(p, "depthwise_conv2d needs an image input (HxWxC), not a flat vector");
    L->kind = PST_LAYER_DEPTHWISE_CONV2D;
    L->filters = L->in_c;
    L->out_c = L->in_c;
    L->w_count = (size_t)L->in_c * L->k_h * L->k_w;
    L->b_count = o.no_bias ? 0 : (size_t)L->in_c;
  } else if (strcmp(kind, "maxpool") == 0 || strcmp(kind, "avgpool") == 0) {
    int d[2];
    if (ntok < 2 || parse_dims(tok[1], 2, MAX_KERNEL, d) != 2)
      return spec_fail(p, "%s needs a window like 2x2", kind);
    L->k_h = d[0];
    L->k_w = d[1];
    o.stride_h = d[0];
    o.stride_w = d[1];
    if (parse_opts(p, kind, tok + 2, ntok - 2, 1, 0, &o) != 0) return -EINVAL;
    if (*flat) return spec_fail(p, "%s needs an image input (HxWxC), not a flat vector", kind);
    L->kind = kind[0] == 'm' ? PST_LAYER_MAXPOOL : PST_LAYER_AVGPOOL;
    L->out_c = L->in_c;
  } else if (strcmp(kind, "global_avgpool") == 0) {
    if (ntok != 1) return spec_fail(p, "global_avgpool takes no options");
    if (*flat)
      return spec_fail(p, "global_avgpool needs an image input (HxWxC), not a flat vector");
    /* One valid window over the whole map, so that the backends' average pooling (and
     * pst_window_shape) serve it unchanged; the output is read as a flat vector [C]. */
    L->kind = PST_LAYER_GLOBAL_AVGPOOL;
    L->k_h = L->in_h;
    L->k_w = L->in_w;
    L->out_h = L->out_w = 1;
    L->out_c = L->in_c;
    *flat = 1;
  } else if (strcmp(kind, "dropout") == 0) {
    char *end = NULL;
    double r = ntok == 2 ? strtod(tok[1], &end) : -1.0;
    if (ntok != 2 || end == tok[1] || *end != '\0' || !(r >= 0.0 && r < 1.0))
      return spec_fail(p, "dropout needs one rate in [0, 1) like 0.5%s%s%s",
                       ntok >= 2 ? " (got '" : "", ntok >= 2 ? spec_shown(tok[1], b, sizeof b) : "",
                       ntok >= 2 ? "')" : "");
    L->kind = PST_LAYER_DROPOUT;
    L->rate = (float)r;
    L->out_h = L->in_h;
    L->out_w = L->in_w;
    L->out_c = L->in_c;
  } else if (merge) {
    if (parse_opts(p, kind, tok + 1, ntok - 1, 0, kind[0] == 'a', &o) != 0) return -EINVAL;
    if (o.act == PST_ACT_SOFTMAX) return spec_fail(p, "add cannot use softmax");
    if (o.have_bias) return spec_fail(p, "%s has no bias", kind);
    L->kind = kind[0] == 'a' ? PST_LAYER_ADD : PST_LAYER_CONCATENATE;
    if (merge_shape(p, kind, m, inputs, n_inputs, L) != 0) return -EINVAL;
  } else if (strcmp(kind, "activation") == 0) {
    /* Keras's Activation/ReLU layer: what follows a batch norm (conv2d, batchnorm, relu6). */
    if (ntok != 2 || (strcmp(tok[1], "relu") != 0 && strcmp(tok[1], "relu6") != 0))
      return spec_fail(p, "activation needs relu or relu6%s%s%s", ntok >= 2 ? " (got '" : "",
                       ntok >= 2 ? spec_shown(tok[1], b, sizeof b) : "", ntok >= 2 ? "')" : "");
    L->kind = PST_LAYER_ACTIVATION;
    o.act = tok[1][4] == '6' ? PST_ACT_RELU6 : PST_ACT_RELU;
    L->out_h = L->in_h;
    L->out_w = L->in_w;
    L->out_c = L->in_c;
  } else if (strcmp(kind, "batchnorm") == 0) {
    if (parse_batchnorm(p, tok + 1, ntok - 1, L) != 0) return -EINVAL;
    L->kind = PST_LAYER_BATCHNORM;
    L->out_h = L->in_h;
    L->out_w = L->in_w;
    L->out_c = L->in_c;
    L->w_count = L->b_count = (size_t)L->in_c;
    L->s_count = 2 * (size_t)L->in_c;
  } else if (strcmp(kind, "flatten") == 0) {
    if (ntok != 1) return spec_fail(p, "flatten takes no options");
    L->kind = PST_LAYER_FLATTEN;
    L->out_h = L->out_w = 1;
    L->out_c = L->in_h * L->in_w * L->in_c;
    *flat = 1;
  } else {
    return spec_fail(p, "unknown layer '%s' (want input, conv2d, depthwise_conv2d, maxpool, "
                        "avgpool, global_avgpool, flatten, dropout, activation, batchnorm, dense, "
                        "add or concatenate)",
                     spec_shown(kind, b, sizeof b));
  }

  if (L->kind == PST_LAYER_CONV2D || L->kind == PST_LAYER_DEPTHWISE_CONV2D ||
      L->kind == PST_LAYER_MAXPOOL || L->kind == PST_LAYER_AVGPOOL) {
    L->stride_h = o.stride_h;
    L->stride_w = o.stride_w;
    L->same_padding = o.same;
    L->out_h = window_out(L->in_h, L->k_h, L->stride_h, o.same, &L->pad_top);
    L->out_w = window_out(L->in_w, L->k_w, L->stride_w, o.same, &L->pad_left);
    if (L->out_h <= 0 || L->out_w <= 0)
      return spec_fail(p, "%s %dx%d on a %dx%dx%d input leaves no output", kind, L->k_h, L->k_w,
                       L->in_h, L->in_w, L->in_c);
  }
  L->act = o.act;
  if ((size_t)L->out_h * L->out_w * L->out_c > MAX_ACT)
    return spec_fail(p, "%s output of %dx%dx%d is too large", kind, L->out_h, L->out_w, L->out_c);
  L->w_offset = m->n_params;
  L->b_offset = m->n_params + L->w_count;
  if (L->w_count == 0) L->w_offset = 0;
  if (L->b_count == 0) L->b_offset = 0;
  /* Model state (batchnorm's moving statistics) follows the layer's trained parameters. */
  L->s_offset = L->s_count ? m->n_params + L->w_count + L->b_count : 0;
  m->n_params += L->w_count + L->b_count + L->s_count;
  if (m->n_params > MAX_PARAMS)
    return spec_fail(p, "too many parameters (at most %zu)", MAX_PARAMS);
  m->n_layers++;
  return 0;
}
