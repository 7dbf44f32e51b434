/* The stall watch of an all-reduce rank (worker/allreduce/allreduce.h). MPI has no timeout: a
 * rank whose peer is stopped (SIGSTOP), frozen or cut off waits in its sum for ever, and the
 * job hangs without a word. This thread ends such a wait: past the limit (--stall-timeout, or
 * 20 times the longest step seen, whichever is longer, as the ps's step watch grows with the
 * job's steps) the rank says what it waited in, at which step, and exits 1; mpirun then ends
 * every rank. It calls no MPI (the loop's thread owns MPI: MPI_THREAD_FUNNELED). */
#include <inttypes.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "worker/allreduce/allreduce.h"

/* The limit is checked this often. */
#define WATCH_TICK_NS 100000000LL
/* A rank that gives up waits this long before it exits, so that every other rank waiting in
 * the same sum reaches its own limit and says so too (the one rank that does not is the one
 * that stalled) before mpirun ends them all. */
#define WATCH_GRACE_S 1

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *watch(void *arg) {
  wk_ar *a = arg;
  while (!atomic_load(&a->watch_stop)) {
    struct timespec tick = {0, WATCH_TICK_NS};
    nanosleep(&tick, NULL);
    long long since = atomic_load(&a->wait_since_ns);
    if (since == 0) continue;
    double limit = a->job.stall_timeout, longest = atomic_load(&a->longest_step_ns) / 1e9;
    if (20 * longest > limit) limit = 20 * longest;
    double waited = (now_ns() - since) / 1e9;
    if (waited <= limit) continue;
    /* The step the loop is in: steps done + 1 (read without a lock: a figure for people). */
    LOG_ERR("rank %d: step %" PRIu64 ": waited %.1f s of a %.1f s limit in %s for the other "
            "ranks (--stall-timeout %g s, or 20 times the longest step, %.3f s): a rank has "
            "stalled or is cut off; ending the job", a->rank, a->t.steps + 1, waited, limit,
            atomic_load(&a->wait_what), a->job.stall_timeout, longest);
    sleep(WATCH_GRACE_S);
    _exit(PST_EXIT_FAILED);
  }
  return NULL;
}

int wk_ar_watch_start(wk_ar *a) {
  if (!(a->job.stall_timeout > 0)) return 0;
  atomic_store(&a->watch_stop, 0);
  if (pthread_create(&a->watch, NULL, watch, a) != 0) return -1;
  a->watching = 1;
  return 0;
}

void wk_ar_watch_stop(wk_ar *a) {
  if (!a->watching) return;
  atomic_store(&a->watch_stop, 1);
  pthread_join(a->watch, NULL);
  a->watching = 0;
}

void wk_ar_wait_begin(wk_ar *a, const char *what) {
  atomic_store(&a->wait_what, what);
  atomic_store(&a->wait_since_ns, now_ns());
}

void wk_ar_wait_end(wk_ar *a) { atomic_store(&a->wait_since_ns, 0); }

void wk_ar_step_took(wk_ar *a, double seconds) {
  long long ns = (long long)(seconds * 1e9);
  if (ns > atomic_load(&a->longest_step_ns)) atomic_store(&a->longest_step_ns, ns);
}
