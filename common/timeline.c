/* The process's timeline (common/timeline.h): per-thread buffers, written as Chrome
 * trace-event JSON at the end. */
#include "common/timeline.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

typedef struct {
  const char *cat, *name;
  double t0, t1;
  uint64_t id;
  pst_tl_args a;
  int async;
} tl_event;

/* One thread's events. Only its thread appends (n is published with release order, so the
 * writer at the end reads whole events); the list of buffers changes under tl.mu. */
typedef struct tl_buf {
  tl_event *ev;
  atomic_uint n;
  char name[32];
  int tid;
  struct tl_buf *next;
} tl_buf;

#define TL_MAX_OFFSETS 16

static struct {
  atomic_int opened; /* read by every recording thread; set before they record, cleared after */
  FILE *f;
  char path[4096];
  char process[64];
  uint64_t skip, steps;
  _Atomic uint64_t step;
  uv_mutex_t mu; /* bufs, n_bufs, offsets */
  tl_buf *bufs;
  int n_bufs;
  atomic_uint_fast64_t dropped;
  struct {
    char peer[32];
    double offset, uncertainty;
    int samples;
  } off[TL_MAX_OFFSETS];
  int n_off;
} tl;

atomic_int pst_tl_on_;
static _Thread_local tl_buf *mine;

int pst_tl_open(const char *path, const char *process, uint64_t skip, uint64_t steps, char *err,
                size_t errlen) {
  if (tl.opened) {
    snprintf(err, errlen, "the timeline is already open");
    return -EALREADY;
  }
  if (!path || !path[0] || steps == 0) {
    snprintf(err, errlen, "--timeline needs a file and --timeline-steps at least 1");
    return -EINVAL;
  }
  /* Created now: a directory that does not exist or cannot be written is refused before the
   * job starts, not found out after it. */
  FILE *f = fopen(path, "w");
  if (!f) {
    int e = errno;
    snprintf(err, errlen, "cannot write the timeline %s: %s", path, strerror(e));
    return -e;
  }
  if (uv_mutex_init(&tl.mu) != 0) {
    fclose(f);
    snprintf(err, errlen, "cannot make the timeline's lock");
    return -ENOMEM;
  }
  tl.f = f;
  snprintf(tl.path, sizeof tl.path, "%s", path);
  snprintf(tl.process, sizeof tl.process, "%s", process ? process : "pstrain");
  tl.skip = skip;
  tl.steps = steps;
  atomic_store(&tl.opened, 1);
  pst_tl_step(0);
  return 0;
}

int pst_tl_opened(void) { return atomic_load_explicit(&tl.opened, memory_order_relaxed); }

void pst_tl_step(uint64_t step) {
  atomic_store_explicit(&tl.step, step, memory_order_relaxed);
  /* A step's slack on either side: an event of the last step of the window may come once
   * the owner has moved to the next (a push's end after the next pull went out); add()
   * keeps events by their own step. */
  int on = pst_tl_opened() && step + 1 >= tl.skip && step <= tl.skip + tl.steps;
  atomic_store_explicit(&pst_tl_on_, on, memory_order_relaxed);
}

uint64_t pst_tl_current_step(void) { return atomic_load_explicit(&tl.step, memory_order_relaxed); }

/* The calling thread's buffer, made and registered on its first use (NULL: no memory). */
static tl_buf *thread_buf(void) {
  if (!pst_tl_opened()) return NULL;
  if (mine) return mine;
  tl_buf *b = calloc(1, sizeof *b);
  if (b) b->ev = malloc(PST_TL_THREAD_EVENTS * sizeof *b->ev);
  if (!b || !b->ev) {
    free(b);
    return NULL;
  }
  uv_mutex_lock(&tl.mu);
  b->tid = ++tl.n_bufs;
  snprintf(b->name, sizeof b->name, "thread %d", b->tid);
  b->next = tl.bufs;
  tl.bufs = b;
  uv_mutex_unlock(&tl.mu);
  mine = b;
  return b;
}

void pst_tl_thread(const char *name) {
  tl_buf *b = thread_buf();
  if (b) snprintf(b->name, sizeof b->name, "%s", name);
}

static void add(const char *cat, const char *name, double t0, double t1, uint64_t id,
                pst_tl_args a, int async) {
  if (!pst_tl_on()) return;
  uint64_t s = a.step >= 0 ? (uint64_t)a.step : pst_tl_current_step();
  if (s < tl.skip || s - tl.skip >= tl.steps) return;
  tl_buf *b = thread_buf();
  if (!b) return;
  unsigned n = atomic_load_explicit(&b->n, memory_order_relaxed);
  if (n >= PST_TL_THREAD_EVENTS) {
    atomic_fetch_add_explicit(&tl.dropped, 1, memory_order_relaxed);
    return;
  }
  b->ev[n] = (tl_event){cat, name, t0, t1 > t0 ? t1 : t0, id, a, async};
  atomic_store_explicit(&b->n, n + 1, memory_order_release);
}

void pst_tl_span(const char *cat, const char *name, double t0, double t1, pst_tl_args a) {
  add(cat, name, t0, t1, 0, a, 0);
}

void pst_tl_async(const char *cat, const char *name, uint64_t id, double t0, double t1,
                  pst_tl_args a) {
  add(cat, name, t0, t1, id, a, 1);
}

void pst_tl_offset(const char *peer, double offset_s, double uncertainty_s) {
  if (!pst_tl_opened()) return;
  uv_mutex_lock(&tl.mu);
  int i = 0;
  while (i < tl.n_off && strcmp(tl.off[i].peer, peer) != 0) i++;
  if (i < TL_MAX_OFFSETS) {
    if (i == tl.n_off) {
      tl.n_off++;
      snprintf(tl.off[i].peer, sizeof tl.off[i].peer, "%s", peer);
      tl.off[i].uncertainty = uncertainty_s + 1; /* any sample beats none */
    }
    tl.off[i].samples++;
    if (uncertainty_s < tl.off[i].uncertainty) {
      tl.off[i].offset = offset_s;
      tl.off[i].uncertainty = uncertainty_s;
    }
  }
  uv_mutex_unlock(&tl.mu);
}

uint64_t pst_tl_count(void) {
  uint64_t n = 0;
  if (!pst_tl_opened()) return 0;
  uv_mutex_lock(&tl.mu);
  for (tl_buf *b = tl.bufs; b; b = b->next) n += atomic_load_explicit(&b->n, memory_order_acquire);
  uv_mutex_unlock(&tl.mu);
  return n;
}

uint64_t pst_tl_dropped(void) { return atomic_load(&tl.dropped); }

/* ---- writing ---- */

/* One JSON value on its own line of the traceEvents array (a comma before all but the
 * first): printed by cJSON one event at a time, so that memory does not grow with the file. */
static int put(FILE *f, cJSON *o, int *first) {
  if (!o) return -ENOMEM;
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!s) return -ENOMEM;
  int rc = fprintf(f, "%s%s", *first ? "\n" : ",\n", s) < 0 ? -EIO : 0;
  free(s);
  *first = 0;
  return rc;
}

static cJSON *meta_event(const char *what, int pid, int tid, const char *name) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "ph", "M");
  cJSON_AddStringToObject(o, "name", what);
  cJSON_AddNumberToObject(o, "pid", pid);
  cJSON_AddNumberToObject(o, "tid", tid);
  cJSON *args = cJSON_AddObjectToObject(o, "args");
  cJSON_AddStringToObject(args, "name", name);
  return o;
}

/* Microseconds, as Chrome's ts and dur are, rounded to the nanosecond. */
static double us(double s) { return (double)(int64_t)(s * 1e9 + (s >= 0 ? 0.5 : -0.5)) / 1e3; }

static cJSON *event_json(const tl_event *e, int pid, int tid, const char *ph, double ts) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "ph", ph);
  cJSON_AddStringToObject(o, "cat", e->cat);
  cJSON_AddStringToObject(o, "name", e->name);
  cJSON_AddNumberToObject(o, "pid", pid);
  cJSON_AddNumberToObject(o, "tid", tid);
  cJSON_AddNumberToObject(o, "ts", us(ts));
  if (!e->async) cJSON_AddNumberToObject(o, "dur", us(e->t1) - us(e->t0));
  if (e->async) {
    char id[32];
    snprintf(id, sizeof id, "0x%llx", (unsigned long long)e->id);
    cJSON_AddStringToObject(o, "id", id);
  }
  cJSON *args = cJSON_AddObjectToObject(o, "args");
  const int64_t v[5] = {e->a.step, e->a.index, e->a.offset, e->a.floats, e->a.version};
  static const char *const k[5] = {"step", "index", "offset", "floats", "version"};
  for (int i = 0; i < 5; i++)
    if (v[i] >= 0) cJSON_AddNumberToObject(args, k[i], (double)v[i]);
  return o;
}

static cJSON *metadata(uint64_t kept) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddNumberToObject(m, "pstrain_timeline", 1);
  cJSON_AddStringToObject(m, "process", tl.process);
  cJSON_AddNumberToObject(m, "pid", (double)getpid());
  cJSON_AddStringToObject(m, "clock", "CLOCK_MONOTONIC of this process, microseconds");
  cJSON_AddNumberToObject(m, "skip_steps", (double)tl.skip);
  cJSON_AddNumberToObject(m, "steps", (double)tl.steps);
  cJSON_AddNumberToObject(m, "events", (double)kept);
  cJSON_AddNumberToObject(m, "dropped", (double)atomic_load(&tl.dropped));
  cJSON *offs = cJSON_AddArrayToObject(m, "clock_offsets");
  for (int i = 0; i < tl.n_off; i++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "peer", tl.off[i].peer);
    cJSON_AddNumberToObject(o, "offset_us", us(tl.off[i].offset));
    cJSON_AddNumberToObject(o, "uncertainty_us", us(tl.off[i].uncertainty));
    cJSON_AddNumberToObject(o, "samples", tl.off[i].samples);
    cJSON_AddItemToArray(offs, o);
  }
  return m;
}

int pst_tl_write(char *err, size_t errlen) {
  if (!pst_tl_opened()) return 0;
  atomic_store(&pst_tl_on_, 0);
  FILE *f = tl.f;
  int pid = (int)getpid(), first = 1, rc = 0;
  uint64_t kept = 0;
  uv_mutex_lock(&tl.mu);
  if (fputs("{\"traceEvents\":[", f) < 0) rc = -EIO;
  if (rc == 0) rc = put(f, meta_event("process_name", pid, 0, tl.process), &first);
  for (tl_buf *b = tl.bufs; b && rc == 0; b = b->next) {
    rc = put(f, meta_event("thread_name", pid, b->tid, b->name), &first);
    unsigned n = atomic_load_explicit(&b->n, memory_order_acquire);
    for (unsigned i = 0; i < n && rc == 0; i++) {
      const tl_event *e = &b->ev[i];
      kept++;
      if (!e->async) {
        rc = put(f, event_json(e, pid, b->tid, "X", e->t0), &first);
      } else {
        rc = put(f, event_json(e, pid, b->tid, "b", e->t0), &first);
        if (rc == 0) rc = put(f, event_json(e, pid, b->tid, "e", e->t1), &first);
      }
    }
  }
  if (rc == 0) {
    cJSON *m = metadata(kept);
    char *s = m ? cJSON_PrintUnformatted(m) : NULL;
    cJSON_Delete(m);
    if (!s || fprintf(f, "\n],\n\"displayTimeUnit\":\"ms\",\n\"metadata\":%s}\n", s) < 0)
      rc = s ? -EIO : -ENOMEM;
    free(s);
  }
  for (tl_buf *b = tl.bufs, *next; b; b = next) {
    next = b->next;
    free(b->ev);
    free(b);
  }
  tl.bufs = NULL;
  uv_mutex_unlock(&tl.mu);
  mine = NULL; /* the calling thread's buffer is gone with the others */
  if (fclose(f) != 0 && rc == 0) rc = -EIO;
  tl.f = NULL;
  atomic_store(&tl.opened, 0);
  if (rc < 0) snprintf(err, errlen, "cannot write the timeline %s: %s", tl.path, strerror(-rc));
  return rc;
}
