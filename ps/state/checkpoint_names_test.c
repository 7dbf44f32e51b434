/* Checkpoints' tensor names (ps/state/checkpoint.c): Keras's names and order for every layer
 * kind, layers without parameters leaving no gap, batchnorm's four tensors, a layer's name=,
 * and a checkpoint from a build that named every layer automatically loading into a model
 * whose layers have names. */
#include "ps/state/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/testing.h"

#define MAXT (3 * PST_CKPT_MAX_MODEL_TENSORS)

static char g_root[512];

/* Layers without parameters (relu6, avgpool, global_avgpool, dropout) leave no tensors and
 * do not shift the names of the others; depthwise_conv2d is named as Keras names it. */
static void test_new_layer_names(void) {
  pst_model m;
  char err[256];
  CHECK(pst_model_parse("input 8x8x3\nconv2d 4 3x3 relu6\ndepthwise_conv2d 3x3 relu6\n"
                        "avgpool 2x2\ndepthwise_conv2d 2x2 stride=2 padding=same\n"
                        "dropout 0.5\nglobal_avgpool\ndense 2 softmax\n",
                        "s", &m, err, sizeof err) == 0);
  pst_ckpt_tensor t[MAXT];
  CHECK(pst_ckpt_model_tensors(&m, NULL, "", t, MAXT) == 8);
  CHECK(!strcmp(t[0].name, "conv2d/kernel") && !strcmp(t[1].name, "conv2d/bias"));
  CHECK(!strcmp(t[2].name, "depthwise_conv2d/depthwise_kernel"));
  CHECK(t[2].ndim == 4 && t[2].shape[0] == 4 && t[2].shape[1] == 3 && t[2].shape[2] == 3 &&
        t[2].shape[3] == 1);
  CHECK(!strcmp(t[3].name, "depthwise_conv2d/bias") && t[3].count == 4);
  CHECK(!strcmp(t[4].name, "depthwise_conv2d_1/depthwise_kernel") && t[4].count == 16);
  CHECK(!strcmp(t[5].name, "depthwise_conv2d_1/bias"));
  CHECK(!strcmp(t[6].name, "dense/kernel") && t[6].shape[0] == 4 && t[6].shape[1] == 2);
  CHECK(pst_ckpt_model_tensors(&m, NULL, "optimizer/m/", t, MAXT) == 8 &&
        !strcmp(t[4].name, "optimizer/m/depthwise_conv2d_1/depthwise_kernel"));
}

/* batchnorm: four tensors as Keras names them, gamma, beta, moving_mean and
 * moving_variance, [C] each, tiling the vector with the layers around them. */
static void test_batchnorm_names(void) {
  pst_model m;
  char err[256];
  CHECK(pst_model_parse("input 6x6x2\nconv2d 3 3x3\nbatchnorm\nflatten\ndense 4 relu\n"
                        "batchnorm momentum=0.9\ndense 2 softmax\n",
                        "s", &m, err, sizeof err) == 0);
  float *w = calloc(m.n_params, sizeof(float));
  pst_ckpt_tensor t[MAXT];
  CHECK(pst_ckpt_model_tensors(&m, w, "", t, MAXT) == 14);
  static const char *const want[] = {
      "conv2d/kernel", "conv2d/bias", "batch_normalization/gamma", "batch_normalization/beta",
      "batch_normalization/moving_mean", "batch_normalization/moving_variance", "dense/kernel",
      "dense/bias", "batch_normalization_1/gamma", "batch_normalization_1/beta",
      "batch_normalization_1/moving_mean", "batch_normalization_1/moving_variance",
      "dense_1/kernel", "dense_1/bias"};
  size_t at = 0;
  for (int i = 0; i < 14; i++) {
    CHECK(!strcmp(t[i].name, want[i]) && t[i].data == w + at);
    at += t[i].count;
  }
  CHECK(at == m.n_params);
  CHECK(t[5].ndim == 1 && t[5].shape[0] == 3 && t[11].count == 4 &&
        t[11].data == w + m.layers[5].s_offset + 4);
  CHECK(pst_ckpt_model_tensors(&m, NULL, "optimizer/v/", t, MAXT) == 14 &&
        !strcmp(t[4].name, "optimizer/v/batch_normalization/moving_mean"));
  free(w);
}

/* A layer's name= names its tensors (as Keras does); a checkpoint from a build that named
 * every layer automatically still loads into the named model. */
static void test_given_names(void) {
  pst_model named, plain;
  char err[256], dir[600], path[700];
  CHECK(pst_model_parse("input 4 name=x\ndense 3 relu name=hidden\nbatchnorm name=bn\n"
                        "dense 2 softmax\n", "s", &named, err, sizeof err) == 0);
  CHECK(pst_model_parse("input 4\ndense 3 relu\nbatchnorm\ndense 2 softmax\n", "s", &plain,
                        err, sizeof err) == 0);
  CHECK(named.n_params == plain.n_params);
  float *w = malloc(named.n_params * sizeof(float)), *x = calloc(named.n_params, sizeof(float));
  for (size_t i = 0; i < named.n_params; i++) w[i] = (float)i + 0.5f;
  pst_ckpt_tensor t[MAXT];
  CHECK(pst_ckpt_model_tensors(&named, w, "", t, MAXT) == 8);
  CHECK(!strcmp(t[0].name, "hidden/kernel") && !strcmp(t[3].name, "bn/beta") &&
        !strcmp(t[5].name, "bn/moving_variance") && !strcmp(t[6].name, "dense_1/kernel"));
  /* Written with the automatic names (dense/kernel, batch_normalization/gamma, ...). */
  pst_ckpt_tensor old[MAXT];
  int n = pst_ckpt_model_tensors(&plain, w, "", old, MAXT);
  CHECK(n == 8 && !strcmp(old[0].name, "dense/kernel"));
  snprintf(dir, sizeof dir, "%s/names", g_root);
  CHECK(pst_ckpt_write(dir, 3, old, n, NULL, 0, 3, path, sizeof path, err, sizeof err) == 0);
  pst_ckpt ck;
  CHECK(pst_ckpt_load(path, &ck, err, sizeof err) == 0);
  CHECK(pst_ckpt_read_model(&ck, &named, "", x, err, sizeof err) == 0);
  CHECK(memcmp(w, x, named.n_params * sizeof(float)) == 0);
  pst_ckpt_free(&ck);
  /* And one written by the named model itself. */
  memset(x, 0, named.n_params * sizeof(float));
  CHECK(pst_ckpt_write(dir, 4, t, 8, NULL, 0, 3, path, sizeof path, err, sizeof err) == 0);
  CHECK(pst_ckpt_load(path, &ck, err, sizeof err) == 0);
  CHECK(pst_ckpt_read_model(&ck, &named, "", x, err, sizeof err) == 0);
  CHECK(memcmp(w, x, named.n_params * sizeof(float)) == 0);
  /* The plain model does not take the named one's tensors. */
  CHECK(pst_ckpt_read_model(&ck, &plain, "", x, err, sizeof err) == -ENOENT &&
        strstr(err, "no tensor 'dense/kernel'"));
  pst_ckpt_free(&ck);
  free(w);
  free(x);
}

int main(void) {
  const char *base = getenv("TEST_TMPDIR");
  snprintf(g_root, sizeof g_root, "%s/ckpt-names-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(g_root)) {
    perror("mkdtemp");
    return 1;
  }
  test_new_layer_names();
  test_batchnorm_names();
  test_given_names();
  /* What test_given_names wrote: two checkpoints in one directory. */
  char dir[600];
  snprintf(dir, sizeof dir, "%s/names", g_root);
  DIR *d = opendir(dir);
  for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
    if (de->d_name[0] == '.') continue;
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    unlink(p);
  }
  if (d) closedir(d);
  rmdir(dir);
  rmdir(g_root);
  return t_summary();
}
