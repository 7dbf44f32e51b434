/* Internal to model/: what the files that read a spec share (model.c reads the whole spec;
 * spec_errors.c, layer_line.c, optimizer_line.c and canonical.c serve it; summary.c names
 * activations as canonical.c does). Not part of the model's API, which is model.h. Calls
 * run one way: model.c calls the others, layer_line.c and optimizer_line.c call
 * spec_errors.c, summary.c calls canonical.c, and none calls model.c. */
#ifndef PSTRAIN_MODEL_MODEL_INTERNAL_H
#define PSTRAIN_MODEL_MODEL_INTERNAL_H

#include <stddef.h>

#include "model/model.h"

/* A line holds any canonical line (at most about 400 characters: the longest options, a
 * name and eight inputs of 31 characters), so that the canonical text always parses again. */
#define MAX_LINE 1024

/* Parser state shared by the helpers below. */
typedef struct {
  const char *source;
  int line;
  char *err;
  size_t errlen;
} parse_ctx;

/* spec_errors.c: writes "source:line: message" into p's error buffer (when it has one) and
 * returns -EINVAL. */
int spec_fail(parse_ctx *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* spec_errors.c: an untrusted word for an error message, short and printable, in buf. */
const char *spec_shown(const char *tok, char *buf, size_t len);

/* layer_line.c: one layer line's words into m->layers[m->n_layers], its shapes and its
 * parameters' place (0, or -EINVAL reported through p). */
int spec_parse_layer(parse_ctx *p, char **tok, int ntok, pst_model *m, const int *inputs,
                     int n_inputs, int *flat);
/* optimizer_line.c: "optimizer KIND key=value ..." into m->settings. */
int spec_parse_optimizer(parse_ctx *p, char **tok, int ntok, pst_model *m);

/* canonical.c: an activation's word in the spec ("relu", "relu6", "softmax", "linear"). */
const char *spec_act_name(pst_activation a);
/* canonical.c: whether layer i takes just the output of the line above it. */
int spec_takes_previous(const pst_model *m, int i);
/* canonical.c: appends the canonical line of layer i to text; -1 when text is full. */
int spec_canon_layer(const pst_model *m, int i, int flat_input, char *text, size_t *len);

#endif
