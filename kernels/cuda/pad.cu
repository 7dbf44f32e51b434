/* Explicit padding for the geometries cuDNN cannot express: cuDNN pads symmetrically,
 * while TF/Keras "same" padding puts the odd extra row and column at the bottom and right.
 * Those layers copy their input into a padded buffer and run cuDNN without padding; the
 * input gradient comes back through the reverse crop. Also the geometry checks shared by
 * conv.cu and pool.cu. Both kernels are one-dimensional grid-stride loops over size_t
 * indices (pst_cuda_blocks): any size. */
#include "kernels/cuda/cuda_internal.h"

/* xp[n, hp, wp, ch] = x[n, hp - top, wp - left, ch] inside x, else fill */
__global__ static void pad_kernel(const float *x, float *xp, size_t total, int h, int w, int ch,
                                  int hp, int wp, int top, int left, float fill) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    int cc = (int)(i % (size_t)ch);
    size_t t = i / (size_t)ch;
    int xw = (int)(t % (size_t)wp) - left;
    t /= (size_t)wp;
    int xh = (int)(t % (size_t)hp) - top;
    size_t b = t / (size_t)hp;
    float v = fill;
    if (xh >= 0 && xh < h && xw >= 0 && xw < w)
      v = x[((b * (size_t)h + (size_t)xh) * (size_t)w + (size_t)xw) * (size_t)ch + (size_t)cc];
    xp[i] = v;
  }
}

/* x[n, h, w, ch] = xp[n, h + top, w + left, ch] inside xp, else 0 */
__global__ static void crop_kernel(const float *xp, float *x, size_t total, int h, int w, int ch,
                                   int hp, int wp, int top, int left) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    int cc = (int)(i % (size_t)ch);
    size_t t = i / (size_t)ch;
    int pw = (int)(t % (size_t)w) + left;
    t /= (size_t)w;
    int ph = (int)(t % (size_t)h) + top;
    size_t b = t / (size_t)h;
    float v = 0.0f;
    if (ph < hp && pw < wp)
      v = xp[((b * (size_t)hp + (size_t)ph) * (size_t)wp + (size_t)pw) * (size_t)ch + (size_t)cc];
    x[i] = v;
  }
}

int pst_cuda_pad_nhwc(pst_cuda *c, const float *x, float *xp, int n, int h, int w, int ch,
                      int hp, int wp, int top, int left, float fill) {
  size_t total = (size_t)n * (size_t)hp * (size_t)wp * (size_t)ch;
  if (total == 0) return 0;
  pad_kernel<<<pst_cuda_blocks(total), PST_CUDA_THREADS, 0, c->stream>>>(x, xp, total, h, w, ch,
                                                                         hp, wp, top, left, fill);
  CUDA_CHECK_LAUNCH();
  return 0;
}

int pst_cuda_crop_nhwc(pst_cuda *c, const float *xp, float *x, int n, int h, int w, int ch,
                       int hp, int wp, int top, int left) {
  size_t total = (size_t)n * (size_t)h * (size_t)w * (size_t)ch;
  if (total == 0) return 0;
  crop_kernel<<<pst_cuda_blocks(total), PST_CUDA_THREADS, 0, c->stream>>>(xp, x, total, h, w, ch,
                                                                          hp, wp, top, left);
  CUDA_CHECK_LAUNCH();
  return 0;
}

int pst_cuda_check_window(const pst_window_shape *s, const char *op, int pooling) {
  PST_CUDA_REQUIRE(s != NULL, "%s: no shape", op);
  PST_CUDA_REQUIRE(s->n > 0 && s->in_h > 0 && s->in_w > 0 && s->in_c > 0 && s->k_h > 0 &&
                       s->k_w > 0 && s->stride_h > 0 && s->stride_w > 0 && s->out_h > 0 &&
                       s->out_w > 0 && s->out_c > 0,
                   "%s: bad shape: every size and stride must be positive (n=%d in=%dx%dx%d "
                   "k=%dx%d stride=%dx%d out=%dx%dx%d)",
                   op, s->n, s->in_h, s->in_w, s->in_c, s->k_h, s->k_w, s->stride_h, s->stride_w,
                   s->out_h, s->out_w, s->out_c);
  PST_CUDA_REQUIRE(s->pad_top >= 0 && s->pad_left >= 0 && s->pad_top < s->k_h &&
                       s->pad_left < s->k_w,
                   "%s: bad padding %d,%d for a %dx%d window", op, s->pad_top, s->pad_left, s->k_h,
                   s->k_w);
  /* Every output window must start inside the padded input: the last one at row
   * (out_h - 1) * stride - pad_top must be a real row. */
  PST_CUDA_REQUIRE((long long)(s->out_h - 1) * s->stride_h - s->pad_top < s->in_h &&
                       (long long)(s->out_w - 1) * s->stride_w - s->pad_left < s->in_w,
                   "%s: output %dx%d does not fit input %dx%d with window %dx%d stride %dx%d",
                   op, s->out_h, s->out_w, s->in_h, s->in_w, s->k_h, s->k_w, s->stride_h,
                   s->stride_w);
  PST_CUDA_REQUIRE(!pooling || s->out_c == s->in_c,
                   "%s: pooling keeps channels but out_c=%d, in_c=%d", op, s->out_c, s->in_c);
  return 0;
}

/* cuDNN's tensor descriptors describe at most 2^31 - 1 elements: "the total size of a tensor
 * including the potential padding between dimensions is limited to 2 Giga-elements of type
 * datatype" (cuDNN API reference, cudnnSetTensorNdDescriptor; cudnnSetTensor4dDescriptor
 * returns CUDNN_STATUS_NOT_SUPPORTED beyond it), and their sizes are ints. A batch whose
 * tensors would be larger runs in slices of whole samples, each within the limit, as
 * PyTorch's cuDNN convolutions do (split_batch_dim_to_32bit_out). The padded copy of an
 * input is at most max(in, (out - 1) * stride + k) on each side. */
int pst_cuda_batch_slice(pst_cuda *c, const pst_window_shape *s, const char *op, int *per) {
  size_t ph = (size_t)(s->out_h - 1) * (size_t)s->stride_h + (size_t)s->k_h;
  size_t pw = (size_t)(s->out_w - 1) * (size_t)s->stride_w + (size_t)s->k_w;
  if (ph < (size_t)s->in_h) ph = (size_t)s->in_h;
  if (pw < (size_t)s->in_w) pw = (size_t)s->in_w;
  size_t sample = ph * pw * (size_t)s->in_c;
  size_t out = (size_t)s->out_h * (size_t)s->out_w * (size_t)s->out_c;
  if (out > sample) sample = out;
  PST_CUDA_REQUIRE(sample <= c->max_tensor_elems,
                   "%s: %s: one sample of %dx%dx%d -> %dx%dx%d has %zu elements, above the "
                   "%zu a cuDNN tensor may hold",
                   c->name, op, s->in_h, s->in_w, s->in_c, s->out_h, s->out_w, s->out_c, sample,
                   c->max_tensor_elems);
  size_t fit = c->max_tensor_elems / sample;
  *per = fit >= (size_t)s->n ? s->n : (int)fit;
  return 0;
}
