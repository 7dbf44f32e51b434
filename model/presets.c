/* The generated presets: Keras's MobileNetV2 and the CIFAR ResNet20, written out as graph
 * model specs (model/model.h) so that they go through the same parser, canonical text and
 * fingerprint as a user's own file.
 *
 * Both are checked against Keras's published parameter counts (model/presets_test.c):
 *   - MobileNetV2 (tf.keras.applications.MobileNetV2, alpha 1.0, 224x224x3, 1000 classes):
 *     3,538,984 parameters, 34,112 of them non-trainable (the batch norms' moving
 *     statistics). Our layers are Keras's one for one, with two differences that change no
 *     count: "same" padding where Keras pads by hand and convolves "valid" (the same output
 *     size and, for even inputs, the same pixels), and, for inputs of 32x32 and smaller,
 *     a first convolution of stride 1 instead of 2 (the CIFAR variant: a stride-2 stem would
 *     leave a 1x1 map before the last blocks).
 *   - ResNet20 v1 (the Keras CIFAR-10 example, depth 20): 274,442 parameters, 1,376 of them
 *     non-trainable. Keras ends it with AveragePooling2D(8) and Flatten on the 8x8 map; a
 *     global average pool is the same for 32x32 inputs and lets other sizes through.
 *
 * Options follow the name after a colon, comma-separated: "mobilenetv2:alpha=0.35",
 * "resnet20:input=32x32x3,classes=100". input= (HxWxC, default 32x32x3), classes=
 * (default 10) and momentum= (the batch norms', default 0.9: PyTorch's, not Keras's 0.999
 * and 0.99; see pst_preset_generate) apply to both; alpha= (the width multiplier, default 1) to
 * MobileNetV2. */
#include "model/presets.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char *buf;
  size_t len, cap;
  int overflow;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(text *t, const char *fmt, ...) {
  if (t->overflow) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= t->cap - t->len) {
    t->overflow = 1;
    return;
  }
  t->len += (size_t)n;
}

typedef struct {
  double alpha;
  double momentum; /* the batch norms' moving-average momentum */
  int h, w, c, classes;
} preset_opts;

/* Parses "key=value,key=value" after the preset's name. */
static int parse_opts(const char *name, const char *s, int takes_alpha, preset_opts *o,
                      char *err, size_t errlen) {
  char copy[128];
  if (strlen(s) >= sizeof copy) {
    snprintf(err, errlen, "%s: options too long", name);
    return -EINVAL;
  }
  strcpy(copy, s);
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(tok, '=');
    char *end = NULL;
    if (eq == NULL) {
      snprintf(err, errlen, "%s: option '%.32s' is not key=value", name, tok);
      return -EINVAL;
    }
    *eq = '\0';
    const char *v = eq + 1;
    if (strcmp(tok, "alpha") == 0 && takes_alpha) {
      o->alpha = strtod(v, &end);
      if (end == v || *end != '\0' || !(o->alpha >= 0.1 && o->alpha <= 2.0)) {
        snprintf(err, errlen, "%s: alpha=%.32s is not a width multiplier in [0.1, 2]", name, v);
        return -EINVAL;
      }
    } else if (strcmp(tok, "classes") == 0) {
      long k = strtol(v, &end, 10);
      if (end == v || *end != '\0' || k < 2 || k > 100000) {
        snprintf(err, errlen, "%s: classes=%.32s is not a number of classes (2..100000)", name, v);
        return -EINVAL;
      }
      o->classes = (int)k;
    } else if (strcmp(tok, "momentum") == 0) {
      o->momentum = strtod(v, &end);
      if (end == v || *end != '\0' || !(o->momentum >= 0.0 && o->momentum < 1.0)) {
        snprintf(err, errlen, "%s: momentum=%.32s is not a batch norm momentum in [0, 1)", name, v);
        return -EINVAL;
      }
    } else if (strcmp(tok, "input") == 0) {
      int h, w, c, used = 0;
      if (sscanf(v, "%dx%dx%d%n", &h, &w, &c, &used) != 3 || v[used] != '\0' || h < 8 ||
          w < 8 || h > 1024 || w > 1024 || c < 1 || c > 4) {
        snprintf(err, errlen, "%s: input=%.32s is not an image shape HxWxC (8..1024 pixels, "
                 "1..4 channels)", name, v);
        return -EINVAL;
      }
      o->h = h;
      o->w = w;
      o->c = c;
    } else {
      snprintf(err, errlen,
               "%s: unknown option '%.32s' (want %sinput=HxWxC, classes=N or momentum=M)", name,
               tok, takes_alpha ? "alpha=A, " : "");
      return -EINVAL;
    }
  }
  return 0;
}

/* Keras's _make_divisible: the nearest multiple of 8, never 10% below v. */
static int divisible8(double v) {
  int n = (int)(v + 4.0) / 8 * 8;
  if (n < 8) n = 8;
  if (n < 0.9 * v) n += 8;
  return n;
}

/* One inverted residual block (Keras's _inverted_res_block); *in_c is updated and `prev`
 * names the block's input and then its output. */
static void mbv2_block(text *t, const preset_opts *o, int id, int filters, int stride,
                       int expansion, int *in_c, char *prev, size_t prevlen) {
  int pointwise = divisible8((int)(filters * o->alpha));
  double bn = o->momentum;
  char p[32];
  if (id == 0) {
    snprintf(p, sizeof p, "expanded_conv");
  } else {
    snprintf(p, sizeof p, "block_%d", id);
    put(t, "conv2d %d 1x1 padding=same bias=no name=%s_expand\n", expansion * *in_c, p);
    put(t, "batchnorm momentum=%g name=%s_expand_BN\nactivation relu6 name=%s_expand_relu\n", bn,
        p, p);
  }
  put(t, "depthwise_conv2d 3x3 stride=%d padding=same bias=no name=%s_depthwise\n", stride, p);
  put(t, "batchnorm momentum=%g name=%s_depthwise_BN\nactivation relu6 name=%s_depthwise_relu\n",
      bn, p, p);
  put(t, "conv2d %d 1x1 padding=same bias=no name=%s_project\n", pointwise, p);
  put(t, "batchnorm momentum=%g name=%s_project_BN\n", bn, p);
  if (*in_c == pointwise && stride == 1) {
    put(t, "add inputs=%s,%s_project_BN name=%s_add\n", prev, p, p);
    snprintf(prev, prevlen, "%s_add", p);
  } else {
    snprintf(prev, prevlen, "%s_project_BN", p);
  }
  *in_c = pointwise;
}

static void mobilenetv2(text *t, const preset_opts *o) {
  /* (filters, stride, expansion) of Keras's 17 blocks. */
  static const int blocks[17][3] = {
      {16, 1, 1},  {24, 2, 6},  {24, 1, 6},  {32, 2, 6},  {32, 1, 6},  {32, 1, 6},
      {64, 2, 6},  {64, 1, 6},  {64, 1, 6},  {64, 1, 6},  {96, 1, 6},  {96, 1, 6},
      {96, 1, 6},  {160, 2, 6}, {160, 1, 6}, {160, 1, 6}, {320, 1, 6}};
  int stem = divisible8(32 * o->alpha);
  int stride = o->h <= 32 && o->w <= 32 ? 1 : 2;
  put(t, "# MobileNetV2 (Keras), alpha %g, %dx%dx%d, %d classes\n", o->alpha, o->h, o->w, o->c,
      o->classes);
  put(t, "input %dx%dx%d name=input_1\n", o->h, o->w, o->c);
  put(t, "conv2d %d 3x3 stride=%d padding=same bias=no name=Conv1\n", stem, stride);
  put(t, "batchnorm momentum=%g name=bn_Conv1\nactivation relu6 name=Conv1_relu\n", o->momentum);
  int in_c = stem;
  char prev[48] = "Conv1_relu";
  for (int i = 0; i < 17; i++)
    mbv2_block(t, o, i, blocks[i][0], blocks[i][1], blocks[i][2], &in_c, prev, sizeof prev);
  int last = o->alpha > 1.0 ? divisible8(1280 * o->alpha) : 1280;
  put(t, "conv2d %d 1x1 padding=same bias=no name=Conv_1\n", last);
  put(t, "batchnorm momentum=%g name=Conv_1_bn\nactivation relu6 name=out_relu\n", o->momentum);
  put(t, "global_avgpool name=global_average_pooling2d\n");
  put(t, "dense %d softmax name=predictions\n", o->classes);
}

static void resnet20(text *t, const preset_opts *o) {
  put(t, "# ResNet20 v1 (the Keras CIFAR-10 example), %dx%dx%d, %d classes\n", o->h, o->w, o->c,
      o->classes);
  put(t, "input %dx%dx%d name=input_1\n", o->h, o->w, o->c);
  put(t, "conv2d 16 3x3 padding=same name=conv_stem\nbatchnorm momentum=%g name=bn_stem\n",
      o->momentum);
  put(t, "activation relu name=relu_stem\n");
  char x[32] = "relu_stem";
  for (int stage = 0; stage < 3; stage++) {
    int filters = 16 << stage;
    for (int b = 0; b < 3; b++) {
      int stride = stage > 0 && b == 0 ? 2 : 1;
      char p[16];
      snprintf(p, sizeof p, "s%db%d", stage + 1, b + 1);
      put(t, "conv2d %d 3x3 stride=%d padding=same inputs=%s name=%s_conv1\n", filters, stride, x, p);
      put(t, "batchnorm momentum=%g name=%s_bn1\nactivation relu name=%s_relu1\n", o->momentum, p,
          p);
      put(t, "conv2d %d 3x3 padding=same name=%s_conv2\nbatchnorm momentum=%g name=%s_bn2\n",
          filters, p, o->momentum, p);
      const char *shortcut = x;
      char sc[32];
      if (stride != 1) {
        /* Keras v1: a 1x1 projection of stride 2, without batch norm. */
        put(t, "conv2d %d 1x1 stride=2 padding=same inputs=%s name=%s_shortcut\n", filters, x, p);
        snprintf(sc, sizeof sc, "%s_shortcut", p);
        shortcut = sc;
      }
      put(t, "add inputs=%s,%s_bn2 relu name=%s_out\n", shortcut, p, p);
      snprintf(x, sizeof x, "%s_out", p);
    }
  }
  put(t, "global_avgpool name=avg_pool\ndense %d softmax name=predictions\n", o->classes);
}

int pst_preset_generate(const char *name, char *buf, size_t buflen, char *err, size_t errlen) {
  if (name == NULL) return 0;
  size_t base = strcspn(name, ":");
  int which = base == 11 && strncmp(name, "mobilenetv2", 11) == 0 ? 1
              : base == 8 && strncmp(name, "resnet20", 8) == 0   ? 2
                                                                 : 0;
  if (which == 0) return 0;
  /* The batch norms' momentum is PyTorch's (0.1 there, as the weight of the new batch), not
   * Keras's (MobileNetV2 sets 0.999, the ResNet example keeps the default 0.99): the moving
   * statistics keep momentum^steps of their starting values 0 and 1, and evaluation uses
   * them. On an H100, 10 epochs of Fashion-MNIST at 32x32 (docs/benchmarks.md): MobileNetV2
   * evaluated at chance for its first epochs with 0.999 and ended at 0.858 against 0.907
   * with 0.9; ResNet20 ended at 0.865 with 0.99 against 0.918. */
  preset_opts o = {.alpha = 1.0, .momentum = 0.9, .h = 32, .w = 32, .c = 3, .classes = 10};
  char shown[16];
  snprintf(shown, sizeof shown, "%.*s", (int)base, name);
  if (name[base] == ':' && parse_opts(shown, name + base + 1, which == 1, &o, err, errlen) < 0)
    return -EINVAL;
  text t = {.buf = buf, .cap = buflen};
  if (buflen > 0) buf[0] = '\0';
  if (which == 1)
    mobilenetv2(&t, &o);
  else
    resnet20(&t, &o);
  if (t.overflow) {
    snprintf(err, errlen, "%s: the generated spec does not fit in %zu bytes", shown, buflen);
    return -ENOSPC;
  }
  return 1;
}
