/* The prefetch thread: one batch ahead, one buffer. */
#include "worker/prefetch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/fpenv.h"

static void *prefetch_main(void *arg) {
  wk_prefetch *pf = arg;
  pst_fp_flush_denormals(); /* as in every pstrain thread that computes */
  pthread_mutex_lock(&pf->mu);
  for (;;) {
    while (!pf->stop && pf->state != WK_PF_ASKED) pthread_cond_wait(&pf->cv, &pf->mu);
    if (pf->stop) break;
    pf->state = WK_PF_WORKING;
    uint64_t step = pf->step;
    pthread_mutex_unlock(&pf->mu);
    /* Only this thread touches idx, x and y while WORKING. */
    pst_batch_fill(pf->prep, pf->idx, pf->batch, 1, step, pf->x, pf->y);
    pthread_mutex_lock(&pf->mu);
    pf->state = WK_PF_READY;
    pthread_cond_broadcast(&pf->cv);
  }
  pthread_mutex_unlock(&pf->mu);
  return NULL;
}

int wk_prefetch_start(wk_prefetch *pf, const pst_batch_prep *prep, int batch) {
  memset(pf, 0, sizeof *pf);
  pf->prep = prep;
  pf->batch = batch;
  pf->features = pst_batch_features(prep);
  pf->idx = malloc((size_t)batch * sizeof *pf->idx);
  pf->x = malloc((size_t)batch * pf->features * sizeof *pf->x);
  pf->y = malloc((size_t)batch * sizeof *pf->y);
  if (pf->idx == NULL || pf->x == NULL || pf->y == NULL) {
    wk_prefetch_stop(pf);
    return -ENOMEM;
  }
  pthread_mutex_init(&pf->mu, NULL);
  pthread_cond_init(&pf->cv, NULL);
  int rc = pthread_create(&pf->thread, NULL, prefetch_main, pf);
  if (rc != 0) {
    pthread_mutex_destroy(&pf->mu);
    pthread_cond_destroy(&pf->cv);
    wk_prefetch_stop(pf);
    return -rc;
  }
  pf->started = 1;
  return 0;
}

/* With pf->mu held: waits for whatever was asked for (its buffers are either this step's
 * batch or free to be reused once it is done), takes the thread's result back, and says
 * whether it is step's batch. */
static int claim_locked(wk_prefetch *pf, uint64_t step) {
  while (pf->state == WK_PF_ASKED || pf->state == WK_PF_WORKING)
    pthread_cond_wait(&pf->cv, &pf->mu);
  int ours = pf->state == WK_PF_READY && pf->step == step;
  pf->state = WK_PF_IDLE;
  return ours;
}

double wk_prefetch_take(wk_prefetch *pf, uint64_t step, const int32_t *idx, float *x, int32_t *y) {
  double t0 = pst_now();
  int ours = 0;
  if (pf->started) {
    pthread_mutex_lock(&pf->mu);
    ours = claim_locked(pf, step);
    pthread_mutex_unlock(&pf->mu);
  }
  if (ours) {
    memcpy(x, pf->x, (size_t)pf->batch * pf->features * sizeof *x);
    memcpy(y, pf->y, (size_t)pf->batch * sizeof *y);
  } else {
    pst_batch_fill(pf->prep, idx, pf->batch, 1, step, x, y);
  }
  return pst_now() - t0;
}

double wk_prefetch_take_swap(wk_prefetch *pf, uint64_t step, const int32_t *idx, float **x,
                             int32_t **y, size_t x_floats) {
  if (x_floats != (size_t)pf->batch * pf->features) return wk_prefetch_take(pf, step, idx, *x, *y);
  double t0 = pst_now();
  int ours = 0;
  if (pf->started) {
    pthread_mutex_lock(&pf->mu);
    ours = claim_locked(pf, step);
    if (ours) {
      /* Under the lock: the thread touches pf->x and pf->y only while it works. */
      float *xs = *x;
      int32_t *ys = *y;
      *x = pf->x;
      *y = pf->y;
      pf->x = xs;
      pf->y = ys;
    }
    pthread_mutex_unlock(&pf->mu);
  }
  if (!ours) pst_batch_fill(pf->prep, idx, pf->batch, 1, step, *x, *y);
  return pst_now() - t0;
}

void wk_prefetch_ask(wk_prefetch *pf, uint64_t step, const int32_t *idx) {
  if (!pf->started) return;
  pthread_mutex_lock(&pf->mu);
  if (pf->state == WK_PF_IDLE) {
    memcpy(pf->idx, idx, (size_t)pf->batch * sizeof *idx);
    pf->step = step;
    pf->state = WK_PF_ASKED;
    pthread_cond_broadcast(&pf->cv);
  }
  pthread_mutex_unlock(&pf->mu);
}

void wk_prefetch_stop(wk_prefetch *pf) {
  if (pf->started) {
    pthread_mutex_lock(&pf->mu);
    pf->stop = 1;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    pthread_join(pf->thread, NULL);
    pthread_mutex_destroy(&pf->mu);
    pthread_cond_destroy(&pf->cv);
  }
  free(pf->idx);
  free(pf->x);
  free(pf->y);
  memset(pf, 0, sizeof *pf);
}
