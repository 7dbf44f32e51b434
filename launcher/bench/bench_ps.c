/* `pstrain bench`: pstrain's side of one cell (launcher/bench/bench_ps.h): K pstrain-ps
 * processes holding a synthetic model of the cell's size, N x K pstrain-benchclient processes
 * doing the rounds, their figures read back. */
#include "launcher/bench/bench_ps.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cjson/cJSON.h>

#include "common/clock.h"
#include "common/proc.h"
#include "launcher/common/helpers.h"

static pid_t spawn_logged(char **argv, const char *log) {
  fflush(NULL);
  pid_t p = fork();
  if (p != 0) return p;
  int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  int nul = open("/dev/null", O_RDONLY);
  if (nul >= 0) dup2(nul, 0);
  execv(argv[0], argv);
  fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

/* Whether something listens on 127.0.0.1:port. */
static int port_open(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

/* Waits for every pid (deadline in seconds); the ps's (pids[0]) peak RSS comes from wait4.
 * Returns 0 when all exited 0. */
static int wait_all(pid_t *pids, int n, double deadline, long *ps_maxrss_kib) {
  int left = n, bad = 0;
  int *done = calloc((size_t)n, sizeof *done);
  if (!done) return -ENOMEM;
  /* A pid that never started (fork failed, -1) must never reach wait4 or kill: kill(-1)
   * would signal every process of this user. */
  for (int i = 0; i < n; i++)
    if (pids[i] <= 0) {
      done[i] = 1;
      left--;
      bad = 1;
    }
  while (left > 0) {
    for (int i = 0; i < n; i++) {
      if (done[i]) continue;
      int st;
      struct rusage ru;
      pid_t r = wait4(pids[i], &st, WNOHANG, &ru);
      if (r == 0) continue;
      done[i] = 1;
      left--;
      if (r < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
      if (i == 0 && r > 0) *ps_maxrss_kib = ru.ru_maxrss;
    }
    if (left == 0) break;
    if (bad || pst_now() > deadline) {
      bad = 1;
      for (int i = 0; i < n; i++)
        if (!done[i]) kill(pids[i], SIGKILL);
      deadline = pst_now() + 5;
    }
    /* The clients time their own rounds, so exits need not be noticed at once; polling
     * faster would only take CPU from the processes being measured (the raw baseline's
     * launcher blocks in waitpid). */
    usleep(50000);
  }
  free(done);
  return bad ? -EIO : 0;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = len >= 0 ? malloc((size_t)len + 1) : NULL;
  if (s) s[fread(s, 1, (size_t)len, f)] = '\0';
  fclose(f);
  return s;
}

/* A number from a figures object, or -1 where it is missing (as a client that failed
 * before writing it leaves it). */
static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* One client's figures file (tools/benchclient.c, write_out) into c (lat allocated). */
static int load_client(const char *path, pl_bench_client *c, long *hwm_kib) {
  char *s = read_file(path);
  if (!s) return -ENOENT;
  cJSON *o = cJSON_Parse(s);
  free(s);
  if (!o) return -EPROTO;
  c->t_first = num(o, "t_first");
  c->t_last = num(o, "t_last");
  c->push_s = num(o, "push_s");
  c->pull_s = num(o, "pull_s");
  c->rounds = (long)num(o, "rounds");
  c->server_cpu_s = num(o, "ps_cpu_s");
  c->server_loop_cpu_s = num(o, "ps_loop_cpu_s");
  c->cpu_s = num(o, "cpu_s");
  long hwm = (long)num(o, "ps_hwm_kib");
  if (hwm > *hwm_kib) *hwm_kib = hwm;
  const cJSON *lat = cJSON_GetObjectItemCaseSensitive(o, "lat_s");
  int ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ok")) && c->rounds > 0 &&
           cJSON_IsArray(lat) && cJSON_GetArraySize(lat) == c->rounds;
  c->lat = ok ? calloc((size_t)c->rounds, sizeof *c->lat) : NULL;
  if (c->lat) {
    long r = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, lat) c->lat[r++] = cJSON_IsNumber(v) ? v->valuedouble : 0;
  }
  cJSON_Delete(o);
  return ok && c->lat ? 0 : -EPROTO;
}

int pl_bench_pstrain(pl_bench_cell *ce, const pl_bench_ps_opts *o, const char *dir,
                     const char *ps_bin, const char *cl_bin, long warmup, pl_bench_figs *out) {
  char spec[PATH_MAX + 64], ps_log[PATH_MAX + 64];
  snprintf(spec, sizeof spec, "%s/model-%zu.spec", dir, ce->bytes);
  FILE *f = fopen(spec, "w");
  if (!f) {
    snprintf(ce->why, sizeof ce->why, "cannot write %.200s", spec);
    return -errno;
  }
  fprintf(f, "# pstrain bench: %zu bytes of parameters\ninput %d\ndense %d softmax\n", ce->bytes,
          ce->input, ce->units);
  fclose(f);
  int k = o->shards, nc = ce->clients * k; /* ps processes; client processes */
  pid_t *pids = calloc((size_t)(k + nc), sizeof *pids);
  char (*outs)[PATH_MAX + 64] = calloc((size_t)nc, sizeof *outs);
  int ports[16], n = 0;
  if (!pids || !outs) {
    free(pids);
    free(outs);
    snprintf(ce->why, sizeof ce->why, "out of memory");
    return -ENOMEM;
  }
  for (int s = 0; s < k; s++) {
    ports[s] = pl_free_port();
    char a_listen[64], a_model[PATH_MAX + 96], a_workers[32], a_chunk[32], a_threads[32],
        a_shard[32];
    snprintf(a_listen, sizeof a_listen, "--listen=127.0.0.1:%d", ports[s]);
    snprintf(a_model, sizeof a_model, "--model=%s", spec);
    snprintf(a_workers, sizeof a_workers, "--workers=%d", ce->clients);
    snprintf(a_chunk, sizeof a_chunk, "--chunk-kib=%lld", o->chunk_kib);
    snprintf(a_threads, sizeof a_threads, "--threads=%lld", o->ps_threads);
    snprintf(a_shard, sizeof a_shard, "--shard=%d/%d", s, k);
    char *ps_argv[] = {(char *)ps_bin, a_listen, a_model, "--mode=sync", a_workers, a_chunk,
                       a_threads, a_shard, "--optimizer=sgd", "--lr=1e-9", "--epochs=1",
                       /* Constant synthetic gradients, not training: the default norm rule
                        * would take them for poison. */
                       "--grad-norm-factor=0", "--status-interval=0", "--log-level=warning",
                       NULL};
    snprintf(ps_log, sizeof ps_log, "%s/ps-%zu-%d-%d.log", dir, ce->bytes, ce->clients, s);
    pids[n] = spawn_logged(ps_argv, ps_log);
    if (pids[n++] < 0) {
      snprintf(ce->why, sizeof ce->why, "cannot start pstrain-ps: %s", strerror(errno));
      for (int i = 0; i < n - 1; i++) kill(pids[i], SIGKILL);
      for (int i = 0; i < n - 1; i++) waitpid(pids[i], NULL, 0);
      free(pids);
      free(outs);
      return -EIO;
    }
  }
  /* Start the clients once every ps listens (each fills its part's buffers first). */
  double t0 = pst_now();
  for (int s = 0; s < k; s++)
    while (!port_open(ports[s]) && pst_now() - t0 < 60) {
      if (waitpid(pids[s], NULL, WNOHANG) == pids[s]) break;
      usleep(2000);
    }
  for (int i = 0; i < nc; i++) {
    int cl = i / k, s = i % k;
    char a_ps[64], a_index[32], a_rounds[32], a_warm[32], a_watch[32], a_out[PATH_MAX + 80],
        a_shard[32], log[PATH_MAX + 64];
    snprintf(a_ps, sizeof a_ps, "--ps=127.0.0.1:%d", ports[s]);
    snprintf(a_index, sizeof a_index, "--index=%d", cl);
    snprintf(a_rounds, sizeof a_rounds, "--rounds=%ld", ce->rounds);
    snprintf(a_warm, sizeof a_warm, "--warmup=%ld", warmup);
    snprintf(a_watch, sizeof a_watch, "--watch-pid=%d", (int)pids[s]);
    snprintf(a_shard, sizeof a_shard, "--shard=%d/%d", s, k);
    snprintf(outs[i], sizeof outs[i], "%s/client-%zu-%d-%d-%d.json", dir, ce->bytes, ce->clients,
             cl, s);
    unlink(outs[i]);
    snprintf(a_out, sizeof a_out, "--out=%s", outs[i]);
    snprintf(log, sizeof log, "%s/client-%zu-%d-%d-%d.log", dir, ce->bytes, ce->clients, cl, s);
    /* As pstrain-worker does: each round pushes, then pulls (no --pull-first). */
    char *cl_argv[] = {(char *)cl_bin, a_ps, a_index, a_rounds, a_warm, a_watch, a_out, a_shard,
                       "--connect-timeout=30", NULL};
    /* A client that cannot start leaves the ps waiting for it: wait_all gives up on the
     * failed slot and stops the rest. */
    if ((pids[n++] = spawn_logged(cl_argv, log)) < 0) break;
  }
  long maxrss = -1, hwm = -1;
  /* Generous: at least 0.05 GB/s, plus a minute of start-up. */
  double budget = 60 + 2.0 * ce->bytes * (double)(ce->rounds + warmup) * ce->clients / 5e7;
  int rc = wait_all(pids, n, pst_now() + budget, &maxrss);
  pl_bench_client *cs = calloc((size_t)nc, sizeof *cs);
  if (!cs) rc = -ENOMEM;
  for (int i = 0; i < nc && rc == 0; i++) rc = load_client(outs[i], &cs[i], &hwm);
  memset(out, 0, sizeof *out);
  /* Each client process moved its shard's part: about S / K bytes a round. */
  if (rc == 0) pl_bench_reduce(cs, nc, ce->bytes / (size_t)k, out);
  for (int i = 0; cs && i < nc; i++) free(cs[i].lat);
  free(cs);
  free(pids);
  free(outs);
  out->peak_rss_kib = hwm > maxrss ? hwm : maxrss;
  if (rc < 0) snprintf(ce->why, sizeof ce->why, "pstrain run failed; logs in %.200s", dir);
  return rc;
}
