/* Parity of the CUDA backend with the CPU backend: every operation (batchnorm included),
 * forward and backward, on the same random inputs; outputs must agree to a relative error
 * of 1e-4 on the norm (dropout exactly: its mask is one function on both sides). The
 * shapes are the kernels' own edge cases and limits (one row, odd sizes, 4096 channels,
 * 2^24 rows, more elements than one grid, batches in slices); the shapes the presets reach
 * are preset_parity_test.c's. Without a usable GPU it skips (kernels/cuda/parity.h). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/device.h"
#include "model/model.h"
#include "kernels/net.h"
#include "kernels/cuda/parity.h"
#include "kernels/cuda/parity_ops.h"
#include "kernels/testing.h"

/* A whole graph model through pst_net on both backends: residual add with three inputs, a
 * tensor taken by four layers, concatenations of images and of vectors, flatten handing
 * its gradient to two dense layers. Loss and gradients must agree. */
static void test_graph_net(void) {
  static const char *spec =
      "input 10x9x3 name=x\n"
      "conv2d 8 3x3 padding=same relu name=a\n"
      "conv2d 8 3x3 padding=same relu6 name=b\n"
      "conv2d 8 1x1 inputs=a name=c\n"
      "add relu inputs=a,b,c name=s\n"
      "depthwise_conv2d 3x3 padding=same inputs=a name=dw\n"
      "concatenate inputs=s,dw,x name=cat\n"
      "maxpool 2x2\n"
      "flatten name=f\n"
      "dense 16 relu name=d1\n"
      "dense 8 relu inputs=f name=d2\n"
      "concatenate inputs=d1,d2 name=m\n"
      "add inputs=m,m\n"
      "dropout 0.25\n"
      "dense 5 softmax\n";
  static pst_model m;
  char err[256];
  CHECK(pst_model_parse(spec, "graph", &m, err, sizeof err) == 0);
  enum { B = 6 };
  float *params = malloc(m.n_params * 4);
  float *x = rand_floats((size_t)B * m.input_size, -1, 1);
  float *g[2] = {pst_parity_zeros(m.n_params), pst_parity_zeros(m.n_params)};
  int32_t labels[B] = {0, 1, 2, 3, 4, 0};
  double loss[2] = {0, 0};
  int correct[2] = {0, 0};
  pst_model_init_params(&m, 21, params);
  for (int k = 0; k < 2; k++) {
    pst_backend *b = k ? g_dut : g_ref;
    pst_net *net = NULL;
    int rc = pst_net_create(&m, b, B, &net);
    if (!rc) rc = pst_net_load_params(net, params);
    pst_net_set_seed(net, 99);
    if (!rc) rc = pst_net_train_step(net, x, labels, B, 1.0f / B, g[k], &loss[k], &correct[k]);
    CHECK(rc == 0);
    pst_net_destroy(net);
  }
  CHECK(fabs(loss[0] - loss[1]) <= 1e-4 * fabs(loss[0]) && correct[0] == correct[1]);
  pst_parity_compare("graph net", "gradient", g[1], g[0], m.n_params);
  free(params), free(x), free(g[0]), free(g[1]);
}

/* ---- batches in slices ------------------------------------------------------------- */

/* cuDNN takes at most 2^31 - 1 elements per tensor, so a larger batch goes to its
 * convolutions in slices of whole samples (pad.cu, pst_cuda_batch_slice). Batches that
 * large cannot be checked against a CPU reference here, so a second backend is opened with
 * the limit lowered to 4000 elements (PSTRAIN_CUDA_MAX_TENSOR_ELEMS) and ordinary shapes go
 * through it in slices: one sample per slice, two with a remainder, with and without the
 * explicitly padded input, grouped too. A sample larger than the limit is refused. The CPU
 * harness has no limit and runs the same shapes whole. */
static void test_sliced(const char *spec) {
  setenv("PSTRAIN_CUDA_MAX_TENSOR_ELEMS", "4000", 1);
  pst_backend *b = NULL;
  char note[512];
  int rc = pst_device_open(spec, 0, 1, &b, note, sizeof note);
  unsetenv("PSTRAIN_CUDA_MAX_TENSOR_ELEMS");
  CHECK(rc == 0 && b != NULL);
  if (rc != 0 || b == NULL) return;
  pst_backend *whole = g_dut;
  g_dut = b;
  test_conv(window(7, 14, 14, 8, 3, 1, 1, 16));     /* 3136 per sample: 7 slices of 1 */
  test_conv(window(5, 14, 14, 8, 3, 2, 1, 6));      /* padded 1800: slices of 2, 2, 1 */
  test_depthwise(window(5, 14, 14, 8, 3, 2, 1, 8)); /* the same, grouped */
  if (!b->host_memory) {
    pst_window_shape s = window(1, 30, 30, 8, 3, 1, 1, 8); /* 7200 elements per sample */
    size_t nx = (size_t)30 * 30 * 8;
    float *x = up(b, NULL, nx * 4), *w = up(b, NULL, 8 * 9 * 8 * 4), *y = up(b, NULL, nx * 4);
    CHECK(b->conv2d_forward(b, &s, x, w, NULL, y) == -EINVAL);
    printf("a sample over the limit: %s\n", pst_parity_reason(b, -EINVAL));
    b->free(b, x), b->free(b, w), b->free(b, y);
  }
  g_dut = whole;
  b->destroy(b);
}

/* ---- the memory cap and describe() ------------------------------------------------- */

static void test_cap(const char *spec) {
  pst_backend *b = NULL;
  char note[512];
  int rc = pst_device_open(spec, 1 /* MiB */, 1, &b, note, sizeof note);
  CHECK(rc == 0 && b != NULL);
  if (rc != 0 || !b) return;
  if (b->host_memory) { /* the CPU backend has no cap */
    b->destroy(b);
    return;
  }
  void *small = b->alloc(b, 256 * 1024);
  CHECK(small != NULL);
  CHECK(b->alloc(b, 2 * 1024 * 1024) == NULL); /* logs the refusal */
  b->free(b, small);
  small = b->alloc(b, 900 * 1024); /* room again once freed */
  CHECK(small != NULL);
  b->free(b, small);
  b->destroy(b);
}

static void test_describe(void) {
  char line[256] = "";
  if (!g_dut->describe) return;
  g_dut->describe(g_dut, "conv2d", 1, line, sizeof line);
  printf("describe conv2d: %s\n", line);
  CHECK(line[0] != '\0');
  g_dut->describe(g_dut, "dense", 2, line, sizeof line);
  printf("describe dense: %s\n", line);
  CHECK(line[0] != '\0');
}

int main(void) {
  int rc = pst_parity_open(&g_dut, &g_ref);
  if (rc != 0) return rc < 0 ? 1 : 0;

  test_dense(1, 1, 1);
  test_dense(7, 33, 19);
  test_dense(64, 784, 128);
  test_dense(128, 128, 10);
  test_dense(300, 40, 300); /* more rows than one bias-gradient chunk */
  test_relu(10007);
  test_relu6(10007);
  test_dropout(10007, 0.3f, 42);
  test_dropout(4096, 0.5f, 0xfeedfacecafebeefull);
  test_dropout(1000, 0.0f, 7);
  test_add(10007);
  test_add(1);
  {
    static const int two[] = {3, 5}, three[] = {8, 1, 16}, eight[] = {1, 2, 3, 4, 5, 6, 7, 8};
    test_concat(7 * 9 * 4, two, 2);
    test_concat(5 * 5 * 3, three, 3);
    test_concat(37, eight, 8); /* flat vectors: rows = the batch */
  }
  test_graph_net();
  test_xent(37, 10);
  test_xent(5, 100); /* more classes than a warp has lanes */
  test_xent(1000, 10);
  test_xent(1, 1);
  test_xent(65536, 10); /* the largest batch a job may ask for (--batch-size) */
  /* Beyond one launch's grid: pst_cuda_blocks gives at most 65535 * 16 blocks of 256
   * threads (268,431,360), so 2^28 + 5 elements take the grid-stride loop round again. */
  if (!pst_parity_small()) test_relu6(((size_t)1 << 28) + 5);

  /* conv2d: valid; symmetric "same" (cuDNN pads); asymmetric "same" (explicit padding). */
  test_conv(window(3, 28, 28, 1, 3, 1, 0, 8));
  test_conv(window(3, 14, 14, 8, 3, 1, 1, 16));
  test_conv(window(3, 14, 14, 8, 3, 2, 1, 6)); /* pad 0 top, 1 bottom */
  test_conv(window(2, 9, 9, 3, 5, 1, 1, 4));
  test_conv(window(2, 8, 8, 4, 1, 1, 0, 5));
  test_conv(window(2, 11, 11, 3, 4, 1, 1, 3)); /* pad 1 top, 2 bottom */
  test_conv(window(2, 10, 10, 2, 3, 2, 0, 4)); /* valid, stride 2 */
  test_conv(window(40, 12, 12, 3, 3, 1, 0, 7)); /* many bias-gradient rows */
  /* Rectangular everything, so that a swapped height and width cannot pass. */
  test_conv(window2(2, 9, 6, 2, 3, 2, 2, 1, 1, 3));  /* pads: 1 top, 0 left; explicit */
  test_conv(window2(2, 10, 7, 3, 5, 3, 1, 1, 1, 4)); /* symmetric pads 2 and 1 */
  test_conv(window2(2, 8, 11, 2, 2, 4, 2, 3, 0, 3)); /* valid */

  /* depthwise_conv2d (cuDNN grouped convolution): valid, symmetric same, asymmetric same
   * (explicit padding), stride 2, rectangular, many channels; and a full convolution of
   * the same geometry right after one, which must not reuse the grouped plan. */
  test_depthwise(window(3, 14, 14, 8, 3, 1, 0, 8));
  test_depthwise(window(3, 14, 14, 8, 3, 1, 1, 8));
  test_depthwise(window(2, 14, 14, 16, 3, 2, 1, 16)); /* pad 0 top, 1 bottom */
  test_depthwise(window(2, 9, 9, 3, 5, 1, 1, 3));
  test_depthwise(window2(2, 9, 6, 4, 3, 2, 2, 1, 1, 4));
  test_depthwise(window(2, 8, 8, 96, 3, 1, 1, 96));
  test_conv(window(3, 14, 14, 8, 3, 1, 1, 8));

  /* maxpool (pool.cu's kernels): valid and every padded case (padding never wins); ties,
   * whose gradient goes to the first maximum; a batch of one, many channels. */
  test_pool(window(3, 28, 28, 8, 2, 2, 0, 8));
  test_pool(window(3, 7, 7, 4, 2, 2, 1, 4));
  test_pool(window(2, 8, 8, 3, 3, 2, 1, 3));
  test_pool(window(2, 6, 6, 2, 3, 1, 1, 2));
  test_pool(window(2, 7, 7, 2, 2, 2, 0, 2));
  test_pool(window2(2, 7, 10, 3, 3, 2, 2, 2, 1, 3));
  test_pool(window2(2, 9, 6, 2, 2, 3, 2, 3, 0, 2));
  test_pool_ties(window(3, 8, 8, 5, 2, 2, 0, 5));
  test_pool_ties(window(2, 9, 9, 3, 3, 2, 1, 3)); /* overlapping windows, padded */
  test_pool(window(1, 5, 5, 300, 3, 1, 1, 300));

  /* batchnorm (norm.cu's kernels): flat [B, C], NHWC images as [B*H*W, C], data far from
   * zero; one row (variance 0, and the moving variance's change (0 - moving) * k), one
   * channel, and up to 4096 channels, with odd counts of both; the rows cuDNN refused on an
   * H100: 86528 (the first failure) and 65536 (mobilenetv2's first layers at batch 64, in
   * evaluation); and 2^24 + 1 rows, where every chunk of the column sums is full. */
  test_batchnorm(32, 10, 0.0);
  test_batchnorm(4 * 13 * 13, 16, 0.0);
  test_batchnorm(128 * 26 * 26, 4, 0.0);
  test_batchnorm(64 * 32 * 32, 16, 0.0);
  test_batchnorm(500, 7, 50.0);
  test_batchnorm(1, 5, 0.0);
  test_batchnorm(1, 1, 0.0);
  test_batchnorm(1, 4096, 0.0);
  test_batchnorm(3, 4096, 0.0);
  test_batchnorm(257, 4096, 0.0);
  test_batchnorm(37, 33, 0.0);
  test_batchnorm(100003, 1, 0.0);
  if (!pst_parity_small()) test_batchnorm((1 << 24) + 1, 3, 1.0);

  /* avgpool: valid, asymmetric same (padding excluded from the mean), overlapping,
   * rectangular, and global average pooling. */
  test_avgpool(window(3, 28, 28, 8, 2, 2, 0, 8));
  test_avgpool(window(3, 7, 7, 4, 2, 2, 1, 4));
  test_avgpool(window(2, 8, 8, 3, 3, 2, 1, 3));
  test_avgpool(window(2, 6, 6, 2, 3, 1, 1, 2));
  test_avgpool(window2(2, 7, 10, 3, 3, 2, 2, 2, 1, 3));
  test_avgpool(global_window(4, 7, 7, 32));
  test_avgpool(global_window(2, 5, 3, 300));

  test_sliced(pst_parity_device());
  test_describe();
  test_cap(pst_parity_device());

  g_ref->destroy(g_ref);
  g_dut->destroy(g_dut);
  return t_summary();
}
