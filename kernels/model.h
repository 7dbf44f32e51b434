/* Models as data: a Keras-like layer stack read from a small text format.
 *
 *   # comment
 *   input 28x28x1          (H x W x C; "input 784" means a flat vector)
 *   conv2d 32 3x3 relu     (filters, kernel; options: stride=S, padding=valid|same; default valid, 1)
 *   maxpool 2x2            (window; option stride=S, default = window)
 *   flatten
 *   dense 128 relu         (units, optional activation relu|softmax|linear)
 *   dense 10 softmax       (the last layer must be dense with softmax: training uses
 *                           softmax cross-entropy on its logits)
 *
 * Presets: "mlp" (784-256-128-10 ReLU), "cnn", "cnn2" (see model.c).
 * The canonical text (one normalised layer a line) is what travels to the workers; its
 * 64-bit FNV-1a hash is the model fingerprint. */
#ifndef PSTRAIN_KERNELS_MODEL_H
#define PSTRAIN_KERNELS_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PST_MODEL_MAX_LAYERS 32
#define PST_MODEL_MAX_TEXT 4096

typedef enum {
  PST_LAYER_INPUT = 0,
  PST_LAYER_DENSE,
  PST_LAYER_CONV2D,
  PST_LAYER_MAXPOOL,
  PST_LAYER_FLATTEN,
} pst_layer_kind;

typedef enum { PST_ACT_LINEAR = 0, PST_ACT_RELU, PST_ACT_SOFTMAX } pst_activation;

typedef struct {
  pst_layer_kind kind;
  pst_activation act;
  int units;                 /* dense: output features */
  int filters;               /* conv2d: output channels */
  int k_h, k_w;              /* conv2d kernel / maxpool window */
  int stride_h, stride_w;
  int same_padding;          /* conv2d/maxpool: 1 = "same", 0 = "valid" */
  int pad_top, pad_left;     /* derived from same_padding */
  /* Per-sample shapes, derived by pst_model_parse: dense/flatten use h = w = 1. */
  int in_h, in_w, in_c;
  int out_h, out_w, out_c;
  /* Parameters inside the flat parameter vector (float offsets); counts are 0 if none. */
  size_t w_offset, w_count;  /* dense [in, out]; conv2d [Cout, KH, KW, Cin] */
  size_t b_offset, b_count;  /* [out] / [Cout] */
} pst_layer;

typedef struct {
  int n_layers;              /* layers[0] is the input layer */
  pst_layer layers[PST_MODEL_MAX_LAYERS];
  size_t n_params;           /* total floats in the flat parameter vector */
  int input_size;            /* floats per sample */
  int classes;               /* outputs of the last layer */
  uint64_t fingerprint;      /* FNV-1a 64 of text */
  char text[PST_MODEL_MAX_TEXT]; /* canonical spec */
} pst_model;

/* Parses spec text. On error returns -EINVAL and writes one line such as
 * "my.spec:3: conv2d needs a kernel like 3x3" into err. `source` names the text in errors. */
int pst_model_parse(const char *text, const char *source, pst_model *m, char *err, size_t errlen);
/* Loads a preset name ("mlp", "cnn", "cnn2") or else a spec file path. */
int pst_model_load(const char *name_or_path, pst_model *m, char *err, size_t errlen);
/* The text of a preset, or NULL. */
const char *pst_model_preset(const char *name);
/* Deterministic initialisation from seed: He-uniform for ReLU layers, Glorot-uniform
 * otherwise, zero biases. params has n_params floats. */
void pst_model_init_params(const pst_model *m, uint64_t seed, float *params);
/* Keras-style summary table: layer, output shape, parameter count, totals. */
void pst_model_summary(const pst_model *m, FILE *out);

#endif
