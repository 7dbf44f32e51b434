/* `pstrain bench`: the sweep, pstrain's side of each cell, the table and the JSON file.
 *
 * For each size S and client count N: first the raw TCP baseline (launcher/bench/bench_tcp.c),
 * then a pstrain-ps with a synthetic model of S bytes ("input A" / "dense K softmax", which
 * has (A + 1) x K floats) in sync mode with SGD (no optimizer slots, so the ps's memory
 * bound is 2 x S + 32 MiB), and N pstrain-benchclient processes doing the same rounds.
 * With --shards K there are K ps processes, each holding its part of the S bytes
 * (kernels/partition.h), and each client is K benchclient processes, one per shard, each
 * doing its rounds against its shard: the figures then count K x N client processes, each
 * round moving one shard's part. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cjson/cJSON.h>
#include <uv.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/json_file.h"
#include "common/proc.h"
#include "common/tls.h"
#include "common/tls_pki.h"
#include "launcher/bench/bench.h"
#include "launcher/bench/bench_ps.h"
#include "launcher/bench/bench_tls.h"
#include "launcher/commands.h"
#include "launcher/common/helpers.h"
#include "launcher/run/run_files.h"

#define MAX_CELLS 64
#define MAX_CLIENTS 64
#define MIB (1024.0 * 1024.0)
#define MAX_SUITES PL_BENCH_MAX_SUITES

static char f_sizes[PST_CFG_STR_MAX], f_clients[PST_CFG_STR_MAX], f_json[PST_CFG_STR_MAX];
static char f_run_dir[PST_CFG_STR_MAX];
static int64_t f_rounds, f_warmup, f_chunk, f_repeat, f_ps_threads, f_shards;
static double f_seconds;
static int f_tls;
static char f_tls_suites[PST_CFG_STR_MAX];

static pst_cfg_opt g_opts[] = {
    PST_OPT("sizes", PST_CFG_STRING, f_sizes, "4K,1M,16M,100M", "tensor sizes (bytes; K, M, G = KiB, MiB, GiB)", 0, 0),
    PST_OPT("clients", PST_CFG_STRING, f_clients, "1,2,4", "client counts N", 0, 0),
    PST_OPT("rounds", PST_CFG_INT, &f_rounds, "0", "timed rounds per cell (0: from --seconds)", 0, 10000000),
    PST_OPT("seconds", PST_CFG_DOUBLE, &f_seconds, "0.5", "aim for about this long per run (when --rounds is 0)", 0, 0),
    PST_OPT("repeat", PST_CFG_INT, &f_repeat, "3", "runs of each side per cell; the best one counts", 1, 100),
    PST_OPT("warmup", PST_CFG_INT, &f_warmup, "2", "untimed rounds before the timed ones", 0, 100000),
    PST_OPT("chunk-kib", PST_CFG_INT, &f_chunk, "4096", "the ps's tensor chunk on the wire (KiB)", 4, 262144),
    PST_OPT("ps-threads", PST_CFG_INT, &f_ps_threads, "1", "the ps's --threads (0: every core it may use)", 0, 1024),
    PST_OPT("shards", PST_CFG_INT, &f_shards, "1", "ps shards the weights are split over (each client talks to all)", 1, 16),
    PST_OPT("json", PST_CFG_STRING, f_json, "", "write every figure to this file", 0, 0),
    PST_OPT("run-dir", PST_CFG_STRING, f_run_dir, "", "logs here (default: a new /tmp dir)", 0, 0),
    PST_OPT("tls", PST_CFG_BOOL, &f_tls, "false", "also measure what TLS costs: a libuv echo of the same rounds, plain and with mutual TLS 1.3", 0, 0),
    PST_OPT("tls-suites", PST_CFG_STRING, f_tls_suites, "default", "with --tls: TLS 1.3 suites, comma-separated: default (OpenSSL's), aes256, aes128, chacha20, or OpenSSL names", 0, 0),
};

typedef pl_bench_cell cell;

/* --tls-suites: OpenSSL suite lists ("" for its default) and their names in the table. */
static char g_suite_list[MAX_SUITES][128], g_suite_name[MAX_SUITES][128];
static int g_n_suites;

static int parse_suites(const char *s) {
  static const char *alias[][2] = {{"default", ""},
                                   {"aes256", "TLS_AES_256_GCM_SHA384"},
                                   {"aes128", "TLS_AES_128_GCM_SHA256"},
                                   {"chacha20", "TLS_CHACHA20_POLY1305_SHA256"}};
  g_n_suites = 0;
  while (*s) {
    size_t len = strcspn(s, ",");
    if (len == 0 || len >= sizeof g_suite_list[0] || g_n_suites == MAX_SUITES) return -EINVAL;
    char word[128];
    memcpy(word, s, len);
    word[len] = '\0';
    const char *list = word;
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
      if (!strcmp(word, alias[i][0])) list = alias[i][1];
    snprintf(g_suite_list[g_n_suites], sizeof g_suite_list[0], "%s", list);
    snprintf(g_suite_name[g_n_suites], sizeof g_suite_name[0], "%s", word);
    g_n_suites++;
    s += len;
    if (*s == ',') s++;
  }
  return g_n_suites > 0 ? 0 : -EINVAL;
}

/* "4K,1M,16M" into byte counts. */
static int parse_sizes(const char *s, size_t *out, int max) {
  int n = 0;
  while (*s && n < max) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0)) return -EINVAL;
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    if (*end && *end != ',') return -EINVAL;
    double b = v * mul;
    if (b < 32 || b > 1024.0 * 1024 * 1024) return -ERANGE;
    out[n++] = (size_t)b;
    s = *end ? end + 1 : end;
  }
  return *s ? -E2BIG : n;
}

/* A model of F floats: (A + 1) x K = F with K <= 65536 and 1 <= A <= 65536 (the spec
 * parser's limits); when F has no such factors, the nearest multiple of 65536. */
static void model_for(size_t bytes, int *input, int *units) {
  size_t f = bytes / 4;
  for (size_t k = f / 2 < 65536 ? f / 2 : 65536; k >= 1; k--)
    if (f % k == 0 && f / k >= 2 && f / k - 1 <= 65536) {
      *units = (int)k;
      *input = (int)(f / k - 1);
      return;
    }
  size_t a1 = (f + 32768) / 65536;
  if (a1 < 2) a1 = 2;
  if (a1 > 65537) a1 = 65537;
  *units = 65536;
  *input = (int)a1 - 1;
}

/* ---- output ---- */

static void machine_line(char *out, size_t outlen) {
  char model[128] = "unknown CPU", line[256];
  FILE *f = fopen("/proc/cpuinfo", "r");
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
      snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
      model[strcspn(model, "\n")] = '\0';
      break;
    }
  if (f) fclose(f);
  struct utsname u;
  uname(&u);
  uint64_t mem = uv_get_total_memory();
  snprintf(out, outlen, "%s, %ld CPUs, %.0f GiB, Linux %s", model, sysconf(_SC_NPROCESSORS_ONLN),
           mem / (1024.0 * 1024 * 1024), u.release);
}

static void size_name(size_t b, char *out, size_t outlen) {
  if (b >= 1024 * 1024 && b % (1024 * 1024) == 0) snprintf(out, outlen, "%zu MiB", b >> 20);
  else if (b >= 1024 * 1024) snprintf(out, outlen, "%.2f MiB", b / MIB);
  else if (b % 1024 == 0) snprintf(out, outlen, "%zu KiB", b >> 10);
  else snprintf(out, outlen, "%zu B", b);
}

static void print_header(void) {
  printf("%-9s %2s %6s | %6s %6s %6s %8s %8s | %6s %8s | %5s | %4s %4s %4s | %7s %7s\n", "size",
         "N", "rounds", "push", "pull", "comb", "p50", "p99", "raw", "raw p50", "ratio", "ps",
         "loop", "raw", "ps peak", "bound");
  printf("%-9s %2s %6s | %6s %6s %6s %8s %8s | %6s %8s | %5s | %4s %4s %4s | %7s %7s\n", "", "",
         "", "GB/s", "GB/s", "GB/s", "us", "us", "GB/s", "us", "", "cpu", "cpu", "cpu", "MiB",
         "MiB");
}

/* CPU seconds over the timed rounds, in percent of one CPU. */
static double pct(double cpu_s, const pl_bench_figs *f) {
  return cpu_s >= 0 && f->wall_s > 0 ? 100 * cpu_s / f->wall_s : -1;
}

/* A server's CPU use over the timed rounds, in percent of one CPU. */
static double cpu_pct(const pl_bench_figs *f) { return pct(f->server_cpu_s, f); }

static void print_cell(const cell *c) {
  char sz[32];
  size_name(c->bytes, sz, sizeof sz);
  if (!c->ps_ok || !c->raw_ok) {
    printf("%-9s %2d %6ld | failed: %s\n", sz, c->clients, c->rounds, c->why);
    return;
  }
  printf("%-9s %2d %6ld | %6.2f %6.2f %6.2f %8.1f %8.1f | %6.2f %8.1f | %5.2f | %3.0f%% %3.0f%% "
         "%3.0f%% | %7.1f %7.1f%s\n",
         sz, c->clients, c->rounds, c->ps.push_rate / 1e9, c->ps.pull_rate / 1e9,
         c->ps.combined_rate / 1e9, c->ps.p50_s * 1e6, c->ps.p99_s * 1e6,
         c->raw.combined_rate / 1e9, c->raw.p50_s * 1e6,
         c->raw.combined_rate > 0 ? c->ps.combined_rate / c->raw.combined_rate : 0,
         cpu_pct(&c->ps), pct(c->ps.server_loop_cpu_s, &c->ps), cpu_pct(&c->raw),
         c->ps.peak_rss_kib / 1024.0, c->bound_kib / 1024.0,
         c->ps.peak_rss_kib > c->bound_kib ? " OVER" : "");
  fflush(stdout);
}

static void json_figs(cJSON *parent, const char *name, const pl_bench_figs *x) {
  cJSON *o = cJSON_AddObjectToObject(parent, name);
  cJSON_AddNumberToObject(o, "rounds", (double)x->rounds);
  cJSON_AddNumberToObject(o, "wall_s", x->wall_s);
  cJSON_AddNumberToObject(o, "push_gbps", x->push_rate / 1e9);
  cJSON_AddNumberToObject(o, "pull_gbps", x->pull_rate / 1e9);
  cJSON_AddNumberToObject(o, "combined_gbps", x->combined_rate / 1e9);
  cJSON_AddNumberToObject(o, "p50_us", x->p50_s * 1e6);
  cJSON_AddNumberToObject(o, "p99_us", x->p99_s * 1e6);
  cJSON_AddNumberToObject(o, "peak_rss_kib", (double)x->peak_rss_kib);
  cJSON_AddNumberToObject(o, "server_cpu_s", x->server_cpu_s);
  cJSON_AddNumberToObject(o, "server_loop_cpu_s", x->server_loop_cpu_s);
  cJSON_AddNumberToObject(o, "clients_cpu_s", x->clients_cpu_s);
}

/* --tls: the libuv echo of cell c, plain and with each suite; each keeps its best run. */
static void run_tls(cell *c, const char *dir, int rep) {
  char why[256], suite[64];
  pl_bench_figs f;
  pl_bench_tls_opts o = {.pki_dir = NULL, .suites = NULL, .chunk = (size_t)f_chunk * 1024};
  if (rep == 0) c->uv_ok = 1;
  if (!c->uv_ok) return;
  c->uv_ok = pl_bench_uv(c->bytes, c->clients, c->rounds, f_warmup, &o, &f, suite, sizeof suite,
                         why, sizeof why) == 0;
  if (c->uv_ok && f.combined_rate > c->uv.combined_rate) c->uv = f;
  o.pki_dir = dir;
  for (int k = 0; k < g_n_suites && c->uv_ok; k++) {
    o.suites = g_suite_list[k];
    c->uv_ok = pl_bench_uv(c->bytes, c->clients, c->rounds, f_warmup, &o, &f, suite,
                           sizeof suite, why, sizeof why) == 0;
    if (c->uv_ok && f.combined_rate > c->tls[k].combined_rate) {
      c->tls[k] = f;
      /* "TLSv1.3 TLS_AES_256_GCM_SHA384, peer ..." -> the suite's name. */
      const char *p = strncmp(suite, "TLSv1.3 ", 8) == 0 ? suite + 8 : suite;
      snprintf(c->suite[k], sizeof c->suite[k], "%.*s", (int)strcspn(p, ","), p);
    }
  }
  if (!c->uv_ok) snprintf(c->why, sizeof c->why, "%s", why);
}

static void print_tls(const cell *cells, int n) {
  printf("\nTLS (common/tls.h, as the daemons use it with --tls-*): a libuv echo of the same "
         "rounds, each\nclient pushing S bytes in %lld KiB chunk writes (header + payload "
         "pointer) and the server\nanswering with S bytes the same way, through pst_tls_stream: "
         "plain (no context: libuv's own\ncalls) and with mutual TLS 1.3. vs plain = comb / "
         "plain comb; vs raw = comb / raw comb.\n\n", (long long)f_chunk);
  printf("%-9s %2s %-40s | %6s %6s %6s %9s | %5s %5s | %4s %5s\n", "size", "N", "variant", "push",
         "pull", "comb", "p50", "vs", "vs", "srv", "cl");
  printf("%-9s %2s %-40s | %6s %6s %6s %9s | %5s %5s | %4s %5s\n", "", "", "", "GB/s", "GB/s",
         "GB/s", "us", "plain", "raw", "cpu", "cpu");
  for (int i = 0; i < n; i++) {
    const cell *c = &cells[i];
    char sz[32];
    size_name(c->bytes, sz, sizeof sz);
    if (!c->uv_ok) {
      printf("%-9s %2d failed: %s\n", sz, c->clients, c->why);
      continue;
    }
    for (int k = -2; k < g_n_suites; k++) {
      const pl_bench_figs *f = k == -2 ? &c->raw : k == -1 ? &c->uv : &c->tls[k];
      char name[80];
      if (k == -2) snprintf(name, sizeof name, "raw TCP (poll, 1 MiB writes)");
      else if (k == -1) snprintf(name, sizeof name, "plain (libuv)");
      else if (!strcmp(g_suite_name[k], c->suite[k])) snprintf(name, sizeof name, "TLS %s", c->suite[k]);
      else snprintf(name, sizeof name, "TLS %s: %s", g_suite_name[k], c->suite[k]);
      double cl_pct = f->wall_s > 0 ? 100 * f->clients_cpu_s / f->wall_s : -1;
      printf("%-9s %2d %-40.40s | %6.2f %6.2f %6.2f %9.1f | %5.2f %5.2f | %3.0f%% %4.0f%%\n", sz,
             c->clients, name, f->push_rate / 1e9, f->pull_rate / 1e9, f->combined_rate / 1e9,
             f->p50_s * 1e6, c->uv.combined_rate > 0 ? f->combined_rate / c->uv.combined_rate : 0,
             c->raw.combined_rate > 0 ? f->combined_rate / c->raw.combined_rate : 0, cpu_pct(f),
             cl_pct);
    }
  }
  printf("srv cpu = the server's CPU use, cl cpu = all clients' together, %% of one CPU.\n");
  fflush(stdout);
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

static int write_json(const char *path, const cell *cells, int n, const char *machine,
                      const char *command, const char *date, double load0, double load1) {
  cJSON *doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "date", date);
  cJSON_AddStringToObject(doc, "machine", machine);
  cJSON_AddStringToObject(doc, "command", command);
  cJSON_AddNumberToObject(doc, "load_start", load0);
  cJSON_AddNumberToObject(doc, "load_end", load1);
  cJSON_AddNumberToObject(doc, "repeat", (double)f_repeat);
  cJSON_AddStringToObject(doc, "mode", "sync");
  cJSON_AddStringToObject(doc, "optimizer", "sgd");
  cJSON_AddNumberToObject(doc, "optimizer_slots", 0);
  cJSON_AddNumberToObject(doc, "chunk_kib", (double)f_chunk);
  cJSON_AddNumberToObject(doc, "ps_shards", (double)f_shards);
  cJSON_AddNumberToObject(doc, "ps_threads", (double)f_ps_threads);
  cJSON_AddStringToObject(doc, "memory_bound", "weights x (2 + 0 slots) + 32 MiB");
  cJSON *arr = cJSON_AddArrayToObject(doc, "cells");
  for (int i = 0; i < n; i++) {
    const cell *c = &cells[i];
    char model[64];
    snprintf(model, sizeof model, "input %d / dense %d softmax", c->input, c->units);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(arr, o);
    cJSON_AddNumberToObject(o, "bytes", (double)c->bytes);
    cJSON_AddNumberToObject(o, "clients", c->clients);
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddBoolToObject(o, "ok", c->ps_ok && c->raw_ok);
    json_figs(o, "pstrain", &c->ps);
    json_figs(o, "raw_tcp", &c->raw);
    cJSON_AddNumberToObject(o, "ratio", ratio(c->ps.combined_rate, c->raw.combined_rate));
    cJSON_AddNumberToObject(o, "ps_peak_rss_kib", (double)c->ps.peak_rss_kib);
    cJSON_AddNumberToObject(o, "memory_bound_kib", (double)c->bound_kib);
    cJSON_AddBoolToObject(o, "within_bound", c->ps.peak_rss_kib <= c->bound_kib);
    if (f_tls && c->uv_ok) {
      json_figs(o, "uv_plain", &c->uv);
      cJSON *tls = cJSON_AddArrayToObject(o, "tls");
      for (int k = 0; k < g_n_suites; k++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddItemToArray(tls, t);
        cJSON_AddStringToObject(t, "asked", g_suite_name[k]);
        cJSON_AddStringToObject(t, "suite", c->suite[k]);
        json_figs(t, "figures", &c->tls[k]);
        cJSON_AddNumberToObject(t, "ratio_uv_plain",
                                ratio(c->tls[k].combined_rate, c->uv.combined_rate));
        cJSON_AddNumberToObject(t, "ratio_raw", ratio(c->tls[k].combined_rate, c->raw.combined_rate));
      }
    }
  }
  int rc = pst_json_write_file(path, doc, 1);
  cJSON_Delete(doc);
  return rc;
}

int pl_cmd_bench(int argc, char **argv) {
  char err[600];
  pst_cfg cfg = {.prog = "pstrain bench", .section = "bench", .env_prefix = "PSTRAIN_BENCH_",
                 .usage_extra =
                     "Measures push/pull throughput and round latency of a pstrain-ps (sync mode,\n"
                     "SGD, synthetic model of each size) with N benchmark clients, against a raw\n"
                     "loopback TCP baseline moving the same bytes in 1 MiB writes.\n",
                 .opts = g_opts, .n_opts = (int)(sizeof g_opts / sizeof g_opts[0])};
  if (pst_cfg_load(&cfg, argc, argv, err, sizeof err) < 0) {
    fprintf(stderr, "pstrain bench: %s\n", err);
    return 2;
  }
  if (cfg.help) return 0;
  size_t sizes[16];
  int clients[16];
  int n_sizes = parse_sizes(f_sizes, sizes, 16);
  int n_clients = pl_parse_int_list(f_clients, clients, 16, 1, MAX_CLIENTS);
  if (n_sizes <= 0 || n_clients <= 0 || n_sizes * n_clients > MAX_CELLS) {
    fprintf(stderr, "pstrain bench: --sizes wants up to 16 sizes like 4K,1M,100M (32 B..1 GiB) "
                    "and --clients up to 16 counts in 1..%d\n", MAX_CLIENTS);
    return 2;
  }
  char ps_bin[PATH_MAX], cl_bin[PATH_MAX], dir[PATH_MAX];
  if (pl_find_binary("pstrain-ps", "ps", ps_bin, sizeof ps_bin) < 0 ||
      pl_find_binary("pstrain-benchclient", "tools", cl_bin, sizeof cl_bin) < 0) {
    fprintf(stderr, "pstrain bench: cannot find pstrain-ps and pstrain-benchclient (build "
                    "//launcher:pstrain, or set PSTRAIN_PS_BIN / PSTRAIN_BENCHCLIENT_BIN)\n");
    return 1;
  }
  if (pl_make_run_dir(f_run_dir[0] ? f_run_dir : NULL, dir, sizeof dir) < 0) return 1;
  signal(SIGPIPE, SIG_IGN);
  if (f_tls) {
    if (parse_suites(f_tls_suites) < 0) {
      fprintf(stderr, "pstrain bench: --tls-suites wants up to %d comma-separated suites "
                      "(default, aes256, aes128, chacha20, or OpenSSL names)\n", MAX_SUITES);
      return 2;
    }
    /* A throwaway CA and certificates for the echo, in the run directory. */
    if (pst_tls_pki_make(dir, "bench", err, sizeof err) < 0) {
      fprintf(stderr, "pstrain bench: %s\n", err);
      return 1;
    }
    /* A suite OpenSSL does not know fails here, not in every cell's children. */
    char cert[PATH_MAX], key[PATH_MAX], ca[PATH_MAX];
    pst_tls_pki_path(cert, sizeof cert, dir, "bench", "server.pem");
    pst_tls_pki_path(key, sizeof key, dir, "bench", "server.key");
    pst_tls_pki_path(ca, sizeof ca, dir, "bench", "ca.pem");
    pst_tls_ctx *probe = NULL;
    int rc = pst_tls_ctx_new(PST_TLS_SERVER, cert, key, ca, &probe, err, sizeof err);
    for (int k = 0; k < g_n_suites && rc == 0; k++)
      rc = pst_tls_ctx_set_ciphersuites(probe, g_suite_list[k], err, sizeof err);
    pst_tls_ctx_free(probe);
    if (rc < 0) {
      fprintf(stderr, "pstrain bench: --tls-suites: %s\n", err);
      return 2;
    }
  }

  char machine[400], command[1024], date[64];
  machine_line(machine, sizeof machine);
  size_t cl = (size_t)snprintf(command, sizeof command, "pstrain bench");
  for (int i = 1; i < argc && cl < sizeof command - 1; i++)
    cl += (size_t)snprintf(command + cl, sizeof command - cl, " %s", argv[i]);
  time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %z", localtime(&now));
  double load[3] = {0, 0, 0}, load_end = 0;
  FILE *lf = fopen("/proc/loadavg", "r");
  if (lf) {
    if (fscanf(lf, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = 0;
    fclose(lf);
  }
  printf("pstrain bench: %s (load average %.2f %.2f %.2f)\n%s; sync mode, SGD (0 optimizer slots), chunk %lld KiB, %lld ps shard%s x %lld thread%s; logs in %s\n"
         "GB/s = 1e9 bytes/s. comb = bytes pushed + pulled by all clients / wall time; ratio = "
         "comb / raw comb.\n\n",
         date, load[0], load[1], load[2], machine, (long long)f_chunk, (long long)f_shards,
         f_shards == 1 ? "" : "s", (long long)f_ps_threads, f_ps_threads == 1 ? "" : "s", dir);
  if (load[0] > 0.5)
    printf("warning: the machine is busy (load %.2f): the figures will be disturbed.\n\n", load[0]);
  print_header();

  static cell cells[MAX_CELLS];
  int n = 0, all_ok = 1;
  const pl_bench_ps_opts pso = {(int)f_shards, (long long)f_chunk, (long long)f_ps_threads};
  for (int si = 0; si < n_sizes; si++)
    for (int ci = 0; ci < n_clients; ci++) {
      cell *c = &cells[n++];
      memset(c, 0, sizeof *c);
      c->clients = clients[ci];
      model_for(sizes[si], &c->input, &c->units);
      c->bytes = (size_t)(c->input + 1) * (size_t)c->units * 4;
      double per_round = 2.0 * (double)c->bytes * c->clients;
      c->rounds = f_rounds > 0 ? (long)f_rounds : (long)(f_seconds * 2.5e9 / per_round);
      if (f_rounds == 0 && c->rounds < 6) c->rounds = 6;
      if (f_rounds == 0 && c->rounds > 3000) c->rounds = 3000;
      c->bound_kib = (long)(2 * c->bytes / 1024) + 32 * 1024;
      /* The two sides alternate, f_repeat times each; each keeps its best run (by combined
       * throughput), so that a burst of other load on the machine hurts neither for long. */
      c->raw_ok = c->ps_ok = 1;
      long peak = -1;
      /* With --tls, the TLS echo goes on after a failed pstrain run: it does not use the ps. */
      for (int rep = 0; rep < f_repeat && c->raw_ok && (c->ps_ok || f_tls); rep++) {
        pl_bench_figs f;
        c->raw_ok = pl_bench_tcp(c->bytes, c->clients, c->rounds, f_warmup, &f, c->why,
                                 sizeof c->why) == 0;
        if (c->raw_ok && f.combined_rate > c->raw.combined_rate) c->raw = f;
        if (c->ps_ok)
          c->ps_ok = c->raw_ok && pl_bench_pstrain(c, &pso, dir, ps_bin, cl_bin, f_warmup, &f) == 0;
        if (c->ps_ok && f.combined_rate > c->ps.combined_rate) c->ps = f;
        if (c->ps_ok && f.peak_rss_kib > peak) peak = f.peak_rss_kib;
        if (f_tls && c->raw_ok) run_tls(c, dir, rep);
        if (f_tls && !c->uv_ok) break;
      }
      c->ps.peak_rss_kib = peak;
      if (!c->ps_ok || !c->raw_ok || (f_tls && !c->uv_ok)) all_ok = 0;
      print_cell(c);
    }
  if (f_tls) print_tls(cells, n);
  FILE *lf2 = fopen("/proc/loadavg", "r");
  if (lf2) {
    if (fscanf(lf2, "%lf", &load_end) != 1) load_end = 0;
    fclose(lf2);
  }
  printf("\nload average at the end: %.2f\n", load_end);
  printf("cpu = the ps's (raw: the server's) CPU use over the timed rounds, %% of one CPU;\n"
         "loop = the part of it on its event-loop thread, which cannot pass 100%%.\n"
         "ps peak = the ps's VmHWM; bound = weights x (2 + 0 slots) + 32 MiB.\n");
  if (f_json[0]) {
    int rc = write_json(f_json, cells, n, machine, command, date, load[0], load_end);
    if (rc < 0) {
      fprintf(stderr, "pstrain bench: cannot write %s: %s\n", f_json, strerror(-rc));
      return 1;
    }
    printf("figures written to %s\n", f_json);
  }
  return all_ok ? 0 : 1;
}
