/* A model spec meets a program's configuration: the spec's optimizer line (model/model.h)
 * becomes the defaults of the options it names, below the config file, the environment and
 * the flags (common/config.h). The ps and the launcher both do this, so that what the
 * launcher prints and passes on is what the ps would have chosen by itself. */
#ifndef PSTRAIN_MODEL_MODEL_CONFIG_H
#define PSTRAIN_MODEL_MODEL_CONFIG_H

#include <stddef.h>

#include "common/config.h"
#include "model/model.h"

/* Loads the preset or spec file name_or_path into m, then sets each of cfg's options that the
 * spec's optimizer line names and the configuration left at its built-in default, with
 * source PST_SRC_MODEL and origin "SPEC:LINE". If cfg's "optimizer" option was set to a
 * kind other than the spec's, none of the spec's numbers apply. Options cfg lacks are
 * skipped. Returns 0, or a negative code with a one-line reason in err. */
int pst_model_configure(pst_cfg *cfg, const char *name_or_path, pst_model *m, char *err,
                        size_t errlen);

#endif
