/* Daemon configuration: defaults, then a config file, then the environment, then flags,
 * each overriding the one before. Every option has one name used in all four places:
 *   flag      --batch-size 64   (or --batch-size=64)
 *   file      batch-size = 64   (or batch_size; INI syntax, parsed by inih; keys at the top
 *                                or in a section named after the program, e.g. [worker])
 *   env       PSTRAIN_WORKER_BATCH_SIZE=64   (the program's env prefix + upper-case name)
 * --config FILE names the file (it must then exist); otherwise the default file is read
 * when present. Unknown keys and flags are errors that name the file and line or flag.
 * --print-config prints every effective value and where it came from. */
#ifndef PSTRAIN_COMMON_CONFIG_H
#define PSTRAIN_COMMON_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PST_CFG_STR_MAX 512

typedef enum { PST_CFG_STRING, PST_CFG_INT, PST_CFG_DOUBLE, PST_CFG_BOOL } pst_cfg_type;
/* Where a value came from. PST_SRC_MODEL: a model spec's optimizer line (model/model.h),
 * which only ever replaces a built-in default. PST_SRC_KUBERNETES: what a pod's environment
 * implies (common/k8s.h), which likewise only fills in defaults. */
typedef enum {
  PST_SRC_DEFAULT = 0,
  PST_SRC_FILE,
  PST_SRC_ENV,
  PST_SRC_FLAG,
  PST_SRC_MODEL,
  PST_SRC_KUBERNETES,
} pst_cfg_source;

typedef struct {
  const char *name;   /* "batch-size" */
  pst_cfg_type type;
  void *value;        /* char[PST_CFG_STR_MAX] | int64_t | double | int (0/1) */
  const char *def;    /* default as text; NULL means empty string / 0 */
  const char *help;
  int64_t min, max;   /* PST_CFG_INT bounds (ignored when min == max) */
  pst_cfg_source source; /* set by the loader */
  char origin[160];      /* "/etc/pstrain/ps.conf:12", "PSTRAIN_PS_LISTEN", "--listen" */
} pst_cfg_opt;

/* One entry of an option table; min == max means no bounds. */
#define PST_OPT(name, type, value, def, help, min, max) \
  { name, type, value, def, help, min, max, PST_SRC_DEFAULT, "" }

typedef struct {
  const char *prog;          /* "pstrain-ps" */
  const char *section;       /* "ps": the INI section that is ours */
  const char *default_file;  /* "/etc/pstrain/ps.conf" */
  const char *env_prefix;    /* "PSTRAIN_PS_" */
  const char *usage_extra;   /* text printed after the option list, or NULL */
  pst_cfg_opt *opts;
  int n_opts;
  /* Results besides the options: */
  int print_config;          /* --print-config given */
  int help;                  /* --help given (usage already printed) */
  char file_used[PST_CFG_STR_MAX];
} pst_cfg;

/* Loads everything. Returns 0, or a negative code with a one-line reason in err. */
int pst_cfg_load(pst_cfg *c, int argc, char **argv, char *err, size_t errlen);
void pst_cfg_print(const pst_cfg *c, FILE *out);
void pst_cfg_usage(const pst_cfg *c, FILE *out);
/* Sets an option from code (source FLAG, origin as given), e.g. from TF_CONFIG. */
int pst_cfg_set(pst_cfg *c, const char *name, const char *text, pst_cfg_source src,
                const char *origin, char *err, size_t errlen);
/* pst_cfg_set, but only while the option is still at its default: for values derived from
 * something less explicit than the config file, the environment and flags (TF_CONFIG, a
 * systemd instance name). Returns 0 also when it leaves the option alone. */
int pst_cfg_set_default(pst_cfg *c, const char *name, const char *text, pst_cfg_source src,
                        const char *origin, char *err, size_t errlen);
/* pst_cfg_set_default for each of n name/value pairs. Names this program has no option for
 * are skipped: they are meant for another program (the launcher has no Adam betas, the ps
 * it starts has). */
int pst_cfg_set_defaults(pst_cfg *c, const char *const *names, const char *const *values, int n,
                         pst_cfg_source src, const char *origin, char *err, size_t errlen);
pst_cfg_opt *pst_cfg_find(pst_cfg *c, const char *name);

/* The one integer parser for flags, config values and the numbers inside them: text must be
 * a whole decimal integer, an optional sign then digits only (no space, no fraction, no
 * exponent, nothing after it), within [min, max]. 0 with *out set; -EINVAL for text that is
 * not such an integer (empty, "1.5", "1e300", "2x"), -ERANGE for one outside [min, max]
 * (overflow included). *out is left alone on error. */
int pst_parse_int(const char *text, int64_t min, int64_t max, int64_t *out);
/* pst_parse_int for a flag's value, with the reason as one line naming the flag in err:
 * "--workers: '2x' is not an integer from 1 to 4096". */
int pst_parse_int_flag(const char *flag, const char *text, int64_t min, int64_t max,
                       int64_t *out, char *err, size_t errlen);
/* pst_parse_int of the first len characters of text (a part of "I:N" or "A,B,C"). */
int pst_parse_int_n(const char *text, size_t len, int64_t min, int64_t max, int64_t *out);

/* Parses "host:port" ("[v6]:port" too) into host[hostlen] and *port. */
int pst_parse_hostport(const char *s, char *host, size_t hostlen, int *port);

#endif
