/* The child processes of `pstrain local` (launcher/run/run_ctx.h): starting them, starting a
 * worker that died again, stopping them, and reporting the failure that ended a run. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/config.h"
#include "launcher/common/helpers.h"
#include "launcher/links/link.h"
#include "launcher/run/run_children.h"
#include "launcher/run/run_ctx.h"

/* Every ps shard is up: workers may be restarted. */
static int ps_running(const run_ctx *r) {
  for (int i = 0; i < r->n_ps; i++)
    if (!r->ps[i].started || r->ps[i].exited) return 0;
  return 1;
}

/* Every ps shard has exited, each with status 0: the run is over. */
static int ps_finished(const run_ctx *r) {
  for (int i = 0; i < r->n_ps; i++)
    if (!r->ps[i].exited || r->ps[i].status != 0 || r->ps[i].term_signal != 0) return 0;
  return 1;
}

static int is_ps(const run_ctx *r, const child *c) { return c >= r->ps && c < r->ps + r->n_ps; }

/* Each process is told to stop once: a ps that got SIGTERM is saving its last checkpoint, and
 * a second signal would end it halfway through (its handlers are gone by then). SIGKILL
 * (a second Ctrl-C) goes to everything still running. */
void pl_stop_one(child *c, int sig) {
  if (!c->started || c->exited || (c->signalled && sig != SIGKILL)) return;
  uv_process_kill(&c->proc, sig);
  c->signalled = 1;
}

void pl_stop_all(run_ctx *r, int sig) {
  for (int i = 0; i < r->n_ps; i++) pl_stop_one(&r->ps[i], sig);
  for (int i = 0; i < r->n_workers; i++) pl_stop_one(&r->workers[i], sig);
}

/* Every ps shard has exited (or never started). */
int pl_ps_all_exited(const run_ctx *r) {
  for (int i = 0; i < r->n_ps; i++)
    if (r->ps[i].started && !r->ps[i].exited) return 0;
  return 1;
}

/* The last line of a child's log that says what went wrong. */
static void last_error_line(const char *log, char *out, size_t outlen) {
  FILE *f = fopen(log, "r");
  out[0] = '\0';
  if (!f) return;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, "error") || out[0] == '\0') {
      line[strcspn(line, "\n")] = '\0';
      /* Drop the "<3>" journald level prefix for people. */
      const char *p = line[0] == '<' && line[2] == '>' ? line + 3 : line;
      snprintf(out, outlen, "%.*s", (int)outlen - 1, p);
    }
  }
  fclose(f);
}

/* The last line of a child's log, without its level prefix. */

int pl_spawn(run_ctx *r, child *c, char **argv);

static void on_restart_closed(uv_handle_t *h) {
  child *c = h->data;
  run_ctx *r = (run_ctx *)h->loop->data;
  if (r->stopping || !ps_running(r)) return;
  c->exited = 0;
  if (pl_spawn(r, c, c->argv) < 0) {
    r->failed = 1;
    r->stopping = 1;
    pl_stop_all(r, SIGTERM);
  }
}

static void on_child_exit(uv_process_t *p, int64_t status, int term_signal) {
  child *c = p->data;
  run_ctx *r = (run_ctx *)p->loop->data;
  c->exited = 1;
  c->status = status;
  c->term_signal = term_signal;
  c->t_exit = pst_now() - r->t0;
  r->alive--;
  /* A process this launcher told to stop that did (exit status 3, PST_EXIT_STOPPED) has not
   * failed: a worker still waiting for a ps that has finished, or one stopped because
   * another process failed, whose failure is the one to report. */
  int stopped = c->signalled && status == 3 && term_signal == 0;
  int bad = (status != 0 && !stopped) || (term_signal != 0 && !r->stopping);
  if (bad && !is_ps(r, c) && c->argv && !r->stopping && !r->interrupted &&
      c->restarts < PL_WORKER_RESTARTS && ps_running(r)) {
    c->restarts++;
    fprintf(stderr, "pstrain: %s exited with %s %d; starting it again (%d of %d)\n", c->name,
            term_signal ? "signal" : "status", term_signal ? term_signal : (int)status,
            c->restarts, PL_WORKER_RESTARTS);
    uv_close((uv_handle_t *)p, on_restart_closed);
    return;
  }
  uv_close((uv_handle_t *)p, NULL);
  char why[800]; /* a worker's compute failure names its layer, shape and library call */
  last_error_line(c->log, why, sizeof why);
  /* A process that logged an error counts even when our SIGTERM ended it first. */
  int logged_error = strstr(why, "error:") != NULL;
  if ((bad || logged_error) && !r->interrupted) {
    /* Several processes fail together when one does; report the cause: a worker's own
     * error (3, e.g. its data) over the ps's (2) over a worker that only lost the ps or
     * was told to stop (1). */
    int lost_ps = strstr(why, "the ps stopped training") || strstr(why, "connection") ||
                  strstr(why, "cannot reach the ps");
    int rank = is_ps(r, c) ? 2 : lost_ps ? 1 : 3;
    if (rank > r->failure_rank) {
      if (term_signal && !bad)
        snprintf(r->first_failure, sizeof r->first_failure, "%s failed: %s", c->name, why);
      else
        snprintf(r->first_failure, sizeof r->first_failure, "%s exited with %s %d: %s", c->name,
                 term_signal ? "signal" : "status", term_signal ? term_signal : (int)status,
                 why[0] ? why : "(no output)");
      r->failure_rank = rank;
    }
    r->failed = 1;
  }
  if (bad) {
    /* One failure ends the job: nobody is left behind. When it was interrupted, the ps's
     * go first (on_signal), and the workers once the last one has ended. */
    r->stopping = 1;
    if (!r->interrupted || pl_ps_all_exited(r)) pl_stop_all(r, SIGTERM);
  } else if (is_ps(r, c) && !r->stopping && ps_finished(r)) {
    /* Every ps finished the run (shards end one by one, each once every worker is done with
     * it): the workers have been told and get PL_DRAIN_S to exit by themselves. */
    r->stopping = 1;
    r->drain_deadline = pst_now() + PL_DRAIN_S;
  }
  if (r->alive == 0) {
    uv_timer_stop(&r->tick);
    uv_close((uv_handle_t *)&r->tick, NULL);
    uv_close((uv_handle_t *)&r->sig_int, NULL);
    uv_close((uv_handle_t *)&r->sig_term, NULL);
    uv_close((uv_handle_t *)&r->sig_hup, NULL);
  }
}

int pl_child_main(int argc, char **argv) {
  int64_t ppid = 0;
  if (argc < 3 || pst_parse_int(argv[1], 2, INT32_MAX, &ppid) < 0) {
    fprintf(stderr, "pstrain %s: wants PPID PROGRAM [ARGS...] (pstrain's own use)\n",
            PL_CHILD_CMD);
    return 2;
  }
  /* SIGTERM when the launcher dies, even by SIGKILL: the ps then saves its checkpoint and
   * stops, the workers stop, and none trains on for minutes with nobody watching. It holds
   * across the exec below (and the exec of `ip netns exec`'s program). */
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0) {
    fprintf(stderr, "pstrain: cannot ask for SIGTERM when the launcher dies: %s\n",
            strerror(errno));
    return 1;
  }
  /* The launcher may have died between fork and prctl: then no signal comes, and the
   * parent is someone else already. */
  if (getppid() != (pid_t)ppid) return 3;
  execvp(argv[2], argv + 2);
  fprintf(stderr, "pstrain: cannot start %s: %s\n", argv[2], strerror(errno));
  return 127;
}

int pl_spawn(run_ctx *r, child *c, char **argv) {
  /* Behind --link, inside its namespace: "ip netns exec NS" execs the program, so the pid
   * is the program's, and signals reach it as without. */
  char *wrapped[PL_MAX_ARGS + 8];
  if (r->links.up) {
    if (pl_links_wrap(&r->links, c->ns, argv, wrapped, PL_MAX_ARGS + 8) < 0) return -E2BIG;
    argv = wrapped;
  }
  /* Through this launcher's own binary (pl_child_main), which asks to be sent SIGTERM when
   * the launcher dies and then becomes the program: same pid, so signals and the exit
   * status are the program's. A program that cannot be found is found here, as before. */
  if (strchr(argv[0], '/') && access(argv[0], X_OK) != 0) {
    fprintf(stderr, "pstrain: cannot start %s: %s\n", argv[0], strerror(errno));
    return -errno;
  }
  char ppid[24], *via[PL_MAX_ARGS + 12];
  int n = 0;
  snprintf(ppid, sizeof ppid, "%d", (int)getpid());
  via[n++] = "/proc/self/exe";
  via[n++] = PL_CHILD_CMD;
  via[n++] = ppid;
  for (int i = 0; argv[i] && n < PL_MAX_ARGS + 11; i++) via[n++] = argv[i];
  via[n] = NULL;
  argv = via;
  /* A restarted worker's log goes on after its predecessor's. */
  int fd = open(c->log, O_WRONLY | O_CREAT | (c->restarts ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0644);
  if (fd < 0) {
    fprintf(stderr, "pstrain: cannot write %s: %s\n", c->log, strerror(errno));
    return -errno;
  }
  uv_stdio_container_t stdio[3];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_INHERIT_FD;
  stdio[1].data.fd = fd;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = fd;
  uv_process_options_t po;
  memset(&po, 0, sizeof po);
  po.file = argv[0];
  po.args = argv;
  po.exit_cb = on_child_exit;
  po.stdio = stdio;
  po.stdio_count = 3;
  /* A process group of its own: a Ctrl-C at the terminal reaches the launcher alone, which
   * then stops each process once (stop_all), not the terminal's SIGINT and the launcher's
   * SIGTERM one after the other. */
  po.flags = UV_PROCESS_DETACHED;
  c->proc.data = c;
  c->signalled = 0;
  int rc = uv_spawn(&r->loop, &c->proc, &po);
  close(fd);
  if (rc < 0) {
    fprintf(stderr, "pstrain: cannot start %s: %s\n", argv[0], uv_strerror(rc));
    return rc;
  }
  c->started = 1;
  r->alive++;
  return 0;
}

