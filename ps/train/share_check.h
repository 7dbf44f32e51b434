/* The checks on a worker's share before it is summed, and the norm rule's history
 * (ps/train/share_check.c): internal to ps/train/update.c, which owns pst_update. */
#ifndef PSTRAIN_PS_TRAIN_SHARE_CHECK_H
#define PSTRAIN_PS_TRAIN_SHARE_CHECK_H

#include <stdint.h>

#include "ps/train/update.h"

/* Whether worker w's chunk c (len values at x) may be summed; reject_why says why not. Adds
 * its squared norm to the push's (push_sq[w]) when a norm is checked. */
int pst_share_ok(pst_update *u, int w, uint32_t c, const float *x, uint32_t len);
/* The bound on a share's squared norm for a push that starts now (0: none). */
double pst_norm_sq_bound(const pst_update *u);
/* Worker w's push, every chunk checked, was accepted: its norm joins the rule's history. */
void pst_norm_note(pst_update *u, int w);

#endif
