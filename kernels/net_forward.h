/* Inside kernels/net: the forward pass over the net's layers [lo, hi) (net.c), for the
 * whole-batch steps of net.c and the micro-batch passes of net_stage.c. Not for other
 * modules. */
#ifndef PSTRAIN_KERNELS_NET_FORWARD_H
#define PSTRAIN_KERNELS_NET_FORWARD_H

#include "kernels/net_state.h"

/* Runs the layers on `batch` rows from net->row0, with net->out of the lower cut (or the
 * batch, out[0]) set; the last layer's output is left as logits. `training` turns dropout
 * on and batch statistics. A failure is recorded (pst_net_error) with the layer, what it
 * ran and the shape. */
int pst_net_forward(pst_net *net, int batch, int training);

#endif
