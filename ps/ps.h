/* The ps's shared state and the rooms' interface to each other: what the ps is told at start
 * (ps_options), a worker slot (ps_worker), struct ps_server, the training core's way to the
 * connections (ps_net_ops), and the functions of ps/train/ the other rooms call. The loop's
 * wiring (start, stop, free) is ps/server.h's. */
#ifndef PSTRAIN_PS_PS_H
#define PSTRAIN_PS_PS_H

#include <stdint.h>
#include <uv.h>

#include "common/auth.h"
#include "common/codec.h"
#include "common/log.h"
#include "common/tls.h"
#include "model/model.h"
#include "ps/obs/metrics.h"
#include "ps/train/eval_hook.h"
#include "ps/train/handout.h"
#include "ps/train/optim.h"
#include "ps/train/stepwatch.h"
#include "ps/state/store.h"
#include "ps/train/update.h"
#include "proto/wire.h"

/* Everything the ps is told at start (see ps/main.c for the flags). */
typedef struct {
  char listen_host[256];
  int listen_port;
  int workers;            /* the most workers (MAX of --workers MIN:MAX; N of a plain N) */
  int workers_min;        /* training starts with, and goes on from, this many (MIN) */
  int data_handout;       /* the ps hands out the data (--data-order ps, ps/train/dataplan.c) */
  pst_mode mode;
  int staleness;          /* ssp bound */
  int backup_workers;     /* sync: steps need N-K gradients */
  int staleness_lr;       /* async/ssp: a gradient's learning rate / (1 + its staleness) */
  int lr_linear;          /* --lr-scaling linear (sync, the data handout) */
  pst_lr_schedule lr_schedule; /* --lr-schedule (ps_plan_lr) */
  int epochs;
  int batch_size;         /* per worker */
  uint64_t seed;
  uint32_t chunk_floats;
  int layer_chunks;       /* chunks along the model's layers (model/model.h), at most
                           * chunk_floats each; 0: chunks of chunk_floats */
  /* The part of the parameter vector this ps holds (kernels/partition.h): shard shard_index
   * of shard_count, floats [shard_offset, shard_offset + shard_floats). shard_count 0 means
   * one ps holding everything (ps_server_start fills the rest in). */
  int shard_index, shard_count;
  size_t shard_offset, shard_floats;
  int threads;            /* threads for sums and optimizer passes in all (<= 1: the loop's);
                           * above 1, as many - 1 I/O threads too (ps/net/io.h) */
  int shm;                /* a worker on this host may send and take payloads through shared
                           * memory (proto/ring.h, ps/net/messages.c) */
  uint32_t io_min;        /* bytes: payloads and reply runs from this size are moved by the
                           * I/O threads (0: none are) */
  int report_every;       /* steps between the workers' loss reports */
  int eval_every;         /* steps between evaluations on the test subset (0: off) */
  const ps_eval_hook *evaluator; /* --eval-on ps: the ps evaluates each epoch itself (the
                                  * caller's, outlives the server); NULL: the workers do */
  int eval_samples;       /* test samples in that subset */
  double status_interval; /* seconds between status log lines; 0 = off */
  const char *model_name; /* as given: a preset name or a spec file */
  const char *metrics_path;
  const char *summary_path;
  pst_opt_config opt;
  /* What a gradient share may be (ps/train/update.h): values of magnitude at most grad_limit, and
   * with clip_norm > 0 (told to the workers, which clip to it) a norm within it. */
  double grad_limit;
  double clip_norm;
  /* A push's norm over grad_norm_factor times the running median of accepted ones' is
   * rejected (ps/train/update.h; 0: off, which a zeroed ps_options gets: pstrain-ps's default is
   * PST_NORM_FACTOR_DEFAULT). */
  double grad_norm_factor;
  /* The job's tensor encodings (common/codec.h; issue 27), told in WELCOME: pushes arrive in
   * push_enc and are decoded to float32 before any check or sum; pulls go out in pull_enc,
   * rounded from the fp32 weights. A worker that does not know them is refused. */
  pst_enc push_enc, pull_enc;
  double topk_fraction;   /* push_enc TOPK: the share of each chunk a push sends */
  double topk_warmup;     /* ... after a warm-up of this many epochs (pst_topk_fraction_at) */
  double topk_momentum;   /* > 0: the momentum the workers keep (ps/main.c); opt's is then 0 */
  /* The data every worker must have (training and test samples, classes); 0 0 0: whatever
   * the first worker to register says (ps/train/validate.c). */
  uint32_t data_train, data_test, data_classes;
  /* Who may connect, and how many. */
  const pst_secret *secret;  /* set: every connection authenticates first */
  pst_tls_ctx *tls;          /* set: every connection is mutual TLS (the caller's; outlives the
                              * server) */
  double hello_timeout;      /* seconds to authenticate and register */
  int max_connections;
  /* Failures (ps/train/liveness.c). */
  double worker_timeout;  /* seconds of silence after which a worker is lost */
  double eval_timeout;    /* seconds a worker may take to report an evaluation it owes once
                           * the others have (0: the worker timeout; ps/train/liveness.c) */
  double rejoin_timeout;  /* seconds a lost worker's slot waits for a replacement */
  int wait_on_loss;       /* sync: steps wait for a lost worker (else go on without it) */
  /* sync: how long a step waits on one connected worker (ps/train/stepwatch.h): step_factor x
   * its typical step, at least PS_STEP_FLOOR seconds, at most step_timeout (0: no cap). */
  double step_factor;
  double step_timeout;
  /* Checkpoints (ps/state/checkpointing.c). */
  const char *checkpoint_dir; /* "" : none */
  uint64_t checkpoint_every;  /* steps; 0: off */
  double checkpoint_seconds;  /* 0: off */
  int checkpoint_keep;
  const char *resume;         /* "auto", "never" or a checkpoint file */
} ps_options;

typedef struct ps_conn ps_conn;

#define PS_EVAL_SHARES 4   /* epochs of evaluation shares a slot keeps */
#define PS_EVAL_FLAGS 32   /* implausible shares the summary lists at most */

/* One worker's share of an epoch's evaluation, as it reported it. */
typedef struct {
  uint32_t epoch;
  uint64_t correct, samples;
  double loss_sum;
  int set_aside;          /* flagged implausible: left out of the epoch's figures */
} ps_eval_share;

/* A worker slot: the shard with index i, whichever process holds it. */
typedef struct {
  ps_conn *conn;          /* NULL while no worker holds the slot */
  char name[64];
  int done;               /* sent BYE */
  int ever;               /* a worker has held the slot */
  int lost;               /* its worker was lost; waiting for a replacement */
  int abandoned;          /* the rejoin timeout ran out: training goes on without it */
  double lost_at;         /* monotonic seconds */
  uint32_t losses;
  uint32_t evals_done;    /* epochs whose evaluation this slot reported or no longer owes */
  uint64_t last_version;  /* version its last push was computed on */
  uint64_t whole_for;     /* v + 1 for its last push computed on v and taken whole (0: none) */
  uint64_t last_staleness;
  uint64_t pushes;        /* gradients of this slot applied: its position in async/ssp */
  uint64_t dropped;       /* gradients of this slot dropped (late, or backup workers) */
  uint32_t epoch;         /* the epoch of its last training report */
  uint32_t rejected_total; /* invalid messages of all the workers that held this slot, for
                            * the summary (ps/train/validate.c); the strikes that disconnect a
                            * worker are its connection's (ps_conn.strikes) */
  uint32_t subset_asked;  /* the newest dense evaluation point this slot was asked for */
  /* The evaluation this slot owes next (ps/train/liveness.c): since when it could have sent it,
   * and how long its last share took after it could. */
  uint32_t eval_due_epoch;
  double eval_due_at, eval_took;
  uint32_t evals_missed;  /* epochs evaluated without its share (lost, left, or late: check_evals) */
  /* Its evaluation shares of the last epochs, by epoch % PS_EVAL_SHARES: what it reported,
   * for the plausibility check against the others' (ps/train/liveness.c). */
  ps_eval_share eval_share[PS_EVAL_SHARES];
  /* The data handout (ps/train/dataplan.c): the ranges its worker holds, for the step on
   * range_version[k] at k = that version & 1 (count 0: none): a sync worker may be given the
   * next step's while its push of this one is still being taken. And the step it takes part
   * from. */
  pst_range range[2];
  uint64_t range_version[2];
  /* The last range it trained, and the version of the weights it trained it on: a sync
   * checkpoint of an older version than that one's step gives the range back (ps/train/dataplan.c,
   * ps_data_position). */
  pst_range trained_range;
  uint64_t trained_version;
  uint64_t join_at;
  /* What it has trained (issue 43): sync, one past the newest version a push of its was
   * computed on and read whole (taken, or dropped as a backup worker's); and the steps
   * published without its share while it was lost or given up (its batches skipped). */
  uint64_t pushed_to;
  uint64_t skipped_steps;
  uint64_t untrained_steps; /* at the end of the run: steps of its shard never trained */
  int leaving;            /* its worker said goodbye (BYE leaving): its close is no loss */
  /* ssp: the worker's clock is pushes + clock_off (unsigned, wrapping). 0 but for a newcomer
   * of an elastic job, whose clock starts at the slowest present worker's, so that it is
   * neither held back nor holds the others back by the pushes it never made. */
  uint64_t clock_off;
} ps_worker;

/* ssp: a worker's clock (ps_worker.clock_off). */
static inline uint64_t ps_ssp_clock(const ps_worker *w) { return w->pushes + w->clock_off; }

typedef struct ps_ckpt_state ps_ckpt_state; /* ps/state/checkpointing.c */

typedef struct ps_server ps_server;

/* What the training core (ps/train/) may ask of the connections and of the loop: it does not
 * include the connection layer (ps/net/conn.h) but calls these, which ps_server_start wires
 * to ps/server.c and ps/net/. */
typedef struct {
  void (*kick)(ps_server *s);                                 /* ps_server_kick */
  /* ps_server_stop: failed says so to the workers and the summary; exit_code (PST_EXIT_*,
   * common/proc.h; 0: as it stands) is the ps's when the run has failed or is incomplete. */
  void (*stop)(ps_server *s, const char *reason, int failed, int exit_code);
  /* A ROLLBACK the ps accepted (ps/net/messages.c): it stops, and ps/main.c starts it again
   * from the checkpoint at path, of version. */
  void (*go_back)(ps_server *s, const char *path, uint64_t version);
  void (*drop)(ps_conn *c, const char *why);   /* an ERROR saying why, then a hard close */
  /* Every registered worker's connection: silence (lost after --worker-timeout) and
   * heartbeats (ps/net/conn.c). */
  void (*watch)(ps_server *s, double now);
  /* Connections that did not authenticate or register in time (ps/net/admission.c). */
  void (*admission_watch)(ps_server *s, double now);
} ps_net_ops;

/* What the training core (ps/train/) and durable state (ps/state/) tell observability: they
 * do not call into ps/obs/ but say what happened through these, which ps_server_start wires
 * to ps/obs/events.c (the metrics file, /metrics, TensorBoard). */
typedef struct {
  /* Slot `worker` joined, departed or was lost ("joined", "departed", "lost"); `present`
   * workers train now; join_at: the version it takes part from (joined). */
  void (*workers)(ps_server *s, const char *why, int worker, int present, uint64_t join_at);
  /* Training began (every slot has had a worker, or MIN of an elastic job), or ended (the
   * last evaluation is in). */
  void (*began)(ps_server *s);
  void (*ended)(ps_server *s);
  /* The data handout: a range "handed" out to slot `worker` for the step on `version`,
   * "returned" to the pool, or "trained"; epoch `epoch` had every sample trained once. */
  void (*range)(ps_server *s, const char *what, int worker, uint64_t version, const pst_range *r);
  void (*data_epoch)(ps_server *s, uint32_t epoch);
  /* A share of epoch's test evaluation (the workers' or the ps's own), one set aside as
   * implausible, and the epoch's evaluation closed: returns 1 when its figures became final
   * now (0: closed before, or no share in). */
  void (*eval_share)(ps_server *s, uint32_t epoch, uint64_t version, double loss_sum,
                     uint64_t correct, uint64_t samples);
  void (*eval_set_aside)(ps_server *s, uint32_t epoch, double loss_sum, uint64_t correct,
                         uint64_t samples);
  int (*eval_closed)(ps_server *s, uint32_t epoch);
  /* A new version was published (the step-time histogram, the learning rate shown). */
  void (*published)(ps_server *s);
  /* What the workers report (ps/train/reports.c): a training report of slot `worker`, the
   * seconds an evaluation took it, and its share of dense evaluation `point`. */
  void (*trained)(ps_server *s, int worker, const Pstrain__Report *r, uint64_t staleness);
  void (*eval_time)(ps_server *s, double seconds);
  void (*subset_share)(ps_server *s, int worker, const Pstrain__Report *r);
  /* The push path and the pull path (ps/server.c, ps/net/pull.c): a gradient applied
   * (`staleness` versions old, `seconds` since its first chunk), a reply's last chunk written
   * `seconds` after its PULL, a worker's round trip (its exposed wait, and the ps's part:
   * queued, summing, optimizer, sending), dense evaluation point `point` asked for. */
  void (*applied)(ps_server *s, uint64_t staleness, double seconds);
  void (*pulled)(ps_server *s, double seconds);
  void (*round_trip)(ps_server *s, double exposed, double queued, double sum, double optimizer,
                     double sending);
  void (*subset_asked)(ps_server *s, uint32_t point);
} ps_obs_events;

/* The parts of the ps's state. Each is changed only by the module named with it; the others
 * read it (through const pointers where a function takes it) or ask its module. */

/* The connections (ps/net/net.h): opaque here, so that the training core, which includes this
 * header, does not see the connection layer. */
typedef struct ps_net ps_net;

/* The steps (the push path in ps/server.c, ps/train/update.c, the store): the weights and their
 * versions, the optimizer and its state, the step being assembled, the helper threads. */
typedef struct {
  pst_store store;
  pst_optimizer optim;
  pst_update upd;
  ps_par *par;            /* helper threads (ps/train/par.h), NULL with --threads 1 */
  /* --push-compress topk or int8: a chunk's pairs, or its scale and bytes, are copied here
   * before they are decoded into the receive buffer they arrived in (the loop decodes one
   * chunk at a time). */
  uint8_t *topk_pairs;
  uint64_t max_lead;      /* ssp: the largest lead any answered pull had over the slowest
                           * (ps/net/pull.c measures it; checkpoints keep it) */
  /* Sync steps one connected worker holds open (ps/train/stepwatch.h, ps/train/liveness.c),
   * and the version whose step the watch has seen open (UINT64_MAX: none yet). */
  pst_stepwatch sw;
  uint64_t sw_version;
} ps_core;

/* The worker slots and who holds them (ps/train/liveness.c). */
typedef struct {
  int n;                  /* slots: opt.workers */
  ps_worker *workers;     /* [n] */
  int registered;         /* slots a worker holds now */
  int finished;           /* slots whose worker said BYE (no more pushes) */
  int started;            /* every slot has been taken once: training is under way */
  int slots_seen;         /* slots a worker has held */
  int losses, abandoned;  /* worker losses over the run; slots given up */
  int departures;         /* workers that left on purpose (BYE leaving) */
  int workers_most;       /* the most workers training at once */
  double empty_since;     /* monotonic seconds since no worker is connected (0: some are) */
  /* The job ended with samples of some slots never trained: how many. */
  uint64_t untrained_samples;
  uv_timer_t watch_timer; /* timeouts, heartbeats, rejoin deadlines, timed checkpoints */
} ps_roster;

/* The data every worker must have (ps/train/validate.c). */
typedef struct {
  int data_known;         /* the workers' data facts, from the first HELLO that had them */
  int data_fixed;         /* ... or from --data-facts: never forgotten */
  uint64_t data_pinned_at; /* the version when a HELLO set them */
  uint32_t train_n, test_n, classes;
} ps_facts;

/* The evaluations (ps/train/liveness.c). */
typedef struct {
  uint32_t ps_eval_epoch;   /* --eval-on ps: the epoch being or last evaluated */
  pst_eval_flag eval_flags[PS_EVAL_FLAGS]; /* implausible evaluation shares */
  int n_eval_flags;
  uint64_t evals_flagged;
  /* The whole model's checksum as the workers' evaluations of the last epoch report it
   * (Report.weights_checksum): a shard of K holds one part and cannot compute it itself.
   * model_sums: reports that gave one; model_sums_differ: two of them disagreed. */
  uint64_t model_sum;
  int model_sums, model_sums_differ;
} ps_evals;

/* The data handout (--data-order ps, ps/train/dataplan.c). plan_next: sync, the steps on
 * versions below it have their ranges given out. */
typedef struct {
  pst_handout data;
  uint64_t plan_next;
} ps_plan;

/* What the operator sees (ps/obs/): the metrics and the summary's figures, and STATUS's
 * weights checksum, computed once per version so that a STATUS costs no pass over the
 * weights, however many are asked for. */
typedef struct {
  pst_metrics metrics;
  uint64_t status_ck, status_ck_version;
  int status_ck_valid;
  char push_enc_text[48];  /* the summary's push_encoding ("topk:0.01") */
  uv_timer_t status_timer;
  /* Why the run ended and whether it failed, kept for the summary, which is written once
   * the final checkpoint has ended (ps_obs_stop_report); and what writing them found: the
   * final checkpoint failed, the summary or the metrics file could not be written
   * (ps_server_exit_code turns these into the ps's exit code). */
  char end_reason[512];
  int end_failed;
  int ckpt_failed, report_failed;
} ps_obs;

/* Where the run came from (ps/state/checkpointing.c): a checkpoint, and its version. */
typedef struct {
  int resumed;
  uint64_t resumed_from;
} ps_restored;

/* The daemon's life (ps/server.c): the loop's turns, the signals, and how the run ends. */
typedef struct {
  uv_signal_t sig_int, sig_term;
  int kicking, kick_again;
  int stopping;           /* shutdown begun */
  /* Going back to an older version (a ROLLBACK from a worker): the checkpoint file the ps
   * starts itself again from once the loop has ended (ps/main.c), and the version. */
  char rollback_path[1024];
  uint64_t rollback_version;
  int stop_requested;     /* by a signal: exit PST_EXIT_STOPPED */
  int exit_code;          /* as the run ended (ps_server_exit_code adds the report's) */
} ps_life;

struct ps_server {
  /* Set once by ps_server_start, read by every part. */
  ps_options opt;
  const pst_model *model;
  uv_loop_t *loop;
  ps_net_ops ops;         /* the training core's way to the connections (above) */
  ps_obs_events events;   /* ... and to observability */
  /* The parts. */
  ps_net *net;            /* ps/net/ */
  ps_core core;
  ps_roster roster;
  ps_facts facts;
  ps_evals evals;
  ps_plan plan;
  ps_obs obs;
  ps_ckpt_state *ckpt;    /* ps/state/checkpointing.c; NULL without --checkpoint-dir */
  ps_restored restored;
  ps_life life;
};

/* Seconds: the derived bound on a sync step held by one worker is never below this. */
#define PS_STEP_FLOOR 5.0

/* ---- membership and liveness (ps/train/roster.c: the slots' books; ps/train/liveness.c) ---- */

/* The watch timer: losses, rejoin deadlines, silence and heartbeats, the step watch. */
int ps_liveness_start(ps_server *s);
void ps_liveness_stop(ps_server *s);
/* The slot a worker registering now takes: the one it asks
 * for (requested >= 0) if no worker holds it, else an unfinished free one, preferring one
 * nobody has held yet; -1: none. */
int ps_slot_free(const ps_roster *r, int requested);
/* Connection c's worker (named name, which dropped `dropped` late gradients while it was
 * away) takes slot i; ps_worker_joined follows once it is welcomed. */
void ps_slot_take(ps_server *s, int i, ps_conn *c, const char *name, uint32_t dropped);
/* A worker took slot i, from peer (over session: TLS, or ""); says so in the log when it was
 * a rejoin. */
void ps_worker_joined(ps_server *s, int i, const char *peer, const char *session);
/* Slot i's worker is gone (connection closed, or silent for the timeout). */
void ps_worker_lost(ps_server *s, int i, const char *why);
/* Slot i's worker said goodbye (BYE leaving): 1, or 0 if it had already. */
int ps_worker_leaving(ps_roster *r, int i);
/* A message of slot i's worker was rejected: the slot's count of them, this one included. */
uint32_t ps_slot_struck(ps_roster *r, int i);
/* Slot i's worker said BYE having trained through its data (ps/server.c checked it): no
 * more pushes from it. 1 if it had not finished before. */
int ps_worker_finished(ps_roster *r, int i);
/* Workers training now (connected, not finished). */
int ps_present_workers(const ps_roster *r);
/* sync: whether the step in progress waits for slot i's gradient (the status log line's
 * "waiting for", STATUS's waited_for, the step watch). */
int ps_waits_for(const ps_server *s, int i);
/* No worker will push again: every slot finished or given up (with the data handed out: every
 * range trained and every worker gone or finished). The final weights are fixed then. */
int ps_no_more_pushes(const ps_server *s);
/* Whether slot i's worker has trained through its data: its shard's every step (sync: the
 * job's last version; async/ssp: its own pushes), or, with the data handed out, the whole
 * handout. A BYE before that is no finish (ps/server.c). */
int ps_slot_trained(const ps_server *s, int i);
/* Evaluations and the end of the run, re-checked after every event that may complete them. */
void ps_check_progress(ps_server *s);
/* The step watch (ps/train/stepwatch.h): a new sync version opened a step (called at every kick),
 * slot i's weights went out or it reported an evaluation (its step begins from now), its
 * push is in. */
void ps_step_opened(ps_server *s);
void ps_step_begins(ps_server *s, int i);
void ps_step_pushed(ps_server *s, int i);

/* ---- what workers report (ps/train/reports.c) ---- */

/* What slot `worker`'s worker reports: its training loss, or its share
 * of an evaluation. 0, or -EINVAL with the reason when the report is invalid (the caller
 * strikes the connection). */
int ps_worker_reported(ps_server *s, int worker, const Pstrain__Report *r, char *why,
                       size_t whylen);
/* The dense evaluation point slot i is to be asked for with a reply of `version` (recorded as
 * asked), or 0: none due. */
uint32_t ps_eval_point_due(ps_server *s, int i, uint64_t version);

/* ---- the data plan (ps/train/dataplan.c) ---- */

/* Where slot i stands: the steps of its shard done (sync: the version, as every worker takes
 * one step per version; async/ssp: its applied gradients). */
uint64_t ps_slot_position(const ps_server *s, int i);
/* Sets the handout up (every call here a no-op without --data-order ps). */
int ps_data_start(ps_server *s, char *err, size_t errlen);
/* --lr-schedule cosine: the learning rate's decay over the job's planned versions, set once
 * the data's size is known (--data-facts at start, or the first worker's HELLO). */
void ps_plan_lr(ps_server *s);
/* --lr: the learning rate of the newest step, its schedule's share applied (not the sync
 * step's --lr-scaling or an async gradient's --staleness-lr). */
float ps_lr_now(const ps_server *s);
/* Where a worker registering now starts (sync: the step it pulls first). */
uint64_t ps_data_join_version(const ps_server *s);
/* The pull of slot `worker` on version v is about to be answered (not a pull of the final
 * weights): plans or hands out its range and fills d (initialised by the caller) with it.
 * 1: d is to be sent first (a DATA frame); 0: no data handout, or no slot. */
int ps_data_range_for(ps_server *s, int worker, uint64_t v, Pstrain__DataRange *d);
/* Slot i's push on `version` was taken whole (trained = 1), or will never be (dropped,
 * rejected: 0): its range is trained, or goes back. */
void ps_data_pushed(ps_server *s, int i, uint64_t version, int trained);
/* Slot i's worker is gone (lost, or left): its range goes back to the pool. */
void ps_data_slot_gone(ps_server *s, int i, const char *why);
/* The data position a checkpoint of the published version holds (ps/state/checkpointing.c):
 * where fresh ranges go on, the samples of each epoch trained in that version
 * (trained[1..epochs]), and the ranges to hand out again first: those returned, those out
 * now, and (sync) those trained in the step after it. *back is malloc'ed (free it). 0 or
 * -ENOMEM. */
int ps_data_position(const ps_server *s, uint32_t *epoch, uint64_t *next, uint64_t *trained,
                     pst_range **back, size_t *n_back);
/* Every range of every epoch is trained. */
int ps_data_finished(const ps_server *s);

/* ---- checks on what workers send, and the data facts (ps/train/validate.c) ---- */

/* The data facts: fixed by --data-facts at start, or forgotten when
 * every worker of a job without them has gone (the next worker's HELLO says them again). */
void ps_facts_fix(ps_facts *f, uint32_t train, uint32_t test, uint32_t classes);
void ps_facts_forget(ps_facts *f);
/* Checks on what workers send: 0, or -EINVAL with the reason. */
int ps_check_hello(ps_server *s, const Pstrain__Hello *h, char *why, size_t whylen);
int ps_check_report(ps_server *s, int worker, const Pstrain__Report *r, char *why, size_t whylen);

#endif
