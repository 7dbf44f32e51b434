/* Presets written out by code rather than kept as text: "mobilenetv2" and "resnet20",
 * each with options after a colon ("mobilenetv2:alpha=0.35,input=32x32x3,classes=10,momentum=0.9").
 * See presets.c for what they are and how they were checked against Keras. */
#ifndef PSTRAIN_MODEL_PRESETS_H
#define PSTRAIN_MODEL_PRESETS_H

#include <stddef.h>

/* The names, for messages that list the presets. */
#define PST_GENERATED_PRESETS \
  "mobilenetv2[:alpha=A,input=HxWxC,classes=N,momentum=M], resnet20[:input=HxWxC,classes=N,momentum=M]"

/* Writes the spec text of the generated preset `name` into buf: 1 when name is one (buf
 * holds the spec), 0 when it is not, or a negative code with a one-line reason in err
 * (a bad option, or a buffer too small). */
int pst_preset_generate(const char *name, char *buf, size_t buflen, char *err, size_t errlen);

#endif
