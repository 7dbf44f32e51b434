/* Merging a local job's timelines (launcher/run/run_timeline.h). */
#include "launcher/run/run_timeline.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pl_timeline_part(const pl_run_options *o, const char *kind, int index, char *buf,
                      size_t len) {
  snprintf(buf, len, "%s/timeline-%s%d.json", o->run_dir, kind, index);
}

static cJSON *load(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  cJSON *doc = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    char *s = n > 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fseek(f, 0, SEEK_SET) == 0 && fread(s, 1, (size_t)n, f) == (size_t)n) {
      s[n] = '\0';
      doc = cJSON_Parse(s);
    }
    free(s);
  }
  fclose(f);
  return doc;
}

/* A part's measured offset to `peer` (its clock = the part's + offset_us), or 0 without one. */
static int offset_to(const cJSON *doc, const char *peer, double *offset_us, double *unc_us,
                     int *samples) {
  const cJSON *offs = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "metadata"), "clock_offsets");
  const cJSON *o;
  cJSON_ArrayForEach(o, offs) {
    const char *p = cJSON_GetStringValue(cJSON_GetObjectItem(o, "peer"));
    if (p && strcmp(p, peer) == 0) {
      *offset_us = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "offset_us"));
      *unc_us = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "uncertainty_us"));
      *samples = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "samples"));
      return 1;
    }
  }
  return 0;
}

/* Moves every event of doc into `into` with its ts shifted by shift_us. */
static void move_events(cJSON *doc, double shift_us, cJSON *into) {
  cJSON *evs = cJSON_DetachItemFromObject(doc, "traceEvents");
  cJSON *e;
  while (evs && (e = cJSON_DetachItemFromArray(evs, 0)) != NULL) {
    cJSON *ts = cJSON_GetObjectItem(e, "ts");
    if (cJSON_IsNumber(ts)) cJSON_SetNumberValue(ts, ts->valuedouble + shift_us);
    cJSON_AddItemToArray(into, e);
  }
  cJSON_Delete(evs);
}

static void note(cJSON *procs, const char *path, const char *process, double shift, double unc,
                 const char *via, int samples) {
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "file", path);
  if (process) cJSON_AddStringToObject(p, "process", process);
  cJSON_AddNumberToObject(p, "shift_us", shift);
  cJSON_AddNumberToObject(p, "uncertainty_us", unc);
  cJSON_AddStringToObject(p, "measured", via);
  if (samples > 0) cJSON_AddNumberToObject(p, "brackets", samples);
  cJSON_AddItemToArray(procs, p);
}

static const char *process_of(const cJSON *doc) {
  return cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "metadata"), "process"));
}

int pl_timeline_merge(const pl_run_options *o, int n_ps, int workers, char *err, size_t errlen) {
  char path[4096], peer[32];
  int rc = 0;
  cJSON *out = cJSON_CreateObject(), *meta = cJSON_CreateObject();
  cJSON *events = cJSON_AddArrayToObject(out, "traceEvents");
  cJSON *procs = cJSON_CreateArray(), *missing = cJSON_CreateArray();
  /* Worker 0's offsets carry the shards onto shard 0's clock. */
  pl_timeline_part(o, "worker", 0, path, sizeof path);
  cJSON *w0 = load(path);
  double w0_off0 = 0, w0_unc0 = 0;
  int n0 = 0, n = 0;
  if (!w0 || !offset_to(w0, "ps shard 0", &w0_off0, &w0_unc0, &n0)) {
    snprintf(err, errlen, "the timeline of worker 0 (%s) is %s", path,
             w0 ? "without its clock's offset to the ps" : "missing or not JSON");
    rc = -ENOENT;
  }
  for (int s = 0; rc == 0 && s < n_ps; s++) {
    pl_timeline_part(o, "ps", s, path, sizeof path);
    cJSON *doc = load(path);
    double off = 0, unc = 0;
    snprintf(peer, sizeof peer, "ps shard %d", s);
    if (!doc || (s > 0 && !offset_to(w0, peer, &off, &unc, &n))) {
      if (s == 0) {
        snprintf(err, errlen, "the timeline of the ps (%s) is missing or not JSON", path);
        rc = -ENOENT;
      }
      cJSON_AddItemToArray(missing, cJSON_CreateString(path));
      cJSON_Delete(doc);
      continue;
    }
    /* ps_s = w0 + off, so w0 = ps_s - off and ps_0 = ps_s - off + w0_off0. */
    double shift = s == 0 ? 0 : w0_off0 - off;
    note(procs, path, process_of(doc), shift, s == 0 ? 0 : unc + w0_unc0,
         s == 0 ? "the reference clock" : "through worker 0's offsets to shard 0 and to it",
         s == 0 ? 0 : n);
    move_events(doc, shift, events);
    cJSON_Delete(doc);
  }
  for (int i = 0; rc == 0 && i < workers; i++) {
    pl_timeline_part(o, "worker", i, path, sizeof path);
    cJSON *doc = i == 0 ? w0 : load(path);
    double off = 0, unc = 0;
    if (!doc || !offset_to(doc, "ps shard 0", &off, &unc, &n)) {
      cJSON_AddItemToArray(missing, cJSON_CreateString(path));
      if (i > 0) cJSON_Delete(doc);
      continue;
    }
    note(procs, path, process_of(doc), off, unc,
         "the narrowest of its brackets of shard 0's clock (its HELLO and the WELCOME, its "
         "clock probes and their answers)", n);
    move_events(doc, off, events);
    if (i > 0) cJSON_Delete(doc);
  }
  cJSON_Delete(w0);
  if (rc == 0) {
    cJSON_AddNumberToObject(meta, "pstrain_timeline_merged", 1);
    cJSON_AddStringToObject(meta, "clock", "ps shard 0's CLOCK_MONOTONIC, microseconds");
    cJSON_AddNumberToObject(meta, "skip_steps", o->timeline_skip);
    cJSON_AddNumberToObject(meta, "steps", o->timeline_steps);
    cJSON_AddItemToObject(meta, "processes", procs);
    cJSON_AddItemToObject(meta, "missing", missing);
    procs = missing = NULL;
    cJSON_AddStringToObject(out, "displayTimeUnit", "ms");
    cJSON_AddItemToObject(out, "metadata", meta);
    meta = NULL;
    char *text = cJSON_PrintUnformatted(out);
    FILE *f = text ? fopen(o->timeline, "w") : NULL;
    if (!text) {
      snprintf(err, errlen, "cannot make the merged timeline: out of memory");
      rc = -ENOMEM;
    } else if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0) {
      rc = -errno;
      snprintf(err, errlen, "cannot write the timeline %s: %s", o->timeline, strerror(errno));
    }
    if (f && fclose(f) != 0 && rc == 0) {
      rc = -errno;
      snprintf(err, errlen, "cannot write the timeline %s: %s", o->timeline, strerror(errno));
    }
    free(text);
  }
  cJSON_Delete(procs);
  cJSON_Delete(missing);
  cJSON_Delete(meta);
  cJSON_Delete(out);
  return rc;
}
