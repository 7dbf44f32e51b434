/* The connection's shared memory with a ps on this host (issue 41, proto/ring.h): the offer
 * in the HELLO, and the WELCOME's answer. Sending puts payloads there (client_send.c); the
 * reader takes the ps's from its region (proto/wire.c); closing frees both (client.c). */
#include "worker/client.h"

#include "common/log.h"

/* Data bytes of this end's region. Pages are allocated as they are first written, and a new
 * lap starts whenever the ps has read everything (proto/ring.h), so a push of a model under
 * this size touches about that push's bytes; a larger one sends what does not fit on TCP. */
#define WK_RING_BYTES (64ull * 1024 * 1024)

const Pstrain__RingOffer *wk_client_ring_offer(wk_client *c) {
  if (!c->ring_wanted || c->tls || c->state != WK_CONN_OPEN) return NULL;
  if (!c->ring.mine) {
    char err[200];
    if (pst_ring_create(&c->ring, WK_RING_BYTES, err, sizeof err) < 0) {
      LOG_DEBUG("no shared memory with the ps: %s", err);
      return NULL;
    }
  }
  pst_wire_ring_offer(&c->ring, &c->ring_offer);
  return &c->ring_offer;
}

int wk_client_ring_welcome(wk_client *c, const Pstrain__Welcome *w) {
  c->ring_on = 0;
  if (!c->ring.mine) return 0;
  if (!w->ring_taken) {
    /* Another host, another user, an older ps or --shm false there: TCP. */
    pst_ring_free(&c->ring);
    return 0;
  }
  pst_ring_mapped_by_peer(&c->ring);
  char err[200];
  if (pst_wire_ring_attach(&c->ring, w->ring, err, sizeof err) < 0) {
    LOG_INFO("ps shard %d: payloads over TCP (its shared memory: %s)", c->tl_shard, err);
    pst_ring_free(&c->ring);
    return 0;
  }
  pst_reader_set_ring(&c->rd, &c->ring);
  c->ring_on = 1;
  LOG_INFO("ps shard %d is on this host: payloads through shared memory both ways (--shm false: "
           "TCP)", c->tl_shard);
  return 1;
}
