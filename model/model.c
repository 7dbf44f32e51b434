/* Reading a model spec (model.h): the presets kept as text (mlp, cnn, cnn2), a whole spec
 * read line by line with its graph (name= and inputs=, with cycles and names further down
 * told apart), the checks on the model as a whole, its canonical text and fingerprint, and
 * pst_model_load for a preset, a generated preset (presets.c) or a spec file.
 *
 * Parsing works one line at a time and derives every layer's per-sample shapes as it
 * goes, so that a shape problem is reported on the line that causes it. The canonical
 * text is rebuilt from the parsed layers (not copied from the input), so two specs that
 * mean the same model have the same fingerprint whatever their comments and spacing.
 *
 * model_internal.h names the files this one calls, which call nothing back: layer_line.c
 * (a layer line), optimizer_line.c (the optimizer line), spec_errors.c (the errors),
 * canonical.c (a layer's canonical line); and summary.c for the layers' automatic names. */
#include "model/model.h"

#include "common/fnv.h"
#include "model/model_internal.h"
#include "model/presets.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  if (n >= MAX_LINE) return spec_fail(p, "line too long (at most %d characters)", MAX_LINE - 1);
  memcpy(buf, *at, n);
  buf[n] = '\0';
  char *hash = strchr(buf, '#');
  if (hash != NULL) *hash = '\0';
  *ntok = 0;
  for (char *save = NULL, *t = strtok_r(buf, " \t\r\v\f", &save); t != NULL;
       t = strtok_r(NULL, " \t\r\v\f", &save)) {
    if (*ntok == MAX_TOKENS) return spec_fail(p, "too many words on one line");
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
  if (names[0] == '\0') return spec_fail(p, "inputs= needs layer names, like inputs=a,b");
  for (char *s = names;;) {
    char *c = strchr(s, ',');
    if (c != NULL) *c = '\0';
    if (s[0] == '\0') return spec_fail(p, "inputs: an empty name (want inputs=a,b)");
    if (*n_inputs == PST_LAYER_MAX_INPUTS)
      return spec_fail(p, "inputs: too many (at most %d)", PST_LAYER_MAX_INPUTS);
    int j = find_layer(m, s);
    if (j < 0) {
      int k = find_ahead(ahead, n_ahead, s, strlen(s));
      unsigned char seen[PST_MODEL_MAX_LAYERS + 1] = {0};
      if (self_name != NULL && strcmp(s, self_name) == 0)
        return spec_fail(p, "inputs: '%s' is this layer itself (a cycle)",
                         spec_shown(s, b, sizeof b));
      if (k >= 0 && k > m->n_layers && reaches(ahead, n_ahead, k, m->n_layers, seen))
        return spec_fail(p, "inputs: '%s' (line %d) is computed from this layer (a cycle)",
                         spec_shown(s, b, sizeof b), ahead[k].line);
      if (k >= 0 && k > m->n_layers)
        return spec_fail(p, "inputs: '%s' is defined below, on line %d (a layer's inputs must be "
                            "above it)", spec_shown(s, b, sizeof b), ahead[k].line);
      return spec_fail(p, "inputs: unknown layer '%s'", spec_shown(s, b, sizeof b));
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
  if (text == NULL) return spec_fail(&p, "no model text");

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
      if (spec_parse_optimizer(&p, tok, ntok, m) != 0) return -EINVAL;
      continue;
    }
    /* name= and inputs= belong to the graph: taken out before the layer's own options. */
    const char *name = NULL, *inputs_s = NULL;
    int k = 1;
    for (int t = 1; t < ntok; t++) {
      if (strncmp(tok[t], "name=", 5) == 0) {
        if (name != NULL) return spec_fail(&p, "name given twice");
        name = tok[t] + 5;
      } else if (strncmp(tok[t], "inputs=", 7) == 0) {
        if (inputs_s != NULL) return spec_fail(&p, "inputs given twice");
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
        return spec_fail(&p, "bad name '%s' (letters, digits and _, not starting with a digit, "
                             "at most %d characters)",
                         spec_shown(name, b, sizeof b), PST_MODEL_MAX_NAME - 1);
      int j = find_layer(m, name);
      if (j >= 0) return spec_fail(&p, "name '%s' already used on line %d", name, line_of[j]);
    }
    int inputs[PST_LAYER_MAX_INPUTS], n_inputs = 0;
    if (idx > 0 && inputs_s != NULL) {
      if (strcmp(tok[0], "input") == 0) return spec_fail(&p, "input takes no inputs=");
      if (parse_inputs(&p, m, inputs_s, name, ahead, n_ahead, inputs, &n_inputs) != 0)
        return -EINVAL;
    } else if (idx > 0) {
      inputs[n_inputs++] = idx - 1;
    } else if (inputs_s != NULL && strcmp(tok[0], "input") == 0) {
      return spec_fail(&p, "input takes no inputs=");
    }
    int flat = idx > 0 ? m->layers[inputs[0]].flat : 1;
    if (spec_parse_layer(&p, tok, ntok, m, inputs, n_inputs, &flat) != 0) return -EINVAL;
    pst_layer *L = &m->layers[idx];
    L->flat = flat;
    if (name != NULL) snprintf(L->name, sizeof L->name, "%s", name);
    if (idx == 0) flat_input = flat;
    if (idx > 0 && !spec_takes_previous(m, idx)) m->graph = 1;
    line_of[idx] = p.line;
  }
  if (rc < 0) return -EINVAL;

  if (p.line == 0) p.line = 1;
  if (m->n_layers == 0) return spec_fail(&p, "the model is empty (it needs an input layer)");
  if (m->n_layers == 1) return spec_fail(&p, "the model needs at least one layer after input");
  for (int i = 1; i < m->n_layers - 1; i++) {
    if (m->layers[i].act == PST_ACT_SOFTMAX) {
      p.line = line_of[i];
      return spec_fail(&p, "softmax is only allowed on the last layer");
    }
  }
  const pst_layer *last = &m->layers[m->n_layers - 1];
  if (last->kind != PST_LAYER_DENSE || last->act != PST_ACT_SOFTMAX) {
    p.line = line_of[m->n_layers - 1];
    return spec_fail(&p, "the last layer must be dense with softmax (training uses softmax "
                         "cross-entropy on its logits)");
  }
  if (last->units < 2) {
    p.line = line_of[m->n_layers - 1];
    return spec_fail(&p, "the last layer needs at least 2 classes");
  }
  /* The last layer is the only output: a layer nothing takes would be computed for
   * nothing (and is most likely a misspelt inputs=). */
  unsigned char used[PST_MODEL_MAX_LAYERS] = {0};
  for (int i = 1; i < m->n_layers; i++)
    for (int t = 0; t < m->layers[i].n_inputs; t++) used[m->layers[i].inputs[t]] = 1;
  for (int i = 0; i < m->n_layers - 1; i++) {
    if (!used[i]) {
      p.line = line_of[i];
      return spec_fail(&p, "no layer takes this layer's output (only the last layer may be the "
                           "model's output)");
    }
  }
  /* Names are unique, automatic ones included (checkpoints name tensors by them, and Keras
   * refuses a model whose names repeat too). */
  typedef char layer_name_buf[PST_MODEL_MAX_NAME + 32];
  layer_name_buf *names = malloc(PST_MODEL_MAX_LAYERS * sizeof *names); /* 16 KiB */
  if (names == NULL) return spec_fail(&p, "out of memory");
  for (int i = 0; i < m->n_layers; i++) pst_model_layer_name(m, i, 1, names[i], sizeof names[i]);
  for (int i = 1; i < m->n_layers; i++) {
    for (int j = 0; j < i; j++) {
      if (strcmp(names[i], names[j]) != 0) continue;
      int named = m->layers[i].name[0] ? i : j, other = named == i ? j : i;
      p.line = line_of[named];
      rc = spec_fail(&p, "name '%s' is also the automatic name of the layer on line %d; pick "
                         "another", names[i], line_of[other]);
      free(names);
      return rc;
    }
  }
  free(names);

  size_t len = 0;
  for (int i = 0; i < m->n_layers; i++) {
    if (spec_canon_layer(m, i, flat_input, m->text, &len) != 0) {
      p.line = line_of[i];
      return spec_fail(&p, "the model text is too long (at most %d bytes)", PST_MODEL_MAX_TEXT - 1);
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
