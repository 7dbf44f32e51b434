/* A model's layer names and its summary table (model.h): Keras's automatic names and class
 * names, pst_model_layer_name (which model.c also uses to check that names are unique) and
 * pst_model_summary, the table Keras's model.summary() prints. */
#include "model/model_internal.h"

#include <stdio.h>
#include <string.h>

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
                          ? spec_act_name(L->act)
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
