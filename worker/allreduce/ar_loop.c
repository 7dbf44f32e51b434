/* An all-reduce rank's training (worker/allreduce/allreduce.h): the job set up as a ps's
 * worker and a sync ps set it up, then each step: this rank's batch through the net (the
 * loss over the global batch, b x N, as a sync worker's), the clip norm on its share, the
 * ranks' shares summed by the collective, and the ps's sync step applied to the sum. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/fnv.h"
#include "common/log.h"
#include "worker/allreduce/allreduce.h"
#include "worker/grad_clip.h"
#include "worker/position.h"
#include "worker/setup.h"

/* The chunk size of the update: any; the sums and the optimizer are element by element, so
 * chunks change no bit (ps/train/update.h). */
#define AR_CHUNK_FLOATS (1u << 20)

/* --bucket-kib: the backward pass (kernels/net.h: on this thread for the CPU backend) says
 * every float at or above `from` is final; each bucket lying wholly there starts its sum.
 * Buckets are cut at layer boundaries as the ps's chunks are (pst_model_chunks). */
static void on_grad_ready(void *ctx, size_t from) {
  wk_ar *a = (wk_ar *)((char *)ctx - offsetof(wk_ar, t));
  while (a->next_bucket >= 0 && a->buckets[a->next_bucket].off >= from) {
    wk_ar_bucket *b = &a->buckets[a->next_bucket--];
    if (pst_coll_iallreduce_f32(a->coll, a->t.grad + b->off, b->end - b->off) == 0) b->started = 1;
  }
  pst_coll_poke(a->coll);
}

static int plan_buckets(wk_ar *a, char *err, size_t errlen) {
  size_t n = a->t.model.n_params;
  size_t max_floats = (size_t)a->job.bucket_kib * 1024 / sizeof(float);
  if (max_floats == 0) max_floats = 1;
  size_t count = pst_model_chunks(&a->t.model, 0, n, max_floats, NULL);
  if (count > WK_AR_MAX_BUCKETS) {
    snprintf(err, errlen, "--bucket-kib %d cuts the model's %zu parameters into %zu buckets, more "
             "than %d: give a larger size", a->job.bucket_kib, n, count, WK_AR_MAX_BUCKETS);
    return -EINVAL;
  }
  size_t starts[WK_AR_MAX_BUCKETS + 1];
  pst_model_chunks(&a->t.model, 0, n, max_floats, starts);
  a->n_buckets = (int)count;
  for (size_t i = 0; i < count; i++) a->buckets[i] = (wk_ar_bucket){starts[i], starts[i + 1], 0};
  return 0;
}

/* The weights, the optimizer and the update, as a sync ps's (ps/server.c): rank 0's weights
 * from the seed, broadcast; model state marked; the cosine schedule over the job's steps. */
static int setup(wk_ar *a, char *err, size_t errlen) {
  wk_trainer *t = &a->t;
  t->index = a->rank;
  t->world = a->size;
  t->epochs = a->job.epochs;
  t->batch = a->job.batch;
  t->seed = a->job.seed;
  t->clip_norm = a->job.clip_norm;
  t->report_every = a->job.report_every;
  /* A clipped share's scale is known only once all of it is: then the buckets are started
   * after the backward pass (step), not by it. */
  t->opt.push_by_layer = a->job.bucket_kib > 0 && !(a->job.clip_norm > 0);
  int rc = wk_setup_compute(t, on_grad_ready, err, errlen);
  if (rc < 0) return rc;
  /* The CPU backend calls the hook on the computing thread, which owns MPI (funneled); a GPU
   * backend calls it on a thread of its own, which may not call MPI: there the buckets start
   * once the backward pass is over. */
  if (t->opt.push_by_layer && strncmp(t->backend->name, "cpu", 3) != 0) {
    pst_pipe_on_grad_ready(t->net, NULL, NULL);
    LOG_INFO("--bucket-kib on %s: the buckets start after the backward pass (its hook runs on "
             "a thread that may not call MPI)", t->backend->name);
  }
  size_t n = t->model.n_params;
  /* NCCL for the gradients' sums of GPU ranks (every rank decides alike: the backends are
   * alike, and pst_coll_use_nccl fails on every rank or none). */
  if (a->job.collective != WK_AR_COLL_MPI && !strncmp(t->backend->name, "cuda:", 5)) {
    int dev = atoi(t->backend->name + 5);
    if (pst_coll_use_nccl(a->coll, dev, t->grad, n) < 0) {
      if (a->job.collective == WK_AR_COLL_NCCL) {
        snprintf(err, errlen, "--collective nccl: %s", pst_coll_error(a->coll));
        return -EIO;
      }
      LOG_WARN("the gradients are summed by Open MPI through host memory: %s",
               pst_coll_error(a->coll));
    }
  } else if (a->job.collective == WK_AR_COLL_NCCL) {
    snprintf(err, errlen, "--collective nccl sums on GPUs, and this rank computes on %s",
             t->backend->name);
    return -EINVAL;
  }
  if (a->rank == 0) pst_model_init_params(&t->model, t->seed, t->params);
  if ((rc = pst_coll_bcast_f32(a->coll, t->params, n, 0)) < 0) {
    snprintf(err, errlen, "broadcasting the initial weights: %s", pst_coll_error(a->coll));
    return rc;
  }
  size_t st_off[PST_MODEL_MAX_LAYERS], st_count[PST_MODEL_MAX_LAYERS];
  int n_st = pst_model_state_ranges(&t->model, st_off, st_count);
  /* One share per step, the ranks' sum: the update's single worker. Its scale is N/shares =
   * 1, as a sync ps's with all N shares in; its clip check is the sum's norm against the
   * clip norm, which a sum of N shares each within clip_norm / N cannot exceed. */
  if ((rc = pst_store_init(&a->store, n, t->params)) < 0 ||
      (rc = pst_opt_init(&a->optim, &a->job.opt, n)) < 0 ||
      (rc = pst_update_init(&a->upd, PST_MODE_SYNC, 1, AR_CHUNK_FLOATS, &a->store, &a->optim)) < 0 ||
      (rc = pst_update_set_limits(&a->upd, a->job.grad_limit, a->job.clip_norm)) < 0 ||
      (rc = pst_opt_set_state(&a->optim, st_off, st_count, n_st)) < 0) {
    snprintf(err, errlen, "cannot set up the optimizer for %zu parameters: %s", n, strerror(-rc));
    return rc;
  }
  if (a->job.lr_schedule == PST_LR_COSINE)
    pst_update_set_lr_decay(&a->upd, (uint64_t)t->epochs * (uint64_t)t->steps_per_epoch);
  a->rank_checksums = calloc((size_t)a->size, sizeof *a->rank_checksums);
  if (!a->rank_checksums) return -ENOMEM;
  if (a->job.bucket_kib > 0 && (rc = plan_buckets(a, err, errlen)) < 0) return rc;
  /* The dense evaluations' subset: a ps's workers' rule (worker/setup.h), by rank. */
  if (a->job.eval_every > 0 && wk_make_subset(t, (uint32_t)a->job.eval_samples) < 0) {
    snprintf(err, errlen, "out of memory for the test subset");
    return -ENOMEM;
  }
  return 0;
}

/* The ps's sync step on the summed gradient: each chunk offered as the step's one share. */
static int apply_sum(wk_ar *a, char *err, size_t errlen) {
  pst_update *u = &a->upd;
  for (uint32_t c = 0; c < u->n_chunks; c++) {
    int published = 0;
    int rc = pst_update_offer(u, 0, a->store.version, c, pst_update_chunk_flags(u, c),
                              a->t.grad + pst_update_chunk_off(u, c), &published);
    if (rc != PST_OFFER_TAKEN) {
      snprintf(err, errlen, "the summed gradient of step %" PRIu64 " was refused: %s",
               a->store.version + 1, rc == PST_OFFER_REJECTED ? u->reject_why : strerror(-rc));
      return -EINVAL;
    }
    if (u->last_unsafe) {
      snprintf(err, errlen, "step %" PRIu64 ": %s", a->store.version + 1, u->reject_why);
      return -ERANGE;
    }
  }
  return 0;
}

/* A few figures (losses, counts) summed over the ranks, watched by the stall watch as `what`;
 * 0, or a negative code with the step and what was being summed in err. */
static int sum_figures(wk_ar *a, double *fig, size_t n, const char *what, char *err,
                       size_t errlen) {
  wk_ar_wait_begin(a, what);
  int rc = pst_coll_allreduce_f64(a->coll, fig, n);
  wk_ar_wait_end(a);
  if (rc < 0)
    snprintf(err, errlen, "step %" PRIu64 ": %s: %s", a->t.steps, what, pst_coll_error(a->coll));
  return rc;
}

/* This rank's figures (loss sum, correct, samples) over test samples list[0..n) (list NULL:
 * [lo, hi)) on the weights just made. */
static int eval_part(wk_ar *a, const int32_t *list, int lo, int hi, double fig[3]) {
  wk_trainer *t = &a->t;
  int32_t *idx = malloc((size_t)t->batch * sizeof *idx);
  int rc = idx ? pst_pipe_load_params(t->net, pst_store_front(&a->store)) : -ENOMEM;
  fig[0] = fig[1] = fig[2] = 0;
  for (int b = lo; rc == 0 && b < hi; b += t->batch) {
    int n = hi - b < t->batch ? hi - b : t->batch;
    for (int i = 0; i < n; i++) idx[i] = list ? list[b + i] : b + i;
    pst_batch_fill(&t->test_prep, idx, n, 0, 0, t->xb, t->yb);
    double loss = 0;
    int correct = 0;
    rc = pst_pipe_evaluate(t->net, t->xb, t->yb, n, &loss, &correct);
    fig[0] += loss;
    fig[1] += correct;
    fig[2] += n;
  }
  free(idx);
  return rc;
}

/* The test shard this rank evaluates, on the weights just made; the ranks' figures summed. */
static int evaluate(wk_ar *a, int epoch, char *err, size_t errlen) {
  wk_trainer *t = &a->t;
  double t0 = pst_now();
  double fig[3]; /* loss sum, correct, samples */
  int rc = eval_part(a, NULL, t->test_begin, t->test_end, fig);
  if (rc < 0) {
    snprintf(err, errlen, "evaluating epoch %d failed on %s: %s", epoch, t->backend->name,
             pst_pipe_error(t->net)[0] ? pst_pipe_error(t->net) : strerror(-rc));
    return rc;
  }
  LOG_INFO("epoch %d/%d: test shard [%d, %d): loss %.4f accuracy %.4f (version %" PRIu64 ")",
           epoch, t->epochs, t->test_begin, t->test_end, fig[2] ? fig[0] / fig[2] : 0.0,
           fig[2] ? fig[1] / fig[2] : 0.0, a->store.version);
  if ((rc = sum_figures(a, fig, 3, "the evaluation's sum", err, errlen)) < 0) return rc;
  a->test_loss = fig[2] ? fig[0] / fig[2] : 0;
  a->test_accuracy = fig[2] ? fig[1] / fig[2] : 0;
  a->epochs_evaluated = epoch;
  wk_ar_metrics_eval(a, epoch, fig[0], fig[1], fig[2]);
  a->eval_seconds += pst_now() - t0;
  return 0;
}

/* --eval-every: point `point` on the test subset, every rank its part (as a ps's workers
 * evaluate theirs when the ps asks at version point x eval_every), the figures summed. Its
 * time and training time are those at which the point was reached, as the ps records them. */
static int evaluate_subset(wk_ar *a, uint32_t point, char *err, size_t errlen) {
  wk_trainer *t = &a->t;
  double t0 = pst_now(), asked = t0 - a->t0, asked_train = asked - a->eval_seconds;
  double fig[3];
  int rc = eval_part(a, t->subset_idx, 0, t->subset_n, fig);
  if (rc < 0) {
    snprintf(err, errlen, "step %" PRIu64 ": evaluating the test subset failed on %s: %s",
             t->steps, t->backend->name,
             pst_pipe_error(t->net)[0] ? pst_pipe_error(t->net) : strerror(-rc));
    return rc;
  }
  if ((rc = sum_figures(a, fig, 3, "the subset evaluation's sum", err, errlen)) < 0) return rc;
  a->eval_seconds += pst_now() - t0;
  wk_ar_metrics_subset(a, point, fig[0], fig[1], fig[2], asked, asked_train > 0 ? asked_train : 0);
  return 0;
}

/* --slow-factor and --delay-ms: this rank sleeps on purpose (a slower device, a slower link),
 * as a ps's worker does (worker/step.c), so that stragglers can be compared in both modes. */
static void idle(double seconds) {
  if (!(seconds > 0)) return;
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

/* One step: this rank's batch, its share, the sum, the update. */
static int step(wk_ar *a, double win[3], char *err, size_t errlen) {
  wk_trainer *t = &a->t;
  const int32_t *idx = t->order + (size_t)t->step_in_epoch * t->batch;
  a->data_wait += wk_prefetch_take(&t->prefetch, t->steps, idx, t->xb, t->yb);
  if (t->step_in_epoch + 1 < t->steps_per_epoch)
    wk_prefetch_ask(&t->prefetch, t->steps + 1, idx + t->batch);
  double t0 = pst_now();
  int rc = pst_pipe_load_params(t->net, pst_store_front(&a->store));
  /* The loss over the global batch b x N and the dropout seed of a sync worker with this
   * index at this step (worker/step.c), so that the shares are a sync job's. */
  float scale = 1.0f / ((float)t->batch * (float)t->world);
  pst_pipe_set_seed(t->net, (t->seed * 0x9e3779b97f4a7c15ull + (uint64_t)t->index) *
                               0xbf58476d1ce4e5b9ull + t->steps);
  a->next_bucket = a->n_buckets - 1;
  for (int i = 0; i < a->n_buckets; i++) a->buckets[i].started = 0;
  double loss = 0;
  int correct = 0;
  if (rc == 0) rc = pst_pipe_train_step(t->net, t->xb, t->yb, t->batch, scale, t->grad, &loss, &correct);
  if (rc < 0) {
    snprintf(err, errlen, "step %" PRIu64 ": compute failed on %s: %s", t->steps + 1,
             t->backend->name, pst_pipe_error(t->net)[0] ? pst_pipe_error(t->net) : strerror(-rc));
    return rc;
  }
  if (a->job.slow_factor > 1) idle((a->job.slow_factor - 1) * (pst_now() - t0));
  double t1 = pst_now();
  a->compute_seconds += t1 - t0;
  /* The clip needs the whole share's norm: with it, the buckets wait for the backward pass's
   * end (as --push-by-layer does on a ps's worker) and are all started here. */
  if (t->clip_norm > 0) a->clipped += (uint64_t)wk_clip_gradient(&t->model, t->grad, t->world, t->clip_norm);
  idle(a->job.delay_ms / 1e3); /* the share leaves late */
  wk_ar_wait_begin(a, "the gradients' sum");
  if (a->n_buckets > 0) {
    rc = 0;
    for (int i = a->n_buckets - 1; i >= 0 && rc == 0; i--)
      if (!a->buckets[i].started)
        rc = pst_coll_iallreduce_f32(a->coll, t->grad + a->buckets[i].off,
                                     a->buckets[i].end - a->buckets[i].off);
    if (rc == 0) rc = pst_coll_wait_all(a->coll);
  } else {
    rc = pst_coll_allreduce_f32(a->coll, t->grad, t->model.n_params);
  }
  wk_ar_wait_end(a);
  if (rc < 0) {
    snprintf(err, errlen, "step %" PRIu64 ": summing the gradients: %s", t->steps + 1,
             pst_coll_error(a->coll));
    return rc;
  }
  idle(a->job.delay_ms / 1e3); /* the sum arrives late */
  double t2 = pst_now();
  a->sum_seconds += t2 - t1;
  if ((rc = apply_sum(a, err, errlen)) < 0) return rc;
  a->opt_seconds += pst_now() - t2;
  wk_ar_step_took(a, pst_now() - t0);
  t->steps++;
  t->step_in_epoch++;
  win[0] += loss;
  win[1] += correct;
  win[2] += t->batch;
  return 0;
}

int wk_ar_run(wk_ar *a, char *err, size_t errlen) {
  wk_trainer *t = &a->t;
  int rc = setup(a, err, errlen);
  if (rc == 0) rc = wk_ar_ckpt_resume(a, err, errlen);
  if (rc == 0) rc = wk_ar_metrics_open(a, err, errlen);
  if (rc < 0) return rc;
  size_t n = t->model.n_params;
  pst_coll_describe(a->coll, n * sizeof(float), a->alg_desc, sizeof a->alg_desc);
  LOG_INFO("rank %d of %d on %s: shard [%d, %d), %d steps of %d per epoch, %d epochs, %s %g; "
           "%zu parameters summed by %s%s", a->rank, a->size, t->backend->name, t->shard_begin,
           t->shard_end, t->steps_per_epoch, t->batch, t->epochs, a->job.optimizer,
           a->job.opt.lr, n, a->alg_desc, a->n_buckets > 0 ? "" : ", one sum per step");
  if (a->n_buckets > 0)
    LOG_INFO("--bucket-kib %d: %d buckets, each summed as soon as the backward pass has made it",
             a->job.bucket_kib, a->n_buckets);
  if (wk_ar_watch_start(a) < 0) {
    snprintf(err, errlen, "cannot start the stall watch's thread");
    return -ENOMEM;
  }
  /* Where a sync worker with this index starts (or resumes: the shuffles replayed from the
   * seed to that step; a checkpoint at an epoch's end was written after its evaluation). */
  uint64_t start = a->store.version;
  wk_take_position(t, start, (uint32_t)(start / (uint64_t)t->steps_per_epoch));
  a->t0 = a->last_ckpt = pst_now();
  double win[3] = {0, 0, 0};
  while (t->epoch < t->epochs) {
    if ((rc = step(a, win, err, errlen)) < 0) return rc;
    int epoch_end = t->step_in_epoch == t->steps_per_epoch;
    if (t->steps % (uint64_t)t->report_every == 0 || epoch_end) {
      /* The window's training figures over every rank (one small sum). */
      if ((rc = sum_figures(a, win, 3, "the training loss's sum", err, errlen)) < 0) return rc;
      wk_ar_metrics_train(a, win[0], win[1], win[2]);
      win[0] = win[1] = win[2] = 0;
    }
    if (a->job.eval_every > 0 && t->steps % (uint64_t)a->job.eval_every == 0 &&
        (rc = evaluate_subset(a, (uint32_t)(t->steps / (uint64_t)a->job.eval_every), err,
                              errlen)) < 0)
      return rc;
    if (!epoch_end) {
      /* By steps (every rank knows them), or by rank 0's clock: only rank 0 writes, and
       * writing takes no collective, so the others need not agree on the moment. */
      int due = (a->job.checkpoint_every > 0 &&
                 t->steps % (uint64_t)a->job.checkpoint_every == 0) ||
                (a->job.checkpoint_seconds > 0 && a->rank == 0 &&
                 pst_now() - a->last_ckpt >= a->job.checkpoint_seconds);
      if (due) {
        if ((rc = wk_ar_ckpt_save(a, err, errlen)) < 0) return rc;
        a->last_ckpt = pst_now();
      }
      continue;
    }
    t->epoch++;
    t->step_in_epoch = 0;
    if (t->epoch < t->epochs) {
      wk_new_epoch_order(t);
      wk_prefetch_ask(&t->prefetch, t->steps, t->order);
    }
    if ((rc = evaluate(a, t->epoch, err, errlen)) < 0) return rc;
    if ((rc = wk_ar_ckpt_save(a, err, errlen)) < 0) return rc;
    a->last_ckpt = pst_now();
  }
  /* Resumed from the checkpoint of a finished job: its weights evaluated, for the summary. */
  if (t->steps == start && start > 0 && (rc = evaluate(a, t->epochs, err, errlen)) < 0) return rc;
  /* Every rank's weights, which must be one model. */
  a->checksum = pst_fnv1a64(pst_store_front(&a->store), n * sizeof(float));
  wk_ar_wait_begin(a, "the checksums' gather");
  rc = pst_coll_allgather_u64(a->coll, a->checksum, a->rank_checksums);
  wk_ar_wait_end(a);
  if (rc < 0) {
    snprintf(err, errlen, "gathering the ranks' checksums: %s", pst_coll_error(a->coll));
    return rc;
  }
  for (int r = 0; r < a->size; r++)
    if (a->rank_checksums[r] != a->checksum) {
      snprintf(err, errlen, "rank %d ended with weights %016" PRIx64 ", rank %d with %016" PRIx64
               ": the ranks' models differ", r, a->rank_checksums[r], a->rank, a->checksum);
      return -EIO;
    }
  double steps = t->steps > start ? (double)(t->steps - start) : 1;
  LOG_INFO("final weights: version %" PRIu64 ", checksum %016" PRIx64 " over %zu parameters, the "
           "same on all %d ranks", a->store.version, a->checksum, n, a->size);
  LOG_INFO("a step's time, ms on average over %" PRIu64 " steps: compute %.3f, sum %.3f, "
           "optimizer %.3f", t->steps - start, a->compute_seconds / steps * 1e3,
           a->sum_seconds / steps * 1e3, a->opt_seconds / steps * 1e3);
  if (t->clip_norm > 0)
    LOG_INFO("--clip-norm %g: %" PRIu64 " of %" PRIu64 " gradients clipped", t->clip_norm,
             a->clipped, t->steps);
  return 0;
}
