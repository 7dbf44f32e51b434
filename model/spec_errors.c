/* How a model spec's errors are reported (model/model_internal.h): every message starts
 * with the spec's source and line, and words taken from the spec are shown short and
 * printable. Every file that reads a spec line reports through these; they call nothing. */
#include "model/model_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int spec_fail(parse_ctx *p, const char *fmt, ...) {
  if (p->err != NULL && p->errlen > 0) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "%s:%d: %s", p->source, p->line, msg);
  }
  return -EINVAL;
}

/* Copies an untrusted token for an error message: short and printable only, so that a
 * garbage file cannot produce a multi-line or unreadable error. */
const char *spec_shown(const char *tok, char *buf, size_t len) {
  size_t o = 0;
  for (size_t i = 0; tok[i] != '\0' && o + 4 < len; i++) {
    if (i == 24) {
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
    unsigned char c = (unsigned char)tok[i];
    buf[o++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  buf[o] = '\0';
  return buf;
}
