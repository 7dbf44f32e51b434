#include "ps/train/par.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/fpenv.h"

/* Pieces per thread: a loop is cut into (threads it needs) x PIECES pieces that every thread
 * claims one at a time, so a helper the kernel has not scheduled yet (the ps often shares its machine
 * with workers) holds up no more than the piece it has started; the caller takes whatever
 * pieces nobody has claimed. */
#define PIECES 4

struct ps_par {
  int threads;            /* in all, the caller included */
  pthread_t *helpers;     /* [threads - 1] */
  int started;            /* helpers created */
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  int quit;
  /* The loop of the current round, set under mu before `round` moves on. */
  uint32_t round;
  ps_par_fn fn;
  void *ctx;
  size_t n;
  uint32_t pieces;
  /* round << 32 | the next piece to claim: a helper that wakes late, after its round ended
   * and the next began, fails its claim instead of running a piece of another loop with the
   * old one's function. */
  _Atomic uint64_t claim;
  uint32_t finished;      /* pieces done this round, under mu */
};

/* Piece k of [0, n) cut in `pieces`, on 16-element boundaries. */
static void piece_of(size_t n, uint32_t pieces, uint32_t k, size_t *begin, size_t *end) {
  size_t lines = (n + 15) / 16;
  size_t b = lines * k / pieces * 16, e = lines * (k + 1) / pieces * 16;
  *begin = b < n ? b : n;
  *end = e < n ? e : n;
}

/* Claims the next piece of round r: 1 with *k set, 0 when none is left (or r is over). */
static int claim(ps_par *p, uint32_t r, uint32_t pieces, uint32_t *k) {
  uint64_t cur = atomic_load(&p->claim);
  for (;;) {
    if ((uint32_t)(cur >> 32) != r || (uint32_t)cur >= pieces) return 0;
    if (atomic_compare_exchange_weak(&p->claim, &cur, cur + 1)) {
      *k = (uint32_t)cur;
      return 1;
    }
  }
}

/* Runs the pieces of round r this thread can claim; returns how many it ran. */
static uint32_t work(ps_par *p, uint32_t r, ps_par_fn fn, void *ctx, size_t n, uint32_t pieces) {
  uint32_t k, ran = 0;
  while (claim(p, r, pieces, &k)) {
    size_t begin, end;
    piece_of(n, pieces, k, &begin, &end);
    if (begin < end) fn(ctx, begin, end);
    ran++;
  }
  return ran;
}

static void *helper_main(void *arg) {
  ps_par *p = arg;
  pst_fp_flush_denormals();
  uint32_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->quit && p->round == seen) pthread_cond_wait(&p->go, &p->mu);
    if (p->quit) break;
    seen = p->round;
    ps_par_fn fn = p->fn;
    void *ctx = p->ctx;
    size_t n = p->n;
    uint32_t pieces = p->pieces;
    pthread_mutex_unlock(&p->mu);
    uint32_t ran = work(p, seen, fn, ctx, n, pieces);
    pthread_mutex_lock(&p->mu);
    if (ran > 0 && p->round == seen) {
      p->finished += ran;
      if (p->finished == p->pieces) pthread_cond_signal(&p->done);
    }
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int ps_par_create(int threads, ps_par **out) {
  *out = NULL;
  if (threads < 1 || threads > 1024) return -EINVAL;
  ps_par *p = calloc(1, sizeof *p);
  if (!p) return -ENOMEM;
  p->threads = threads;
  atomic_init(&p->claim, 0);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  if (threads > 1) {
    p->helpers = calloc((size_t)threads - 1, sizeof *p->helpers);
    if (!p->helpers) {
      ps_par_free(p);
      return -ENOMEM;
    }
    /* Helpers are made with every signal blocked, so SIGINT and SIGTERM reach the loop
     * thread's handlers; they inherit its FTZ/DAZ bits and set them again anyway. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = 0;
    for (int i = 1; i < threads && rc == 0; i++) {
      rc = -pthread_create(&p->helpers[i - 1], NULL, helper_main, p);
      if (rc == 0) p->started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc < 0) {
      ps_par_free(p);
      return rc;
    }
  }
  *out = p;
  return 0;
}

void ps_par_free(ps_par *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->started; i++) pthread_join(p->helpers[i], NULL);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->mu);
  free(p->helpers);
  free(p);
}

int ps_par_threads(const ps_par *p) { return p ? p->threads : 1; }

void ps_par_for(ps_par *p, size_t n, ps_par_fn fn, void *ctx) {
  /* As many threads as the loop has PS_PAR_MIN elements for: a helper woken for less costs
   * more than its share saves, and the ps's CPU per gradient would grow with --threads. */
  size_t active = p ? n / PS_PAR_MIN : 0;
  if (p && active > (size_t)p->threads) active = (size_t)p->threads;
  if (active <= 1) {
    if (n > 0) fn(ctx, 0, n);
    return;
  }
  pthread_mutex_lock(&p->mu);
  uint32_t r = ++p->round;
  p->fn = fn;
  p->ctx = ctx;
  p->n = n;
  p->pieces = (uint32_t)active * PIECES;
  p->finished = 0;
  atomic_store(&p->claim, (uint64_t)r << 32);
  /* Only the helpers the loop needs are woken; the others sleep on (one that wakes anyway
   * finds the round's pieces, or none left, and sleeps again). */
  for (size_t k = 1; k < active; k++) pthread_cond_signal(&p->go);
  pthread_mutex_unlock(&p->mu);
  uint32_t ran = work(p, r, fn, ctx, n, p->pieces);
  pthread_mutex_lock(&p->mu);
  p->finished += ran;
  /* Every piece is claimed now; wait for those a helper is still running. */
  while (p->finished < p->pieces) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}
