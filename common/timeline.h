/* A process's timeline (issue 41): what each thread did when, written at the end as Chrome
 * trace-event JSON (it loads in Perfetto and chrome://tracing, as Horovod's and PyTorch's
 * profiler timelines do).
 *
 * One timeline per process (a module-wide state: the worker's compute thread, its loop and
 * the ps's helpers all record into it without being handed anything). Recording costs one
 * relaxed atomic load when the timeline is off or outside its window of steps. When on, each
 * thread appends to a buffer of its own (made on its first event, registered once under a
 * mutex), so the hot path takes no lock and does no I/O; the file is written once, by
 * pst_tl_write, after the work is over.
 *
 * Times are the process's monotonic clock (common/clock.h, seconds; microseconds in the
 * file). Processes' clocks are put on one by whoever merges the files, from the offsets each
 * process measured and recorded with pst_tl_offset (the worker's, to each ps shard).
 *
 * The window: events are kept only while the owner's step (pst_tl_step) is in
 * [skip, skip + steps), so a file holds a bounded number of steps after the warm-up. */
#ifndef PSTRAIN_COMMON_TIMELINE_H
#define PSTRAIN_COMMON_TIMELINE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Steps skipped at the start unless told otherwise (the first steps allocate, load data and
 * fill caches: not the steady state the timeline is for). */
#define PST_TL_SKIP_DEFAULT 5
#define PST_TL_STEPS_DEFAULT 50
/* Events one thread keeps at most; past it they are counted as dropped (the file says how
 * many). 50 steps of a 160-layer model with 4 events a layer is 32,000. */
#define PST_TL_THREAD_EVENTS 65536

/* Whether events are being kept now: tested before any other work on the hot path. */
extern atomic_int pst_tl_on_;
static inline int pst_tl_on(void) { return atomic_load_explicit(&pst_tl_on_, memory_order_relaxed); }

/* Starts the process's timeline for `path` (created now, so that an unwritable place is an
 * error at once, not at the end), as process `process` (e.g. "worker 0", "ps"), keeping the
 * steps [skip, skip + steps). 0, or a negative code with the reason in err. Once only. */
int pst_tl_open(const char *path, const char *process, uint64_t skip, uint64_t steps, char *err,
                size_t errlen);
/* Whether pst_tl_open succeeded (the timeline was asked for). */
int pst_tl_opened(void);
/* The owner's step now (the worker's training step, the ps's version being built): turns
 * recording on inside the window (and one step either side of it) and off outside it. An
 * event is kept when its own step (pst_tl_args.step; the owner's step now where it has
 * none) is inside the window. */
void pst_tl_step(uint64_t step);
/* The step last given to pst_tl_step (events carry it). */
uint64_t pst_tl_current_step(void);
/* Names the calling thread's track ("loop", "compute", ...); before or after its events. */
void pst_tl_thread(const char *name);

/* What an event says besides its name and times: -1 where it does not apply. */
typedef struct {
  int64_t step;    /* the step (or version) it belongs to */
  int64_t index;   /* a layer's or a chunk's index */
  int64_t offset;  /* a chunk's first float */
  int64_t floats;  /* and its length */
  int64_t version; /* the weights' version a chunk carries or was computed on */
} pst_tl_args;

#define PST_TL_NOARGS ((pst_tl_args){-1, -1, -1, -1, -1})
/* The arguments of a chunk: its step, index, first float, length and version. */
#define PST_TL_CHUNK(step, index, offset, floats, version)                             \
  ((pst_tl_args){(int64_t)(step), (int64_t)(index), (int64_t)(offset), (int64_t)(floats), \
                 (int64_t)(version)})
/* The arguments of a layer's span, or of anything else of one step. */
#define PST_TL_STEP(step, index) ((pst_tl_args){(int64_t)(step), (int64_t)(index), -1, -1, -1})

/* A span [t0, t1] on the calling thread's track (Chrome's "X"). name and cat must outlive
 * the timeline (string literals, or a model's layer names). */
void pst_tl_span(const char *cat, const char *name, double t0, double t1, pst_tl_args a);
/* A span that may overlap others (a chunk on the wire, a step): Chrome's async pair "b"/"e",
 * on a track of its category. id tells overlapping spans of one name apart. */
void pst_tl_async(const char *cat, const char *name, uint64_t id, double t0, double t1,
                  pst_tl_args a);
/* A measured offset to another process's clock: its clock = this one's + offset_s, within
 * +-uncertainty_s. Kept per peer: the sample with the least uncertainty wins. */
void pst_tl_offset(const char *peer, double offset_s, double uncertainty_s);

/* Writes the file (kept events, thread names, offsets, counts) and frees the buffers. Call
 * once every recording thread is done or idle. 0 or a negative code with the reason. */
int pst_tl_write(char *err, size_t errlen);
/* Events kept so far, and dropped for want of room (tests). */
uint64_t pst_tl_count(void);
uint64_t pst_tl_dropped(void);

#endif
