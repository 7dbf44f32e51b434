/* conv2d forward and backward through cuDNN's convolution API: NHWC activations, NHWC
 * (= KRSC = OHWI) filters, FP32 with FMA math only (no TF32), so results match the CPU
 * backend to FP32 rounding.
 *
 * Each geometry (batch size included) gets a plan: descriptors plus the algorithms the
 * cuDNN heuristics (cudnnGet*_v7) rank first among those that succeed, are deterministic
 * and fit the memory cap. The single cuDNN workspace grows to the largest plan's need.
 * Padding cuDNN cannot express (TF's "same" with the odd extra row at the bottom) is done
 * by copying the input into a zero-padded scratch buffer (pad.cu).
 *
 * Depthwise convolution (depth multiplier 1) is the same code with cuDNN's grouped
 * convolution, groupCount = C: the filter is then [C, KH, KW, 1] in KRSC order, which is
 * the backend's depthwise layout [C, KH, KW]. Plans are keyed by geometry and group count,
 * so a depthwise layer and a full convolution of the same shape never share one. */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

static const char *fwd_algo_name(cudnnConvolutionFwdAlgo_t a) {
  static const char *const names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                      "FFT",           "FFT_TILING",            "WINOGRAD",
                                      "WINOGRAD_NONFUSED"};
  return (unsigned)a < sizeof names / sizeof names[0] ? names[a] : "?";
}

static const char *bwd_data_algo_name(cudnnConvolutionBwdDataAlgo_t a) {
  static const char *const names[] = {"ALGO_0",   "ALGO_1", "FFT", "FFT_TILING",
                                      "WINOGRAD", "WINOGRAD_NONFUSED"};
  return (unsigned)a < sizeof names / sizeof names[0] ? names[a] : "?";
}

static const char *bwd_filter_algo_name(cudnnConvolutionBwdFilterAlgo_t a) {
  static const char *const names[] = {"ALGO_0",   "ALGO_1",           "FFT",       "ALGO_3",
                                      "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  return (unsigned)a < sizeof names / sizeof names[0] ? names[a] : "?";
}

static void plan_release(pst_cuda_conv_plan *p) {
  if (p->x_desc) cudnnDestroyTensorDescriptor(p->x_desc);
  if (p->y_desc) cudnnDestroyTensorDescriptor(p->y_desc);
  if (p->w_desc) cudnnDestroyFilterDescriptor(p->w_desc);
  if (p->conv_desc) cudnnDestroyConvolutionDescriptor(p->conv_desc);
  memset(p, 0, sizeof *p);
}

void pst_cuda_conv_plans_destroy(pst_cuda *c) {
  for (int i = 0; i < PST_CUDA_MAX_PLANS; i++)
    if (c->conv[i].used) plan_release(&c->conv[i]);
}

/* Without a cap, algorithms needing more workspace than this are passed over: the layers
 * of the models pstrain trains need a few MiB at most. */
#define UNCAPPED_WORKSPACE_MAX ((size_t)1 << 30)

/* Bytes of workspace a plan may ask for: with a cap, what the cap leaves once the current
 * workspace is given back. */
static size_t workspace_budget(const pst_cuda *c) {
  if (!c->mem_limit) return UNCAPPED_WORKSPACE_MAX;
  size_t others = c->mem_used - c->workspace.bytes;
  return others < c->mem_limit ? c->mem_limit - others : 0;
}

/* Index in cuDNN's ranked list of the first algorithm that works, is deterministic, uses
 * FMA math and fits `budget`; failing that of the first that works and fits; else -1. */
template <typename Perf>
static int pick_algo(const Perf *perf, int n, size_t budget) {
  for (int i = 0; i < n; i++)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= budget &&
        perf[i].determinism == CUDNN_DETERMINISTIC && perf[i].mathType == CUDNN_FMA_MATH)
      return i;
  for (int i = 0; i < n; i++)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= budget) return i;
  return -1;
}

static int no_algo(const pst_cuda *c, const pst_window_shape *s, const char *which,
                   size_t budget) {
  pst_cuda_log(3,
               "%s: conv2d %dx%dx%d -> %dx%dx%d: cuDNN offers no usable %s algorithm within "
               "%.1f MiB of workspace",
               c->name, s->in_h, s->in_w, s->in_c, s->out_h, s->out_w, s->out_c, which,
               (double)budget / 1048576.0);
  return -ENOTSUP;
}

static int plan_build(pst_cuda *c, const pst_window_shape *s, int groups,
                      pst_cuda_conv_plan *p) {
  p->s = *s;
  p->groups = groups;
  /* cuDNN pads symmetrically: usable as is when its output size formula gives ours. */
  int direct = s->in_h + 2 * s->pad_top >= s->k_h && s->in_w + 2 * s->pad_left >= s->k_w &&
               1 + (s->in_h + 2 * s->pad_top - s->k_h) / s->stride_h == s->out_h &&
               1 + (s->in_w + 2 * s->pad_left - s->k_w) / s->stride_w == s->out_w;
  p->explicit_pad = !direct;
  p->pad_h = direct ? s->in_h : (s->out_h - 1) * s->stride_h + s->k_h;
  p->pad_w = direct ? s->in_w : (s->out_w - 1) * s->stride_w + s->k_w;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x_desc));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y_desc));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w_desc));
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv_desc));
  /* cudnnSetTensor4dDescriptor: n, c, h, w positive ints (pst_cuda_check_window), packed
   * NHWC FP32, at most 2^31 - 1 elements in all (the caller's batch slice). */
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x_desc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, s->n,
                                         s->in_c, p->pad_h, p->pad_w));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y_desc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, s->n,
                                         s->out_c, s->out_h, s->out_w));
  /* cudnnSetFilter4dDescriptor: k, c, h, w positive; NHWC means KRSC, the backend's OHWI;
   * for grouped convolution c is the channels per group (1 for depthwise). */
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, s->out_c,
                                         s->in_c / groups, s->k_h, s->k_w));
  /* cudnnSetConvolution2dDescriptor: padding >= 0 (symmetric, or 0 with the explicit copy),
   * strides and dilation > 0; compute type FP32; FMA math so no TF32 tensor cores; a group
   * count that divides both channel counts (depthwise: groups = C = out_c, checked by
   * pst_cuda_check_window's pooling rule). */
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv_desc, direct ? s->pad_top : 0,
                                              direct ? s->pad_left : 0, s->stride_h, s->stride_w,
                                              1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  /* cudnnSetConvolutionMathType: FMA, no tensor-op or TF32 conversion; and the group
   * count (1 < groups = C for depthwise). */
  CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv_desc, CUDNN_FMA_MATH));
  if (groups > 1) CUDNN_CHECK(cudnnSetConvolutionGroupCount(p->conv_desc, groups));
  /* cuDNN's own output size must be the layer's: a mismatch would read or write out of
   * bounds, so it is an error here rather than at the first kernel. */
  int on, oc, oh, ow;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv_desc, p->x_desc, p->w_desc, &on, &oc,
                                                    &oh, &ow));
  PST_CUDA_REQUIRE(on == s->n && oc == s->out_c && oh == s->out_h && ow == s->out_w,
                   "%s: conv2d: cuDNN computes output %dx%dx%dx%d, the layer wants %dx%dx%dx%d",
                   c->name, on, oh, ow, oc, s->n, s->out_h, s->out_w, s->out_c);

  /* cudnnGet*Algorithm_v7: ranked algorithms with a status each; only those reported
   * CUDNN_STATUS_SUCCESS for exactly these descriptors (layout, type, groups, sizes) are
   * taken, which is how cuDNN states its per-algorithm support limits. */
  size_t budget = workspace_budget(c);
  int n = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(c->cudnn, p->x_desc, p->w_desc, p->conv_desc,
                                                     p->y_desc, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                     &n, fwd));
  int k = pick_algo(fwd, n, budget);
  if (k < 0) return no_algo(c, s, "forward", budget);
  p->fwd_algo = fwd[k].algo;
  cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      c->cudnn, p->w_desc, p->y_desc, p->conv_desc, p->x_desc,
      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, bd));
  k = pick_algo(bd, n, budget);
  if (k < 0) return no_algo(c, s, "backward data", budget);
  p->bwd_data_algo = bd[k].algo;
  cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      c->cudnn, p->x_desc, p->y_desc, p->conv_desc, p->w_desc,
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, bf));
  k = pick_algo(bf, n, budget);
  if (k < 0) return no_algo(c, s, "backward filter", budget);
  p->bwd_filter_algo = bf[k].algo;

  /* The heuristics' memory figures are estimates: ask for the exact sizes
   * (cudnnGetConvolution*WorkspaceSize, for the very descriptors and algorithm), and grow
   * the one workspace to the largest, which every call of this plan then passes. */
  CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(c->cudnn, p->x_desc, p->w_desc,
                                                      p->conv_desc, p->y_desc, p->fwd_algo,
                                                      &p->fwd_ws));
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(c->cudnn, p->w_desc, p->y_desc,
                                                           p->conv_desc, p->x_desc,
                                                           p->bwd_data_algo, &p->bwd_data_ws));
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(c->cudnn, p->x_desc, p->y_desc,
                                                             p->conv_desc, p->w_desc,
                                                             p->bwd_filter_algo,
                                                             &p->bwd_filter_ws));
  size_t need = p->fwd_ws;
  if (p->bwd_data_ws > need) need = p->bwd_data_ws;
  if (p->bwd_filter_ws > need) need = p->bwd_filter_ws;
  if (need > 0) {
    int rc = pst_cuda_buffer_reserve(c, &c->workspace, need, "the cuDNN workspace");
    if (rc != 0) return rc;
  }
  p->first_use = ++c->use_clock;
  p->used = 1;
  return 0;
}

/* The plan for (s, groups): cached, or built in a free slot, else in the least recently
 * used one. */
static int conv_plan(pst_cuda *c, const pst_window_shape *s, int groups,
                     pst_cuda_conv_plan **out) {
  pst_cuda_conv_plan *victim = NULL;
  for (int i = 0; i < PST_CUDA_MAX_PLANS; i++) {
    pst_cuda_conv_plan *p = &c->conv[i];
    if (p->used && p->groups == groups && memcmp(&p->s, s, sizeof *s) == 0) {
      p->last_use = ++c->use_clock;
      *out = p;
      return 0;
    }
    if (!victim || (victim->used && (!p->used || p->last_use < victim->last_use))) victim = p;
  }
  if (victim->used) plan_release(victim);
  int rc = plan_build(c, s, groups, victim);
  if (rc != 0) {
    plan_release(victim);
    return rc;
  }
  victim->last_use = c->use_clock;
  *out = victim;
  return 0;
}

/* The input as cuDNN reads it: x itself, or x copied into the zero-padded scratch 0. */
static int conv_input(pst_cuda *c, const pst_cuda_conv_plan *p, const float *x,
                      const float **xin) {
  const pst_window_shape *s = &p->s;
  *xin = x;
  if (!p->explicit_pad) return 0;
  size_t bytes = (size_t)s->n * p->pad_h * p->pad_w * s->in_c * sizeof(float);
  int rc = pst_cuda_buffer_reserve(c, &c->scratch[0], bytes, "a padded conv2d input");
  if (rc != 0) return rc;
  rc = pst_cuda_pad_nhwc(c, x, (float *)c->scratch[0].p, s->n, s->in_h, s->in_w, s->in_c,
                         p->pad_h, p->pad_w, s->pad_top, s->pad_left, 0.0f);
  *xin = (const float *)c->scratch[0].p;
  return rc;
}

/* Elements of one sample of the input and of the output. */
static size_t in_elems(const pst_window_shape *s) {
  return (size_t)s->in_h * (size_t)s->in_w * (size_t)s->in_c;
}
static size_t out_elems(const pst_window_shape *s) {
  return (size_t)s->out_h * (size_t)s->out_w * (size_t)s->out_c;
}

/* groups = 1: conv2d; groups = C (= in_c = out_c): depthwise. The batch goes to cuDNN in
 * slices of whole samples when it is too large for one call (pst_cuda_batch_slice); the
 * bias is added over the whole output at once (bias.cu: no limit). */
static int conv_forward(pst_backend *b, const char *op, int groups, const pst_window_shape *s,
                        const float *x, const float *w, const float *bias, float *y) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = pst_cuda_check_window(s, op, groups > 1);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && w && y, "%s: %s: NULL tensor", c->name, op);
  PST_CUDA_ENTER(c);
  int per;
  if ((rc = pst_cuda_batch_slice(c, s, op, &per)) != 0) return rc;
  const float one = 1.0f, zero = 0.0f;
  for (int n0 = 0; n0 < s->n; n0 += per) {
    pst_window_shape part = *s;
    part.n = s->n - n0 < per ? s->n - n0 : per;
    pst_cuda_conv_plan *p;
    const float *xin;
    if ((rc = conv_plan(c, &part, groups, &p)) != 0 ||
        (rc = conv_input(c, p, x + (size_t)n0 * in_elems(s), &xin)) != 0)
      return rc;
    /* cudnnConvolutionForward: x, w and y FP32 NHWC (filter KRSC), FMA math, the
     * algorithm the _v7 heuristics reported as supported for exactly these descriptors
     * (plan_build), its workspace at least cudnnGetConvolutionForwardWorkspaceSize's (the
     * one workspace is grown to every plan's need; cudaMalloc's 256-byte alignment), every
     * tensor within 2^31 - 1 elements (the slice). */
    CUDNN_CHECK(cudnnConvolutionForward(c->cudnn, &one, p->x_desc, xin, p->w_desc, w,
                                        p->conv_desc, p->fwd_algo, c->workspace.p,
                                        c->workspace.bytes, &zero, p->y_desc,
                                        y + (size_t)n0 * out_elems(s)));
  }
  if (bias)
    return pst_cuda_bias_add(c, y, bias, (size_t)s->n * s->out_h * s->out_w, s->out_c);
  return 0;
}

static int conv_backward(pst_backend *b, const char *op, int groups, const pst_window_shape *s,
                         const float *x, const float *w, const float *dy, float *dx, float *dw,
                         float *db) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = pst_cuda_check_window(s, op, groups > 1);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && w && dy && dw, "%s: %s: NULL tensor", c->name, op);
  PST_CUDA_ENTER(c);
  int per;
  if ((rc = pst_cuda_batch_slice(c, s, op, &per)) != 0) return rc;
  if (db && (rc = pst_cuda_bias_grad(c, dy, db, (size_t)s->n * s->out_h * s->out_w, s->out_c)))
    return rc;
  const float one = 1.0f, zero = 0.0f;
  for (int n0 = 0; n0 < s->n; n0 += per) {
    pst_window_shape part = *s;
    part.n = s->n - n0 < per ? s->n - n0 : per;
    const float *xs = x + (size_t)n0 * in_elems(s), *dys = dy + (size_t)n0 * out_elems(s);
    pst_cuda_conv_plan *p;
    const float *xin;
    if ((rc = conv_plan(c, &part, groups, &p)) != 0) return rc;
    float *dxs = dx ? dx + (size_t)n0 * in_elems(s) : NULL, *dxin = dxs;
    if (dx && p->explicit_pad) {
      size_t bytes = (size_t)part.n * p->pad_h * p->pad_w * s->in_c * sizeof(float);
      if ((rc = pst_cuda_buffer_reserve(c, &c->scratch[1], bytes, "a padded conv2d gradient")))
        return rc;
      dxin = (float *)c->scratch[1].p;
    }
    if ((rc = conv_input(c, p, xs, &xin)) != 0) return rc;
    /* cudnnConvolutionBackwardFilter: the limits of the forward call above, for the
     * backward-filter algorithm and workspace; beta 0 for the first slice, then 1, so the
     * slices' filter gradients add up (the blending every cuDNN convolution supports). */
    const float *beta = n0 == 0 ? &zero : &one;
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(c->cudnn, &one, p->x_desc, xin, p->y_desc, dys,
                                               p->conv_desc, p->bwd_filter_algo, c->workspace.p,
                                               c->workspace.bytes, beta, p->w_desc, dw));
    if (!dx) continue;
    /* cudnnConvolutionBackwardData: the same limits, for the backward-data algorithm. */
    CUDNN_CHECK(cudnnConvolutionBackwardData(c->cudnn, &one, p->w_desc, w, p->y_desc, dys,
                                             p->conv_desc, p->bwd_data_algo, c->workspace.p,
                                             c->workspace.bytes, &zero, p->x_desc, dxin));
    if (p->explicit_pad &&
        (rc = pst_cuda_crop_nhwc(c, dxin, dxs, part.n, s->in_h, s->in_w, s->in_c, p->pad_h,
                                 p->pad_w, s->pad_top, s->pad_left)) != 0)
      return rc;
  }
  return 0;
}

int pst_cuda_conv2d_forward(pst_backend *b, const pst_window_shape *s, const float *x,
                            const float *w, const float *bias, float *y) {
  return conv_forward(b, "conv2d_forward", 1, s, x, w, bias, y);
}

int pst_cuda_conv2d_backward(pst_backend *b, const pst_window_shape *s, const float *x,
                             const float *w, const float *dy, float *dx, float *dw, float *db) {
  return conv_backward(b, "conv2d_backward", 1, s, x, w, dy, dx, dw, db);
}

/* The window check (pooling = 1) makes sure out_c == in_c before the group count is set. */
int pst_cuda_depthwise_conv2d_forward(pst_backend *b, const pst_window_shape *s, const float *x,
                                      const float *w, const float *bias, float *y) {
  return conv_forward(b, "depthwise_conv2d_forward", s ? s->in_c : 1, s, x, w, bias, y);
}

int pst_cuda_depthwise_conv2d_backward(pst_backend *b, const pst_window_shape *s, const float *x,
                                       const float *w, const float *dy, float *dx, float *dw,
                                       float *db) {
  return conv_backward(b, "depthwise_conv2d_backward", s ? s->in_c : 1, s, x, w, dy, dx, dw,
                       db);
}

/* Describes the plan of the ordinal-th distinct geometry (batch size aside) in order of
 * first use, which is layer order since the worker runs the forward pass first. */
int pst_cuda_conv_describe(pst_cuda *c, int ordinal, char *out, size_t outlen) {
  const pst_cuda_conv_plan *order[PST_CUDA_MAX_PLANS];
  int n = 0;
  for (int i = 0; i < PST_CUDA_MAX_PLANS; i++) {
    if (!c->conv[i].used || c->conv[i].groups != 1) continue; /* depthwise: described apart */
    int j = n++;
    for (; j > 0 && order[j - 1]->first_use > c->conv[i].first_use; j--) order[j] = order[j - 1];
    order[j] = &c->conv[i];
  }
  for (int i = 0; i < n; i++) {
    int dup = 0;
    for (int k = 0; k < i && !dup; k++) {
      pst_window_shape a = order[k]->s, bb = order[i]->s;
      a.n = bb.n = 0;
      dup = memcmp(&a, &bb, sizeof a) == 0;
    }
    if (dup || ordinal-- != 0) continue;
    const pst_cuda_conv_plan *p = order[i];
    const pst_window_shape *s = &p->s;
    snprintf(out, outlen,
             "cuDNN conv %dx%dx%d -> %dx%dx%d (%dx%d stride %d,%d%s), FP32 FMA math: forward %s, "
             "backward data %s, backward filter %s, workspace %.1f MiB",
             s->in_h, s->in_w, s->in_c, s->out_h, s->out_w, s->out_c, s->k_h, s->k_w,
             s->stride_h, s->stride_w, p->explicit_pad ? ", explicit padding" : "",
             fwd_algo_name(p->fwd_algo), bwd_data_algo_name(p->bwd_data_algo),
             bwd_filter_algo_name(p->bwd_filter_algo), (double)c->workspace.bytes / 1048576.0);
    return 0;
  }
  return -ENOENT;
}
