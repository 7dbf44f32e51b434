/* A step's transfers layer by layer (layer_push.h). */
#include "worker/layer_push.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/pipeline/pipeline.h"
#include "worker/client.h"
#include "worker/shards.h"

/* --push-by-layer: this step's push begins before its compute, and its chunks leave as the
 * backward pass finishes them (wk_on_grad_ready; after_train queues what is left). */
void wk_begin_layer_push(wk_trainer *t) {
  t->layer_push = 0;
  /* --slow-factor and --delay-ms make a step's push leave late on purpose: not early; and a
   * clipped gradient's scale is known only once all of it is. */
  if (!t->opt.push_by_layer || t->opt.slow_factor > 1.0 || t->opt.delay_ms > 0 ||
      t->clip_norm > 0)
    return;
  atomic_store(&t->grad_from, t->model.n_params);
  uv_mutex_lock(&t->pull_mu);
  t->part_lo = t->part_hi = 0;
  uv_mutex_unlock(&t->pull_mu);
  for (int i = 0; i < t->n_ps; i++)
    if (wk_client_push_begin(&t->ps[i].client, t->ps[i].version, t->grad + t->ps[i].offset) < 0)
      return; /* after_train pushes the usual way, and meets the same error */
  for (int i = 0; i < t->n_ps; i++) t->ps[i].pushing = 1;
  t->push_in_flight = 1;
  t->layer_push = 1;
}

/* On the threadpool, from the backward pass (kernels/net.h). */
void wk_grad_ready(void *ctx, size_t from) {
  wk_trainer *t = ctx;
  if (t->work_kind != WK_WORK_TRAIN) return;
  atomic_store(&t->grad_from, from);
  uv_async_send(&t->grad_async);
}

/* On the threadpool (or the backend's download thread), from the backward pass: a layer made
 * in rising pieces has [lo, hi) final (kernels/net.h). */
void wk_grad_part(void *ctx, size_t lo, size_t hi) {
  wk_trainer *t = ctx;
  if (t->work_kind != WK_WORK_TRAIN) return;
  uv_mutex_lock(&t->pull_mu);
  t->part_lo = lo;
  t->part_hi = hi;
  uv_mutex_unlock(&t->pull_mu);
  uv_async_send(&t->grad_async);
}

/* On the loop: queues each shard's chunks that are final now: the runs above, highest first,
 * then the rising layer's first chunks. */
void wk_on_grad_ready(uv_async_t *a) {
  wk_trainer *t = a->data;
  if (!t->layer_push || t->state != WK_COMPUTING || !wk_all_open(t)) return;
  size_t from = atomic_load(&t->grad_from);
  uv_mutex_lock(&t->pull_mu);
  size_t lo = t->part_lo, hi = t->part_hi;
  uv_mutex_unlock(&t->pull_mu);
  for (int i = 0; i < t->n_ps; i++) {
    wk_shard *sh = &t->ps[i];
    uint32_t before = sh->client.push_queued;
    int rc = 0;
    if (from < sh->offset + sh->floats) /* some of its part is final */
      rc = wk_client_push_upto(&sh->client, from > sh->offset ? from - sh->offset : 0);
    /* A rising layer below what is final whole (a part announced before its layer's end
     * was: the layer is pushed whole by the line above). */
    if (rc == 0 && lo < hi && lo < from && hi > sh->offset && lo < sh->offset + sh->floats) {
      size_t a0 = lo > sh->offset ? lo - sh->offset : 0;
      size_t a1 = hi < sh->offset + sh->floats ? hi - sh->offset : sh->floats;
      rc = wk_client_push_rising(&sh->client, a0, a1);
    }
    if (from > 0) t->chunks_early += sh->client.push_queued - before; /* 0: compute is over */
    if (rc < 0) return; /* the connection is failing: its close callback says why */
  }
}

/* --layer-pieces: the net's dense layers cut where the shards' chunks start (the vector's
 * offsets, shard by shard in order), so that each chunk of a large layer's gradient is
 * pushed once its piece is made and each piece's forward pass runs once its chunk is in. Set
 * on the loop before a step is queued: the net is the threadpool's while one runs. A failure
 * (out of memory) leaves the layers whole, as without --layer-pieces. */
void wk_set_row_cuts(wk_trainer *t) {
  t->cuts_stale = 0;
  if (!t->opt.layer_pieces) return;
  size_t n = 0;
  for (int i = 0; i < t->n_ps; i++) n += t->ps[i].client.n_chunks;
  size_t *cuts = malloc((n ? n : 1) * sizeof *cuts);
  if (cuts == NULL) return;
  size_t k = 0;
  for (int i = 0; i < t->n_ps; i++)
    for (uint32_t c = 0; c < t->ps[i].client.n_chunks; c++)
      cuts[k++] = t->ps[i].offset + t->ps[i].client.starts[c];
  if (pst_pipe_set_row_cuts(t->net, cuts, k) < 0) pst_pipe_set_row_cuts(t->net, NULL, 0);
  free(cuts);
  /* Pushed layer by layer, a cut layer is made from its first rows up, so that its first
   * chunk leaves first and the PULL after it lets the ps stream the next weights' first
   * chunks while the layer's last pieces are made (wk_client_push_rising). */
  if (t->opt.push_by_layer) pst_pipe_on_grad_part(t->net, wk_grad_part, t);
}

