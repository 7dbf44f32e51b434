/* A local job's placement and its links' bytes beside the model's (run_place.h). */
#include "launcher/run/run_place.h"

#include <stdio.h>
#include <string.h>

#include "launcher/common/helpers.h"

int pl_place_prepare(const pl_run_options *o, int workers, int n_ps, int allreduce, int linked,
                     pl_place_plan *plan) {
  pl_placement p = PL_PLACE_ONE_HOST;
  char err[400];
  if (o->ps_placement && pl_placement_parse(o->ps_placement, &p) < 0) {
    fprintf(stderr, "pstrain: --ps-placement: '%.60s' is not one-host, colocated or separate\n",
            o->ps_placement);
    return 2;
  }
  if (pl_place_plan_make(p, workers, n_ps, allreduce, linked, plan, err, sizeof err) < 0) {
    fprintf(stderr, "pstrain: %s\n", err);
    return 2;
  }
  return 0;
}

void pl_place_finish(const pl_run_options *o, const pl_place_plan *plan, int allreduce,
                     pl_links *L, pl_run_result *res) {
  snprintf(res->placement, sizeof res->placement, "%s",
           allreduce ? "ring" : pl_placement_name(plan->placement));
  res->link_bytes_per_step = res->model_bytes_per_step = res->model_step_seconds = -1;
  if (!L->up) return;
  pl_links_count(L);
  double steps = res->summary_json[0] ? pl_json_num(res->summary_json, "updates") : -1;
  double train = res->summary_json[0] ? pl_json_num(res->summary_json, "training_seconds") : -1;
  pl_links_note note = {.placement = res->placement, .steps = steps,
                        .step_seconds = steps > 0 && train > 0 ? train / steps : -1};
  /* The model is a sync step's (or an all-reduce step's): an async ps's updates are single
   * gradients, whose bytes are another count. Compressed pushes or pulls move fewer bytes
   * than M: no model for them either. */
  pl_bytes_model m;
  const pl_link_spec *l = &L->spec[0];
  int sync = allreduce || !strcmp(o->mode, "sync");
  if (sync && !o->push_compress && !o->pull_compress && o->model_params > 0 && l->set &&
      pl_bytes_model_of(plan->placement, allreduce, plan->workers, plan->shards,
                        4.0 * (double)o->model_params, l->bits_per_sec, l->delay_s, 0, &m) == 0) {
    note.model_bytes = m.link_bytes;
    note.formula = m.formula;
    note.model_seconds = m.seconds; /* no compute term: the communication's */
    note.model_transfer_seconds = m.transfer_s;
    note.model_latency_seconds = m.latency_s;
    note.model_hops = m.hops;
    res->model_bytes_per_step = m.link_bytes;
    res->model_step_seconds = m.seconds;
  }
  if (L->busiest >= 0 && steps > 0) res->link_bytes_per_step = L->busiest_bytes / steps;
  if (!o->quiet && res->link_bytes_per_step > 0) {
    char model[160] = "";
    if (note.model_bytes > 0)
      snprintf(model, sizeof model, " (the bytes model: %.3f MB, %s; communication %.1f ms a "
               "step, compute not counted; measured %.1f ms)", note.model_bytes / 1e6, note.formula, note.model_seconds * 1e3,
               note.step_seconds * 1e3);
    fprintf(stderr, "pstrain: placement %s: the busiest link (%s %d's) carried %.3f MB a "
            "step%s\n", res->placement, L->busiest < L->workers ? "worker" : "ps shard",
            L->busiest < L->workers ? L->busiest : L->busiest - L->workers,
            res->link_bytes_per_step / 1e6, model);
  }
  pl_links_down(L, o->run_dir, &note);
}
