/* Device specs (device_spec.h). */
#include "kernels/device_spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pst_device_spec_parse(const char *spec, pst_spec_kind *kind, int *index, double *rate) {
  *index = 0;
  *rate = 0;
  if (!spec || strcmp(spec, "auto") == 0) {
    *kind = PST_SPEC_AUTO;
    return 0;
  }
  if (strcmp(spec, "cpu") == 0) {
    *kind = PST_SPEC_CPU;
    return 0;
  }
  if (strncmp(spec, "null", 4) == 0) {
    *kind = PST_SPEC_NULL;
    if (spec[4] == '\0') return 0;
    if (spec[4] != ':' || spec[5] < '0' || spec[5] > '9') return -EINVAL;
    char *end;
    errno = 0;
    *rate = strtod(spec + 5, &end);
    return errno || *end || !(*rate > 0 && *rate <= 1e12) ? -EINVAL : 0;
  }
  if (strncmp(spec, "cuda", 4) != 0) return -EINVAL;
  *kind = PST_SPEC_CUDA;
  if (spec[4] == '\0') return 0;
  if (spec[4] != ':' || spec[5] < '0' || spec[5] > '9') return -EINVAL;
  char *end;
  errno = 0;
  long v = strtol(spec + 5, &end, 10);
  if (errno || *end || v > 4095) return -EINVAL;
  *index = (int)v;
  return 0;
}

int pst_device_check_spec(const char *spec, char *err, size_t errlen) {
  pst_spec_kind kind;
  int index;
  double rate;
  if (pst_device_spec_parse(spec, &kind, &index, &rate) == 0) return 0;
  /* One line whatever the spec holds: its newlines become spaces. */
  snprintf(err, errlen,
           "bad device \"%.64s\": expected auto, cpu, cuda, cuda:N, null or null:RATE (RATE: "
           "samples a second, at most 1e12)", spec);
  for (size_t i = 0; i < errlen && err[i]; i++)
    if (err[i] == '\n' || err[i] == '\r') err[i] = ' ';
  return -EINVAL;
}

/* A decimal number at s: digits only, at most `most`; its end in *end. -1 if none. */
static long plain_number(const char *s, long most, const char **end) {
  if (*s < '0' || *s > '9') return -1; /* no sign, no space: strtol would take them */
  char *e;
  errno = 0;
  long v = strtol(s, &e, 10);
  if (errno || v > most) return -1;
  *end = e;
  return v;
}

int pst_device_spec_virtual_gpu(const char *spec, int *gpu, int *instance) {
  if (spec == NULL || strncmp(spec, "cuda:", 5) != 0) return 0;
  const char *end;
  long n = plain_number(spec + 5, 4095, &end);
  if (n < 0 || *end != '.') return 0; /* cuda:N (or a bad spec): not this form */
  long k = plain_number(end + 1, 255, &end);
  if (k < 0 || *end) return -EINVAL;
  *gpu = (int)n;
  *instance = (int)k;
  return 1;
}
