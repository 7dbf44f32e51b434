/* `pstrain compare`'s settings (launcher/compare/sweep.h): --modes, --encodings, --links and
 * --targets into the settings it runs. */
#include "launcher/compare/sweep.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/codec.h"
#include "common/config.h"
#include "launcher/links/link.h"
#include "launcher/links/place.h"

int pl_cmp_parse_modes(const char *s, mode_run *runs, int max) {
  int n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (n == max) return -E2BIG;
    mode_run *r = &runs[n];
    memset(r, 0, sizeof *r);
    snprintf(r->label, sizeof r->label, "%.31s", tok);
    /* MODE+sa: async or ssp with the staleness-aware learning rate (the ps's
     * --staleness-lr). */
    size_t len = strlen(tok);
    if (len > 3 && !strcmp(tok + len - 3, "+sa")) {
      tok[len - 3] = '\0';
      r->staleness_lr = 1;
      if (!strcmp(tok, "sync")) return -EINVAL;
    }
    /* allreduce: no ps, the ranks sum with Open MPI (launcher/run/run_allreduce.h). */
    if (!strcmp(tok, "sync") || !strcmp(tok, "async") ||
        (!strcmp(tok, "allreduce") && !r->staleness_lr)) {
      snprintf(r->mode, sizeof r->mode, "%s", tok);
    } else if (!strncmp(tok, "ssp", 3) && (tok[3] == '\0' || tok[3] == ':')) {
      snprintf(r->mode, sizeof r->mode, "ssp");
      int64_t st = 2;
      if (tok[3] && pst_parse_int(tok + 4, 0, 1000000, &st) < 0) return -EINVAL;
      r->staleness = (int)st;
    } else {
      return -EINVAL;
    }
    memcpy(r->safe, r->label, sizeof r->safe);
    for (char *p = r->safe; *p; p++)
      if (*p == ':') *p = '-';
    n++;
  }
  return n;
}

/* A file-name-safe copy of a label: anything but letters, digits, '.', '_' and '-' becomes
 * '-'. */
static void make_safe(mode_run *r) {
  snprintf(r->safe, sizeof r->safe, "%s", r->label);
  for (char *p = r->safe; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') *p = '-';
}

/* --encodings PUSH[/PULL],... and --links SPEC;SPEC...: every mode of runs[0..n) once per
 * encoding and link (issue 27), labelled "MODE PUSH/PULL @LINK". Returns the new count, or
 * -1 with a one-line reason in err. */
int pl_cmp_expand_settings(mode_run *runs, int n, int max, const char *encs, const char *links,
                           char *err, size_t errlen) {
  char ebuf[512], lbuf[512];
  const char *elist[MAX_MODES], *llist[MAX_MODES];
  int ne = 0, nl = 0;
  snprintf(ebuf, sizeof ebuf, "%s", encs ? encs : "");
  snprintf(lbuf, sizeof lbuf, "%s", links ? links : "");
  for (char *save = NULL, *t = strtok_r(ebuf, ",", &save); t && ne < MAX_MODES;
       t = strtok_r(NULL, ",", &save)) {
    char push[64], *slash;
    pst_enc e;
    double f;
    snprintf(push, sizeof push, "%s", t);
    if ((slash = strchr(push, '/'))) *slash = '\0';
    if (strlen(t) >= 48 || pst_enc_parse_push(push, &e, &f) < 0 ||
        (slash && pst_enc_parse(slash + 1, &e) < 0)) {
      snprintf(err, errlen, "--encodings: '%.60s' is not PUSH[/PULL] (PUSH %s; PULL %s)", t,
               pst_enc_push_choices(), pst_enc_choices());
      return -1;
    }
    elist[ne++] = t;
  }
  for (char *save = NULL, *t = strtok_r(lbuf, ";", &save); t && nl < MAX_MODES;
       t = strtok_r(NULL, ";", &save)) {
    pl_link_spec l;
    char why[300];
    if (strlen(t) >= 64 || pl_link_parse(t, &l, why, sizeof why) < 0) {
      snprintf(err, errlen, "--links: %s", why);
      return -1;
    }
    llist[nl++] = t;
  }
  if (ne == 0) elist[ne++] = NULL;
  if (nl == 0) llist[nl++] = NULL;
  if (n * ne * nl > max) {
    snprintf(err, errlen, "%d modes x %d encodings x %d links is over %d settings", n, ne, nl,
             max);
    return -1;
  }
  static mode_run base[MAX_MODES];
  memcpy(base, runs, (size_t)n * sizeof *runs);
  int k = 0;
  for (int i = 0; i < n; i++)
    for (int e = 0; e < ne; e++)
      for (int l = 0; l < nl; l++) {
        mode_run *r = &runs[k++];
        *r = base[i];
        if (elist[e]) {
          const char *slash = strchr(elist[e], '/');
          snprintf(r->push, sizeof r->push, "%.*s",
                   (int)(slash ? (size_t)(slash - elist[e]) : strlen(elist[e])), elist[e]);
          if (slash) snprintf(r->pull, sizeof r->pull, "%s", slash + 1);
        }
        if (llist[l]) snprintf(r->link, sizeof r->link, "%s", llist[l]);
        size_t used = strlen(r->label);
        if (elist[e]) used += (size_t)snprintf(r->label + used, sizeof r->label - used, " %s", elist[e]);
        if (llist[l] && used < sizeof r->label)
          snprintf(r->label + used, sizeof r->label - used, " @%s", llist[l]);
        make_safe(r);
      }
  return k;
}

int pl_cmp_expand_placements(mode_run *runs, int n, int max, const char *placements,
                             char *err, size_t errlen) {
  char buf[512];
  const char *list[MAX_MODES];
  int np = 0;
  snprintf(buf, sizeof buf, "%s", placements ? placements : "");
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char name[32];
    pl_placement p;
    int64_t k = 0;
    char *colon = strchr(t, ':');
    snprintf(name, sizeof name, "%.*s", colon ? (int)(colon - t) : (int)strlen(t), t);
    if (np == MAX_MODES || strlen(t) >= 24 || pl_placement_parse(name, &p) < 0 ||
        (colon && pst_parse_int(colon + 1, 1, PL_PLACE_MAX_SHARDS, &k) < 0)) {
      snprintf(err, errlen, "--placements: '%.40s' is not PLACEMENT[:SHARDS] (one-host, colocated "
               "or separate; SHARDS in 1..%d)", t, PL_PLACE_MAX_SHARDS);
      return -1;
    }
    list[np++] = t;
  }
  if (np == 0) return n;
  static mode_run base[MAX_MODES];
  memcpy(base, runs, (size_t)n * sizeof *runs);
  int k = 0;
  for (int i = 0; i < n; i++) {
    int ps = strcmp(base[i].mode, "allreduce") != 0;
    for (int p = 0; p < (ps ? np : 1); p++) {
      if (k == max) {
        snprintf(err, errlen, "modes x placements is over %d settings", max);
        return -1;
      }
      mode_run *r = &runs[k++];
      *r = base[i];
      if (!ps) continue;
      const char *colon = strchr(list[p], ':');
      snprintf(r->placement, sizeof r->placement, "%.*s",
               colon ? (int)(colon - list[p]) : (int)strlen(list[p]), list[p]);
      pl_placement pp;
      pl_placement_parse(r->placement, &pp);
      snprintf(r->placement, sizeof r->placement, "%s", pl_placement_name(pp));
      r->shards = colon ? atoi(colon + 1) : 0;
      size_t used = strlen(r->label);
      snprintf(r->label + used, sizeof r->label - used, " %s", list[p]);
      make_safe(r);
    }
  }
  return k;
}

/* "0.85,0.88,0.9": each in (0, 1]. */
int pl_cmp_parse_targets(const char *s, double *out, int max) {
  int n = 0;
  while (*s) {
    if (n == max) return -E2BIG;
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0 && v <= 1) || (*end && *end != ',')) return -EINVAL;
    out[n++] = v;
    s = *end ? end + 1 : end;
  }
  return n;
}

int pl_cmp_add_compute(mode_run *runs, int n, int repeats, const char *link, char *err,
                       size_t errlen) {
  int found = 0, got = 0;
  for (int i = 0; i < n; i++) found |= !strcmp(runs[i].link, link);
  if (!found) {
    snprintf(err, errlen, "--compute-link '%.60s' is not one of --links' entries", link);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    mode_run *m = &runs[i];
    if (!m->link[0] || !strcmp(m->link, link)) continue;
    const mode_run *b = NULL;
    for (int j = 0; j < n && !b; j++) {
      const mode_run *c = &runs[j];
      if (!strcmp(c->link, link) && !strcmp(c->mode, m->mode) && c->staleness == m->staleness &&
          c->staleness_lr == m->staleness_lr && !strcmp(c->placement, m->placement) &&
          c->shards == m->shards && !strcmp(c->push, m->push) && !strcmp(c->pull, m->pull))
        b = c;
    }
    if (!b) continue;
    for (int k = 0; k < repeats; k++) {
      run_rec *r = &m->reps[k];
      if (r->model_comm <= 0 || b->reps[k].step_s <= 0) continue;
      r->compute_s = b->reps[k].step_s;
      r->model_s = r->compute_s + r->model_comm;
      got++;
    }
  }
  return got;
}
