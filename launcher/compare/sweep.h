/* `pstrain compare`'s settings (launcher/compare/sweep.c): what it sweeps, parsed before
 * anything runs. */
#ifndef PSTRAIN_LAUNCHER_COMPARE_SWEEP_H
#define PSTRAIN_LAUNCHER_COMPARE_SWEEP_H

#include <stddef.h>

#include "launcher/compare/records.h"

/* --modes "sync,async,ssp:2,async+sa" into runs[0..max): label, mode, staleness, +sa.
 * Returns the count, -EINVAL on a bad mode, -E2BIG past max. */
int pl_cmp_parse_modes(const char *s, mode_run *runs, int max);
/* --encodings PUSH[/PULL],... and --links SPEC;SPEC...: every mode of runs[0..n) once per
 * encoding and link (issue 27), labelled "MODE PUSH/PULL @LINK". Returns the new count, or
 * -1 with a one-line reason in err. */
int pl_cmp_expand_settings(mode_run *runs, int n, int max, const char *encs, const char *links,
                           char *err, size_t errlen);
/* --placements one-host,colocated,separate:4 (issue 39): every ps mode of runs[0..n) once per
 * placement, PLACEMENT:K with K ps shards (colocated without :K: one per worker); allreduce
 * settings stay as they are (their ranks have no ps to place). Labelled "MODE PLACEMENT[:K]".
 * Returns the new count, or -1 with a one-line reason in err. */
int pl_cmp_expand_placements(mode_run *runs, int n, int max, const char *placements,
                             char *err, size_t errlen);
/* --compute-link LINK (issue 39): the compute term of the step-time model. Each setting of
 * runs[0..n) behind a link other than LINK whose runs have a modelled communication time
 * takes, repeat by repeat, the seconds per step of the setting that differs from it only by
 * running behind LINK (same mode, placement, shards, encodings; the repeats alternate, so
 * the two ran minutes apart on the same seed) as compute_s, and model_s becomes compute_s +
 * model_comm. Returns how many runs got a term, or -1 with a one-line reason in err when
 * LINK is not one of the settings' links. */
int pl_cmp_add_compute(mode_run *runs, int n, int repeats, const char *link, char *err,
                       size_t errlen);
/* "0.85,0.88,0.9": each in (0, 1]. Returns the count, -EINVAL or -E2BIG. */
int pl_cmp_parse_targets(const char *s, double *out, int max);

#endif
