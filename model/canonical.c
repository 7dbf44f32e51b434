/* The canonical text of a model (model.h): one normalised line a layer, rebuilt from the
 * parsed layer rather than copied from the input, so two specs that mean the same model have
 * the same text and fingerprint whatever their comments and spacing (model.c assembles it
 * and hashes it). Also the activations' words, which summary.c shows too. Calls nothing. */
#include "model/model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *spec_act_name(pst_activation a) {
  return a == PST_ACT_RELU    ? "relu"
         : a == PST_ACT_RELU6 ? "relu6"
         : a == PST_ACT_SOFTMAX ? "softmax"
                                : "linear";
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
int spec_takes_previous(const pst_model *m, int i) {
  const pst_layer *L = &m->layers[i];
  return i > 0 && L->n_inputs == 1 && L->inputs[0] == i - 1;
}

/* Appends the canonical line of layer i; -1 when the text buffer is full. */
int spec_canon_layer(const pst_model *m, int i, int flat_input, char *text, size_t *len) {
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
      n = snprintf(line, sizeof line, "dense %d %s%s\n", L->units, spec_act_name(L->act),
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
                     spec_act_name(L->act), L->b_count ? "" : " bias=no");
      else if (L->kind == PST_LAYER_DEPTHWISE_CONV2D)
        n = snprintf(line, sizeof line, "depthwise_conv2d %dx%d stride=%s padding=%s %s%s\n",
                     L->k_h, L->k_w, stride, L->same_padding ? "same" : "valid",
                     spec_act_name(L->act), L->b_count ? "" : " bias=no");
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
      n = snprintf(line, sizeof line, "activation %s\n", spec_act_name(L->act));
      break;
    case PST_LAYER_ADD:
      n = snprintf(line, sizeof line, "add %s\n", spec_act_name(L->act));
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
  if (n > 0 && (L->name[0] != '\0' || (i > 0 && !spec_takes_previous(m, i)))) {
    n--;
    if (L->name[0] != '\0') n += snprintf(line + n, sizeof line - n, " name=%s", L->name);
    for (int t = 0; i > 0 && !spec_takes_previous(m, i) && t < L->n_inputs; t++)
      n += snprintf(line + n, sizeof line - n, "%s%s", t ? "," : " inputs=",
                    m->layers[L->inputs[t]].name);
    n += snprintf(line + n, sizeof line - n, "\n");
  }
  if (n <= 0 || *len + (size_t)n + 1 > PST_MODEL_MAX_TEXT) return -1;
  memcpy(text + *len, line, (size_t)n + 1);
  *len += (size_t)n;
  return 0;
}
