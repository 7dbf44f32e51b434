/* Max pooling forward and backward through cuDNN's pooling API, NHWC; average pooling
 * (and global average pooling) as direct kernels, at the end of this file.
 *
 * cuDNN is only ever asked to pool without padding: a layer with padding (or whose output
 * size cuDNN's formula would not give) first copies its input into a scratch buffer padded
 * with -inf, so padding cells can never win, exactly as in the CPU backend, whatever cuDNN
 * does with its own padding. The input gradient comes back through the reverse crop.
 * Ties: cuDNN routes the gradient of a window to one of its maxima; with real data that
 * matters only for windows of equal values (all zero after a ReLU), whose gradient the
 * ReLU below zeroes anyway. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

static void plan_release(pst_cuda_pool_plan *p) {
  if (p->x_desc) cudnnDestroyTensorDescriptor(p->x_desc);
  if (p->y_desc) cudnnDestroyTensorDescriptor(p->y_desc);
  if (p->pool_desc) cudnnDestroyPoolingDescriptor(p->pool_desc);
  memset(p, 0, sizeof *p);
}

void pst_cuda_pool_plans_destroy(pst_cuda *c) {
  for (int i = 0; i < PST_CUDA_MAX_PLANS; i++)
    if (c->pool[i].used) plan_release(&c->pool[i]);
}

static int plan_build(pst_cuda *c, const pst_window_shape *s, pst_cuda_pool_plan *p) {
  p->s = *s;
  int direct = s->pad_top == 0 && s->pad_left == 0 && s->in_h >= s->k_h && s->in_w >= s->k_w &&
               1 + (s->in_h - s->k_h) / s->stride_h == s->out_h &&
               1 + (s->in_w - s->k_w) / s->stride_w == s->out_w;
  p->explicit_pad = !direct;
  p->pad_h = direct ? s->in_h : (s->out_h - 1) * s->stride_h + s->k_h;
  p->pad_w = direct ? s->in_w : (s->out_w - 1) * s->stride_w + s->k_w;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x_desc));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y_desc));
  CUDNN_CHECK(cudnnCreatePoolingDescriptor(&p->pool_desc));
  /* cudnnSetTensor4dDescriptor: positive ints, packed NHWC FP32, at most 2^31 - 1 elements
   * (the caller's batch slice). */
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x_desc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, s->n,
                                         s->in_c, p->pad_h, p->pad_w));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y_desc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, s->n,
                                         s->out_c, s->out_h, s->out_w));
  /* cudnnSetPooling2dDescriptor: window and strides positive, padding 0 (explicit copy). */
  CUDNN_CHECK(cudnnSetPooling2dDescriptor(p->pool_desc, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN,
                                          s->k_h, s->k_w, 0, 0, s->stride_h, s->stride_w));
  /* cuDNN's output size must be the layer's (else it would write out of bounds). */
  int on, oc, oh, ow;
  CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(p->pool_desc, p->x_desc, &on, &oc, &oh, &ow));
  PST_CUDA_REQUIRE(on == s->n && oc == s->out_c && oh == s->out_h && ow == s->out_w,
                   "%s: maxpool: cuDNN computes output %dx%dx%dx%d, the layer wants %dx%dx%dx%d",
                   c->name, on, oh, ow, oc, s->n, s->out_h, s->out_w, s->out_c);
  p->first_use = ++c->use_clock;
  p->used = 1;
  return 0;
}

/* The plan for s: cached, or built in a free slot, else in the least recently used one. */
static int pool_plan(pst_cuda *c, const pst_window_shape *s, pst_cuda_pool_plan **out) {
  pst_cuda_pool_plan *victim = NULL;
  for (int i = 0; i < PST_CUDA_MAX_PLANS; i++) {
    pst_cuda_pool_plan *p = &c->pool[i];
    if (p->used && memcmp(&p->s, s, sizeof *s) == 0) {
      p->last_use = ++c->use_clock;
      *out = p;
      return 0;
    }
    if (!victim || (victim->used && (!p->used || p->last_use < victim->last_use))) victim = p;
  }
  if (victim->used) plan_release(victim);
  int rc = plan_build(c, s, victim);
  if (rc != 0) {
    plan_release(victim);
    return rc;
  }
  victim->last_use = c->use_clock;
  *out = victim;
  return 0;
}

/* The input as cuDNN reads it: x itself, or x copied into the -inf padded scratch 0. */
static int pool_input(pst_cuda *c, const pst_cuda_pool_plan *p, const float *x,
                      const float **xin) {
  const pst_window_shape *s = &p->s;
  *xin = x;
  if (!p->explicit_pad) return 0;
  size_t bytes = (size_t)s->n * p->pad_h * p->pad_w * s->in_c * sizeof(float);
  int rc = pst_cuda_buffer_reserve(c, &c->scratch[0], bytes, "a padded maxpool input");
  if (rc != 0) return rc;
  rc = pst_cuda_pad_nhwc(c, x, (float *)c->scratch[0].p, s->n, s->in_h, s->in_w, s->in_c,
                         p->pad_h, p->pad_w, s->pad_top, s->pad_left, -INFINITY);
  *xin = (const float *)c->scratch[0].p;
  return rc;
}

static size_t in_elems(const pst_window_shape *s) {
  return (size_t)s->in_h * (size_t)s->in_w * (size_t)s->in_c;
}
static size_t out_elems(const pst_window_shape *s) {
  return (size_t)s->out_h * (size_t)s->out_w * (size_t)s->out_c;
}

/* Both directions hand cuDNN the batch in slices of whole samples when it is too large for
 * one call (pst_cuda_batch_slice). */
int pst_cuda_maxpool_forward(pst_backend *b, const pst_window_shape *s, const float *x,
                             float *y) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = pst_cuda_check_window(s, "maxpool_forward", 1);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && y, "%s: maxpool_forward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  int per;
  if ((rc = pst_cuda_batch_slice(c, s, "maxpool_forward", &per)) != 0) return rc;
  const float one = 1.0f, zero = 0.0f;
  for (int n0 = 0; n0 < s->n; n0 += per) {
    pst_window_shape part = *s;
    part.n = s->n - n0 < per ? s->n - n0 : per;
    pst_cuda_pool_plan *p;
    const float *xin;
    if ((rc = pool_plan(c, &part, &p)) != 0 ||
        (rc = pool_input(c, p, x + (size_t)n0 * in_elems(s), &xin)) != 0)
      return rc;
    /* cudnnPoolingForward: x and y FP32 NHWC of the same n and c, at most 2^31 - 1 elements
     * each (the slice), no padding in the descriptor (the -inf copy instead). */
    CUDNN_CHECK(cudnnPoolingForward(c->cudnn, p->pool_desc, &one, p->x_desc, xin, &zero,
                                    p->y_desc, y + (size_t)n0 * out_elems(s)));
  }
  return 0;
}

int pst_cuda_maxpool_backward(pst_backend *b, const pst_window_shape *s, const float *x,
                              const float *y, const float *dy, float *dx) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = pst_cuda_check_window(s, "maxpool_backward", 1);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && y && dy && dx, "%s: maxpool_backward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  int per;
  if ((rc = pst_cuda_batch_slice(c, s, "maxpool_backward", &per)) != 0) return rc;
  const float one = 1.0f, zero = 0.0f;
  for (int n0 = 0; n0 < s->n; n0 += per) {
    pst_window_shape part = *s;
    part.n = s->n - n0 < per ? s->n - n0 : per;
    const size_t xo = (size_t)n0 * in_elems(s), yo = (size_t)n0 * out_elems(s);
    pst_cuda_pool_plan *p;
    const float *xin;
    if ((rc = pool_plan(c, &part, &p)) != 0) return rc;
    float *dxin = dx + xo;
    if (p->explicit_pad) {
      size_t bytes = (size_t)part.n * p->pad_h * p->pad_w * s->in_c * sizeof(float);
      if ((rc = pst_cuda_buffer_reserve(c, &c->scratch[1], bytes, "a padded maxpool gradient")))
        return rc;
      dxin = (float *)c->scratch[1].p;
    }
    if ((rc = pool_input(c, p, x + xo, &xin)) != 0) return rc;
    /* cudnnPoolingBackward: y, dy, x and dx FP32 NHWC, y and dy alike, x and dx alike (the
     * descriptors are shared), within 2^31 - 1 elements each. */
    CUDNN_CHECK(cudnnPoolingBackward(c->cudnn, p->pool_desc, &one, p->y_desc, y + yo, p->y_desc,
                                     dy + yo, p->x_desc, xin, &zero, p->x_desc, dxin));
    if (p->explicit_pad &&
        (rc = pst_cuda_crop_nhwc(c, dxin, dx + xo, part.n, s->in_h, s->in_w, s->in_c, p->pad_h,
                                 p->pad_w, s->pad_top, s->pad_left)) != 0)
      return rc;
  }
  return 0;
}

/* Describes the ordinal-th distinct pooling geometry (batch size aside) in first-use order. */
int pst_cuda_pool_describe(pst_cuda *c, int ordinal, char *out, size_t outlen) {
  const pst_cuda_pool_plan *order[PST_CUDA_MAX_PLANS];
  int n = 0;
  for (int i = 0; i < PST_CUDA_MAX_PLANS; i++) {
    if (!c->pool[i].used) continue;
    int j = n++;
    for (; j > 0 && order[j - 1]->first_use > c->pool[i].first_use; j--) order[j] = order[j - 1];
    order[j] = &c->pool[i];
  }
  for (int i = 0; i < n; i++) {
    int dup = 0;
    for (int k = 0; k < i && !dup; k++) {
      pst_window_shape a = order[k]->s, bb = order[i]->s;
      a.n = bb.n = 0;
      dup = memcmp(&a, &bb, sizeof a) == 0;
    }
    if (dup || ordinal-- != 0) continue;
    const pst_window_shape *s = &order[i]->s;
    snprintf(out, outlen, "cuDNN max pooling %dx%dx%d -> %dx%dx%d (%dx%d stride %d,%d%s)",
             s->in_h, s->in_w, s->in_c, s->out_h, s->out_w, s->out_c, s->k_h, s->k_w,
             s->stride_h, s->stride_w,
             order[i]->explicit_pad ? ", explicit -inf padding" : "");
    return 0;
  }
  return -ENOENT;
}

/* ---- average pooling ---------------------------------------------------------------
 *
 * Not cuDNN here, deliberately: (1) TF/Keras "same" padding puts the odd padding cell after
 * the data, which cuDNN's symmetric padding cannot express, and the explicit padded copy
 * that maxpool uses would count the padding cells in the mean, which COUNT_EXCLUDE_PADDING
 * is meant to avoid; (2) cuDNN's pooling backward wants x and y, which the backend
 * interface does not pass for average pooling (it needs neither). Two direct kernels cover
 * every geometry: forward, one thread per output cell and channel, sums its window in the
 * CPU backend's order (rows, then columns) and multiplies by 1/count; backward, one thread
 * per input cell and channel, gathers dy/count from every window that covers it, so no
 * atomics are needed and the result does not depend on scheduling. */

/* The real (unpadded) cells of the window of output (oh, ow): rows [h0, h1), cols [w0, w1). */
__device__ static inline void avg_window(const pst_window_shape &s, int oh, int ow, int *h0,
                                         int *h1, int *w0, int *w1) {
  *h0 = oh * s.stride_h - s.pad_top;
  *w0 = ow * s.stride_w - s.pad_left;
  *h1 = min(*h0 + s.k_h, s.in_h);
  *w1 = min(*w0 + s.k_w, s.in_w);
  *h0 = max(*h0, 0);
  *w0 = max(*w0, 0);
}

__global__ static void avgpool_forward_kernel(pst_window_shape s, const float *x, float *y,
                                              size_t total) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const int ch = (int)(i % (size_t)s.in_c);
    size_t t = i / (size_t)s.in_c;
    const int ow = (int)(t % (size_t)s.out_w);
    t /= (size_t)s.out_w;
    const int oh = (int)(t % (size_t)s.out_h);
    const size_t n = t / (size_t)s.out_h;
    int h0, h1, w0, w1;
    avg_window(s, oh, ow, &h0, &h1, &w0, &w1);
    const int cells = (h1 - h0) * (w1 - w0);
    float sum = 0.0f;
    for (int ih = h0; ih < h1; ih++)
      for (int iw = w0; iw < w1; iw++)
        sum += x[((n * (size_t)s.in_h + (size_t)ih) * (size_t)s.in_w + (size_t)iw) *
                     (size_t)s.in_c + (size_t)ch];
    y[i] = cells > 0 ? sum * (1.0f / (float)cells) : 0.0f;
  }
}

__global__ static void avgpool_backward_kernel(pst_window_shape s, const float *dy, float *dx,
                                               size_t total) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const int ch = (int)(i % (size_t)s.in_c);
    size_t t = i / (size_t)s.in_c;
    const int iw = (int)(t % (size_t)s.in_w);
    t /= (size_t)s.in_w;
    const int ih = (int)(t % (size_t)s.in_h);
    const size_t n = t / (size_t)s.in_h;
    /* Output rows whose window covers ih: oh*stride - pad <= ih < oh*stride - pad + k. */
    const int ph = ih + s.pad_top, pw = iw + s.pad_left;
    const int oh0 = ph < s.k_h ? 0 : (ph - s.k_h) / s.stride_h + 1;
    const int oh1 = min(ph / s.stride_h, s.out_h - 1);
    const int ow0 = pw < s.k_w ? 0 : (pw - s.k_w) / s.stride_w + 1;
    const int ow1 = min(pw / s.stride_w, s.out_w - 1);
    float g = 0.0f;
    for (int oh = oh0; oh <= oh1; oh++)
      for (int ow = ow0; ow <= ow1; ow++) {
        int h0, h1, w0, w1;
        avg_window(s, oh, ow, &h0, &h1, &w0, &w1);
        const int cells = (h1 - h0) * (w1 - w0);
        g += dy[((n * (size_t)s.out_h + (size_t)oh) * (size_t)s.out_w + (size_t)ow) *
                    (size_t)s.in_c + (size_t)ch] *
             (1.0f / (float)cells);
      }
    dx[i] = g;
  }
}

int pst_cuda_avgpool_forward(pst_backend *b, const pst_window_shape *s, const float *x,
                             float *y) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = pst_cuda_check_window(s, "avgpool_forward", 1);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(x && y, "%s: avgpool_forward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  const size_t total = (size_t)s->n * s->out_h * s->out_w * s->out_c;
  avgpool_forward_kernel<<<pst_cuda_blocks(total), PST_CUDA_THREADS, 0, c->stream>>>(*s, x, y,
                                                                                    total);
  CUDA_CHECK_LAUNCH();
  return 0;
}

int pst_cuda_avgpool_backward(pst_backend *b, const pst_window_shape *s, const float *dy,
                              float *dx) {
  pst_cuda *c = pst_cuda_of(b);
  int rc = pst_cuda_check_window(s, "avgpool_backward", 1);
  if (rc != 0) return rc;
  PST_CUDA_REQUIRE(dy && dx, "%s: avgpool_backward: NULL tensor", c->name);
  PST_CUDA_ENTER(c);
  const size_t total = (size_t)s->n * s->in_h * s->in_w * s->in_c;
  avgpool_backward_kernel<<<pst_cuda_blocks(total), PST_CUDA_THREADS, 0, c->stream>>>(*s, dy, dx,
                                                                                     total);
  CUDA_CHECK_LAUNCH();
  return 0;
}
