/* The ps's part of the timeline (common/timeline.h, --timeline): each gradient chunk's wait
 * between its last byte in and the sum taking it, and each reply chunk's send. The sums and
 * optimizer passes are recorded where they run (ps/train/update.c). The ps's step on the
 * timeline is the version being built: a chunk of a push computed on version v belongs to
 * step v, as does a reply carrying v. */
#include "common/clock.h"
#include "common/timeline.h"
#include "ps/net/conn.h"

/* A registered worker's probe only, and none while answers pile up unread: a peer that
 * floods probes and reads nothing gets no more than this much of the ps's memory. */
#define PROBE_QUEUE_MAX (64u * 1024u)

void ps_tl_clock_answer(ps_conn *c, const Pstrain__Header *h) {
  if (!(h->clock_probe > 0) || c->state != CONN_WORKER ||
      uv_stream_get_write_queue_size((uv_stream_t *)&c->io.tcp) > PROBE_QUEUE_MAX)
    return;
  Pstrain__Header r = PSTRAIN__HEADER__INIT;
  r.type = PSTRAIN__MSG_TYPE__HEARTBEAT;
  r.clock_probe = h->clock_probe;
  r.clock_seconds = pst_now();
  ps_send_header(c, &r);
}

void ps_tl_chunk_in(ps_conn *c) {
  if (pst_tl_opened()) c->tl_in_at = pst_now();
}

double ps_tl_offer(ps_conn *c) {
  if (!pst_tl_opened()) return 0;
  pst_tl_step(c->srv->core.store.version);
  return pst_tl_on() ? pst_now() : 0;
}

void ps_tl_taken(ps_conn *c, double t_offer) {
  if (!(t_offer > 0) || !(c->tl_in_at > 0)) return;
  const pst_update *u = &c->srv->core.upd;
  uint32_t i = c->pending_chunk;
  /* One track a worker's connection and chunk: chunks of several workers wait at once. */
  pst_tl_async("ps", "queued", ((uint64_t)c->worker << 32) | i, c->tl_in_at, t_offer,
               PST_TL_CHUNK(c->push_version, i, pst_update_chunk_off(u, i),
                            pst_update_chunk_len(u, i), c->push_version));
}

void ps_tl_sent(ps_conn *c, uint32_t first, uint32_t k, double t0, double t1, const char *name) {
  if (!pst_tl_opened()) return;
  const pst_update *u = &c->srv->core.upd;
  pst_tl_step(c->srv->core.store.version);
  for (uint32_t i = first; i < first + k; i++)
    pst_tl_async("ps", name, ((uint64_t)(c->worker + 1) << 40) | i, t0, t1,
                 PST_TL_CHUNK(c->pull_hold.version, i, pst_update_chunk_off(u, i),
                              pst_update_chunk_len(u, i), c->pull_hold.version));
}
