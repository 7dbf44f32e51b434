/* Inside kernels/net: the record of why a call failed (pst_net_error's text), written by
 * net.c and net_backward.c alike; it calls neither (net_state.h). */
#include "kernels/net_state.h"

#include <stdio.h>
#include <string.h>

const char *pst_net_kind_name(pst_layer_kind k) {
  switch (k) {
    case PST_LAYER_INPUT: return "input";
    case PST_LAYER_DENSE: return "dense";
    case PST_LAYER_CONV2D: return "conv2d";
    case PST_LAYER_MAXPOOL: return "maxpool";
    case PST_LAYER_FLATTEN: return "flatten";
    case PST_LAYER_ACTIVATION: return "activation";
    case PST_LAYER_AVGPOOL: return "avgpool";
    case PST_LAYER_GLOBAL_AVGPOOL: return "global_avgpool";
    case PST_LAYER_DROPOUT: return "dropout";
    case PST_LAYER_DEPTHWISE_CONV2D: return "depthwise_conv2d";
    case PST_LAYER_ADD: return "add";
    case PST_LAYER_CONCATENATE: return "concatenate";
    case PST_LAYER_BATCHNORM: return "batchnorm";
  }
  return "?";
}

/* ---- failures: what failed, where, on which shape, and what the backend said ---- */

/* The backend's reason for the failure just returned (backend.h, last_error), or the
 * code's text. */
static const char *backend_reason(const pst_net *net, int rc) {
  const char *why = net->be->last_error ? net->be->last_error(net->be) : NULL;
  return why && why[0] ? why : strerror(rc < 0 ? -rc : rc);
}

/* Layer L's tensor shapes at this batch, for a message. */
static void shape_text(const pst_layer *L, int batch, char *out, size_t len) {
  switch (L->kind) {
    case PST_LAYER_DENSE:
      snprintf(out, len, "%d x %d -> %d x %d", batch, L->in_c, batch, L->units);
      break;
    case PST_LAYER_CONV2D:
    case PST_LAYER_DEPTHWISE_CONV2D:
    case PST_LAYER_MAXPOOL:
    case PST_LAYER_AVGPOOL:
    case PST_LAYER_GLOBAL_AVGPOOL:
      snprintf(out, len, "%dx%dx%dx%d -> %dx%dx%dx%d (window %dx%d, stride %d,%d)", batch,
               L->in_h, L->in_w, L->in_c, batch, L->out_h, L->out_w, L->out_c, L->k_h, L->k_w,
               L->stride_h, L->stride_w);
      break;
    case PST_LAYER_BATCHNORM:
      /* As the backend sees it: rows (batch x height x width) by channels. */
      snprintf(out, len, "%lld x %d", (long long)batch * L->out_h * L->out_w, L->out_c);
      break;
    default:
      snprintf(out, len, "%dx%dx%dx%d", batch, L->out_h, L->out_w, L->out_c);
      break;
  }
}

int pst_net_fail(pst_net *net, int rc, int i, const char *op, int batch) {
  const pst_layer *L = &net->m.layers[i];
  char shape[160], name[PST_MODEL_MAX_NAME + 4] = "";
  shape_text(L, batch, shape, sizeof shape);
  if (L->name[0] != '\0') snprintf(name, sizeof name, " (%s)", L->name);
  snprintf(net->err, sizeof net->err, "layer %d %s%s, %s of %s: %s", i,
           pst_net_kind_name(L->kind), name, op, shape, backend_reason(net, rc));
  return rc;
}

int pst_net_fail_step(pst_net *net, int rc, const char *what) {
  snprintf(net->err, sizeof net->err, "%s: %s", what, backend_reason(net, rc));
  return rc;
}
