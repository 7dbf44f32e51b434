/* Inside kernels/net: the backward pass (net_backward.c), a module that net.c calls and
 * that calls nothing of net.c's (it uses the state in net_state.h). Not for other modules. */
#ifndef PSTRAIN_KERNELS_NET_BACKWARD_H
#define PSTRAIN_KERNELS_NET_BACKWARD_H

#include "kernels/net_state.h"

/* Backpropagates dlogits (in dbuf[0]) to every layer output that leads to parameters,
 * writing the parameter gradients into grad (device) and, with a gradient-ready callback,
 * announcing each layer's as it is final (net.h). With net->dry set it only counts the
 * gradient buffers it holds at once (n_dbuf), for pst_net_create. 0 or a negative code. */
int pst_net_backward(pst_net *net, int batch, float *grad);

#endif
