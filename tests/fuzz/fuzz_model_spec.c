/* Fuzzes the model spec parser (model/model.h: pst_model_parse) with the input as the
 * spec's text (up to the first NUL, as a file read by pst_model_load would be refused
 * with a NUL in it).
 *
 * Checks besides "no crash, no leak, no UB":
 *  - a refused spec gets -EINVAL and one printable line (the error goes to a log or a
 *    terminal as is);
 *  - an accepted spec is consistent: an input layer first, a dense softmax of >= 2 units
 *    last, each layer's inputs above it and its input shape its first input's output (add
 *    and concatenate: all inputs alike but for concatenate's channels), parameters laid out one
 *    after the other without gaps, the fingerprint the FNV-1a of the canonical text;
 *  - the canonical text parses again to the same layers, text and fingerprint (the
 *    workers rebuild the model from it);
 *  - the optimizer defaults, the summary and (for models up to 1M parameters) the
 *    initialisation run, and the initial weights are finite with zero biases. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "fuzz_model_spec: check failed: %s: ", #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
      abort();                                                        \
    }                                                                 \
  } while (0)

#define MAX_SPEC (64 * 1024) /* pst_model_load's file limit */
#define MAX_INIT ((size_t)1 << 20)

static uint64_t fnv(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

static void check_line(const char *err) {
  CHECK(err[0] != '\0', "no error message");
  for (const char *p = err; *p; p++)
    CHECK((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f,
          "unprintable byte 0x%02x in the error \"%s\"", (unsigned char)*p, err);
}

static void check_model(const pst_model *m) {
  CHECK(m->n_layers >= 2 && m->n_layers <= PST_MODEL_MAX_LAYERS, "%d layers", m->n_layers);
  CHECK(m->layers[0].kind == PST_LAYER_INPUT, "first layer kind %d", m->layers[0].kind);
  const pst_layer *last = &m->layers[m->n_layers - 1];
  CHECK(last->kind == PST_LAYER_DENSE && last->act == PST_ACT_SOFTMAX && last->units >= 2,
        "last layer kind %d act %d units %d", last->kind, last->act, last->units);
  CHECK(m->classes == last->units, "classes %d", m->classes);
  const pst_layer *in = &m->layers[0];
  CHECK(m->input_size == in->out_h * in->out_w * in->out_c && m->input_size > 0,
        "input size %d", m->input_size);
  size_t at = 0;
  for (int i = 0; i < m->n_layers; i++) {
    const pst_layer *L = &m->layers[i];
    CHECK(L->out_h > 0 && L->out_w > 0 && L->out_c > 0, "layer %d output %dx%dx%d", i, L->out_h,
          L->out_w, L->out_c);
    if (i > 0) {
      CHECK(L->n_inputs >= 1 && L->n_inputs <= PST_LAYER_MAX_INPUTS, "layer %d has %d inputs", i,
            L->n_inputs);
      for (int t = 0; t < L->n_inputs; t++)
        CHECK(L->inputs[t] >= 0 && L->inputs[t] < i, "layer %d input %d is layer %d", i, t,
              L->inputs[t]);
      CHECK(L->n_inputs == 1 || L->kind == PST_LAYER_ADD || L->kind == PST_LAYER_CONCATENATE,
            "layer %d of kind %d has %d inputs", i, L->kind, L->n_inputs);
      const pst_layer *P = &m->layers[L->inputs[0]];
      CHECK(L->in_h == P->out_h && L->in_w == P->out_w && L->in_c == P->out_c,
            "layer %d input differs from layer %d's output", i, L->inputs[0]);
      if (L->kind == PST_LAYER_ADD || L->kind == PST_LAYER_CONCATENATE) {
        int c = 0;
        for (int t = 0; t < L->n_inputs; t++) {
          const pst_layer *X = &m->layers[L->inputs[t]];
          CHECK(X->out_h == L->out_h && X->out_w == L->out_w && X->flat == L->flat,
                "layer %d input %d has another height, width or flatness", i, t);
          c += X->out_c;
        }
        CHECK(L->kind == PST_LAYER_ADD ? P->out_c == L->out_c : c == L->out_c,
              "layer %d has %d channels", i, L->out_c);
      }
      CHECK(L->act != PST_ACT_SOFTMAX || i == m->n_layers - 1, "softmax on layer %d", i);
    }
    if (L->w_count) {
      CHECK(L->w_offset == at, "layer %d weights at %zu, expected %zu", i, L->w_offset, at);
      at += L->w_count;
    }
    if (L->b_count) {
      CHECK(L->b_offset == at, "layer %d biases at %zu, expected %zu", i, L->b_offset, at);
      at += L->b_count;
    }
    if (L->s_count) {
      CHECK(L->kind == PST_LAYER_BATCHNORM, "layer %d of kind %d holds state", i, L->kind);
      CHECK(L->s_offset == at, "layer %d state at %zu, expected %zu", i, L->s_offset, at);
      at += L->s_count;
    }
    if (L->kind == PST_LAYER_BATCHNORM)
      CHECK(L->w_count == (size_t)L->in_c && L->b_count == (size_t)L->in_c &&
                L->s_count == 2 * (size_t)L->in_c && L->out_c == L->in_c &&
                L->momentum >= 0.0f && L->momentum < 1.0f && L->eps > 0.0f && L->eps <= 1.0f,
            "batchnorm %d counts or options", i);
    if (L->kind == PST_LAYER_DENSE)
      CHECK(L->w_count == (size_t)L->in_c * L->units &&
                (L->b_count == (size_t)L->units || L->b_count == 0), /* bias=no */
            "dense %d counts", i);
    if (L->kind == PST_LAYER_CONV2D)
      CHECK(L->w_count == (size_t)L->filters * L->k_h * L->k_w * L->in_c &&
                (L->b_count == (size_t)L->filters || L->b_count == 0),
            "conv2d %d counts", i);
    if (L->kind == PST_LAYER_ACTIVATION)
      CHECK((L->act == PST_ACT_RELU || L->act == PST_ACT_RELU6) && L->out_c == L->in_c &&
                L->w_count + L->b_count == 0,
            "activation %d", i);
  }
  CHECK(at == m->n_params, "layers hold %zu parameters, the model says %zu", at, m->n_params);
  size_t len = strnlen(m->text, sizeof m->text);
  CHECK(len > 0 && len < sizeof m->text, "canonical text of %zu bytes", len);
  CHECK(m->fingerprint == fnv(m->text, len), "fingerprint is not the text's FNV-1a");
  CHECK(m->n_settings >= 0 && m->n_settings <= PST_MODEL_MAX_SETTINGS, "%d settings",
        m->n_settings);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char text[MAX_SPEC + 1];
  static pst_model m, again;
  static FILE *devnull;
  if (!devnull) devnull = fopen("/dev/null", "w");
  if (size > MAX_SPEC) return 0;
  memcpy(text, data, size);
  text[size] = '\0';

  char err[512];
  int rc = pst_model_parse(text, "fuzz.spec", &m, err, sizeof err);
  if (rc != 0) {
    CHECK(rc == -EINVAL, "rc %d", rc);
    check_line(err);
    return 0;
  }
  check_model(&m);

  /* The canonical text is what travels to the workers: it must mean the same model. */
  rc = pst_model_parse(m.text, "canonical", &again, err, sizeof err);
  CHECK(rc == 0, "the canonical text does not parse: %s\n%s", err, m.text);
  CHECK(strcmp(again.text, m.text) == 0 && again.fingerprint == m.fingerprint &&
            again.n_params == m.n_params && again.n_layers == m.n_layers &&
            again.input_size == m.input_size && again.n_settings == 0,
        "the canonical text parses to another model:\n%s---\n%s", m.text, again.text);
  for (int i = 0; i < m.n_layers; i++)
    CHECK(memcmp(&again.layers[i], &m.layers[i], sizeof m.layers[i]) == 0,
          "layer %d differs after the canonical round trip", i);

  const char *names[PST_MODEL_MAX_SETTINGS], *values[PST_MODEL_MAX_SETTINGS];
  int n = pst_model_defaults(&m, NULL, names, values);
  CHECK(n == m.n_settings, "%d defaults of %d settings", n, m.n_settings);
  if (n > 0) {
    CHECK(strcmp(names[0], "optimizer") == 0, "first setting '%s'", names[0]);
    CHECK(pst_model_defaults(&m, values[0], names, values) == n, "defaults for its own kind");
  }
  if (devnull) pst_model_summary(&m, devnull);

  if (m.n_params <= MAX_INIT) {
    float *p = malloc((m.n_params ? m.n_params : 1) * sizeof(float));
    CHECK(p != NULL, "malloc");
    pst_model_init_params(&m, 42, p);
    for (int i = 1; i < m.n_layers; i++) {
      const pst_layer *L = &m.layers[i];
      for (size_t j = 0; j < L->w_count; j++)
        CHECK(isfinite(p[L->w_offset + j]), "layer %d weight %zu is %g", i, j, p[L->w_offset + j]);
      for (size_t j = 0; j < L->b_count; j++)
        CHECK(p[L->b_offset + j] == 0.0f, "layer %d bias %zu is %g", i, j, p[L->b_offset + j]);
      /* batchnorm's moving statistics start at mean 0, variance 1. */
      for (size_t j = 0; j < L->s_count; j++)
        CHECK(p[L->s_offset + j] == (j < L->s_count / 2 ? 0.0f : 1.0f), "layer %d state %zu is %g",
              i, j, p[L->s_offset + j]);
    }
    free(p);
  }
  return 0;
}
