/* An elastic `pstrain local` job (issue 28, launcher/run/run_ctx.h): the ps's records of the data
 * handout followed as they are written, the --schedule's points acted on as training reaches
 * them, and the workers over time reported at the end. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/clock.h"
#include "launcher/common/helpers.h"
#include "launcher/run/run_args.h"
#include "launcher/run/run_children.h"
#include "launcher/run/run_ctx.h"
#include "launcher/run/run_elastic.h"

/* A departure waits this long at most for the workers started before it to join: the
 * schedule means to stop workers that trained, and a newcomer still loading its data when
 * SIGTERM comes would leave without ever having joined. */
#define PL_SCHED_JOIN_WAIT_S 60.0

int pl_elastic(const pl_run_options *o) { return o->workers_max > o->workers || o->n_sched > 0; }

static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

int pl_elastic_record(run_ctx *r, const char *event, const void *record) {
  const cJSON *o = record;
  if (!strcmp(event, "data_epoch")) {
    if (num(o, "samples") > 0) r->epoch_samples = num(o, "samples");
    return 1;
  }
  if (!strcmp(event, "data")) {
    /* Progress is what was trained: ranges handed out may come back unfinished (a worker
     * lost), and then they are handed out again. */
    const char *what = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "what"));
    if (what && !strcmp(what, "trained") && num(o, "count") > 0) r->trained += num(o, "count");
    return 1;
  }
  if (!strcmp(event, "workers")) {
    int n = (int)num(o, "workers");
    const char *why = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "why"));
    if (n < 0) return 1;
    r->ps_workers = n;
    if (n > r->most_workers) r->most_workers = n;
    if (why && !strcmp(why, "joined")) r->joined++;
    else if (why && !strcmp(why, "departed")) r->departed++;
    else if (why && !strcmp(why, "lost")) r->lost++;
    if (r->n_series < PL_MAX_SERIES) {
      pl_workers_point *p = &r->series[r->n_series++];
      p->time = num(o, "time");
      p->train_time = num(o, "train_time");
      p->workers = n;
      snprintf(p->why, sizeof p->why, "%s", why ? why : "");
    }
    return 1;
  }
  return 0;
}

/* Workers running that have not been asked to leave. */
static int running(const run_ctx *r) {
  int n = 0;
  for (int i = 0; i < r->n_workers; i++) {
    const child *c = &r->workers[i];
    if (c->started && !c->exited && !c->leaving) n++;
  }
  return n;
}

/* A progress line beside the per-epoch ones (the progress bar's line cleared first). */
static void say(run_ctx *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(run_ctx *r, const char *fmt, ...) {
  if (r->o->quiet) return;
  if (r->tty) fprintf(stdout, "\r\033[K");
  fprintf(stdout, "%s", r->o->label ? r->o->label : "");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stdout, fmt, ap);
  va_end(ap);
  fflush(stdout);
}

/* Starts n more workers, each asking the ps for any index. 0 or a negative error code. */
static int start_workers(run_ctx *r, int n, double at) {
  int room = r->o->workers_max - running(r);
  if (n > room) {
    say(r, "epoch %.2f: the schedule asks for %d more worker%s, but --workers admits %d more "
           "(MAX %d)\n", at, n, n > 1 ? "s" : "", room > 0 ? room : 0, r->o->workers_max);
    n = room;
  }
  if (n <= 0) return 0;
  say(r, "epoch %.2f: starting %d more worker%s (%d running)\n", at, n, n > 1 ? "s" : "",
      running(r) + n);
  for (int k = 0; k < n && r->n_workers < r->cap_workers; k++) {
    int slot = r->n_workers;
    child *c = &r->workers[slot];
    static pl_argv w;
    pl_worker_argv_slot(r->o, r->job, -1, slot, &w);
    snprintf(c->name, sizeof c->name, "worker %d", slot);
    c->ns = slot;
    c->scheduled = 1;
    snprintf(c->log, sizeof c->log, "%s/worker%d.log", r->o->run_dir, slot);
    c->argv = pl_argv_dup(w.argv, w.n);
    if (!c->argv) return -ENOMEM;
    r->n_workers++;
    int rc = pl_spawn(r, c, w.argv);
    if (rc < 0) return rc;
    c->t_start = pst_now() - r->t0;
  }
  return 0;
}

/* Asks the n newest running workers to leave: SIGTERM, after which each finishes its step,
 * says goodbye to the ps and exits 0. */
static void stop_workers(run_ctx *r, int n, double at) {
  int left = running(r) - n;
  say(r, "epoch %.2f: asking %d worker%s to leave (%d running then)\n", at, n, n > 1 ? "s" : "",
      left > 0 ? left : 0);
  if (left < r->o->workers)
    fprintf(stderr, "pstrain: %sepoch %.2f: %d worker%s left, below --workers's minimum %d\n",
            r->o->label ? r->o->label : "", at, left > 0 ? left : 0, left == 1 ? "" : "s",
            r->o->workers);
  for (int i = r->n_workers - 1; i >= 0 && n > 0; i--) {
    child *c = &r->workers[i];
    if (!c->started || c->exited || c->leaving) continue;
    c->leaving = 1;
    pl_stop_one(c, SIGTERM);
    n--;
  }
}

void pl_elastic_tick(run_ctx *r) {
  const pl_run_options *o = r->o;
  if (r->stopping || r->epoch_samples <= 0 || pl_ps_all_exited(r)) return;
  double at = r->trained / r->epoch_samples;
  while (r->sched_next < o->n_sched && at >= o->sched[r->sched_next].epoch) {
    const pl_sched_point *p = &o->sched[r->sched_next];
    if (p->delta > 0) {
      if (start_workers(r, p->delta, at) < 0) {
        r->failed = 1;
        r->stopping = 1;
        pl_stop_all(r, SIGTERM);
        return;
      }
    } else {
      /* The workers started so far have all joined (the ps counts as many as run here), or
       * the wait is over: then the newest are stopped whatever their state. */
      if (r->ps_workers < running(r)) {
        if (r->sched_wait_since == 0) r->sched_wait_since = pst_now();
        if (pst_now() - r->sched_wait_since < PL_SCHED_JOIN_WAIT_S) return;
        fprintf(stderr, "pstrain: %sepoch %.2f: %d worker%s started did not join in %.0f s; "
                        "stopping the newest anyway\n", o->label ? o->label : "", at,
                running(r) - r->ps_workers, running(r) - r->ps_workers > 1 ? "s" : "",
                PL_SCHED_JOIN_WAIT_S);
      }
      r->sched_wait_since = 0;
      stop_workers(r, -p->delta, at);
    }
    r->sched_next++;
  }
}

void pl_elastic_report(run_ctx *r, pl_run_result *res) {
  const pl_run_options *o = r->o;
  res->most_workers = r->most_workers;
  res->departed = r->departed;
  res->lost = r->lost;
  if (!pl_elastic(o)) return;
  /* The workers over training time, a change per step: records of one moment (the MIN
   * workers joining before training starts) are shown as where they ended. */
  if (!o->quiet && r->n_series > 0) {
    char line[2048];
    size_t used = 0;
    for (int i = 0; i < r->n_series && used < sizeof line - 64; i++) {
      const pl_workers_point *p = &r->series[i];
      if (i + 1 < r->n_series && r->series[i + 1].train_time == p->train_time) continue;
      used += (size_t)snprintf(line + used, sizeof line - used, "%s%d (%.1f s)",
                               used ? " -> " : "", p->workers, p->train_time);
    }
    printf("%sworkers over training time: %s; most %d, %d joined, %d departed, %d lost\n",
           o->label ? o->label : "", line, r->most_workers, r->joined, r->departed, r->lost);
    for (int i = 0; i < r->n_workers; i++) {
      const child *c = &r->workers[i];
      if (!c->leaving) continue;
      printf("%s%s left when asked: %s %d\n", o->label ? o->label : "", c->name,
             c->term_signal ? "signal" : "exit status",
             c->term_signal ? c->term_signal : (int)c->status);
    }
    fflush(stdout);
  }
  /* The same as numbers, for tests and tools: the ps's series and every worker's outcome. */
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "workers_min", o->workers);
  cJSON_AddNumberToObject(j, "workers_max", o->workers_max > 0 ? o->workers_max : o->workers);
  if (o->schedule) cJSON_AddStringToObject(j, "schedule", o->schedule);
  cJSON_AddNumberToObject(j, "schedule_points_done", r->sched_next);
  cJSON_AddNumberToObject(j, "most_workers", r->most_workers);
  cJSON_AddNumberToObject(j, "joined", r->joined);
  cJSON_AddNumberToObject(j, "departed", r->departed);
  cJSON_AddNumberToObject(j, "lost", r->lost);
  cJSON *series = cJSON_AddArrayToObject(j, "workers_series");
  for (int i = 0; i < r->n_series; i++) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "time", r->series[i].time);
    cJSON_AddNumberToObject(p, "train_time", r->series[i].train_time);
    cJSON_AddNumberToObject(p, "workers", r->series[i].workers);
    cJSON_AddStringToObject(p, "why", r->series[i].why);
    cJSON_AddItemToArray(series, p);
  }
  cJSON *procs = cJSON_AddArrayToObject(j, "processes");
  for (int i = 0; i < r->n_workers; i++) {
    const child *c = &r->workers[i];
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", c->name);
    cJSON_AddNumberToObject(p, "slot", i);
    cJSON_AddBoolToObject(p, "scheduled", c->scheduled);
    cJSON_AddBoolToObject(p, "asked_to_leave", c->leaving);
    cJSON_AddBoolToObject(p, "exited", c->exited);
    cJSON_AddNumberToObject(p, "status", (double)c->status);
    cJSON_AddNumberToObject(p, "signal", c->term_signal);
    cJSON_AddNumberToObject(p, "restarts", c->restarts);
    cJSON_AddNumberToObject(p, "started", c->t_start);
    cJSON_AddNumberToObject(p, "ended", c->t_exit);
    cJSON_AddItemToArray(procs, p);
  }
  char *text = cJSON_PrintUnformatted(j);
  char path[PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/elastic.json", o->run_dir);
  FILE *f = text ? fopen(path, "w") : NULL;
  if (f) {
    fprintf(f, "%s\n", text);
    if (fclose(f) != 0) fprintf(stderr, "pstrain: cannot write %s\n", path);
  } else {
    fprintf(stderr, "pstrain: cannot write %s\n", path);
  }
  free(text);
  cJSON_Delete(j);
}
