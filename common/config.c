#include "common/config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *source_name(pst_cfg_source s) {
  switch (s) {
    case PST_SRC_FILE: return "file";
    case PST_SRC_ENV: return "env";
    case PST_SRC_FLAG: return "flag";
    case PST_SRC_MODEL: return "model";
    case PST_SRC_KUBERNETES: return "kubernetes";
    default: return "default";
  }
}

/* Option names match with '-' and '_' treated alike. */
static int name_eq(const char *a, const char *b) {
  for (; *a && *b; a++, b++) {
    char x = *a == '_' ? '-' : (char)tolower((unsigned char)*a);
    char y = *b == '_' ? '-' : (char)tolower((unsigned char)*b);
    if (x != y) return 0;
  }
  return *a == *b;
}

pst_cfg_opt *pst_cfg_find(pst_cfg *c, const char *name) {
  for (int i = 0; i < c->n_opts; i++)
    if (name_eq(c->opts[i].name, name)) return &c->opts[i];
  return NULL;
}

int pst_parse_int(const char *text, int64_t min, int64_t max, int64_t *out) {
  if (!text) return -EINVAL;
  const char *p = text;
  if (*p == '+' || *p == '-') p++;
  /* strtoll alone would take leading spaces and stop quietly at the first stranger. */
  if (!isdigit((unsigned char)*p)) return -EINVAL;
  for (const char *q = p; *q; q++)
    if (!isdigit((unsigned char)*q)) return -EINVAL;
  errno = 0;
  char *end;
  long long v = strtoll(text, &end, 10);
  if (*end) return -EINVAL;
  if (errno == ERANGE || v < min || v > max) return -ERANGE;
  *out = v;
  return 0;
}

int pst_parse_int_n(const char *text, size_t len, int64_t min, int64_t max, int64_t *out) {
  char buf[32];
  /* Longer than any int64_t, signs and leading zeros aside: not one we take. */
  if (len >= sizeof buf) return memchr(text, '.', len) ? -EINVAL : -ERANGE;
  memcpy(buf, text, len);
  buf[len] = '\0';
  return pst_parse_int(buf, min, max, out);
}

int pst_parse_int_flag(const char *flag, const char *text, int64_t min, int64_t max,
                       int64_t *out, char *err, size_t errlen) {
  int rc = pst_parse_int(text, min, max, out);
  if (rc < 0)
    snprintf(err, errlen, "%s: '%.40s' is %s from %lld to %lld", flag, text,
             rc == -ERANGE ? "out of range: it must be an integer" : "not an integer",
             (long long)min, (long long)max);
  return rc;
}

static int parse_value(pst_cfg_opt *o, const char *text, char *err, size_t errlen,
                       const char *where) {
  char *end;
  switch (o->type) {
    case PST_CFG_STRING:
      if (strlen(text) >= PST_CFG_STR_MAX) {
        snprintf(err, errlen, "%s: value of %s is too long", where, o->name);
        return -EINVAL;
      }
      strcpy((char *)o->value, text);
      return 0;
    case PST_CFG_INT: {
      int64_t v, lo = o->min != o->max ? o->min : INT64_MIN,
                 hi = o->min != o->max ? o->max : INT64_MAX;
      int rc = pst_parse_int(text, lo, hi, &v);
      if (rc == -EINVAL) {
        snprintf(err, errlen, "%s: %s wants an integer, got '%.40s'", where, o->name, text);
        return -EINVAL;
      }
      if (rc < 0) {
        snprintf(err, errlen, "%s: %s must be in %lld..%lld, got %.40s", where, o->name,
                 (long long)lo, (long long)hi, text);
        return -EINVAL;
      }
      *(int64_t *)o->value = v;
      return 0;
    }
    case PST_CFG_DOUBLE: {
      errno = 0;
      double v = strtod(text, &end);
      if (errno || end == text || *end != '\0' || !isfinite(v)) {
        snprintf(err, errlen, "%s: %s wants a number, got '%.40s'", where, o->name, text);
        return -EINVAL;
      }
      *(double *)o->value = v;
      return 0;
    }
    case PST_CFG_BOOL:
      if (!strcmp(text, "1") || !strcasecmp(text, "true") || !strcasecmp(text, "yes") ||
          !strcasecmp(text, "on")) {
        *(int *)o->value = 1;
      } else if (!strcmp(text, "0") || !strcasecmp(text, "false") || !strcasecmp(text, "no") ||
                 !strcasecmp(text, "off") || text[0] == '\0') {
        *(int *)o->value = 0;
      } else {
        snprintf(err, errlen, "%s: %s wants true or false, got '%.40s'", where, o->name, text);
        return -EINVAL;
      }
      return 0;
  }
  return -EINVAL;
}

int pst_cfg_set(pst_cfg *c, const char *name, const char *text, pst_cfg_source src,
                const char *origin, char *err, size_t errlen) {
  pst_cfg_opt *o = pst_cfg_find(c, name);
  if (!o) {
    snprintf(err, errlen, "%s: unknown option '%s'", origin, name);
    return -EINVAL;
  }
  int rc = parse_value(o, text, err, errlen, origin);
  if (rc < 0) return rc;
  o->source = src;
  snprintf(o->origin, sizeof o->origin, "%s", origin);
  return 0;
}

int pst_cfg_set_default(pst_cfg *c, const char *name, const char *text, pst_cfg_source src,
                        const char *origin, char *err, size_t errlen) {
  pst_cfg_opt *o = pst_cfg_find(c, name);
  if (o && o->source != PST_SRC_DEFAULT) return 0;
  return pst_cfg_set(c, name, text, src, origin, err, errlen);
}

int pst_cfg_set_defaults(pst_cfg *c, const char *const *names, const char *const *values, int n,
                         pst_cfg_source src, const char *origin, char *err, size_t errlen) {
  for (int i = 0; i < n; i++) {
    if (pst_cfg_find(c, names[i]) == NULL) continue;
    int rc = pst_cfg_set_default(c, names[i], values[i], src, origin, err, errlen);
    if (rc < 0) return rc;
  }
  return 0;
}

/* ---- the config file, through inih, with our own line counting ---- */

typedef struct {
  pst_cfg *c;
  FILE *f;
  int line;
  int failed;
  char *err;
  size_t errlen;
} file_ctx;

/* inih reads a line at most num - 1 bytes long (Debian's libinih: 199), and takes a line that
 * begins with a space after a key as more of that key's value. Both turned a file someone
 * wrote with care into other settings without a word: the rest of a longer line, when it
 * began with a space, replaced the key's value (a 203-byte `checkpoint-dir = ...` line set
 * it to the last word), and in an indented file the second key's line became the first
 * key's value (`  checkpoint-dir = /tmp/ck` then `  workers = 4`: checkpoint-dir
 * "workers = 4", workers left at 1). So this reader hands inih whole lines only, refusing a
 * longer one with its number, and each without its indentation: an indented line is a key
 * of its own, and no line continues another. */
static char *counting_reader(char *str, int num, void *stream) {
  file_ctx *fc = stream;
  if (fc->failed || !fgets(str, num, fc->f)) return NULL;
  fc->line++;
  size_t n = strlen(str);
  if (n == (size_t)num - 1 && str[n - 1] != '\n') {
    /* Whole when its newline or the file's end comes next. */
    int next = getc(fc->f);
    if (next != EOF && next != '\n') {
      snprintf(fc->err, fc->errlen, "%s:%d: a line longer than %d characters (the most this "
               "reader takes; give a longer value as a flag or in the environment)",
               fc->c->file_used, fc->line, num - 1);
      fc->failed = 1;
      return NULL;
    }
  }
  size_t lead = strspn(str, " \t");
  if (lead) memmove(str, str + lead, n - lead + 1);
  return str;
}

static int file_handler(void *user, const char *section, const char *name, const char *value) {
  file_ctx *fc = user;
  char where[PST_CFG_STR_MAX + 32];
  snprintf(where, sizeof where, "%s:%d", fc->c->file_used, fc->line);
  if (section[0] && strcmp(section, fc->c->section) != 0) {
    snprintf(fc->err, fc->errlen, "%s: unknown section [%s] (this file is for [%s])", where,
             section, fc->c->section);
    fc->failed = 1;
    return 0;
  }
  if (!pst_cfg_find(fc->c, name) || name_eq(name, "config")) {
    snprintf(fc->err, fc->errlen, "%s: unknown key '%s'", where, name);
    fc->failed = 1;
    return 0;
  }
  if (pst_cfg_set(fc->c, name, value, PST_SRC_FILE, where, fc->err, fc->errlen) < 0) {
    fc->failed = 1;
    return 0;
  }
  return 1;
}

static int load_file(pst_cfg *c, const char *path, int must_exist, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) {
    if (!must_exist && errno == ENOENT) return 0;
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -errno;
  }
  snprintf(c->file_used, sizeof c->file_used, "%s", path);
  file_ctx fc = {c, f, 0, 0, err, errlen};
  int rc = ini_parse_stream(counting_reader, &fc, file_handler, &fc);
  fclose(f);
  if (fc.failed) return -EINVAL;
  if (rc != 0) {
    snprintf(err, errlen, "%s:%d: not a valid 'key = value' line", path, rc > 0 ? rc : 0);
    return -EINVAL;
  }
  return 0;
}

static void env_name(const pst_cfg *c, const char *name, char *out, size_t outlen) {
  size_t n = (size_t)snprintf(out, outlen, "%s", c->env_prefix);
  for (const char *p = name; *p && n + 1 < outlen; p++)
    out[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
  out[n] = '\0';
}

int pst_cfg_load(pst_cfg *c, int argc, char **argv, char *err, size_t errlen) {
  const char *config_path = NULL;
  err[0] = '\0';
  c->print_config = c->help = 0;
  c->file_used[0] = '\0';
  /* 1. defaults */
  for (int i = 0; i < c->n_opts; i++) {
    pst_cfg_opt *o = &c->opts[i];
    if (parse_value(o, o->def ? o->def : (o->type == PST_CFG_STRING ? "" : "0"), err, errlen,
                    "default") < 0)
      return -EINVAL;
    o->source = PST_SRC_DEFAULT;
    snprintf(o->origin, sizeof o->origin, "default");
  }
  /* The file to read is itself a flag, so find it first. */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config")) {
      if (i + 1 >= argc) {
        snprintf(err, errlen, "--config needs a file name");
        return -EINVAL;
      }
      config_path = argv[i + 1];
    } else if (!strncmp(argv[i], "--config=", 9)) {
      config_path = argv[i] + 9;
    }
  }
  /* 2. file */
  int rc = config_path ? load_file(c, config_path, 1, err, errlen)
                       : (c->default_file ? load_file(c, c->default_file, 0, err, errlen) : 0);
  if (rc < 0) return rc;
  /* 3. environment */
  for (int i = 0; i < c->n_opts; i++) {
    char name[128];
    env_name(c, c->opts[i].name, name, sizeof name);
    const char *v = getenv(name);
    if (v && pst_cfg_set(c, c->opts[i].name, v, PST_SRC_ENV, name, err, errlen) < 0)
      return -EINVAL;
  }
  /* 4. flags */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      pst_cfg_usage(c, stdout);
      c->help = 1;
      return 0;
    }
    if (!strcmp(a, "--print-config")) {
      c->print_config = 1;
      continue;
    }
    if (strncmp(a, "--", 2) != 0) {
      snprintf(err, errlen, "unexpected argument '%.60s' (try --help)", a);
      return -EINVAL;
    }
    char name[128];
    const char *eq = strchr(a + 2, '=');
    size_t nlen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    if (nlen >= sizeof name) nlen = sizeof name - 1;
    memcpy(name, a + 2, nlen);
    name[nlen] = '\0';
    if (!strcmp(name, "config")) {
      if (!eq) i++;
      continue;
    }
    pst_cfg_opt *o = pst_cfg_find(c, name);
    if (!o) {
      snprintf(err, errlen, "unknown flag --%s (try --help)", name);
      return -EINVAL;
    }
    const char *val = eq ? eq + 1 : NULL;
    if (!val) {
      if (o->type == PST_CFG_BOOL && (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0 ||
                                      (strcmp(argv[i + 1], "true") && strcmp(argv[i + 1], "false")))) {
        val = "true";
      } else if (i + 1 < argc) {
        val = argv[++i];
      } else {
        snprintf(err, errlen, "--%s needs a value", name);
        return -EINVAL;
      }
    }
    char origin[160];
    snprintf(origin, sizeof origin, "--%s", o->name);
    if (pst_cfg_set(c, name, val, PST_SRC_FLAG, origin, err, errlen) < 0) return -EINVAL;
  }
  return 0;
}

static void format_value(const pst_cfg_opt *o, char *out, size_t outlen) {
  switch (o->type) {
    case PST_CFG_STRING: snprintf(out, outlen, "%s", (const char *)o->value); break;
    case PST_CFG_INT: snprintf(out, outlen, "%lld", (long long)*(int64_t *)o->value); break;
    case PST_CFG_DOUBLE: snprintf(out, outlen, "%g", *(double *)o->value); break;
    case PST_CFG_BOOL: snprintf(out, outlen, "%s", *(int *)o->value ? "true" : "false"); break;
  }
}

void pst_cfg_print(const pst_cfg *c, FILE *out) {
  fprintf(out, "# effective configuration of %s (config file: %s)\n", c->prog,
          c->file_used[0] ? c->file_used : "none");
  for (int i = 0; i < c->n_opts; i++) {
    char v[PST_CFG_STR_MAX];
    format_value(&c->opts[i], v, sizeof v);
    /* A default has no place it came from: "# default", not "# default: default". */
    if (c->opts[i].source == PST_SRC_DEFAULT)
      fprintf(out, "%-18s = %-28s # default\n", c->opts[i].name, v);
    else
      fprintf(out, "%-18s = %-28s # %s: %s\n", c->opts[i].name, v,
              source_name(c->opts[i].source), c->opts[i].origin);
  }
}

void pst_cfg_usage(const pst_cfg *c, FILE *out) {
  fprintf(out, "usage: %s [--config FILE] [--print-config] [--OPTION VALUE ...]\n\n", c->prog);
  fprintf(out, "Options (also config-file keys, and environment variables %sNAME):\n",
          c->env_prefix);
  for (int i = 0; i < c->n_opts; i++) {
    const pst_cfg_opt *o = &c->opts[i];
    if (o->def && o->def[0])
      fprintf(out, "  --%-18s %s (default: %s)\n", o->name, o->help, o->def);
    else
      fprintf(out, "  --%-18s %s\n", o->name, o->help);
  }
  if (c->default_file)
    fprintf(out, "  --%-18s read this config file (default: %s, if present)\n", "config FILE",
            c->default_file);
  else
    fprintf(out, "  --%-18s read options from this INI file\n", "config FILE");
  fprintf(out, "  --%-18s %s\n", "print-config", "print every effective value and its source");
  if (c->usage_extra) fprintf(out, "\n%s", c->usage_extra);
}

int pst_parse_hostport(const char *s, char *host, size_t hostlen, int *port) {
  const char *colon;
  const char *h = s;
  size_t hl;
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (!close || close[1] != ':') return -EINVAL;
    h = s + 1;
    hl = (size_t)(close - h);
    colon = close + 1;
  } else {
    colon = strrchr(s, ':');
    if (!colon) return -EINVAL;
    hl = (size_t)(colon - s);
  }
  if (hl == 0 || hl >= hostlen) return -EINVAL;
  /* A bracket belongs only around a whole IPv6 address: "d::1]:70" would otherwise be the host
   * "d::1]", which written back as an address ("[d::1]]:70") no longer parses (found by
   * fuzz_tf_config). */
  if (memchr(h, '[', hl) || memchr(h, ']', hl)) return -EINVAL;
  int64_t p;
  if (pst_parse_int(colon + 1, 1, 65535, &p) < 0 || colon[1] == '+' || colon[1] == '-')
    return -EINVAL;
  memcpy(host, h, hl);
  host[hl] = '\0';
  *port = (int)p;
  return 0;
}
