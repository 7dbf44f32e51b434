/* The placements of a linked job and the bytes model (launcher/links/place.h). */
#include "launcher/links/place.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int pl_placement_parse(const char *s, pl_placement *p) {
  if (!strcmp(s, "one-host") || !strcmp(s, "one")) *p = PL_PLACE_ONE_HOST;
  else if (!strcmp(s, "colocated")) *p = PL_PLACE_COLOCATED;
  else if (!strcmp(s, "separate")) *p = PL_PLACE_SEPARATE;
  else return -EINVAL;
  return 0;
}

const char *pl_placement_name(pl_placement p) {
  static const char *const names[] = {"one-host", "colocated", "separate"};
  return (unsigned)p < sizeof names / sizeof *names ? names[p] : "?";
}

int pl_place_plan_make(pl_placement p, int workers, int shards, int allreduce, int linked,
                       pl_place_plan *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  out->placement = p;
  out->workers = workers;
  out->shards = allreduce ? 0 : shards < 1 ? 1 : shards;
  if (out->shards > PL_PLACE_MAX_SHARDS) {
    snprintf(err, errlen, "--ps-shards must be in 1..%d", PL_PLACE_MAX_SHARDS);
    return -EINVAL;
  }
  if (allreduce && p != PL_PLACE_ONE_HOST) {
    snprintf(err, errlen, "--ps-placement %s places ps shards, and --mode allreduce has none",
             pl_placement_name(p));
    return -EINVAL;
  }
  if (p != PL_PLACE_ONE_HOST && !linked) {
    snprintf(err, errlen, "--ps-placement %s needs --link: without links every process shares "
             "this machine's loopback, and where a shard sits changes nothing",
             pl_placement_name(p));
    return -EINVAL;
  }
  if (p == PL_PLACE_COLOCATED && out->shards != workers) {
    snprintf(err, errlen, "--ps-placement colocated puts shard i beside worker i: --ps-shards "
             "must equal the workers (%d), not %d", workers, out->shards);
    return -EINVAL;
  }
  out->extra = p == PL_PLACE_SEPARATE ? out->shards : 0;
  /* A /24 holds the hub (.1) and nodes .2 to .254. */
  if (workers + out->extra > 250) {
    snprintf(err, errlen, "--link: at most 250 workers and separate shards together (one "
             "address each in a /24), not %d", workers + out->extra);
    return -EINVAL;
  }
  for (int s = 0; s < out->shards; s++)
    out->shard_node[s] = p == PL_PLACE_COLOCATED ? s : p == PL_PLACE_SEPARATE ? workers + s : -1;
  /* Every link reaches the hub; nodes reach each other where a worker's traffic goes to a
   * shard outside the hub, or a ring runs between the ranks. */
  out->peers = allreduce || p != PL_PLACE_ONE_HOST;
  return 0;
}

void pl_place_addr(int node, char *out, size_t outlen) {
  snprintf(out, outlen, "10.214.0.%d", node < 0 ? 1 : node + 2);
}

int pl_bytes_model_of(pl_placement p, int allreduce, int n, int shards, double model_bytes,
                      double rate_bits_per_s, double delay_s, double compute_s,
                      pl_bytes_model *out) {
  memset(out, 0, sizeof *out);
  if (n < 1 || !(rate_bits_per_s > 0) || !(compute_s >= 0) ||
      (!allreduce && p == PL_PLACE_COLOCATED && shards != n))
    return -EINVAL;
  double M = model_bytes, phase;
  int k = shards < 1 ? 1 : shards;
  if (allreduce || p == PL_PLACE_COLOCATED) {
    /* A ring's reduce-scatter sends (n-1)/n M up every link and receives as much down it,
     * and so does its all-gather; colocated shards do the same: in the pushes, worker i
     * sends the other shards their (n-1)/n of M while its shard receives (n-1) pieces of
     * M/n, and the pulls mirror them. Both directions at once: (n-1)/n M a phase. */
    phase = (double)(n - 1) / n * M;
    out->formula = "2(n-1)/n M";
    /* A ring's 2(n-1) steps each wait for the left neighbour's piece, one crossing of two
     * links; a ps step's push and its reply, one crossing each way between two nodes. */
    out->hops = allreduce ? 2 * (n - 1) : 2;
    out->hop_delay_s = 2 * delay_s;
  } else if (p == PL_PLACE_SEPARATE) {
    /* Each worker pushes M up its link (M/k to each shard) while each shard receives n
     * pieces of M/k down its own; the pulls mirror them. */
    double shard = (double)n * M / k;
    phase = shard > M ? shard : M;
    out->formula = k == 1 ? "nM" : shard > M ? "nM/k" : "M";
    out->hops = 2;
    out->hop_delay_s = 2 * delay_s;
  } else {
    /* One host: the shards' side is unbounded; each worker's link carries its push up and
     * its pull down, one crossing of its own link each way. */
    phase = M;
    out->formula = "M";
    out->hops = 2;
    out->hop_delay_s = delay_s;
  }
  out->phase_bytes[0] = out->phase_bytes[1] = phase;
  /* A link's busier direction per step: a ring's and colocated shards' links carry bytes
   * each way in both phases; a ps's link on one side of a push or pull carries them up in
   * one phase and down in the other, so each direction idles half the step. */
  out->link_bytes = allreduce || p == PL_PLACE_COLOCATED ? 2 * phase : phase;
  out->transfer_s = 2 * phase * 8 / rate_bits_per_s;
  out->latency_s = out->hops * out->hop_delay_s;
  out->compute_s = compute_s;
  out->seconds = compute_s + out->transfer_s + out->latency_s;
  return 0;
}

double pl_byteps_seconds(int n, int k, double model_bytes, double rate_bytes_per_s) {
  double nn = n, kk = k;
  return 2 * nn * (nn - 1) * model_bytes / ((nn * nn + kk * nn - 2 * kk) * rate_bytes_per_s);
}
