/* The worker slots' books (ps_roster, ps/ps.h): which slot a registering worker takes, and
 * the slot taken, left, struck and finished; the workers present. ps/train/liveness.c keeps
 * the rest of a slot's life (joined, lost, given up, its evaluations' deadlines); this file
 * calls nothing of it. */
#include <stdio.h>

#include "common/log.h"
#include "ps/ps.h"

int ps_present_workers(const ps_roster *r) {
  int n = 0;
  for (int i = 0; i < r->n; i++) n += r->workers[i].conn && !r->workers[i].done;
  return n;
}

int ps_slot_free(const ps_roster *r, int requested) {
  /* A slot is free while no worker holds it: a new one, or one whose worker was lost (the
   * replacement takes over its shard where it stood). Any index (-1) takes an unfinished
   * slot, preferring one nobody has held yet. */
  if (requested >= 0) {
    /* A finished slot too: its worker may have lost the ps between its BYE and the end,
     * and comes back for the final weights (its position tells it it is done). */
    return requested < r->n && !r->workers[requested].conn ? requested : -1;
  }
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < r->n; i++)
      if (!r->workers[i].conn && !r->workers[i].done && (pass == 1 || !r->workers[i].ever))
        return i;
  return -1;
}

void ps_slot_take(ps_server *s, int i, ps_conn *c, const char *name, uint32_t dropped) {
  ps_worker *w = &s->roster.workers[i];
  w->conn = c;
  if (s->opt.data_handout) {
    /* The step it takes part from: never the one under way (ps/train/dataplan.c). */
    w->join_at = ps_data_join_version(s);
    pst_update_join_at(&s->core.upd, i, w->join_at);
  }
  if (dropped > 0) {
    /* Late work of a worker that lost its connection (stalled, or cut off): never applied,
     * counted here like any other dropped gradient. */
    LOG_INFO("worker %d: %u late gradient%s dropped while it was away", i, dropped,
             dropped == 1 ? "" : "s");
    w->dropped += dropped;
    s->core.upd.dropped += dropped;
  }
  snprintf(w->name, sizeof w->name, "%.60s", name[0] ? name : "worker");
  s->roster.registered++;
}

int ps_worker_leaving(ps_roster *r, int i) {
  ps_worker *w = &r->workers[i];
  if (w->leaving) return 0;
  w->leaving = 1;
  return 1;
}

uint32_t ps_slot_struck(ps_roster *r, int i) { return ++r->workers[i].rejected_total; }

int ps_worker_finished(ps_roster *r, int i) {
  ps_worker *w = &r->workers[i];
  if (w->done) return 0;
  w->done = 1;
  r->finished++;
  return 1;
}
