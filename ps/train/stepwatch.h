/* How long a sync step may wait on one worker (issue 43).
 *
 * A worker that is connected and sends HEARTBEATs is not lost, yet it can hold every sync
 * step open as long as it likes: it pulls and never pushes, or begins a push and sends no
 * more of it. This module keeps, for each slot, how long its worker takes from the moment
 * it could start a step (the step's weights went out to it, or the step opened, or it
 * reported an evaluation) to the moment its push is in, and gives the bound past which a
 * step one slot keeps open is given up like a stall:
 *
 *   plain step:   max(floor, factor x max(the slot's median, the job's median)), at most cap
 *   evaluating:   the plain bound + factor x the evaluation's expected time, at most cap
 *   its first:    as a plain step with PST_SW_FIRST_FLOORS floors (it also sets itself up)
 *   nothing measured yet (the job's first step): cap
 *
 * The medians are of each slot's last PST_SW_WINDOW plain steps, so the bound follows the
 * job: a worker that is slow (a slower device, a slow link) has a long median of its own
 * and keeps working; one that was quick and stops is given up after factor times its usual
 * time. The job's median (the median of the slots' medians) gives a newcomer a figure, and
 * keeps a worker from being judged by a quicker past than the job's. A slot's evaluation is
 * expected to take what its last one took, or, before it has reported one, the longest any
 * slot reported, scaled by how much slower this slot's steps are than the job's. Without a
 * figure to go by, only the cap bounds the step.
 *
 * Times are the caller's (monotonic seconds); nothing here reads a clock, so the unit test
 * drives it with made-up times. */
#ifndef PSTRAIN_PS_STEPWATCH_H
#define PSTRAIN_PS_STEPWATCH_H

#include <stddef.h>

#define PST_SW_WINDOW 32     /* plain steps a slot's median is taken over */
#define PST_SW_FIRST_FLOORS 3 /* a worker's first step: this many floors at least */

typedef struct {
  double began;              /* monotonic seconds its current step began; 0: none */
  int evaluating;            /* its current step includes an evaluation it owes */
  float recent[PST_SW_WINDOW]; /* its last plain steps' times, a ring */
  int n, at;                 /* samples in the ring (<= PST_SW_WINDOW), the next slot */
  double eval_seconds;       /* its last reported evaluation's time; 0: none yet */
} pst_sw_slot;

typedef struct {
  int slots;
  double factor;             /* x the typical step (0: no derived bound, only the cap) */
  double floor;              /* seconds: the derived bound is never below this */
  double cap;                /* seconds: no step waits longer on one slot (0: no cap) */
  double eval_longest;       /* the longest evaluation any slot reported */
  pst_sw_slot *slot;         /* [slots] */
} pst_stepwatch;

/* 0, -EINVAL (slots < 1, a negative or non-finite figure) or -ENOMEM. */
int pst_stepwatch_init(pst_stepwatch *w, int slots, double factor, double floor, double cap);
void pst_stepwatch_free(pst_stepwatch *w);

/* Slot i may start a step from `now` (its weights went out, the step opened, or it has
 * just reported an evaluation); `evaluating`: it owes an evaluation first. */
void pst_stepwatch_begin(pst_stepwatch *w, int i, double now, int evaluating);
/* Slot i's push for its step is in (taken, or dropped as late): a plain step's time is
 * recorded. */
void pst_stepwatch_end(pst_stepwatch *w, int i, double now);
/* Slot i reported an evaluation that took `seconds` of its own. */
void pst_stepwatch_eval(pst_stepwatch *w, int i, double seconds);
/* Slot i has a new worker: its history is another worker's. */
void pst_stepwatch_forget(pst_stepwatch *w, int i);

/* The bound on slot i's step in progress, in seconds (0: no bound), and in `why` how it was
 * made ("20 x the median step of 4.1 ms, at least 5 s"). */
double pst_stepwatch_bound(const pst_stepwatch *w, int i, char *why, size_t whylen);
/* Seconds slot i has held its current step at `now` (0: none in progress). */
double pst_stepwatch_held(const pst_stepwatch *w, int i, double now);

#endif
