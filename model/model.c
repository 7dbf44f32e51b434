/* The model spec: parsing, canonical text, presets, initialisation and summary.
 *
 * Parsing works one line at a time and derives every layer's per-sample shapes as it
 * goes, so that a shape problem is reported on the line that causes it. The canonical
 * text is rebuilt from the parsed layers (not copied from the input), so two specs that
 * mean the same model have the same fingerprint whatever their comments and spacing. */
#include "model/model.h"

#include "common/fnv.h"
#include "model/presets.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Limits that keep every derived size far from integer overflow. */
#define MAX_DIM 4096           /* input height/width */
#define MAX_UNITS 65536        /* dense units, conv filters, input channels */
#define MAX_KERNEL 64          /* conv kernel, pool window, strides */
#define MAX_ACT ((size_t)1 << 24)    /* floats per sample in one layer's output */
#define MAX_PARAMS ((size_t)1 << 28) /* floats in the whole parameter vector (1 GiB) */
/* A line holds any canonical line (at most about 400 characters: the longest options, a
 * name and eight inputs of 31 characters), so that the canonical text always parses again. */
#define MAX_LINE 1024
#define MAX_TOKENS 12
#define MAX_FILE (64 * 1024)

static const struct {
  const char *name;
  const char *text;
} presets[] = {
    {"mlp",
     "# Multi-layer perceptron, 784-256-128-10.\n"
     "input 784\n"
     "dense 256 relu\n"
     "dense 128 relu\n"
     "dense 10 softmax\n"},
    {"cnn",
     "# One convolution and pooling stage, then the classifier.\n"
     "input 28x28x1\n"
     "conv2d 32 3x3 relu\n"
     "maxpool 2x2\n"
     "flatten\n"
     "dense 10 softmax\n"},
    /* Same padding keeps the image borders: 28x28 and 14x14 maps go into the pools and
     * 7x7x64 features into the dense layer. With valid padding (5x5x64) this net stops near
     * 0.90 test accuracy on Fashion-MNIST after 5 epochs, as it does in PyTorch; with same
     * padding and Adam at 2e-3 it reaches 0.913-0.918 over five seeds (docs/benchmarks.md). */
    {"cnn2",
     "# Two convolution and pooling stages and a hidden dense layer.\n"
     "input 28x28x1\n"
     "conv2d 32 3x3 relu padding=same\n"
     "maxpool 2x2\n"
     "conv2d 64 3x3 relu padding=same\n"
     "maxpool 2x2\n"
     "flatten\n"
     "dense 64 relu\n"
     "dense 10 softmax\n"
     "optimizer adam lr=0.002\n"},
};

const char *pst_model_preset(const char *name) {
  if (name == NULL) return NULL;
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (strcmp(presets[i].name, name) == 0) return presets[i].text;
  return NULL;
}

/* Parser state shared by the helpers below. */
typedef struct {
  const char *source;
  int line;
  char *err;
  size_t errlen;
} parse_ctx;

static int fail(parse_ctx *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(parse_ctx *p, const char *fmt, ...) {
  if (p->err != NULL && p->errlen > 0) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "%s:%d: %s", p->source, p->line, msg);
  }
  return -EINVAL;
}

/* Copies an untrusted token for an error message: short and printable only, so that a
 * garbage file cannot produce a multi-line or unreadable error. */
static const char *shown(const char *tok, char *buf, size_t len) {
  size_t o = 0;
  for (size_t i = 0; tok[i] != '\0' && o + 4 < len; i++) {
    if (i == 24) {
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
    unsigned char c = (unsigned char)tok[i];
    buf[o++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  buf[o] = '\0';
  return buf;
}

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
      if (o->have_stride) return fail(p, "%s: stride given twice", kind);
      if (n < 1) return fail(p, "%s: bad stride '%s' (want S or SxS, 1..%d)", kind,
                             shown(t + 7, b, sizeof b), MAX_KERNEL);
      o->stride_h = d[0];
      o->stride_w = n == 2 ? d[1] : d[0];
      o->have_stride = 1;
    } else if (allow_window && strncmp(t, "padding=", 8) == 0) {
      if (o->have_padding) return fail(p, "%s: padding given twice", kind);
      if (strcmp(t + 8, "valid") == 0)
        o->same = 0;
      else if (strcmp(t + 8, "same") == 0)
        o->same = 1;
      else
        return fail(p, "%s: bad padding '%s' (want valid or same)", kind,
                    shown(t + 8, b, sizeof b));
      o->have_padding = 1;
    } else if (allow_act && (strcmp(t, "relu") == 0 || strcmp(t, "relu6") == 0 ||
                             strcmp(t, "linear") == 0 || strcmp(t, "softmax") == 0)) {
      if (o->have_act) return fail(p, "%s: activation given twice", kind);
      o->act = strcmp(t, "relu6") == 0 ? PST_ACT_RELU6
               : t[0] == 'r'           ? PST_ACT_RELU
               : t[0] == 'l'           ? PST_ACT_LINEAR
                                       : PST_ACT_SOFTMAX;
      o->have_act = 1;
    } else if (allow_act && strncmp(t, "bias=", 5) == 0) {
      /* Keras's use_bias=False, for a convolution that a batch norm follows (its beta is
       * the bias), as in MobileNetV2. */
      if (o->have_bias) return fail(p, "%s: bias given twice", kind);
      if (strcmp(t + 5, "no") != 0 && strcmp(t + 5, "yes") != 0)
        return fail(p, "%s: bad bias '%s' (want yes or no)", kind, shown(t + 5, b, sizeof b));
      o->no_bias = t[5] == 'n';
      o->have_bias = 1;
    } else {
      return fail(p, "%s: unknown option '%s'", kind, shown(t, b, sizeof b));
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

static const char *act_name(pst_activation a) {
  return a == PST_ACT_RELU    ? "relu"
         : a == PST_ACT_RELU6 ? "relu6"
         : a == PST_ACT_SOFTMAX ? "softmax"
                                : "linear";
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
        return fail(p, "add: input '%s' is %s but '%s' is %s (add needs equal shapes)", x->name,
                    shape_of(x, sb, sizeof sb), a->name, shape_of(a, sa, sizeof sa));
    } else {
      if (x->flat != a->flat || x->out_h != a->out_h || x->out_w != a->out_w)
        return fail(p, "concatenate: input '%s' is %s but '%s' is %s (concatenate needs %s)",
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
      return fail(p, "batchnorm: unknown option '%s' (want momentum= or eps=)",
                  shown(tok[i], b, sizeof b));
    if ((is_m && have_m) || (is_e && have_e))
      return fail(p, "batchnorm: %s given twice", is_m ? "momentum" : "eps");
    const char *val = tok[i] + (is_m ? 9 : 4);
    char *end = NULL;
    double v = strtod(val, &end);
    /* The float must keep the range too: a momentum just below 1 may round to 1. */
    float f = (float)v;
    if (val[0] == '\0' || *end != '\0' || !isfinite(v) ||
        (is_m && !(v >= 0.0 && f < 1.0f)) || (is_e && !(f > 0.0f && v <= 1.0)))
      return fail(p, "batchnorm: bad %s '%s' (want %s)", is_m ? "momentum" : "eps",
                  shown(val, b, sizeof b), is_m ? "a number in [0, 1)" : "a number in (0, 1]");
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
static int parse_layer(parse_ctx *p, char **tok, int ntok, pst_model *m, const int *inputs,
                       int n_inputs, int *flat) {
  char b[32];
  const char *kind = tok[0];
  int first = m->n_layers == 0;
  if (first && strcmp(kind, "input") != 0)
    return fail(p, "the model must start with an input layer, got '%s'", shown(kind, b, sizeof b));
  if (m->n_layers == PST_MODEL_MAX_LAYERS)
    return fail(p, "too many layers (at most %d, input included)", PST_MODEL_MAX_LAYERS);
  int merge = strcmp(kind, "add") == 0 || strcmp(kind, "concatenate") == 0;
  if (merge && n_inputs < 2)
    return fail(p, "%s needs inputs= naming two or more layers, like inputs=a,b", kind);
  if (!merge && n_inputs > 1)
    return fail(p, "%s takes one input (inputs= names %d)", shown(kind, b, sizeof b), n_inputs);

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
    if (!first) return fail(p, "only the first layer may be input");
    if (ntok != 2) return fail(p, "input needs one shape like 28x28x1 or 784");
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
      return fail(p, "bad input shape '%s' (want HxWxC or N)", shown(tok[1], b, sizeof b));
    }
    if ((size_t)L->in_h * L->in_w * L->in_c > MAX_ACT)
      return fail(p, "input of %dx%dx%d is too large", L->in_h, L->in_w, L->in_c);
    L->kind = PST_LAYER_INPUT;
    L->out_h = L->in_h;
    L->out_w = L->in_w;
    L->out_c = L->in_c;
  } else if (strcmp(kind, "dense") == 0) {
    if (ntok < 2 || parse_num(tok[1], strlen(tok[1]), MAX_UNITS, &L->units) != 0)
      return fail(p, "dense needs a number of units (1..%d)", MAX_UNITS);
    if (parse_opts(p, "dense", tok + 2, ntok - 2, 0, 1, &o) != 0) return -EINVAL;
    if (!*flat)
      return fail(p, "dense needs a flat input but gets %dx%dx%d; add flatten before it",
                  L->in_h, L->in_w, L->in_c);
    L->kind = PST_LAYER_DENSE;
    L->out_h = L->out_w = 1;
    L->out_c = L->units;
    L->w_count = (size_t)L->in_c * L->units;
    L->b_count = o.no_bias ? 0 : (size_t)L->units;
  } else if (strcmp(kind, "conv2d") == 0) {
    int d[2];
    if (ntok < 2 || parse_num(tok[1], strlen(tok[1]), MAX_UNITS, &L->filters) != 0)
      return fail(p, "conv2d needs a number of filters (1..%d)", MAX_UNITS);
    if (ntok < 3 || parse_dims(tok[2], 2, MAX_KERNEL, d) != 2)
      return fail(p, "conv2d needs a kernel like 3x3");
    L->k_h = d[0];
    L->k_w = d[1];
    if (parse_opts(p, "conv2d", tok + 3, ntok - 3, 1, 1, &o) != 0) return -EINVAL;
    if (o.act == PST_ACT_SOFTMAX) return fail(p, "conv2d cannot use softmax");
    if (*flat) return fail(p, "conv2d needs an image input (HxWxC), not a flat vector");
    L->kind = PST_LAYER_CONV2D;
    L->out_c = L->filters;
    L->w_count = (size_t)L->filters * L->k_h * L->k_w * L->in_c;
    L->b_count = o.no_bias ? 0 : (size_t)L->filters;
  } else if (strcmp(kind, "depthwise_conv2d") == 0) {
    int d[2];
    if (ntok < 2 || parse_dims(tok[1], 2, MAX_KERNEL, d) != 2)
      return fail(p, "depthwise_conv2d needs a kernel like 3x3");
    L->k_h = d[0];
    L->k_w = d[1];
    if (parse_opts(p, kind, tok + 2, ntok - 2, 1, 1, &o) != 0) return -EINVAL;
    if (o.act == PST_ACT_SOFTMAX) return fail(p, "depthwise_conv2d cannot use softmax");
    if (*flat)
      return fail(p, "depthwise_conv2d needs an image input (HxWxC), not a flat vector");
    L->kind = PST_LAYER_DEPTHWISE_CONV2D;
    L->filters = L->in_c;
    L->out_c = L->in_c;
    L->w_count = (size_t)L->in_c * L->k_h * L->k_w;
    L->b_count = o.no_bias ? 0 : (size_t)L->in_c;
  } else if (strcmp(kind, "maxpool") == 0 || strcmp(kind, "avgpool") == 0) {
    int d[2];
    if (ntok < 2 || parse_dims(tok[1], 2, MAX_KERNEL, d) != 2)
      return fail(p, "%s needs a window like 2x2", kind);
    L->k_h = d[0];
    L->k_w = d[1];
    o.stride_h = d[0];
    o.stride_w = d[1];
    if (parse_opts(p, kind, tok + 2, ntok - 2, 1, 0, &o) != 0) return -EINVAL;
    if (*flat) return fail(p, "%s needs an image input (HxWxC), not a flat vector", kind);
    L->kind = kind[0] == 'm' ? PST_LAYER_MAXPOOL : PST_LAYER_AVGPOOL;
    L->out_c = L->in_c;
  } else if (strcmp(kind, "global_avgpool") == 0) {
    if (ntok != 1) return fail(p, "global_avgpool takes no options");
    if (*flat) return fail(p, "global_avgpool needs an image input (HxWxC), not a flat vector");
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
      return fail(p, "dropout needs one rate in [0, 1) like 0.5%s%s%s", ntok >= 2 ? " (got '" : "",
                  ntok >= 2 ? shown(tok[1], b, sizeof b) : "", ntok >= 2 ? "')" : "");
    L->kind = PST_LAYER_DROPOUT;
    L->rate = (float)r;
    L->out_h = L->in_h;
    L->out_w = L->in_w;
    L->out_c = L->in_c;
  } else if (merge) {
    if (parse_opts(p, kind, tok + 1, ntok - 1, 0, kind[0] == 'a', &o) != 0) return -EINVAL;
    if (o.act == PST_ACT_SOFTMAX) return fail(p, "add cannot use softmax");
    if (o.have_bias) return fail(p, "%s has no bias", kind);
    L->kind = kind[0] == 'a' ? PST_LAYER_ADD : PST_LAYER_CONCATENATE;
    if (merge_shape(p, kind, m, inputs, n_inputs, L) != 0) return -EINVAL;
  } else if (strcmp(kind, "activation") == 0) {
    /* Keras's Activation/ReLU layer: what follows a batch norm (conv2d, batchnorm, relu6). */
    if (ntok != 2 || (strcmp(tok[1], "relu") != 0 && strcmp(tok[1], "relu6") != 0))
      return fail(p, "activation needs relu or relu6%s%s%s", ntok >= 2 ? " (got '" : "",
                  ntok >= 2 ? shown(tok[1], b, sizeof b) : "", ntok >= 2 ? "')" : "");
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
    if (ntok != 1) return fail(p, "flatten takes no options");
    L->kind = PST_LAYER_FLATTEN;
    L->out_h = L->out_w = 1;
    L->out_c = L->in_h * L->in_w * L->in_c;
    *flat = 1;
  } else {
    return fail(p, "unknown layer '%s' (want input, conv2d, depthwise_conv2d, maxpool, avgpool, "
                   "global_avgpool, flatten, dropout, activation, batchnorm, dense, add or concatenate)",
                shown(kind, b, sizeof b));
  }

  if (L->kind == PST_LAYER_CONV2D || L->kind == PST_LAYER_DEPTHWISE_CONV2D ||
      L->kind == PST_LAYER_MAXPOOL || L->kind == PST_LAYER_AVGPOOL) {
    L->stride_h = o.stride_h;
    L->stride_w = o.stride_w;
    L->same_padding = o.same;
    L->out_h = window_out(L->in_h, L->k_h, L->stride_h, o.same, &L->pad_top);
    L->out_w = window_out(L->in_w, L->k_w, L->stride_w, o.same, &L->pad_left);
    if (L->out_h <= 0 || L->out_w <= 0)
      return fail(p, "%s %dx%d on a %dx%dx%d input leaves no output", kind, L->k_h, L->k_w,
                  L->in_h, L->in_w, L->in_c);
  }
  L->act = o.act;
  if ((size_t)L->out_h * L->out_w * L->out_c > MAX_ACT)
    return fail(p, "%s output of %dx%dx%d is too large", kind, L->out_h, L->out_w, L->out_c);
  L->w_offset = m->n_params;
  L->b_offset = m->n_params + L->w_count;
  if (L->w_count == 0) L->w_offset = 0;
  if (L->b_count == 0) L->b_offset = 0;
  /* Model state (batchnorm's moving statistics) follows the layer's trained parameters. */
  L->s_offset = L->s_count ? m->n_params + L->w_count + L->b_count : 0;
  m->n_params += L->w_count + L->b_count + L->s_count;
  if (m->n_params > MAX_PARAMS) return fail(p, "too many parameters (at most %zu)", MAX_PARAMS);
  m->n_layers++;
  return 0;
}

/* The optimizer line's options. Each value is checked here, with the spec's line number,
 * against the same ranges the ps enforces on its flags, so a bad number is reported where
 * it was written and not later by the ps. */
enum { KIND_SGD = 1, KIND_MOMENTUM = 2, KIND_ADAM = 4, KIND_ALL = 7 };
static const char *const opt_kinds[] = {"sgd", "momentum", "adam"};
static const struct {
  const char *key;    /* as written in the spec; '-' and '_' are alike */
  const char *option; /* the ps option it sets */
  unsigned kinds;     /* the optimizers it belongs to */
  double lo, hi;      /* allowed: lo <= x (lo < x when lo_open), and x < hi when hi > 0 */
  int lo_open;
  const char *want;
} opt_keys[] = {
    {"lr", "lr", KIND_ALL, 0, 0, 1, "a number > 0"},
    {"momentum", "momentum", KIND_MOMENTUM, 0, 0, 0, "a number >= 0"},
    {"beta1", "beta1", KIND_ADAM, 0, 1, 0, "a number in [0, 1)"},
    {"beta2", "beta2", KIND_ADAM, 0, 1, 0, "a number in [0, 1)"},
    {"eps", "eps", KIND_ADAM, 0, 0, 1, "a number > 0"},
    {"weight_decay", "weight-decay", KIND_ALL, 0, 0, 0, "a number >= 0"},
};

/* Whether the n characters at s name key, with '-' and '_' alike. */
static int key_is(const char *s, size_t n, const char *key) {
  if (strlen(key) != n) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i] == '-' ? '_' : s[i];
    if (c != key[i]) return 0;
  }
  return 1;
}

static void add_setting(pst_model *m, const char *name, const char *value) {
  pst_model_setting *st = &m->settings[m->n_settings++];
  snprintf(st->name, sizeof st->name, "%s", name);
  snprintf(st->value, sizeof st->value, "%s", value);
}

/* "optimizer KIND key=value ..." into m->settings. */
static int parse_optimizer(parse_ctx *p, char **tok, int ntok, pst_model *m) {
  char b[32];
  if (m->n_settings > 0)
    return fail(p, "optimizer given twice (first on line %d)", m->settings_line);
  if (ntok < 2) return fail(p, "optimizer needs a kind: sgd, momentum or adam");
  int kind = -1;
  for (int k = 0; k < 3; k++)
    if (strcmp(tok[1], opt_kinds[k]) == 0) kind = k;
  if (kind < 0)
    return fail(p, "optimizer needs a kind: sgd, momentum or adam (got '%s')",
                shown(tok[1], b, sizeof b));
  add_setting(m, "optimizer", opt_kinds[kind]);
  unsigned seen = 0;
  for (int i = 2; i < ntok; i++) {
    const char *eq = strchr(tok[i], '=');
    size_t klen = eq ? (size_t)(eq - tok[i]) : strlen(tok[i]);
    int k = -1;
    for (int j = 0; j < (int)(sizeof opt_keys / sizeof opt_keys[0]); j++)
      if (key_is(tok[i], klen, opt_keys[j].key)) k = j;
    if (eq == NULL || k < 0)
      return fail(p, "optimizer: unknown option '%s' (want lr=, momentum=, beta1=, beta2=, eps= "
                     "or weight_decay=)", shown(tok[i], b, sizeof b));
    if (!(opt_keys[k].kinds & (1u << kind)))
      return fail(p, "optimizer: %s does not apply to %s", opt_keys[k].key, opt_kinds[kind]);
    if (seen & (1u << k)) return fail(p, "optimizer: %s given twice", opt_keys[k].key);
    seen |= 1u << k;
    const char *val = eq + 1;
    char *end = NULL;
    double v = strtod(val, &end);
    if (val[0] == '\0' || *end != '\0' || !isfinite(v) || v < opt_keys[k].lo ||
        (opt_keys[k].lo_open && v <= opt_keys[k].lo) || (opt_keys[k].hi > 0 && v >= opt_keys[k].hi) ||
        strlen(val) >= sizeof m->settings[0].value)
      return fail(p, "optimizer: bad %s '%s' (want %s)", opt_keys[k].key, shown(val, b, sizeof b),
                  opt_keys[k].want);
    add_setting(m, opt_keys[k].option, val);
  }
  m->settings_line = p->line;
  return 0;
}

int pst_model_defaults(const pst_model *m, const char *kind, const char **names,
                       const char **values) {
  /* settings[0] is always the optimizer's kind. */
  if (m->n_settings == 0 || (kind != NULL && strcmp(kind, m->settings[0].value) != 0)) return 0;
  for (int i = 0; i < m->n_settings; i++) {
    names[i] = m->settings[i].name;
    values[i] = m->settings[i].value;
  }
  return m->n_settings;
}

/* The shortest decimal text that reads back as exactly f ("0.99", not "0.99000001"), so
 * that the canonical line is both exact and the way a person writes it. */
static const char *float_text(float f, char *buf, size_t len) {
  for (int prec = 1; prec <= 9; prec++) {
    snprintf(buf, len, "%.*g", prec, (double)f);
    if ((float)strtod(buf, NULL) == f) break; /* as the parser reads it back */
  }
  return buf;
}

/* Whether layer i takes just the output of the line above it (the sequential default). */
static int takes_previous(const pst_model *m, int i) {
  const pst_layer *L = &m->layers[i];
  return i > 0 && L->n_inputs == 1 && L->inputs[0] == i - 1;
}

/* Appends the canonical line of layer i; -1 when the text buffer is full. */
static int canon_layer(const pst_model *m, int i, int flat_input, char *text, size_t *len) {
  const pst_layer *L = &m->layers[i];
  char line[MAX_LINE];
  int n = 0;
  switch (L->kind) {
    case PST_LAYER_INPUT:
      if (flat_input)
        n = snprintf(line, sizeof line, "input %d\n", L->out_c);
      else
        n = snprintf(line, sizeof line, "input %dx%dx%d\n", L->out_h, L->out_w, L->out_c);
      break;
    case PST_LAYER_DENSE:
      n = snprintf(line, sizeof line, "dense %d %s%s\n", L->units, act_name(L->act),
                   L->b_count ? "" : " bias=no");
      break;
    case PST_LAYER_CONV2D:
    case PST_LAYER_DEPTHWISE_CONV2D:
    case PST_LAYER_MAXPOOL:
    case PST_LAYER_AVGPOOL: {
      char stride[32];
      if (L->stride_h == L->stride_w)
        snprintf(stride, sizeof stride, "%d", L->stride_h);
      else
        snprintf(stride, sizeof stride, "%dx%d", L->stride_h, L->stride_w);
      if (L->kind == PST_LAYER_CONV2D)
        n = snprintf(line, sizeof line, "conv2d %d %dx%d stride=%s padding=%s %s%s\n",
                     L->filters, L->k_h, L->k_w, stride, L->same_padding ? "same" : "valid",
                     act_name(L->act), L->b_count ? "" : " bias=no");
      else if (L->kind == PST_LAYER_DEPTHWISE_CONV2D)
        n = snprintf(line, sizeof line, "depthwise_conv2d %dx%d stride=%s padding=%s %s%s\n",
                     L->k_h, L->k_w, stride, L->same_padding ? "same" : "valid",
                     act_name(L->act), L->b_count ? "" : " bias=no");
      else
        n = snprintf(line, sizeof line, "%s %dx%d stride=%s padding=%s\n",
                     L->kind == PST_LAYER_MAXPOOL ? "maxpool" : "avgpool", L->k_h, L->k_w,
                     stride, L->same_padding ? "same" : "valid");
      break;
    }
    case PST_LAYER_GLOBAL_AVGPOOL:
      n = snprintf(line, sizeof line, "global_avgpool\n");
      break;
    case PST_LAYER_DROPOUT:
      /* %.9g gives back the float exactly, so the text means the rate the net uses. */
      n = snprintf(line, sizeof line, "dropout %.9g\n", (double)L->rate);
      break;
    case PST_LAYER_FLATTEN:
      n = snprintf(line, sizeof line, "flatten\n");
      break;
    case PST_LAYER_ACTIVATION:
      n = snprintf(line, sizeof line, "activation %s\n", act_name(L->act));
      break;
    case PST_LAYER_ADD:
      n = snprintf(line, sizeof line, "add %s\n", act_name(L->act));
      break;
    case PST_LAYER_CONCATENATE:
      n = snprintf(line, sizeof line, "concatenate\n");
      break;
    case PST_LAYER_BATCHNORM: {
      char mom[32], eps[32];
      n = snprintf(line, sizeof line, "batchnorm momentum=%s eps=%s\n",
                   float_text(L->momentum, mom, sizeof mom), float_text(L->eps, eps, sizeof eps));
      break;
    }
  }
  /* The graph options go last, in place of the newline: the name, and the inputs where
   * they are not the line above (so a sequential spec keeps its text and fingerprint). */
  if (n > 0 && (L->name[0] != '\0' || (i > 0 && !takes_previous(m, i)))) {
    n--;
    if (L->name[0] != '\0') n += snprintf(line + n, sizeof line - n, " name=%s", L->name);
    for (int t = 0; i > 0 && !takes_previous(m, i) && t < L->n_inputs; t++)
      n += snprintf(line + n, sizeof line - n, "%s%s", t ? "," : " inputs=",
                    m->layers[L->inputs[t]].name);
    n += snprintf(line + n, sizeof line - n, "\n");
  }
  if (n <= 0 || *len + (size_t)n + 1 > PST_MODEL_MAX_TEXT) return -1;
  memcpy(text + *len, line, (size_t)n + 1);
  *len += (size_t)n;
  return 0;
}


/* Splits the next line of *s into buf and its words (a comment cut off); advances *s.
 * Returns 1 with *ntok words (0: a blank line), 0 at the end of the text, or -EINVAL for
 * a line too long or with too many words, reported through p. *at is where the line
 * starts in the text, so that a word's place in the text is at + (word - buf). */
static int next_line(parse_ctx *p, const char **s, char *buf, const char **at, char **tok,
                     int *ntok) {
  if (**s == '\0') return 0;
  const char *eol = strchr(*s, '\n');
  size_t n = eol ? (size_t)(eol - *s) : strlen(*s);
  *at = *s;
  *s = eol ? eol + 1 : *s + n;
  p->line++;
  if (n >= MAX_LINE) return fail(p, "line too long (at most %d characters)", MAX_LINE - 1);
  memcpy(buf, *at, n);
  buf[n] = '\0';
  char *hash = strchr(buf, '#');
  if (hash != NULL) *hash = '\0';
  *ntok = 0;
  for (char *save = NULL, *t = strtok_r(buf, " \t\r\v\f", &save); t != NULL;
       t = strtok_r(NULL, " \t\r\v\f", &save)) {
    if (*ntok == MAX_TOKENS) return fail(p, "too many words on one line");
    tok[(*ntok)++] = t;
  }
  return 1;
}

/* What a first look over the whole spec finds about every layer line, so that a reference
 * to a layer further down is reported as such (or as the cycle it closes) rather than as
 * an unknown name. */
typedef struct {
  char name[PST_MODEL_MAX_NAME]; /* "" when none (or not a valid one) */
  int line;
  const char *inputs;            /* the inputs= value in the text, or NULL */
  size_t inputs_len;
} spec_line;

static int find_ahead(const spec_line *ahead, int n, const char *name, size_t len) {
  for (int k = 0; k < n; k++)
    if (strlen(ahead[k].name) == len && strncmp(ahead[k].name, name, len) == 0) return k;
  return -1;
}

/* Whether layer line k computes from layer line `target` (k > target): its inputs, or the
 * line above it, followed upwards through the lines' own references. */
static int reaches(const spec_line *ahead, int n, int k, int target, unsigned char *seen) {
  if (k == target) return 1;
  if (k < 0 || k >= n || seen[k]) return 0;
  seen[k] = 1;
  if (ahead[k].inputs == NULL) return reaches(ahead, n, k - 1, target, seen);
  const char *s = ahead[k].inputs, *end = s + ahead[k].inputs_len;
  while (s < end) {
    const char *c = memchr(s, ',', (size_t)(end - s));
    size_t len = c ? (size_t)(c - s) : (size_t)(end - s);
    if (reaches(ahead, n, find_ahead(ahead, n, s, len), target, seen)) return 1;
    s += len + 1;
  }
  return 0;
}

static int valid_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= PST_MODEL_MAX_NAME || isdigit((unsigned char)s[0])) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && s[i] != '_') return 0;
  return 1;
}

static int find_layer(const pst_model *m, const char *name) {
  for (int i = 0; i < m->n_layers; i++)
    if (strcmp(m->layers[i].name, name) == 0) return i;
  return -1;
}

/* Resolves the names of an inputs= value into layer indices above layer `self`. */
static int parse_inputs(parse_ctx *p, const pst_model *m, const char *value, const char *self_name,
                        const spec_line *ahead, int n_ahead, int *inputs, int *n_inputs) {
  char b[32];
  char names[MAX_LINE];
  snprintf(names, sizeof names, "%s", value);
  *n_inputs = 0;
  if (names[0] == '\0') return fail(p, "inputs= needs layer names, like inputs=a,b");
  for (char *s = names;;) {
    char *c = strchr(s, ',');
    if (c != NULL) *c = '\0';
    if (s[0] == '\0') return fail(p, "inputs: an empty name (want inputs=a,b)");
    if (*n_inputs == PST_LAYER_MAX_INPUTS)
      return fail(p, "inputs: too many (at most %d)", PST_LAYER_MAX_INPUTS);
    int j = find_layer(m, s);
    if (j < 0) {
      int k = find_ahead(ahead, n_ahead, s, strlen(s));
      unsigned char seen[PST_MODEL_MAX_LAYERS + 1] = {0};
      if (self_name != NULL && strcmp(s, self_name) == 0)
        return fail(p, "inputs: '%s' is this layer itself (a cycle)", shown(s, b, sizeof b));
      if (k >= 0 && k > m->n_layers && reaches(ahead, n_ahead, k, m->n_layers, seen))
        return fail(p, "inputs: '%s' (line %d) is computed from this layer (a cycle)",
                    shown(s, b, sizeof b), ahead[k].line);
      if (k >= 0 && k > m->n_layers)
        return fail(p, "inputs: '%s' is defined below, on line %d (a layer's inputs must be "
                       "above it)", shown(s, b, sizeof b), ahead[k].line);
      return fail(p, "inputs: unknown layer '%s'", shown(s, b, sizeof b));
    }
    inputs[(*n_inputs)++] = j;
    if (c == NULL) break;
    s = c + 1;
  }
  return 0;
}

int pst_model_parse(const char *text, const char *source, pst_model *m, char *err,
                    size_t errlen) {
  parse_ctx p = {source ? source : "model", 0, err, errlen};
  int line_of[PST_MODEL_MAX_LAYERS];
  int flat_input = 1;
  char buf[MAX_LINE];
  char *tok[MAX_TOKENS];
  int ntok;
  const char *at;
  if (err != NULL && errlen > 0) err[0] = '\0';
  memset(m, 0, sizeof *m);
  if (text == NULL) return fail(&p, "no model text");

  /* The first look: every layer line's name= and inputs=, errors left to the second. */
  spec_line ahead[PST_MODEL_MAX_LAYERS + 1];
  int n_ahead = 0;
  parse_ctx quiet = {p.source, 0, NULL, 0};
  for (const char *s = text; n_ahead <= PST_MODEL_MAX_LAYERS;) {
    int rc = next_line(&quiet, &s, buf, &at, tok, &ntok);
    if (rc <= 0) break;
    if (ntok == 0 || strcmp(tok[0], "optimizer") == 0) continue;
    spec_line *a = &ahead[n_ahead++];
    memset(a, 0, sizeof *a);
    a->line = quiet.line;
    for (int t = 1; t < ntok; t++) {
      if (strncmp(tok[t], "name=", 5) == 0 && valid_name(tok[t] + 5))
        snprintf(a->name, sizeof a->name, "%s", tok[t] + 5);
      else if (strncmp(tok[t], "inputs=", 7) == 0) {
        a->inputs = at + (tok[t] + 7 - buf);
        a->inputs_len = strlen(tok[t] + 7);
      }
    }
  }

  const char *s = text;
  int rc;
  while ((rc = next_line(&p, &s, buf, &at, tok, &ntok)) > 0) {
    if (ntok == 0) continue;
    if (strcmp(tok[0], "optimizer") == 0) {
      if (parse_optimizer(&p, tok, ntok, m) != 0) return -EINVAL;
      continue;
    }
    /* name= and inputs= belong to the graph: taken out before the layer's own options. */
    const char *name = NULL, *inputs_s = NULL;
    int k = 1;
    for (int t = 1; t < ntok; t++) {
      if (strncmp(tok[t], "name=", 5) == 0) {
        if (name != NULL) return fail(&p, "name given twice");
        name = tok[t] + 5;
      } else if (strncmp(tok[t], "inputs=", 7) == 0) {
        if (inputs_s != NULL) return fail(&p, "inputs given twice");
        inputs_s = tok[t] + 7;
      } else {
        tok[k++] = tok[t];
      }
    }
    ntok = k;
    int idx = m->n_layers;
    char b[32];
    if (name != NULL) {
      if (!valid_name(name))
        return fail(&p, "bad name '%s' (letters, digits and _, not starting with a digit, at "
                        "most %d characters)", shown(name, b, sizeof b), PST_MODEL_MAX_NAME - 1);
      int j = find_layer(m, name);
      if (j >= 0) return fail(&p, "name '%s' already used on line %d", name, line_of[j]);
    }
    int inputs[PST_LAYER_MAX_INPUTS], n_inputs = 0;
    if (idx > 0 && inputs_s != NULL) {
      if (strcmp(tok[0], "input") == 0) return fail(&p, "input takes no inputs=");
      if (parse_inputs(&p, m, inputs_s, name, ahead, n_ahead, inputs, &n_inputs) != 0)
        return -EINVAL;
    } else if (idx > 0) {
      inputs[n_inputs++] = idx - 1;
    } else if (inputs_s != NULL && strcmp(tok[0], "input") == 0) {
      return fail(&p, "input takes no inputs=");
    }
    int flat = idx > 0 ? m->layers[inputs[0]].flat : 1;
    if (parse_layer(&p, tok, ntok, m, inputs, n_inputs, &flat) != 0) return -EINVAL;
    pst_layer *L = &m->layers[idx];
    L->flat = flat;
    if (name != NULL) snprintf(L->name, sizeof L->name, "%s", name);
    if (idx == 0) flat_input = flat;
    if (idx > 0 && !takes_previous(m, idx)) m->graph = 1;
    line_of[idx] = p.line;
  }
  if (rc < 0) return -EINVAL;

  if (p.line == 0) p.line = 1;
  if (m->n_layers == 0) return fail(&p, "the model is empty (it needs an input layer)");
  if (m->n_layers == 1) return fail(&p, "the model needs at least one layer after input");
  for (int i = 1; i < m->n_layers - 1; i++) {
    if (m->layers[i].act == PST_ACT_SOFTMAX) {
      p.line = line_of[i];
      return fail(&p, "softmax is only allowed on the last layer");
    }
  }
  const pst_layer *last = &m->layers[m->n_layers - 1];
  if (last->kind != PST_LAYER_DENSE || last->act != PST_ACT_SOFTMAX) {
    p.line = line_of[m->n_layers - 1];
    return fail(&p, "the last layer must be dense with softmax (training uses softmax "
                    "cross-entropy on its logits)");
  }
  if (last->units < 2) {
    p.line = line_of[m->n_layers - 1];
    return fail(&p, "the last layer needs at least 2 classes");
  }
  /* The last layer is the only output: a layer nothing takes would be computed for
   * nothing (and is most likely a misspelt inputs=). */
  unsigned char used[PST_MODEL_MAX_LAYERS] = {0};
  for (int i = 1; i < m->n_layers; i++)
    for (int t = 0; t < m->layers[i].n_inputs; t++) used[m->layers[i].inputs[t]] = 1;
  for (int i = 0; i < m->n_layers - 1; i++) {
    if (!used[i]) {
      p.line = line_of[i];
      return fail(&p, "no layer takes this layer's output (only the last layer may be the "
                      "model's output)");
    }
  }
  /* Names are unique, automatic ones included (checkpoints name tensors by them, and Keras
   * refuses a model whose names repeat too). */
  typedef char layer_name_buf[PST_MODEL_MAX_NAME + 32];
  layer_name_buf *names = malloc(PST_MODEL_MAX_LAYERS * sizeof *names); /* 16 KiB */
  if (names == NULL) return fail(&p, "out of memory");
  for (int i = 0; i < m->n_layers; i++) pst_model_layer_name(m, i, 1, names[i], sizeof names[i]);
  for (int i = 1; i < m->n_layers; i++) {
    for (int j = 0; j < i; j++) {
      if (strcmp(names[i], names[j]) != 0) continue;
      int named = m->layers[i].name[0] ? i : j, other = named == i ? j : i;
      p.line = line_of[named];
      rc = fail(&p, "name '%s' is also the automatic name of the layer on line %d; pick "
                    "another", names[i], line_of[other]);
      free(names);
      return rc;
    }
  }
  free(names);

  size_t len = 0;
  for (int i = 0; i < m->n_layers; i++) {
    if (canon_layer(m, i, flat_input, m->text, &len) != 0) {
      p.line = line_of[i];
      return fail(&p, "the model text is too long (at most %d bytes)", PST_MODEL_MAX_TEXT - 1);
    }
  }
  m->input_size = m->layers[0].out_h * m->layers[0].out_w * m->layers[0].out_c;
  m->classes = last->units;
  m->fingerprint = pst_fnv1a64_more(PST_FNV1A64_STD_BASIS, m->text, len);
  return 0;
}

int pst_model_load(const char *name_or_path, pst_model *m, char *err, size_t errlen) {
  const char *preset = pst_model_preset(name_or_path);
  if (preset != NULL) return pst_model_parse(preset, name_or_path, m, err, errlen);
  if (name_or_path == NULL || name_or_path[0] == '\0') {
    snprintf(err, errlen, "no model given (want one of " PST_MODEL_PRESETS ", or a spec file)");
    return -EINVAL;
  }
  char *generated = malloc(MAX_FILE);
  if (generated == NULL) {
    snprintf(err, errlen, "%s: out of memory", name_or_path);
    return -ENOMEM;
  }
  int g = pst_preset_generate(name_or_path, generated, MAX_FILE, err, errlen);
  if (g != 0) {
    int rc = g < 0 ? g : pst_model_parse(generated, name_or_path, m, err, errlen);
    free(generated);
    return rc;
  }
  free(generated);
  FILE *f = fopen(name_or_path, "rb");
  if (f == NULL) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot read model file: %s (presets are mlp, cnn, cnn2, %s)",
             name_or_path, strerror(e), PST_GENERATED_PRESETS);
    return -e;
  }
  char *buf = malloc(MAX_FILE + 1);
  if (buf == NULL) {
    fclose(f);
    snprintf(err, errlen, "%s: out of memory", name_or_path);
    return -ENOMEM;
  }
  size_t n = fread(buf, 1, MAX_FILE + 1, f);
  int rerr = ferror(f);
  fclose(f);
  int rc;
  if (rerr) {
    snprintf(err, errlen, "%s: cannot read model file: read error", name_or_path);
    rc = -EIO;
  } else if (n > MAX_FILE) {
    snprintf(err, errlen, "%s: model file too large (at most %d bytes)", name_or_path, MAX_FILE);
    rc = -EINVAL;
  } else if (memchr(buf, '\0', n) != NULL) {
    snprintf(err, errlen, "%s: model file is not text", name_or_path);
    rc = -EINVAL;
  } else {
    buf[n] = '\0';
    rc = pst_model_parse(buf, name_or_path, m, err, errlen);
  }
  free(buf);
  return rc;
}

/* splitmix64: tiny, fast and identical on every machine, unlike rand(). */
static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int pst_model_state_ranges(const pst_model *m, size_t *off, size_t *count) {
  int n = 0;
  for (int i = 1; i < m->n_layers; i++) {
    const pst_layer *L = &m->layers[i];
    if (L->s_count == 0) continue;
    off[n] = L->s_offset;
    count[n] = L->s_count;
    n++;
  }
  return n;
}

void pst_model_init_params(const pst_model *m, uint64_t seed, float *params) {
  for (int i = 1; i < m->n_layers; i++) {
    const pst_layer *L = &m->layers[i];
    if (L->kind == PST_LAYER_BATCHNORM) {
      /* Keras's initialisers: the identity transform, and moving statistics of a
       * standardised input. */
      for (size_t j = 0; j < L->w_count; j++) {
        params[L->w_offset + j] = 1.0f;
        params[L->b_offset + j] = 0.0f;
        params[L->s_offset + j] = 0.0f;
        params[L->s_offset + L->w_count + j] = 1.0f;
      }
      continue;
    }
    if (L->w_count == 0) continue;
    double fan_in, fan_out;
    if (L->kind == PST_LAYER_CONV2D) {
      fan_in = (double)L->k_h * L->k_w * L->in_c;
      fan_out = (double)L->k_h * L->k_w * L->filters;
    } else if (L->kind == PST_LAYER_DEPTHWISE_CONV2D) {
      /* Each output sees KHxKW inputs of its own channel: that is its true fan (Keras
       * counts the channels in as well, which would shrink the initial weights C-fold). */
      fan_in = fan_out = (double)L->k_h * L->k_w;
    } else {
      fan_in = L->in_c;
      fan_out = L->units;
    }
    double limit = (L->act == PST_ACT_RELU || L->act == PST_ACT_RELU6) ? sqrt(6.0 / fan_in) : sqrt(6.0 / (fan_in + fan_out));
    /* One stream per layer, so a layer's initial weights depend only on the seed and
     * its position, not on the sizes of the layers before it. */
    uint64_t state = seed ^ (0x632be59bd9b4e019ull * (uint64_t)i);
    float *w = params + L->w_offset;
    for (size_t j = 0; j < L->w_count; j++) {
      double u = ((double)(splitmix64(&state) >> 40) + 0.5) * (1.0 / 16777216.0);
      w[j] = (float)((2.0 * u - 1.0) * limit);
    }
    memset(params + L->b_offset, 0, L->b_count * sizeof(float));
  }
}

/* Formats n with thousands separators, as Keras does in its totals. */
static const char *commas(size_t n, char *buf, size_t len) {
  char digits[32];
  int nd = snprintf(digits, sizeof digits, "%zu", n);
  size_t o = 0;
  for (int i = 0; i < nd && o + 2 < len; i++) {
    if (i > 0 && (nd - i) % 3 == 0) buf[o++] = ',';
    buf[o++] = digits[i];
  }
  buf[o] = '\0';
  return buf;
}

/* Indexed by pst_layer_kind: Keras's automatic names and class names. */
static const char *const keras_names[] = {
    "input_layer", "dense", "conv2d", "max_pooling2d", "flatten", "average_pooling2d",
    "global_average_pooling2d", "dropout", "depthwise_conv2d", "add", "concatenate",
    "activation", "batch_normalization"};
static const char *const keras_types[] = {
    "InputLayer", "Dense", "Conv2D", "MaxPooling2D", "Flatten", "AveragePooling2D",
    "GlobalAveragePooling2D", "Dropout", "DepthwiseConv2D", "Add", "Concatenate", "Activation",
    "BatchNormalization"};
_Static_assert(sizeof keras_names / sizeof *keras_names == PST_LAYER_BATCHNORM + 1 &&
                   sizeof keras_types / sizeof *keras_types == PST_LAYER_BATCHNORM + 1,
               "a Keras name and type for every layer kind");

void pst_model_layer_name(const pst_model *m, int l, int given, char *buf, size_t len) {
  const pst_layer *L = &m->layers[l];
  if (given && L->name[0] != '\0') {
    snprintf(buf, len, "%s", L->name);
    return;
  }
  int nth = 0;
  for (int j = 0; j < l; j++) nth += m->layers[j].kind == L->kind;
  if (nth)
    snprintf(buf, len, "%s_%d", keras_names[L->kind], nth);
  else
    snprintf(buf, len, "%s", keras_names[L->kind]);
}

void pst_model_summary(const pst_model *m, FILE *out) {
  size_t state = 0; /* non-trainable parameters */
  /* Each layer's name as the table shows it: its name= or Keras's automatic one. */
  char shown_as[PST_MODEL_MAX_LAYERS][48];
  for (int i = 0; i < m->n_layers; i++) pst_model_layer_name(m, i, 1, shown_as[i], sizeof shown_as[i]);
  /* The name column fits the longest name, "global_average_pooling2d_N
   * (GlobalAveragePooling2D)", as Keras's own table does. A graph gets Keras's "Connected
   * to" column as well: the inputs of each layer, one a row. */
  int width = m->graph ? 116 : 91;
  char rule[120], dbl[120], b[32];
  memset(rule, '_', (size_t)width);
  rule[width] = '\0';
  memset(dbl, '=', (size_t)width);
  dbl[width] = '\0';
  fprintf(out, "Model: fingerprint %016llx\n%s\n", (unsigned long long)m->fingerprint, rule);
  if (m->graph)
    fprintf(out, " %-54s %-20s %-8s %-10s %s\n%s\n", "Layer (type)", "Output Shape", "Act",
            "Param #", "Connected to", dbl);
  else
    fprintf(out, " %-54s %-20s %-8s %s\n%s\n", "Layer (type)", "Output Shape", "Act",
            "Param #", dbl);
  for (int i = 0; i < m->n_layers; i++) {
    const pst_layer *L = &m->layers[i];
    char name[96], shape[64];
    snprintf(name, sizeof name, "%.47s (%s)", shown_as[i], keras_types[L->kind]);
    if (L->flat)
      snprintf(shape, sizeof shape, "(None, %d)", L->out_c);
    else
      snprintf(shape, sizeof shape, "(None, %d, %d, %d)", L->out_h, L->out_w, L->out_c);
    const char *act = (L->kind == PST_LAYER_DENSE || L->kind == PST_LAYER_CONV2D ||
                       L->kind == PST_LAYER_DEPTHWISE_CONV2D || L->kind == PST_LAYER_ADD ||
                       L->kind == PST_LAYER_ACTIVATION)
                          ? act_name(L->act)
                          : "";
    state += L->s_count;
    if (!m->graph) {
      fprintf(out, " %-54s %-20s %-8s %s\n", name, shape, act,
              commas(L->w_count + L->b_count + L->s_count, b, sizeof b));
      continue;
    }
    fprintf(out, " %-54s %-20s %-8s %-10s %s\n", name, shape, act,
            commas(L->w_count + L->b_count + L->s_count, b, sizeof b),
            L->n_inputs > 0 ? shown_as[L->inputs[0]] : "-");
    for (int t = 1; t < L->n_inputs; t++)
      fprintf(out, " %-54s %-20s %-8s %-10s %s\n", "", "", "", "", shown_as[L->inputs[t]]);
  }
  fprintf(out, "%s\n", dbl);
  fprintf(out, "Total params: %s (%.2f KB)\n", commas(m->n_params, b, sizeof b),
          (double)m->n_params * 4.0 / 1024.0);
  char b2[32];
  fprintf(out, "Trainable params: %s\nNon-trainable params: %s\n%s\n",
          commas(m->n_params - state, b, sizeof b), commas(state, b2, sizeof b2), rule);
}
