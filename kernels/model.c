/* The model spec: parsing, canonical text, presets, initialisation and summary.
 *
 * Parsing works one line at a time and derives every layer's per-sample shapes as it
 * goes, so that a shape problem is reported on the line that causes it. The canonical
 * text is rebuilt from the parsed layers (not copied from the input), so two specs that
 * mean the same model have the same fingerprint whatever their comments and spacing. */
#include "kernels/model.h"

#include "common/fnv.h"

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
#define MAX_LINE 256
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

/* Parses one non-empty line into m->layers[m->n_layers]. `flat` says whether the
 * current output is a flat vector (dense may follow) or an image (conv2d, maxpool). */
static int parse_layer(parse_ctx *p, char **tok, int ntok, pst_model *m, int *flat) {
  char b[32];
  const char *kind = tok[0];
  int first = m->n_layers == 0;
  if (first && strcmp(kind, "input") != 0)
    return fail(p, "the model must start with an input layer, got '%s'", shown(kind, b, sizeof b));
  if (m->n_layers == PST_MODEL_MAX_LAYERS)
    return fail(p, "too many layers (at most %d, input included)", PST_MODEL_MAX_LAYERS);

  pst_layer *L = &m->layers[m->n_layers];
  memset(L, 0, sizeof *L);
  L->stride_h = L->stride_w = 1;
  if (!first) {
    const pst_layer *prev = &m->layers[m->n_layers - 1];
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
    L->b_count = (size_t)L->units;
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
    L->b_count = (size_t)L->filters;
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
    L->b_count = (size_t)L->in_c;
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
                   "global_avgpool, flatten, dropout, batchnorm or dense)",
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

/* Appends the canonical line of one layer; -1 when the text buffer is full. */
static int canon_layer(const pst_layer *L, int flat_input, char *text, size_t *len) {
  char line[160];
  int n = 0;
  switch (L->kind) {
    case PST_LAYER_INPUT:
      if (flat_input)
        n = snprintf(line, sizeof line, "input %d\n", L->out_c);
      else
        n = snprintf(line, sizeof line, "input %dx%dx%d\n", L->out_h, L->out_w, L->out_c);
      break;
    case PST_LAYER_DENSE:
      n = snprintf(line, sizeof line, "dense %d %s\n", L->units, act_name(L->act));
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
        n = snprintf(line, sizeof line, "conv2d %d %dx%d stride=%s padding=%s %s\n", L->filters,
                     L->k_h, L->k_w, stride, L->same_padding ? "same" : "valid",
                     act_name(L->act));
      else if (L->kind == PST_LAYER_DEPTHWISE_CONV2D)
        n = snprintf(line, sizeof line, "depthwise_conv2d %dx%d stride=%s padding=%s %s\n",
                     L->k_h, L->k_w, stride, L->same_padding ? "same" : "valid",
                     act_name(L->act));
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
    case PST_LAYER_BATCHNORM: {
      char mom[32], eps[32];
      n = snprintf(line, sizeof line, "batchnorm momentum=%s eps=%s\n",
                   float_text(L->momentum, mom, sizeof mom), float_text(L->eps, eps, sizeof eps));
      break;
    }
  }
  if (n <= 0 || *len + (size_t)n + 1 > PST_MODEL_MAX_TEXT) return -1;
  memcpy(text + *len, line, (size_t)n + 1);
  *len += (size_t)n;
  return 0;
}


int pst_model_parse(const char *text, const char *source, pst_model *m, char *err,
                    size_t errlen) {
  parse_ctx p = {source ? source : "model", 0, err, errlen};
  int line_of[PST_MODEL_MAX_LAYERS];
  int flat = 1, flat_input = 1;
  if (err != NULL && errlen > 0) err[0] = '\0';
  memset(m, 0, sizeof *m);
  if (text == NULL) return fail(&p, "no model text");

  const char *s = text;
  while (*s != '\0') {
    const char *eol = strchr(s, '\n');
    size_t n = eol ? (size_t)(eol - s) : strlen(s);
    p.line++;
    char buf[MAX_LINE];
    if (n >= sizeof buf) return fail(&p, "line too long (at most %d characters)", MAX_LINE - 1);
    memcpy(buf, s, n);
    buf[n] = '\0';
    s = eol ? eol + 1 : s + n;

    char *hash = strchr(buf, '#');
    if (hash != NULL) *hash = '\0';
    char *tok[MAX_TOKENS];
    int ntok = 0;
    for (char *save = NULL, *t = strtok_r(buf, " \t\r\v\f", &save); t != NULL;
         t = strtok_r(NULL, " \t\r\v\f", &save)) {
      if (ntok == MAX_TOKENS) return fail(&p, "too many words on one line");
      tok[ntok++] = t;
    }
    if (ntok == 0) continue;
    if (strcmp(tok[0], "optimizer") == 0) {
      if (parse_optimizer(&p, tok, ntok, m) != 0) return -EINVAL;
      continue;
    }
    int is_first = m->n_layers == 0;
    if (parse_layer(&p, tok, ntok, m, &flat) != 0) return -EINVAL;
    if (is_first) flat_input = flat;
    line_of[m->n_layers - 1] = p.line;
  }

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

  size_t len = 0;
  for (int i = 0; i < m->n_layers; i++) {
    if (canon_layer(&m->layers[i], flat_input, m->text, &len) != 0) {
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
    snprintf(err, errlen, "no model given (want mlp, cnn, cnn2 or a spec file)");
    return -EINVAL;
  }
  FILE *f = fopen(name_or_path, "rb");
  if (f == NULL) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot read model file: %s (presets are mlp, cnn, cnn2)",
             name_or_path, strerror(e));
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

/* The canonical input line is "input N" for a flat vector and "input HxWxC" otherwise. */
static int input_is_flat(const pst_model *m) {
  const char *eol = strchr(m->text, '\n');
  const char *x = strchr(m->text, 'x');
  return x == NULL || (eol != NULL && x > eol);
}

/* Whether layer i's output is a flat vector: dropout and batchnorm keep what they are
 * given. */
static int output_is_flat(const pst_model *m, int i) {
  while (i > 0 && (m->layers[i].kind == PST_LAYER_DROPOUT ||
                   m->layers[i].kind == PST_LAYER_BATCHNORM))
    i--;
  pst_layer_kind k = m->layers[i].kind;
  return k == PST_LAYER_DENSE || k == PST_LAYER_FLATTEN || k == PST_LAYER_GLOBAL_AVGPOOL ||
         (k == PST_LAYER_INPUT && input_is_flat(m));
}

void pst_model_summary(const pst_model *m, FILE *out) {
  /* Indexed by pst_layer_kind. */
  static const char *names[] = {"input_layer", "dense", "conv2d", "max_pooling2d", "flatten",
                                "average_pooling2d", "global_average_pooling2d", "dropout",
                                "depthwise_conv2d", "batch_normalization"};
  static const char *types[] = {"InputLayer", "Dense", "Conv2D", "MaxPooling2D", "Flatten",
                                "AveragePooling2D", "GlobalAveragePooling2D", "Dropout",
                                "DepthwiseConv2D", "BatchNormalization"};
  int seen[sizeof names / sizeof names[0]] = {0};
  size_t state = 0; /* non-trainable parameters */
  /* The name column fits the longest name, "global_average_pooling2d_N
   * (GlobalAveragePooling2D)", as Keras's own table does. */
  char rule[92], dbl[92], b[32];
  memset(rule, '_', 91);
  rule[91] = '\0';
  memset(dbl, '=', 91);
  dbl[91] = '\0';
  fprintf(out, "Model: fingerprint %016llx\n%s\n", (unsigned long long)m->fingerprint, rule);
  fprintf(out, " %-54s %-20s %-8s %s\n%s\n", "Layer (type)", "Output Shape", "Act", "Param #",
          dbl);
  for (int i = 0; i < m->n_layers; i++) {
    const pst_layer *L = &m->layers[i];
    char name[64], shape[64];
    int k = (int)L->kind;
    if (seen[k]++ == 0)
      snprintf(name, sizeof name, "%s (%s)", names[k], types[k]);
    else
      snprintf(name, sizeof name, "%s_%d (%s)", names[k], seen[k] - 1, types[k]);
    int flat = output_is_flat(m, i);
    if (flat)
      snprintf(shape, sizeof shape, "(None, %d)", L->out_c);
    else
      snprintf(shape, sizeof shape, "(None, %d, %d, %d)", L->out_h, L->out_w, L->out_c);
    const char *act = (L->kind == PST_LAYER_DENSE || L->kind == PST_LAYER_CONV2D ||
                       L->kind == PST_LAYER_DEPTHWISE_CONV2D)
                          ? act_name(L->act)
                          : "";
    fprintf(out, " %-54s %-20s %-8s %s\n", name, shape, act,
            commas(L->w_count + L->b_count + L->s_count, b, sizeof b));
    state += L->s_count;
  }
  fprintf(out, "%s\n", dbl);
  fprintf(out, "Total params: %s (%.2f KB)\n", commas(m->n_params, b, sizeof b),
          (double)m->n_params * 4.0 / 1024.0);
  char b2[32];
  fprintf(out, "Trainable params: %s\nNon-trainable params: %s\n%s\n",
          commas(m->n_params - state, b, sizeof b), commas(state, b2, sizeof b2), rule);
}
