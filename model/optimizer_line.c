/* The optimizer line of a model spec (model/model_internal.h): its kind and options checked
 * where they are written and kept as settings (spec_parse_optimizer, called by model.c), and
 * those settings handed out as defaults (pst_model_defaults, model.h). Errors go through
 * spec_errors.c. */
#include "model/model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
int spec_parse_optimizer(parse_ctx *p, char **tok, int ntok, pst_model *m) {
  char b[32];
  if (m->n_settings > 0)
    return spec_fail(p, "optimizer given twice (first on line %d)", m->settings_line);
  if (ntok < 2) return spec_fail(p, "optimizer needs a kind: sgd, momentum or adam");
  int kind = -1;
  for (int k = 0; k < 3; k++)
    if (strcmp(tok[1], opt_kinds[k]) == 0) kind = k;
  if (kind < 0)
    return spec_fail(p, "optimizer needs a kind: sgd, momentum or adam (got '%s')",
                     spec_shown(tok[1], b, sizeof b));
  add_setting(m, "optimizer", opt_kinds[kind]);
  unsigned seen = 0;
  for (int i = 2; i < ntok; i++) {
    const char *eq = strchr(tok[i], '=');
    size_t klen = eq ? (size_t)(eq - tok[i]) : strlen(tok[i]);
    int k = -1;
    for (int j = 0; j < (int)(sizeof opt_keys / sizeof opt_keys[0]); j++)
      if (key_is(tok[i], klen, opt_keys[j].key)) k = j;
    if (eq == NULL || k < 0)
      return spec_fail(p, "optimizer: unknown option '%s' (want lr=, momentum=, beta1=, beta2=, "
                          "eps= or weight_decay=)", spec_shown(tok[i], b, sizeof b));
    if (!(opt_keys[k].kinds & (1u << kind)))
      return spec_fail(p, "optimizer: %s does not apply to %s", opt_keys[k].key, opt_kinds[kind]);
    if (seen & (1u << k)) return spec_fail(p, "optimizer: %s given twice", opt_keys[k].key);
    seen |= 1u << k;
    const char *val = eq + 1;
    char *end = NULL;
    double v = strtod(val, &end);
    if (val[0] == '\0' || *end != '\0' || !isfinite(v) || v < opt_keys[k].lo ||
        (opt_keys[k].lo_open && v <= opt_keys[k].lo) || (opt_keys[k].hi > 0 && v >= opt_keys[k].hi) ||
        strlen(val) >= sizeof m->settings[0].value)
      return spec_fail(p, "optimizer: bad %s '%s' (want %s)", opt_keys[k].key,
                       spec_shown(val, b, sizeof b), opt_keys[k].want);
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
