/* The generated presets against Keras's published parameter counts (total and
 * non-trainable, the batch norms' moving statistics), and their options' errors. */
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "model/presets.h"
#include "kernels/testing.h"

static size_t state_of(const pst_model *m) {
  size_t n = 0;
  for (int i = 0; i < m->n_layers; i++) n += m->layers[i].s_count;
  return n;
}

static void expect(const char *name, size_t total, size_t non_trainable, int layers) {
  static pst_model m, again;
  char err[256] = "";
  int rc = pst_model_load(name, &m, err, sizeof err);
  if (rc != 0) fprintf(stderr, "  %s: %s\n", name, err);
  CHECK(rc == 0);
  if (rc != 0) return;
  printf("%-40s %9zu parameters (%zu non-trainable), %d layers\n", name, m.n_params, state_of(&m),
         m.n_layers);
  CHECK(m.n_params == total);
  CHECK(state_of(&m) == non_trainable);
  CHECK(layers == 0 || m.n_layers == layers);
  /* The canonical text is a spec like any other: it parses to the same model. */
  CHECK(pst_model_parse(m.text, "canon", &again, err, sizeof err) == 0 &&
        again.fingerprint == m.fingerprint && again.n_params == m.n_params);
}

int main(void) {
  /* tf.keras.applications.MobileNetV2(weights=None), alpha 1.0, 224x224x3, 1000 classes:
   * "Total params: 3,538,984 ... Non-trainable params: 34,112". */
  expect("mobilenetv2:input=224x224x3,classes=1000", 3538984, 34112, 152);
  /* The same network with a 10-class head: 1280 x 990 + 990 fewer. */
  expect("mobilenetv2", 3538984 - 1280 * 990 - 990, 34112, 152);
  /* The Keras CIFAR-10 example's ResNet20 v1: "Total params: 274,442 ... Non-trainable
   * params: 1,376". */
  expect("resnet20", 274442, 1376, 0);
  /* alpha shrinks every layer but the last 1x1 convolution (1280 channels for alpha <= 1). */
  static pst_model small, full;
  char err[256];
  CHECK(pst_model_load("mobilenetv2:alpha=0.35", &small, err, sizeof err) == 0);
  CHECK(pst_model_load("mobilenetv2", &full, err, sizeof err) == 0);
  CHECK(small.n_params < full.n_params / 2 && small.n_layers == full.n_layers);
  printf("mobilenetv2:alpha=0.35 %zu parameters\n", small.n_params);
  /* momentum= sets every batch norm's; the default is PyTorch's 0.9 (model/presets.c). */
  static pst_model slow;
  CHECK(pst_model_load("resnet20:momentum=0.99", &slow, err, sizeof err) == 0);
  for (int i = 0; i < slow.n_layers; i++)
    if (slow.layers[i].kind == PST_LAYER_BATCHNORM)
      CHECK(slow.layers[i].momentum == 0.99f && full.layers[2].momentum == 0.9f);
  /* A 32x32 input keeps stride 1 in the stem (the CIFAR variant), 224 uses Keras's 2. */
  CHECK(full.layers[1].stride_h == 1);
  static pst_model big;
  CHECK(pst_model_load("mobilenetv2:input=224x224x3,classes=1000", &big, err, sizeof err) == 0);
  CHECK(big.layers[1].stride_h == 2 && big.layers[big.n_layers - 2].in_h == 7);

  static const struct {
    const char *name, *want;
  } bad[] = {
      {"mobilenetv2:alpha=3", "mobilenetv2: alpha=3 is not a width multiplier in [0.1, 2]"},
      {"mobilenetv2:alpha", "mobilenetv2: option 'alpha' is not key=value"},
      {"resnet20:alpha=1",
       "resnet20: unknown option 'alpha' (want input=HxWxC, classes=N or momentum=M)"},
      {"resnet20:momentum=1", "resnet20: momentum=1 is not a batch norm momentum in [0, 1)"},
      {"resnet20:classes=1", "resnet20: classes=1 is not a number of classes"},
      {"mobilenetv2:input=7x7x3", "mobilenetv2: input=7x7x3 is not an image shape"},
      {"mobilenetv2:input=32x32", "mobilenetv2: input=32x32 is not an image shape"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    static pst_model m;
    err[0] = '\0';
    int rc = pst_model_load(bad[i].name, &m, err, sizeof err);
    if (rc == 0 || strncmp(err, bad[i].want, strlen(bad[i].want)) != 0)
      fprintf(stderr, "  %s: got '%s'\n", bad[i].name, err);
    CHECK(rc != 0 && strncmp(err, bad[i].want, strlen(bad[i].want)) == 0);
  }
  return t_summary();
}
