#include "model/model_config.h"

#include <stdio.h>

int pst_model_configure(pst_cfg *cfg, const char *name_or_path, pst_model *m, char *err,
                        size_t errlen) {
  int rc = pst_model_load(name_or_path, m, err, errlen);
  if (rc < 0) return rc;
  const pst_cfg_opt *kind = pst_cfg_find(cfg, "optimizer");
  const char *chosen = kind && kind->source != PST_SRC_DEFAULT ? (const char *)kind->value : NULL;
  const char *names[PST_MODEL_MAX_SETTINGS], *values[PST_MODEL_MAX_SETTINGS];
  int n = pst_model_defaults(m, chosen, names, values);
  char origin[160];
  snprintf(origin, sizeof origin, "%.140s:%d", name_or_path, m->settings_line);
  return pst_cfg_set_defaults(cfg, names, values, n, PST_SRC_MODEL, origin, err, errlen);
}
