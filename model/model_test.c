/* Tests of the model spec: presets, parsing, errors, canonical text, init, summary. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "kernels/testing.h"

static void test_presets(void) {
  pst_model m;
  char err[256];
  CHECK(pst_model_load("mlp", &m, err, sizeof err) == 0);
  CHECK(m.n_layers == 4);
  CHECK(m.n_params == 235146);
  CHECK(m.input_size == 784 && m.classes == 10);
  CHECK(m.layers[1].w_offset == 0 && m.layers[1].w_count == 784 * 256);
  CHECK(m.layers[1].b_offset == 784 * 256 && m.layers[1].b_count == 256);
  CHECK(m.layers[2].w_offset == 784 * 256 + 256);
  CHECK(m.layers[3].b_offset + m.layers[3].b_count == m.n_params);
  CHECK(strcmp(m.text, "input 784\ndense 256 relu\ndense 128 relu\ndense 10 softmax\n") == 0);

  CHECK(pst_model_load("cnn", &m, err, sizeof err) == 0);
  CHECK(m.n_layers == 5);
  CHECK(m.n_params == 320 + 54090);
  const pst_layer *c = &m.layers[1];
  CHECK(c->kind == PST_LAYER_CONV2D && c->out_h == 26 && c->out_w == 26 && c->out_c == 32);
  CHECK(c->w_count == 32 * 3 * 3 * 1 && c->b_count == 32 && c->act == PST_ACT_RELU);
  CHECK(m.layers[2].out_h == 13 && m.layers[2].out_c == 32 && m.layers[2].stride_h == 2);
  CHECK(m.layers[3].kind == PST_LAYER_FLATTEN && m.layers[3].out_c == 5408);
  CHECK(m.layers[4].in_c == 5408 && m.layers[4].units == 10);
  CHECK(strcmp(m.text, "input 28x28x1\n"
                       "conv2d 32 3x3 stride=1 padding=valid relu\n"
                       "maxpool 2x2 stride=2 padding=valid\n"
                       "flatten\n"
                       "dense 10 softmax\n") == 0);

  /* cnn2 keeps the borders (same padding) and trains with Adam at 2e-3 by default. */
  CHECK(pst_model_load("cnn2", &m, err, sizeof err) == 0);
  CHECK(m.n_layers == 8);
  CHECK(m.layers[1].out_h == 28 && m.layers[1].same_padding && m.layers[1].pad_top == 1);
  CHECK(m.layers[3].out_h == 14 && m.layers[3].out_c == 64);
  CHECK(m.layers[4].out_h == 7 && m.layers[4].out_w == 7);
  CHECK(m.layers[5].out_c == 3136);
  CHECK(m.n_params == 320 + 18496 + 200768 + 650);
  CHECK(m.n_settings == 2 && m.settings_line == 10);
  CHECK(strcmp(m.settings[0].name, "optimizer") == 0 && strcmp(m.settings[0].value, "adam") == 0);
  CHECK(strcmp(m.settings[1].name, "lr") == 0 && strcmp(m.settings[1].value, "0.002") == 0);
  CHECK(strstr(m.text, "optimizer") == NULL);
  CHECK(pst_model_preset("nope") == NULL);
}

/* The optimizer line: training defaults, outside the canonical text and the fingerprint. */
static void test_optimizer_line(void) {
  pst_model a, b;
  char err[256];
  const char *names[PST_MODEL_MAX_SETTINGS], *values[PST_MODEL_MAX_SETTINGS];
  CHECK(pst_model_parse("optimizer momentum lr=0.05 momentum=0.8 weight-decay=1e-4\n"
                        "input 784\ndense 10 softmax\n", "s", &a, err, sizeof err) == 0);
  CHECK(pst_model_parse("input 784\ndense 10 softmax\n", "s", &b, err, sizeof err) == 0);
  CHECK(a.fingerprint == b.fingerprint && strcmp(a.text, b.text) == 0);
  CHECK(b.n_settings == 0 && pst_model_defaults(&b, NULL, names, values) == 0);
  CHECK(a.settings_line == 1);
  int n = pst_model_defaults(&a, NULL, names, values);
  CHECK(n == 4);
  CHECK(n == 4 && strcmp(names[0], "optimizer") == 0 && strcmp(values[0], "momentum") == 0);
  CHECK(n == 4 && strcmp(names[1], "lr") == 0 && strcmp(values[1], "0.05") == 0);
  CHECK(n == 4 && strcmp(names[2], "momentum") == 0 && strcmp(values[2], "0.8") == 0);
  CHECK(n == 4 && strcmp(names[3], "weight-decay") == 0 && strcmp(values[3], "1e-4") == 0);
  /* The same kind keeps every default; another kind takes none of them. */
  CHECK(pst_model_defaults(&a, "momentum", names, values) == 4);
  CHECK(pst_model_defaults(&a, "adam", names, values) == 0);
  CHECK(pst_model_parse("input 784\ndense 10 softmax\n# Adam, all of it\n"
                        "optimizer adam lr=1e-3 beta1=0.85 beta2=0.99 eps=1e-7 weight_decay=0\n",
                        "s", &a, err, sizeof err) == 0);
  CHECK(a.n_settings == 6 && a.settings_line == 4 && strcmp(a.settings[4].name, "eps") == 0);
}

static void test_canonical(void) {
  pst_model a, b, c;
  char err[256];
  const char *spec =
      "# a comment\n\n"
      "  input   28x28x1   # trailing comment\n"
      "conv2d 8 5x3 padding=same stride=2 linear\r\n"
      "\tmaxpool 3x3 stride=1\n"
      "conv2d 4 1x1\n"
      "flatten\n"
      "dense 20\n"
      "dense 7 softmax";
  CHECK(pst_model_parse(spec, "t.spec", &a, err, sizeof err) == 0);
  CHECK(strcmp(a.text, "input 28x28x1\n"
                       "conv2d 8 5x3 stride=2 padding=same linear\n"
                       "maxpool 3x3 stride=1 padding=valid\n"
                       "conv2d 4 1x1 stride=1 padding=valid linear\n"
                       "flatten\n"
                       "dense 20 linear\n"
                       "dense 7 softmax\n") == 0);
  /* Same padding with stride 2: ceil(28 / 2) = 14; the kernel 5 needs 3 padding rows,
   * one before and two after, as TensorFlow does. */
  CHECK(a.layers[1].out_h == 14 && a.layers[1].out_w == 14 && a.layers[1].pad_top == 1);
  CHECK(a.layers[1].pad_left == 0);
  CHECK(a.layers[2].out_h == 12 && a.layers[3].out_c == 4 && a.layers[4].out_c == 576);
  CHECK(pst_model_parse(a.text, "canon", &b, err, sizeof err) == 0);
  CHECK(b.fingerprint == a.fingerprint && strcmp(a.text, b.text) == 0);
  CHECK(b.n_params == a.n_params);
  CHECK(pst_model_parse("input 784\ndense 10 softmax\n", "x", &c, err, sizeof err) == 0);
  CHECK(c.fingerprint != a.fingerprint);
  /* FNV-1a 64 of the canonical text, so that other languages can reproduce it. */
  CHECK(pst_model_parse("input 2\ndense 2 softmax\n", "x", &c, err, sizeof err) == 0);
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char *s = c.text; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  CHECK(c.fingerprint == h);
  /* A flat input may be flattened (a no-op). */
  CHECK(pst_model_parse("input 10\nflatten\ndense 3 softmax\n", "x", &c, err, sizeof err) == 0);
}

/* A valid two-line model, for cases about the lines after it. */
#define HEAD2 "input 784\ndense 10 softmax\n"

static void test_errors(void) {
  static const struct {
    const char *spec, *want;
  } cases[] = {
      {"", "s:1: the model is empty"},
      {"# only\n\n", "s:2: the model is empty"},
      {"dense 10 softmax\n", "s:1: the model must start with an input layer"},
      {"input 784\n", "s:1: the model needs at least one layer after input"},
      {"input 784\ndense 10 relu\n", "s:2: the last layer must be dense with softmax"},
      {"input 784\ndense 10 softmax\ndense 5 softmax\n", "s:2: softmax is only allowed"},
      {"input 28x28x1\nconv2d 8 3x3\n", "s:2: the last layer must be dense"},
      {"input 784\nblah 3\ndense 10 softmax\n", "s:2: unknown layer 'blah'"},
      {"input 78a\ndense 10 softmax\n", "s:1: bad input shape '78a'"},
      {"input 28x28\ndense 10 softmax\n", "s:1: bad input shape"},
      {"input 784\ndense -3 relu\ndense 10 softmax\n", "s:2: dense needs a number of units"},
      {"input 784\ndense 0\ndense 10 softmax\n", "s:2: dense needs a number of units"},
      {"input 784\ndense 10 relu relu\ndense 10 softmax\n", "s:2: dense: activation given twice"},
      {"input 784\ndense 10 tanh\ndense 10 softmax\n", "s:2: dense: unknown option 'tanh'"},
      {"input 784\ninput 784\n", "s:2: only the first layer may be input"},
      {"input 28x28x1\ndense 10 softmax\n", "s:2: dense needs a flat input but gets 28x28x1"},
      {"input 28x28x1\nconv2d 4 3x3\n\ndense 10 softmax\n", "s:4: dense needs a flat input"},
      {"input 784\nconv2d 4 3x3\n", "s:2: conv2d needs an image input"},
      {"input 784\nmaxpool 2x2\n", "s:2: maxpool needs an image input"},
      {"input 4x4x1\nconv2d 4 5x5\nflatten\ndense 2 softmax\n", "s:2: conv2d 5x5 on a 4x4x1 input leaves no output"},
      {"input 4x4x1\nmaxpool 2x2\nmaxpool 2x2\nmaxpool 2x2\nflatten\ndense 2 softmax\n",
       "s:4: maxpool 2x2 on a 1x1x1 input leaves no output"},
      {"input 8x8x1\nconv2d 4 3\n", "s:2: conv2d needs a kernel like 3x3"},
      {"input 8x8x1\nconv2d 4 3x3 stride=0\n", "s:2: conv2d: bad stride '0'"},
      {"input 8x8x1\nconv2d 4 3x3 padding=full\n", "s:2: conv2d: bad padding 'full'"},
      {"input 8x8x1\nconv2d 4 3x3 stride=1 stride=1\n", "s:2: conv2d: stride given twice"},
      {"input 8x8x1\nconv2d 4 3x3 softmax\n", "s:2: conv2d cannot use softmax"},
      {"input 8x8x1\nmaxpool 2x2 relu\n", "s:2: maxpool: unknown option 'relu'"},
      {"input 8x8x1\nflatten 2\n", "s:2: flatten takes no options"},
      {"input 784\ndense 1 softmax\n", "s:2: the last layer needs at least 2 classes"},
      {"input 99999999\ndense 2 softmax\n", "s:1: bad input shape"},
      {"input 784\ndense 65536\ndense 65536\ndense 2 softmax\n", "s:3: too many parameters"},
      {"input 784\n\x01\x02zz\ndense 2 softmax\n", "s:2: unknown layer '??zz'"},
      /* relu6, avgpool, global_avgpool, dropout. */
      {"input 8x8x1\nconv2d 4 3x3 relu6 relu\n", "s:2: conv2d: activation given twice"},
      {"input 784\ndense 10 relu7\ndense 2 softmax\n", "s:2: dense: unknown option 'relu7'"},
      {"input 784\navgpool 2x2\n", "s:2: avgpool needs an image input"},
      {"input 8x8x1\navgpool 2\n", "s:2: avgpool needs a window like 2x2"},
      {"input 8x8x1\navgpool 2x2 padding=full\n", "s:2: avgpool: bad padding 'full'"},
      {"input 8x8x1\navgpool 2x2 relu\n", "s:2: avgpool: unknown option 'relu'"},
      {"input 2x2x1\navgpool 3x3\n", "s:2: avgpool 3x3 on a 2x2x1 input leaves no output"},
      {"input 784\nglobal_avgpool\n", "s:2: global_avgpool needs an image input"},
      {"input 8x8x1\nglobal_avgpool 2x2\n", "s:2: global_avgpool takes no options"},
      {"input 8x8x1\nglobal_avgpool\nglobal_avgpool\n", "s:3: global_avgpool needs an image input"},
      {"input 784\ndropout\ndense 2 softmax\n", "s:2: dropout needs one rate in [0, 1) like 0.5"},
      {"input 784\ndropout 1\ndense 2 softmax\n", "s:2: dropout needs one rate in [0, 1) like 0.5 (got '1')"},
      {"input 784\ndropout -0.1\ndense 2 softmax\n", "s:2: dropout needs one rate in [0, 1) like 0.5 (got '-0.1')"},
      {"input 784\ndropout 0.5x\ndense 2 softmax\n", "s:2: dropout needs one rate in [0, 1) like 0.5 (got '0.5x')"},
      {"input 784\ndropout nan\ndense 2 softmax\n", "s:2: dropout needs one rate"},
      {"input 784\ndropout 0.5 0.5\ndense 2 softmax\n", "s:2: dropout needs one rate"},
      {"input 784\ndepthwise_conv2d 3x3\n", "s:2: depthwise_conv2d needs an image input"},
      {"input 8x8x2\ndepthwise_conv2d 3\n", "s:2: depthwise_conv2d needs a kernel like 3x3"},
      {"input 8x8x2\ndepthwise_conv2d 4 3x3\n", "s:2: depthwise_conv2d needs a kernel like 3x3"},
      {"input 8x8x2\ndepthwise_conv2d 3x3 softmax\n", "s:2: depthwise_conv2d cannot use softmax"},
      {"input 8x8x2\ndepthwise_conv2d 3x3 stride=0\n", "s:2: depthwise_conv2d: bad stride '0'"},
      {"input 8x8x2\ndepthwise_conv2d 3x3 filters=2\n", "s:2: depthwise_conv2d: unknown option 'filters=2'"},
      {"input 2x2x2\ndepthwise_conv2d 3x3\n", "s:2: depthwise_conv2d 3x3 on a 2x2x2 input leaves no output"},
      {"input 784\ndense 2 softmax\ndropout 0.5\n", "s:2: softmax is only allowed on the last layer"},
      /* The optimizer line, after the two lines of HEAD2. */
      {HEAD2 "optimizer\n", "s:3: optimizer needs a kind: sgd, momentum or adam"},
      {HEAD2 "optimizer rmsprop\n", "s:3: optimizer needs a kind: sgd, momentum or adam (got 'rmsprop')"},
      {HEAD2 "optimizer adam lr\n", "s:3: optimizer: unknown option 'lr'"},
      {HEAD2 "optimizer adam rate=1\n", "s:3: optimizer: unknown option 'rate=1'"},
      {HEAD2 "optimizer adam lr=0\n", "s:3: optimizer: bad lr '0' (want a number > 0)"},
      {HEAD2 "optimizer adam lr=-1\n", "s:3: optimizer: bad lr '-1'"},
      {HEAD2 "optimizer adam lr=\n", "s:3: optimizer: bad lr ''"},
      {HEAD2 "optimizer adam lr=1e-3x\n", "s:3: optimizer: bad lr '1e-3x'"},
      {HEAD2 "optimizer adam lr=nan\n", "s:3: optimizer: bad lr 'nan'"},
      {HEAD2 "optimizer adam lr=inf\n", "s:3: optimizer: bad lr 'inf'"},
      {HEAD2 "optimizer adam beta1=1\n", "s:3: optimizer: bad beta1 '1' (want a number in [0, 1))"},
      {HEAD2 "optimizer adam eps=0\n", "s:3: optimizer: bad eps '0'"},
      {HEAD2 "optimizer sgd weight_decay=-0.1\n", "s:3: optimizer: bad weight_decay '-0.1'"},
      {HEAD2 "optimizer adam lr=0.1 lr=0.2\n", "s:3: optimizer: lr given twice"},
      {HEAD2 "optimizer sgd momentum=0.9\n", "s:3: optimizer: momentum does not apply to sgd"},
      {HEAD2 "optimizer momentum beta2=0.9\n", "s:3: optimizer: beta2 does not apply to momentum"},
      {HEAD2 "optimizer adam lr=0.00000000000000000000000000000001\n", "s:3: optimizer: bad lr"},
      {HEAD2 "optimizer sgd\noptimizer adam\n", "s:4: optimizer given twice (first on line 3)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pst_model m;
    char err[256] = "";
    int rc = pst_model_parse(cases[i].spec, "s", &m, err, sizeof err);
    int ok = rc < 0 && strncmp(err, cases[i].want, strlen(cases[i].want)) == 0 &&
             strchr(err, '\n') == NULL;
    if (!ok) fprintf(stderr, "  case %zu: rc %d, got '%s', want '%s...'\n", i, rc, err, cases[i].want);
    CHECK(ok);
  }

  /* Too many layers: input + PST_MODEL_MAX_LAYERS flattens; one fewer fits. */
  static char spec[16 * PST_MODEL_MAX_LAYERS];
  strcpy(spec, "input 10\n");
  for (int i = 0; i < PST_MODEL_MAX_LAYERS - 2; i++) strcat(spec, "flatten\n");
  strcat(spec, "dense 2 softmax\n");
  static pst_model m;
  char err[256];
  CHECK(pst_model_parse(spec, "s", &m, err, sizeof err) == 0);
  CHECK(m.n_layers == PST_MODEL_MAX_LAYERS);
  strcpy(spec, "input 10\n");
  for (int i = 0; i < PST_MODEL_MAX_LAYERS; i++) strcat(spec, "flatten\n");
  strcat(spec, "dense 2 softmax\n");
  CHECK(pst_model_parse(spec, "s", &m, err, sizeof err) == -EINVAL);
  char want[64];
  snprintf(want, sizeof want, "s:%d: too many layers", PST_MODEL_MAX_LAYERS + 1);
  CHECK(strncmp(err, want, strlen(want)) == 0);

  /* An over-long line. */
  char longline[1100];
  memset(longline, 'a', sizeof longline - 1);
  longline[sizeof longline - 1] = '\0';
  CHECK(pst_model_parse(longline, "s", &m, err, sizeof err) == -EINVAL);
  CHECK(strncmp(err, "s:1: line too long", 18) == 0);
}

static void test_load_file(void) {
  char path[] = "/tmp/pst_model_testXXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  const char *spec = "input 4x4x2\nconv2d 3 3x3 padding=same relu\nflatten\ndense 2 softmax\n";
  CHECK(write(fd, spec, strlen(spec)) == (ssize_t)strlen(spec));
  close(fd);
  pst_model m;
  char err[256];
  CHECK(pst_model_load(path, &m, err, sizeof err) == 0);
  CHECK(m.n_params == 3 * 9 * 2 + 3 + 48 * 2 + 2);
  unlink(path);
  CHECK(pst_model_load(path, &m, err, sizeof err) < 0);
  CHECK(strstr(err, path) != NULL && strstr(err, "cannot read") != NULL);

  strcpy(path, "/tmp/pst_model_testXXXXXX");
  fd = mkstemp(path);
  CHECK(write(fd, "input 4\nnope\n", 13) == 13);
  close(fd);
  CHECK(pst_model_load(path, &m, err, sizeof err) == -EINVAL);
  char want[300];
  snprintf(want, sizeof want, "%s:2: unknown layer 'nope'", path);
  CHECK(strncmp(err, want, strlen(want)) == 0);
  unlink(path);
}

static void test_init(void) {
  pst_model m;
  char err[256];
  CHECK(pst_model_load("mlp", &m, err, sizeof err) == 0);
  float *a = malloc(m.n_params * sizeof(float)), *b = malloc(m.n_params * sizeof(float));
  pst_model_init_params(&m, 42, a);
  pst_model_init_params(&m, 42, b);
  CHECK(memcmp(a, b, m.n_params * sizeof(float)) == 0);
  pst_model_init_params(&m, 43, b);
  CHECK(memcmp(a, b, m.n_params * sizeof(float)) != 0);

  /* He-uniform for the ReLU layers, Glorot-uniform for the softmax one, zero biases. */
  double lim1 = sqrt(6.0 / 784), lim3 = sqrt(6.0 / (128 + 10));
  double max1 = 0, max3 = 0, sum1 = 0;
  int zero_bias = 1;
  for (size_t i = 0; i < m.layers[1].w_count; i++) {
    max1 = fmax(max1, fabs(a[i]));
    sum1 += a[i];
  }
  for (size_t i = 0; i < m.layers[3].w_count; i++) max3 = fmax(max3, fabs(a[m.layers[3].w_offset + i]));
  for (int l = 1; l < m.n_layers; l++)
    for (size_t i = 0; i < m.layers[l].b_count; i++) zero_bias &= a[m.layers[l].b_offset + i] == 0.0f;
  CHECK(max1 <= lim1 && max1 > 0.99 * lim1);
  CHECK(max3 <= lim3 && max3 > 0.95 * lim3);
  CHECK(fabs(sum1 / m.layers[1].w_count) < 0.01 * lim1);
  CHECK(zero_bias);

  /* The exact values are part of the contract (every machine starts from the same
   * weights): a hash of the bytes pins them. */
  uint64_t h = 0xcbf29ce484222325ull;
  const unsigned char *bytes = (const unsigned char *)a;
  for (size_t i = 0; i < m.n_params * sizeof(float); i++) h = (h ^ bytes[i]) * 0x100000001b3ull;
  printf("init hash mlp seed 42: %016llx\n", (unsigned long long)h);
  CHECK(h == 0xbbbd5c6f437eed03ull);
  free(a);
  free(b);
}

/* relu6, avgpool, global_avgpool and dropout: shapes, no parameters, canonical text,
 * summary rows. */
static void test_new_layers(void) {
  pst_model m, c;
  char err[256];
  const char *spec =
      "input 28x28x1\n"
      "conv2d 8 3x3 relu6 padding=same\n"
      "avgpool 2x2\n"
      "avgpool 3x3 stride=2 padding=same\n"
      "dropout 0.25\n"
      "global_avgpool\n"
      "dropout 0.1\n"
      "dense 16 relu6\n"
      "dense 10 softmax\n";
  CHECK(pst_model_parse(spec, "s", &m, err, sizeof err) == 0);
  if (err[0]) fprintf(stderr, "%s\n", err);
  CHECK(m.n_layers == 9);
  CHECK(m.layers[1].act == PST_ACT_RELU6 && m.layers[1].out_h == 28);
  CHECK(m.layers[2].kind == PST_LAYER_AVGPOOL && m.layers[2].out_h == 14 &&
        m.layers[2].out_c == 8);
  /* Same padding, stride 2 on 14: ceil(14 / 2) = 7, padding 2 split 0 before, 1... as TF. */
  CHECK(m.layers[3].out_h == 7 && m.layers[3].out_w == 7 && m.layers[3].pad_top == 0);
  CHECK(m.layers[4].kind == PST_LAYER_DROPOUT && m.layers[4].rate == 0.25f &&
        m.layers[4].out_h == 7 && m.layers[4].out_c == 8);
  CHECK(m.layers[5].kind == PST_LAYER_GLOBAL_AVGPOOL && m.layers[5].out_h == 1 &&
        m.layers[5].out_w == 1 && m.layers[5].out_c == 8 && m.layers[5].k_h == 7);
  CHECK(m.layers[7].act == PST_ACT_RELU6 && m.layers[7].in_c == 8);
  /* Only conv2d and the two dense layers have parameters. */
  CHECK(m.n_params == (8 * 9 + 8) + (8 * 16 + 16) + (16 * 10 + 10));
  for (int i = 2; i <= 6; i++) CHECK(m.layers[i].w_count + m.layers[i].b_count == 0);
  CHECK(strstr(m.text, "conv2d 8 3x3 stride=1 padding=same relu6\n") != NULL);
  CHECK(strstr(m.text, "avgpool 2x2 stride=2 padding=valid\n") != NULL);
  CHECK(strstr(m.text, "avgpool 3x3 stride=2 padding=same\n") != NULL);
  CHECK(strstr(m.text, "dropout 0.25\nglobal_avgpool\ndropout 0.100000001\n") != NULL);
  CHECK(strstr(m.text, "dense 16 relu6\n") != NULL);
  CHECK(pst_model_parse(m.text, "canon", &c, err, sizeof err) == 0);
  CHECK(c.fingerprint == m.fingerprint && strcmp(c.text, m.text) == 0);
  CHECK(c.layers[6].rate == m.layers[6].rate);

  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  pst_model_summary(&m, f);
  fclose(f);
  fputs(buf, stdout);
  CHECK(strstr(buf, "average_pooling2d (AveragePooling2D)") != NULL);
  CHECK(strstr(buf, "average_pooling2d_1 (AveragePooling2D)") != NULL);
  CHECK(strstr(buf, "global_average_pooling2d (GlobalAveragePooling2D)      (None, 8) ") != NULL);
  CHECK(strstr(buf, "dropout (Dropout)") != NULL && strstr(buf, "dropout_1 (Dropout)") != NULL);
  CHECK(strstr(buf, "relu6") != NULL);
  CHECK(strstr(buf, "(None, 7, 7, 8)") != NULL);
  CHECK(strstr(buf, "Total params: 394") != NULL);
  free(buf);
}

/* The activation layer and bias=no: shapes, counts, the canonical text (bias=no stays in
 * it, nothing is added where a bias is kept) and each error. */
static void test_activation_and_bias(void) {
  pst_model m, c;
  char err[256];
  const char *spec =
      "input 8x8x3\n"
      "conv2d 8 3x3 padding=same bias=no\n"
      "activation relu6\n"
      "depthwise_conv2d 3x3 padding=same bias=no\n"
      "activation relu\n"
      "global_avgpool\n"
      "dense 4 bias=yes softmax\n";
  CHECK(pst_model_parse(spec, "s", &m, err, sizeof err) == 0);
  CHECK(m.layers[1].b_count == 0 && m.layers[1].w_count == 8 * 9 * 3);
  CHECK(m.layers[2].kind == PST_LAYER_ACTIVATION && m.layers[2].act == PST_ACT_RELU6 &&
        m.layers[2].out_h == 8 && m.layers[2].out_c == 8 && !m.layers[2].flat);
  CHECK(m.layers[3].b_count == 0 && m.layers[4].act == PST_ACT_RELU);
  CHECK(m.layers[6].b_count == 4 && m.n_params == 216 + 72 + 32 + 4);
  CHECK(strstr(m.text, "conv2d 8 3x3 stride=1 padding=same linear bias=no\n") != NULL);
  CHECK(strstr(m.text, "activation relu6\nactivation") == NULL &&
        strstr(m.text, "activation relu6\n") != NULL);
  CHECK(strstr(m.text, "dense 4 softmax\n") != NULL); /* bias=yes is the default */
  CHECK(pst_model_parse(m.text, "c", &c, err, sizeof err) == 0 &&
        c.fingerprint == m.fingerprint && c.n_params == m.n_params);
  static const struct {
    const char *spec, *want;
  } cases[] = {
      {"input 4\nactivation\ndense 2 softmax\n", "s:2: activation needs relu or relu6"},
      {"input 4\nactivation softmax\ndense 2 softmax\n",
       "s:2: activation needs relu or relu6 (got 'softmax')"},
      {"input 4\nactivation relu relu6\ndense 2 softmax\n", "s:2: activation needs relu"},
      {"input 4\ndense 3 bias=maybe\ndense 2 softmax\n", "s:2: dense: bad bias 'maybe'"},
      {"input 4\ndense 3 bias=no bias=no\ndense 2 softmax\n", "s:2: dense: bias given twice"},
      {"input 4x4x1\nmaxpool 2x2 bias=no\nflatten\ndense 2 softmax\n",
       "s:2: maxpool: unknown option 'bias=no'"},
      {"input 4 name=x\ndense 4 name=y\nadd inputs=x,y bias=no\ndense 2 softmax\n",
       "s:3: add has no bias"},
      /* A name= that is another layer's automatic name, either way round. */
      {"input 4\ndense 4 name=dense_1\ndense 2 softmax\n",
       "s:2: name 'dense_1' is also the automatic name of the layer on line 3; pick another"},
      {"input 4\ndense 4\ndense 3 name=dense\ndense 2 softmax\n",
       "s:3: name 'dense' is also the automatic name of the layer on line 2"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    err[0] = '\0';
    int rc = pst_model_parse(cases[i].spec, "s", &m, err, sizeof err);
    if (rc == 0 || strncmp(err, cases[i].want, strlen(cases[i].want)) != 0)
      fprintf(stderr, "case %zu: got '%s', want '%s'\n", i, err, cases[i].want);
    CHECK(rc != 0 && strncmp(err, cases[i].want, strlen(cases[i].want)) == 0);
  }
}

static void test_layer_names(void) {
  pst_model m;
  char err[256], b[64];
  CHECK(pst_model_parse("input 4 name=x\ndense 4 relu\ndense 4 relu name=mid\nbatchnorm\n"
                        "dense 2 softmax\n", "s", &m, err, sizeof err) == 0);
  static const char *const given[] = {"x", "dense", "mid", "batch_normalization", "dense_2"};
  static const char *const autos[] = {"input_layer", "dense", "dense_1", "batch_normalization",
                                      "dense_2"};
  for (int i = 0; i < m.n_layers; i++) {
    pst_model_layer_name(&m, i, 1, b, sizeof b);
    CHECK(strcmp(b, given[i]) == 0);
    pst_model_layer_name(&m, i, 0, b, sizeof b);
    CHECK(strcmp(b, autos[i]) == 0);
  }
}

static void test_summary(void) {
  pst_model m, c;
  char err[256];
  char *buf = NULL;
  size_t len = 0;
  CHECK(pst_model_load("cnn", &m, err, sizeof err) == 0);
  FILE *f = open_memstream(&buf, &len);
  pst_model_summary(&m, f);
  fclose(f);
  fputs(buf, stdout);
  CHECK(strstr(buf, "conv2d (Conv2D)") != NULL);
  CHECK(strstr(buf, "(None, 26, 26, 32)") != NULL);
  CHECK(strstr(buf, "max_pooling2d (MaxPooling2D)") != NULL);
  CHECK(strstr(buf, "(None, 5408)") != NULL);
  CHECK(strstr(buf, "54,090") != NULL);
  CHECK(strstr(buf, "Total params: 54,410") != NULL);
  free(buf);
  buf = NULL;
  CHECK(pst_model_load("mlp", &m, err, sizeof err) == 0);
  f = open_memstream(&buf, &len);
  pst_model_summary(&m, f);
  fclose(f);
  CHECK(strstr(buf, "Total params: 235,146") != NULL);
  CHECK(strstr(buf, "dense_2 (Dense)") != NULL);
  CHECK(strstr(buf, "(None, 784)") != NULL);
  free(buf);

  /* depthwise_conv2d: KH*KW*C + C parameters, channels kept, its own summary row. */
  CHECK(pst_model_parse("input 10x10x6\ndepthwise_conv2d 3x3 relu6 stride=2 padding=same\n"
                        "depthwise_conv2d 3x2\nflatten\ndense 2 softmax\n",
                        "s", &m, err, sizeof err) == 0);
  const pst_layer *d = &m.layers[1];
  CHECK(d->kind == PST_LAYER_DEPTHWISE_CONV2D && d->out_h == 5 && d->out_w == 5 &&
        d->out_c == 6 && d->act == PST_ACT_RELU6);
  CHECK(d->w_count == 3 * 3 * 6 && d->b_count == 6 && d->w_offset == 0 && d->b_offset == 54);
  CHECK(m.layers[2].out_h == 3 && m.layers[2].out_w == 4 && m.layers[2].w_count == 36);
  CHECK(strstr(m.text, "depthwise_conv2d 3x3 stride=2 padding=same relu6\n"
                       "depthwise_conv2d 3x2 stride=1 padding=valid linear\n") != NULL);
  CHECK(pst_model_parse(m.text, "canon", &c, err, sizeof err) == 0 &&
        c.fingerprint == m.fingerprint);
  buf = NULL;
  f = open_memstream(&buf, &len);
  pst_model_summary(&m, f);
  fclose(f);
  CHECK(strstr(buf, "depthwise_conv2d (DepthwiseConv2D)") != NULL);
  CHECK(strstr(buf, "depthwise_conv2d_1 (DepthwiseConv2D)") != NULL);
  CHECK(strstr(buf, "Total params: " /* 60 + 42 + (3*4*6)*2 + 2 */ "248") != NULL);
  /* He-uniform over the true fan-in KH*KW: limit sqrt(6/9) for the relu6 layer. */
  float *params = malloc(m.n_params * sizeof(float));
  pst_model_init_params(&m, 3, params);
  float mx = 0;
  for (size_t i = 0; i < d->w_count; i++) mx = fabsf(params[i]) > mx ? fabsf(params[i]) : mx;
  CHECK(mx > 0.4f && mx <= 0.8165f);
  free(params);
  free(buf);
}

/* Sequential specs keep the canonical text and fingerprint they had before graphs: these
 * fingerprints were computed by the parser before name= and inputs= existed (checkpoints
 * and running clusters match on them). */
static void test_sequential_unchanged(void) {
  static const struct {
    const char *spec;
    uint64_t fp;
  } cases[] = {
      {"mlp", 0xc2fb6c9555c32388ull},
      {"cnn", 0xe5e1057fc4d7a89aull},
      {"cnn2", 0x57bf1158ce656798ull},
      {"input 28x28x1\nconv2d 8 3x3 stride=2 padding=same relu6\n"
       "depthwise_conv2d 3x3 padding=same relu\navgpool 2x2 stride=1\n"
       "maxpool 3x2 stride=2x1 padding=same\ndropout 0.25\nconv2d 4 1x1\nglobal_avgpool\n"
       "dense 16 relu6\ndropout 0.5\ndense 10 softmax\noptimizer adam lr=0.001\n",
       0xf2db190cb66cdea4ull},
      {"input 784\nflatten\ndense 32 linear\ndense 3 softmax\n", 0xb39f8310ecf9c89full},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    static pst_model m;
    char err[256];
    const char *text = pst_model_preset(cases[i].spec);
    CHECK(pst_model_parse(text ? text : cases[i].spec, "s", &m, err, sizeof err) == 0);
    if (m.fingerprint != cases[i].fp)
      fprintf(stderr, "  case %zu: fingerprint %016llx, want %016llx\n", i,
              (unsigned long long)m.fingerprint, (unsigned long long)cases[i].fp);
    CHECK(m.fingerprint == cases[i].fp);
    CHECK(!m.graph && strstr(m.text, "name=") == NULL && strstr(m.text, "inputs=") == NULL);
    for (int l = 1; l < m.n_layers; l++)
      CHECK(m.layers[l].n_inputs == 1 && m.layers[l].inputs[0] == l - 1);
  }
  /* inputs= naming the line above is the sequential default, and says nothing more. */
  static pst_model a, b;
  char err[256];
  CHECK(pst_model_parse("input 784 name=in\ndense 32 relu inputs=in name=h\n"
                        "dense 10 softmax inputs=h\n", "s", &a, err, sizeof err) == 0);
  CHECK(!a.graph);
  CHECK(strcmp(a.text, "input 784 name=in\ndense 32 relu name=h\ndense 10 softmax\n") == 0);
  CHECK(pst_model_parse(a.text, "s", &b, err, sizeof err) == 0 && b.fingerprint == a.fingerprint);
}

/* Parses spec, checks that its canonical text is `canon` and parses again to itself. */
static void parse_graph(const char *spec, const char *canon, pst_model *m) {
  static pst_model again;
  char err[256] = "";
  int rc = pst_model_parse(spec, "g", m, err, sizeof err);
  if (rc != 0) fprintf(stderr, "  %s\n", err);
  CHECK(rc == 0);
  if (strcmp(m->text, canon) != 0) fprintf(stderr, "  canonical text:\n%s", m->text);
  CHECK(strcmp(m->text, canon) == 0);
  CHECK(pst_model_parse(m->text, "g", &again, err, sizeof err) == 0);
  CHECK(again.fingerprint == m->fingerprint && again.n_params == m->n_params &&
        strcmp(again.text, m->text) == 0);
}

static void test_graph(void) {
  static pst_model m;
  /* A residual block: the block's input is added to its output. */
  parse_graph("# residual\n"
              "input 8x8x3\n"
              "conv2d 4 3x3 padding=same relu name=stem\n"
              "conv2d 4 3x3 padding=same relu   # takes stem\n"
              "conv2d 4 3x3 padding=same name=f\n"
              "add relu inputs=stem,f name=sum\n"
              "global_avgpool\n"
              "dense 3 softmax\n",
              "input 8x8x3\n"
              "conv2d 4 3x3 stride=1 padding=same relu name=stem\n"
              "conv2d 4 3x3 stride=1 padding=same relu\n"
              "conv2d 4 3x3 stride=1 padding=same linear name=f\n"
              "add relu name=sum inputs=stem,f\n"
              "global_avgpool\n"
              "dense 3 softmax\n",
              &m);
  CHECK(m.graph && m.n_layers == 7);
  const pst_layer *add = &m.layers[4];
  CHECK(add->kind == PST_LAYER_ADD && add->act == PST_ACT_RELU && add->n_inputs == 2);
  CHECK(add->inputs[0] == 1 && add->inputs[1] == 3 && strcmp(add->name, "sum") == 0);
  CHECK(add->out_h == 8 && add->out_w == 8 && add->out_c == 4 && !add->flat);
  CHECK(add->w_count == 0 && add->b_count == 0);
  CHECK(m.layers[2].inputs[0] == 1 && m.layers[5].inputs[0] == 4);
  /* Parameters in spec order, as for a stack. */
  CHECK(m.layers[1].w_offset == 0 && m.layers[2].w_offset == 3 * 9 * 4 + 4);
  CHECK(m.n_params == (3 * 9 * 4 + 4) + 2 * (4 * 9 * 4 + 4) + 4 * 3 + 3);

  /* Two towers from the same input, joined along the channels (images), then two flat
   * towers joined (vectors). */
  parse_graph("input 8x8x2 name=img\n"
              "conv2d 3 3x3 padding=same relu name=left\n"
              "conv2d 5 1x1 relu6 inputs=img\n"
              "maxpool 2x2 stride=1 padding=same name=right\n"
              "concatenate inputs=left,right,img name=cat\n"
              "flatten name=flat\n"
              "dense 6 relu name=a\n"
              "dense 2 relu inputs=flat name=b\n"
              "concatenate inputs=a,b\n"
              "dropout 0.5\n"
              "dense 4 softmax\n",
              "input 8x8x2 name=img\n"
              "conv2d 3 3x3 stride=1 padding=same relu name=left\n"
              "conv2d 5 1x1 stride=1 padding=valid relu6 inputs=img\n"
              "maxpool 2x2 stride=1 padding=same name=right\n"
              "concatenate name=cat inputs=left,right,img\n"
              "flatten name=flat\n"
              "dense 6 relu name=a\n"
              "dense 2 relu name=b inputs=flat\n"
              "concatenate inputs=a,b\n"
              "dropout 0.5\n"
              "dense 4 softmax\n",
              &m);
  const pst_layer *cat = &m.layers[4];
  CHECK(cat->kind == PST_LAYER_CONCATENATE && cat->n_inputs == 3 && cat->out_c == 3 + 5 + 2);
  CHECK(cat->out_h == 8 && cat->out_w == 8 && cat->inputs[2] == 0);
  CHECK(m.layers[5].out_c == 8 * 8 * 10 && m.layers[7].in_c == 640);
  CHECK(m.layers[8].flat && m.layers[8].out_c == 8 && m.layers[10].in_c == 8);

  /* The summary shows the names and a "Connected to" column. */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  pst_model_summary(&m, f);
  fclose(f);
  printf("%s", buf);
  CHECK(strstr(buf, "Connected to") != NULL);
  CHECK(strstr(buf, " img (InputLayer) ") != NULL);
  CHECK(strstr(buf, " cat (Concatenate) ") != NULL);
  CHECK(strstr(buf, " concatenate_1 (Concatenate) ") != NULL);
  CHECK(strstr(buf, "(None, 8, 8, 10)") != NULL);
  /* cat's three inputs, one a row, and the unnamed conv2d shown by its Keras name. */
  const char *row = strstr(buf, " cat (Concatenate) ");
  CHECK(row != NULL && strstr(row, "left\n") != NULL);
  CHECK(row != NULL && strstr(row, "conv2d_1") == NULL);
  CHECK(strstr(buf, "right\n") != NULL && strstr(buf, " conv2d_1 (Conv2D) ") != NULL);
  free(buf);

  /* add x,x is 2x (a tensor taken twice), and an add of flat vectors. */
  parse_graph("input 5 name=x\nadd inputs=x,x\ndense 2 softmax\n",
              "input 5 name=x\nadd linear inputs=x,x\ndense 2 softmax\n", &m);
  CHECK(m.layers[1].flat && m.layers[1].out_c == 5);
}

static void test_graph_errors(void) {
  static const struct {
    const char *spec, *want;
  } cases[] = {
      {"input 4 name=x\ndense 4 inputs=nope\ndense 2 softmax\n",
       "s:2: inputs: unknown layer 'nope'"},
      {"input 4 name=x\ndense 4 inputs=later\ndense 3 name=later inputs=x\ndense 2 softmax\n",
       "s:2: inputs: 'later' is defined below, on line 3 (a layer's inputs must be above it)"},
      {"input 4 name=x\ndense 4 name=a inputs=c\n\ndense 4 name=b\ndense 4 name=c\n"
       "dense 2 softmax\n",
       "s:2: inputs: 'c' (line 5) is computed from this layer (a cycle)"},
      {"input 4 name=x\ndense 4 name=a inputs=b\nadd inputs=x,a name=b\ndense 2 softmax\n",
       "s:2: inputs: 'b' (line 3) is computed from this layer (a cycle)"},
      {"input 4\ndense 4 name=a inputs=a\ndense 2 softmax\n",
       "s:2: inputs: 'a' is this layer itself (a cycle)"},
      {"input 8x8x1 name=x\nconv2d 4 3x3 name=c\nadd inputs=x,c\nflatten\ndense 2 softmax\n",
       "s:3: add: input 'c' is 6x6x4 but 'x' is 8x8x1 (add needs equal shapes)"},
      {"input 8x8x1 name=x\nconv2d 4 3x3 padding=same name=c\nadd inputs=x,c\n",
       "s:3: add: input 'c' is 8x8x4 but 'x' is 8x8x1"},
      {"input 8x8x1 name=x\nconv2d 4 3x3 name=c\nconcatenate inputs=x,c\n",
       "s:3: concatenate: input 'c' is 6x6x4 but 'x' is 8x8x1 (concatenate needs images of the "
       "same height and width)"},
      {"input 4x4x1 name=x\nflatten name=f\nconcatenate inputs=x,f\n",
       "s:3: concatenate: input 'f' is 16 but 'x' is 4x4x1"},
      {"input 16 name=x\ndense 4 name=d\nadd inputs=x,d\ndense 2 softmax\n",
       "s:3: add: input 'd' is 4 but 'x' is 16 (add needs equal shapes)"},
      {"input 4 name=x\nadd\ndense 2 softmax\n",
       "s:2: add needs inputs= naming two or more layers, like inputs=a,b"},
      {"input 4 name=x\nconcatenate inputs=x\ndense 2 softmax\n",
       "s:2: concatenate needs inputs= naming two or more layers"},
      {"input 4 name=x\ndense 4 name=a\ndense 4 inputs=x,a\ndense 2 softmax\n",
       "s:3: dense takes one input (inputs= names 2)"},
      {"input 4 name=x\ndense 4 name=x\ndense 2 softmax\n", "s:2: name 'x' already used on line 1"},
      {"input 4 name=1x\ndense 2 softmax\n", "s:1: bad name '1x' (letters, digits and _"},
      {"input 4 name=a-b\ndense 2 softmax\n", "s:1: bad name 'a-b'"},
      {"input 4 name=\ndense 2 softmax\n", "s:1: bad name ''"},
      {"input 4 name=abcdefghijklmnopqrstuvwxyz012345\ndense 2 softmax\n", "s:1: bad name"},
      {"input 4 name=a name=b\ndense 2 softmax\n", "s:1: name given twice"},
      {"input 4 name=a\ndense 2 softmax inputs=a inputs=a\n", "s:2: inputs given twice"},
      {"input 4 inputs=a\ndense 2 softmax\n", "s:1: input takes no inputs="},
      {"input 4 name=a\ndense 2 softmax inputs=\n", "s:2: inputs= needs layer names"},
      {"input 4 name=a\ndense 2 softmax inputs=a,\n", "s:2: inputs: an empty name"},
      {"input 4 name=a\nadd inputs=a,a,a,a,a,a,a,a,a\ndense 2 softmax\n",
       "s:2: inputs: too many (at most 8)"},
      {"input 4 name=x\nadd inputs=x,x softmax\ndense 2 softmax\n", "s:2: add cannot use softmax"},
      {"input 4 name=x\nconcatenate inputs=x,x relu\ndense 2 softmax\n",
       "s:2: concatenate: unknown option 'relu'"},
      {"input 4 name=x\nadd inputs=x,x stride=2\ndense 2 softmax\n",
       "s:2: add: unknown option 'stride=2'"},
      /* A layer nothing takes: the dense on line 2 leads nowhere. */
      {"input 4 name=x\ndense 8 relu\ndense 2 softmax inputs=x\n",
       "s:2: no layer takes this layer's output (only the last layer may be the model's output)"},
      {"input 4 name=x\ndense 8 relu name=a\nadd inputs=a,a\ndense 2 softmax inputs=a\n",
       "s:3: no layer takes this layer's output"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    static pst_model m;
    char err[256] = "";
    int rc = pst_model_parse(cases[i].spec, "s", &m, err, sizeof err);
    int ok = rc == -EINVAL && strncmp(err, cases[i].want, strlen(cases[i].want)) == 0 &&
             strchr(err, '\n') == NULL;
    if (!ok) fprintf(stderr, "  graph case %zu: rc %d, got '%s', want '%s...'\n", i, rc, err,
                     cases[i].want);
    CHECK(ok);
  }
}

/* The caps hold for a big graph: PST_MODEL_MAX_LAYERS layers of long names and 8-input
 * concatenations either fit the canonical text or get a one-line error, and a canonical
 * line of the longest kind parses again. */
static void test_graph_limits(void) {
  static pst_model m, again;
  static char spec[64 * 1024];
  char err[256];
  /* The longest canonical line: 8 inputs of 31-character names. */
  size_t n = (size_t)snprintf(spec, sizeof spec, "input 4 name=%.31s\n",
                              "n0_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
  for (int i = 1; i < 8; i++)
    n += (size_t)snprintf(spec + n, sizeof spec - n, "dense 4 inputs=n0_aaaaaaaaaaaaaaaaaaaaaaaaaaaa name=n%d_aaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", i);
  n += (size_t)snprintf(spec + n, sizeof spec - n, "concatenate name=cat_bbbbbbbbbbbbbbbbbbbbbbbbbbb inputs=");
  for (int i = 0; i < 8; i++)
    n += (size_t)snprintf(spec + n, sizeof spec - n, "%sn%d_aaaaaaaaaaaaaaaaaaaaaaaaaaaa", i ? "," : "",
                          i);
  snprintf(spec + n, sizeof spec - n, "\ndense 2 softmax\n");
  int rc = pst_model_parse(spec, "s", &m, err, sizeof err);
  if (rc != 0) fprintf(stderr, "  %s\n", err);
  CHECK(rc == 0);
  CHECK(m.layers[8].out_c == 32 && m.layers[8].n_inputs == 8);
  CHECK(pst_model_parse(m.text, "s", &again, err, sizeof err) == 0 &&
        strcmp(again.text, m.text) == 0);

  /* A residual tower of PST_MODEL_MAX_LAYERS layers with 31-character names: it must fit
   * the canonical text (the cap is sized for it). */
  n = (size_t)snprintf(spec, sizeof spec, "input 4x4x2 name=l000_aaaaaaaaaaaaaaaaaaaaaaaaaa\n");
  int layers = 1;
  while (layers + 3 <= PST_MODEL_MAX_LAYERS - 2) {
    n += (size_t)snprintf(spec + n, sizeof spec - n,
                          "conv2d 2 3x3 padding=same relu6 name=l%03d_aaaaaaaaaaaaaaaaaaaaaaaaaa\n"
                          "depthwise_conv2d 3x3 padding=same name=l%03d_aaaaaaaaaaaaaaaaaaaaaaaaaa\n"
                          "add relu inputs=l%03d_aaaaaaaaaaaaaaaaaaaaaaaaaa,l%03d_aaaaaaaaaaaaaaaaaaaaaaaaaa name=l%03d_aaaaaaaaaaaaaaaaaaaaaaaaaa\n",
                          layers, layers + 1, layers - 1, layers + 1, layers + 2);
    layers += 3;
  }
  snprintf(spec + n, sizeof spec - n, "global_avgpool\ndense 2 softmax\n");
  rc = pst_model_parse(spec, "s", &m, err, sizeof err);
  if (rc != 0) fprintf(stderr, "  %s\n", err);
  CHECK(rc == 0);
  printf("a %d-layer residual tower: canonical text of %zu bytes (cap %d)\n", m.n_layers,
         strlen(m.text), PST_MODEL_MAX_TEXT);
  CHECK(m.n_layers > PST_MODEL_MAX_LAYERS - 5 && m.graph);
  CHECK(pst_model_parse(m.text, "s", &again, err, sizeof err) == 0 &&
        again.fingerprint == m.fingerprint);
}

/* batchnorm: options, canonical text, layout (gamma, beta, then the state), state ranges,
 * initialisation, summary, errors; models without it keep their text and fingerprint. */
static void test_batchnorm(void) {
  pst_model m, c, plain;
  char err[256];
  CHECK(pst_model_parse("input 6x6x3\nconv2d 4 3x3\nbatchnorm\nflatten\ndense 8 relu\n"
                        "batchnorm momentum=0.9 eps=0.01\ndense 2 softmax\n",
                        "s", &m, err, sizeof err) == 0);
  const pst_layer *a = &m.layers[2], *b = &m.layers[5];
  CHECK(a->kind == PST_LAYER_BATCHNORM && a->out_h == 4 && a->out_w == 4 && a->out_c == 4);
  CHECK(a->momentum == PST_BATCHNORM_MOMENTUM && a->eps == PST_BATCHNORM_EPS);
  CHECK(b->kind == PST_LAYER_BATCHNORM && b->out_c == 8 && b->momentum == 0.9f && b->eps == 0.01f);
  /* conv 4*27+4 = 112, then gamma, beta, moving mean, moving variance of 4 each. */
  CHECK(a->w_offset == 112 && a->w_count == 4 && a->b_offset == 116 && a->b_count == 4 &&
        a->s_offset == 120 && a->s_count == 8);
  CHECK(m.layers[4].w_offset == 128);
  CHECK(b->w_offset == 128 + 64 * 8 + 8 && b->s_offset == b->w_offset + 16 && b->s_count == 16);
  CHECK(m.n_params == 128 + 520 + 32 + 18);
  CHECK(strstr(m.text, "conv2d 4 3x3 stride=1 padding=valid linear\n"
                       "batchnorm momentum=0.99 eps=0.001\nflatten\n") != NULL);
  CHECK(strstr(m.text, "batchnorm momentum=0.9 eps=0.01\ndense 2 softmax\n") != NULL);
  CHECK(pst_model_parse(m.text, "canon", &c, err, sizeof err) == 0 &&
        c.fingerprint == m.fingerprint && strcmp(c.text, m.text) == 0 &&
        memcmp(c.layers, m.layers, sizeof m.layers) == 0);
  /* The defaults written out are the same model; other numbers another one. */
  CHECK(pst_model_parse("input 6x6x3\nconv2d 4 3x3\nbatchnorm eps=1e-3 momentum=0.990\n"
                        "flatten\ndense 8 relu\nbatchnorm momentum=.9 eps=1e-2\ndense 2 softmax\n",
                        "s", &c, err, sizeof err) == 0 && c.fingerprint == m.fingerprint);
  CHECK(pst_model_parse("input 6x6x3\nconv2d 4 3x3\nbatchnorm momentum=0.98\nflatten\n"
                        "dense 8 relu\nbatchnorm momentum=0.9 eps=0.01\ndense 2 softmax\n",
                        "s", &c, err, sizeof err) == 0 && c.fingerprint != m.fingerprint);
  /* Without batchnorm the text and fingerprint are those of before (no state, no option). */
  CHECK(pst_model_parse("input 6x6x3\nconv2d 4 3x3\nflatten\ndense 8 relu\ndense 2 softmax\n",
                        "s", &plain, err, sizeof err) == 0);
  CHECK(strcmp(plain.text, "input 6x6x3\nconv2d 4 3x3 stride=1 padding=valid linear\nflatten\n"
                           "dense 8 relu\ndense 2 softmax\n") == 0);
  size_t off[PST_MODEL_MAX_LAYERS], cnt[PST_MODEL_MAX_LAYERS];
  CHECK(pst_model_state_ranges(&plain, off, cnt) == 0);
  CHECK(pst_model_state_ranges(&m, off, cnt) == 2 && off[0] == 120 && cnt[0] == 8 &&
        off[1] == b->s_offset && cnt[1] == 16);
  for (int i = 0; i < m.n_layers; i++)
    CHECK(m.layers[i].kind == PST_LAYER_BATCHNORM || m.layers[i].s_count == 0);

  /* Keras's initial values. */
  float *p = malloc(m.n_params * sizeof(float));
  pst_model_init_params(&m, 5, p);
  int ok = 1;
  for (int j = 0; j < 4; j++)
    ok &= p[a->w_offset + j] == 1.0f && p[a->b_offset + j] == 0.0f &&
          p[a->s_offset + j] == 0.0f && p[a->s_offset + 4 + j] == 1.0f;
  CHECK(ok);
  free(p);

  /* The summary counts the moving statistics as non-trainable. */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  pst_model_summary(&m, f);
  fclose(f);
  CHECK(strstr(buf, "batch_normalization (BatchNormalization)") != NULL);
  CHECK(strstr(buf, "batch_normalization_1 (BatchNormalization)") != NULL);
  CHECK(strstr(buf, "(None, 4, 4, 4)") != NULL && strstr(buf, "(None, 8)") != NULL);
  CHECK(strstr(buf, "Total params: 698") != NULL && strstr(buf, "Trainable params: 674") != NULL &&
        strstr(buf, "Non-trainable params: 24") != NULL);
  free(buf);

  static const struct {
    const char *line, *want;
  } bad[] = {
      {"batchnorm 3", "s:3: batchnorm: unknown option '3'"},
      {"batchnorm momentum=1", "s:3: batchnorm: bad momentum '1' (want a number in [0, 1))"},
      {"batchnorm momentum=0.99999999", "s:3: batchnorm: bad momentum"},
      {"batchnorm momentum=-0.1", "s:3: batchnorm: bad momentum"},
      {"batchnorm momentum=", "s:3: batchnorm: bad momentum"},
      {"batchnorm momentum=nan", "s:3: batchnorm: bad momentum"},
      {"batchnorm eps=0", "s:3: batchnorm: bad eps '0' (want a number in (0, 1])"},
      {"batchnorm eps=1e-60", "s:3: batchnorm: bad eps"},
      {"batchnorm eps=2", "s:3: batchnorm: bad eps"},
      {"batchnorm eps=0.1 eps=0.1", "s:3: batchnorm: eps given twice"},
      {"batchnorm momentum=0.1 momentum=0.1", "s:3: batchnorm: momentum given twice"},
      {"batchnorm relu", "s:3: batchnorm: unknown option 'relu'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char spec[256];
    snprintf(spec, sizeof spec, "input 4x4x2\nflatten\n%s\ndense 2 softmax\n", bad[i].line);
    int rc = pst_model_parse(spec, "s", &c, err, sizeof err);
    CHECK(rc == -EINVAL && strncmp(err, bad[i].want, strlen(bad[i].want)) == 0);
    if (rc != -EINVAL || strncmp(err, bad[i].want, strlen(bad[i].want)) != 0)
      fprintf(stderr, "  '%s': got '%s'\n", bad[i].line, err);
  }
  /* On a flat input, and straight after the input layer. */
  CHECK(pst_model_parse("input 5\nbatchnorm\ndense 2 softmax\n", "s", &c, err, sizeof err) == 0 &&
        c.layers[1].out_c == 5 && c.layers[1].s_offset == 10 && c.n_params == 20 + 12);
  CHECK(pst_model_parse("input 5\nbatchnorm\n", "s", &c, err, sizeof err) == -EINVAL &&
        strstr(err, "the last layer must be dense") != NULL);
}

/* The chunks on the wire (pst_model_chunks): the presets' own cuts, a part of a shard, and
 * for every preset at many chunk sizes the properties: ascending, covering the part, never
 * over the chunk size, and each chunk either inside one layer (a piece of it that starts a
 * multiple of the chunk size into it) or made of whole layers. */
static size_t chunks_of(const char *model, size_t lo, size_t n, size_t max, size_t *starts) {
  pst_model m;
  char err[256];
  CHECK(pst_model_load(model, &m, err, sizeof err) == 0);
  return pst_model_chunks(&m, lo, n ? n : m.n_params, max, starts);
}

static void test_chunks(void) {
  static size_t s[4096];
  /* mlp: 200,960 + 32,896 + 1,290 floats. */
  CHECK(chunks_of("mlp", 0, 0, 1u << 20, s) == 3 && s[0] == 0 && s[1] == 200960 &&
        s[2] == 233856 && s[3] == 235146);
  CHECK(chunks_of("mlp", 0, 0, 65536, s) == 6 && s[1] == 65536 && s[3] == 196608 &&
        s[4] == 200960 && s[5] == 233856 && s[6] == 235146);
  /* cnn2: conv 320, conv 18,496, dense 200,768, dense 650: the first conv is small, but
   * the layer after it is not, so it stays a chunk of its own. */
  CHECK(chunks_of("cnn2", 0, 0, 1u << 20, s) == 4 && s[1] == 320 && s[2] == 18816 &&
        s[3] == 219584 && s[4] == 220234);
  /* One layer is cut in chunks of the size, the last shorter (the bench's models). */
  pst_model one;
  char err[256];
  CHECK(pst_model_parse("input 4\ndense 2 softmax\n", "t", &one, err, sizeof err) == 0);
  CHECK(pst_model_chunks(&one, 0, 10, 4, s) == 3 && s[1] == 4 && s[2] == 8 && s[3] == 10);
  CHECK(pst_model_chunks(&one, 0, 10, 0, s) == 0 && pst_model_chunks(&one, 0, 0, 4, s) == 0);
  /* A shard's part [100000, 217573) of the mlp: the first layer's rest, the second's part. */
  CHECK(chunks_of("mlp", 100000, 117573, 1u << 20, s) == 2 && s[1] == 100960 &&
        s[2] == 117573);
  const char *models[] = {"mlp", "cnn", "cnn2", "resnet20", "mobilenetv2:alpha=0.35"};
  const size_t sizes[] = {1024, 4096, 16384, 20000, 65536, 262144, 1u << 20};
  size_t bad = 0, checked = 0;
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    pst_model m;
    CHECK(pst_model_load(models[i], &m, err, sizeof err) == 0);
    /* Each layer's range, to check the cuts against. */
    size_t la[PST_MODEL_MAX_LAYERS], lb[PST_MODEL_MAX_LAYERS];
    int nl = 0;
    for (int l = 1; l < m.n_layers; l++) {
      const pst_layer *L = &m.layers[l];
      size_t c = L->w_count + L->b_count + L->s_count;
      if (c == 0) continue;
      la[nl] = L->w_count ? L->w_offset : L->b_count ? L->b_offset : L->s_offset;
      lb[nl] = la[nl] + c;
      nl++;
    }
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      for (int part = 0; part < 2; part++) {
        /* The whole vector, and the middle third (a shard that cuts layers). */
        size_t lo = part ? m.n_params / 3 : 0, n = part ? m.n_params / 3 : m.n_params;
        size_t c = pst_model_chunks(&m, lo, n, sizes[k], NULL);
        if (c == 0 || c >= sizeof s / sizeof s[0] || pst_model_chunks(&m, lo, n, sizes[k], s) != c) {
          bad++;
          continue;
        }
        checked++;
        if (s[0] != 0 || s[c] != n) bad++;
        for (size_t j = 0; j < c; j++) {
          size_t a = lo + s[j], b = lo + s[j + 1];
          if (b <= a || b - a > sizes[k]) bad++;
          /* Inside one layer (a piece a multiple of the size into its part), or whole
           * layers (each cut on a layer's end). */
          int inside = 0, whole = 1;
          for (int l = 0; l < nl; l++) {
            size_t la_ = la[l] > lo ? la[l] : lo;
            if (a >= la_ && b <= lb[l] && (a - la_) % sizes[k] == 0) inside = 1;
            if (a > la[l] && a < lb[l] && a != lo) whole = 0;
            if (b > la[l] && b < lb[l] && b != lo + n) whole = 0;
          }
          if (!inside && !whole) bad++;
        }
      }
    }
    /* Many small layers are grouped: fewer chunks than layers. */
    if (i >= 3) CHECK(pst_model_chunks(&m, 0, m.n_params, 1u << 20, NULL) < (size_t)nl / 2);
  }
  CHECK(checked == 70 && bad == 0);
}

int main(void) {
  test_chunks();
  test_presets();
  test_batchnorm();
  test_canonical();
  test_optimizer_line();
  test_errors();
  test_load_file();
  test_init();
  test_layer_names();
  test_summary();
  test_new_layers();
  test_activation_and_bias();
  test_sequential_unchanged();
  test_graph();
  test_graph_errors();
  test_graph_limits();
  return t_summary();
}
