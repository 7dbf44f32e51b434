/* The network's layer-by-layer paths (kernels/net.h), which let a worker overlap its
 * transfers with compute: the gradient-ready calls of the backward pass and the weights that
 * arrive while the forward pass runs, on the CPU backend, through a view of it that claims
 * device memory (the path the CUDA backend takes without a copy stream) and through one that
 * also has upload and download (the path it takes with one). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernels/backend.h"
#include "kernels/net.h"
#include "kernels/testing.h"
#include "model/model.h"

/* A view of the CPU backend that claims device memory, so that pst_net copies inputs,
 * labels and gradients as it must for CUDA. */
static pst_backend as_device;
static void *dev_alloc(pst_backend *b, size_t n) { return malloc(n ? n : 1); }
static void dev_free(pst_backend *b, void *p) { free(p); }

/* The same with a copy stream's two operations (kernels/backend.h), done at once here: the
 * layer-by-layer paths the CUDA backend takes. They count their calls. */
static pst_backend as_copying;
static int uploads, downloads;
static int fake_upload(pst_backend *b, void *dst, const void *src, size_t bytes) {
  uploads++;
  memcpy(dst, src, bytes);
  return 0;
}
static int fake_download(pst_backend *b, void *dst, const void *src, size_t bytes,
                         void (*done)(void *ctx, size_t arg), void *ctx, size_t arg) {
  downloads++;
  memcpy(dst, src, bytes);
  if (done) done(ctx, arg);
  return 0;
}

/* Sets up as_device and as_copying over the CPU backend. */
static void fake_devices(pst_backend *cpu) {
  as_device = *cpu;
  as_device.host_memory = 0;
  as_device.alloc = dev_alloc;
  as_device.free = dev_free;
  as_device.describe = NULL;
  as_copying = as_device;
  as_copying.upload = fake_upload;
  as_copying.download = fake_download;
}
/* The model of the layer-by-layer tests: a graph with batch norm (state written in the
 * forward pass), a bias-less layer and layers without parameters between the others. */
static const char *layered_spec =
    "input 6x6x2 name=x\nconv2d 3 3x3 padding=same relu name=a\n"
    "batchnorm\nconv2d 3 3x3 padding=same bias=no name=b\n"
    "add relu inputs=a,b\nmaxpool 2x2\nflatten\ndense 5 relu\n"
    "dropout 0.2\ndense 3 softmax\n";

static int layers_with_params(const pst_model *m) {
  int n = 0;
  for (int l = 1; l < m->n_layers; l++)
    n += m->layers[l].w_count + m->layers[l].b_count + m->layers[l].s_count > 0;
  return n;
}

/* What both cases start from: the model, its weights, one batch, and for each backend a net
 * with those weights loaded and the gradient of one plain step on them (the reference). */
enum { B = 3 };
typedef struct {
  pst_model m;
  float *params, *want;  /* [n_params]: the weights; the reference gradient */
  float *a, *b;          /* [n_params]: the case's own */
  float x[B * 72];       /* [B, 6, 6, 2] */
  int32_t labels[B];
  int with_params;       /* layers with parameters */
} fixture;

static void fixture_init(fixture *f, pst_backend *cpu, uint64_t seed, uint32_t x_seed,
                         const int32_t labels[B]) {
  char err[256];
  CHECK(pst_model_parse(layered_spec, "layered", &f->m, err, sizeof err) == 0);
  size_t bytes = f->m.n_params * sizeof(float);
  f->params = malloc(bytes), f->want = malloc(bytes), f->a = malloc(bytes), f->b = malloc(bytes);
  memcpy(f->labels, labels, sizeof f->labels);
  pst_model_init_params(&f->m, seed, f->params);
  t_fill(f->x, B * 72, x_seed, -1, 1);
  fake_devices(cpu);
  f->with_params = layers_with_params(&f->m);
}

static void fixture_free(fixture *f) {
  free(f->params), free(f->want), free(f->a), free(f->b);
}

/* Backend dev of the three: the CPU, as_device, as_copying. */
static pst_backend *backend(pst_backend *cpu, int dev) {
  return dev == 2 ? &as_copying : dev ? &as_device : cpu;
}

/* A net on be with the weights loaded and dropout seeded, after one plain step: its
 * gradient in f->want, its loss and correct count in *loss and *correct. NULL on failure. */
static pst_net *reference_net(fixture *f, pst_backend *be, uint64_t net_seed, double *loss,
                              int *correct) {
  pst_net *net = NULL;
  CHECK(pst_net_create(&f->m, be, B, &net) == 0);
  if (!net) return NULL;
  CHECK(pst_net_load_params(net, f->params) == 0);
  pst_net_set_seed(net, net_seed);
  CHECK(pst_net_train_step(net, f->x, f->labels, B, 0.5f, f->want, loss, correct) == 0);
  return net;
}

/* pst_net_on_grad_ready: what each call says is final, checked against the step's final
 * gradient; the calls' `from` goes down, one per layer with parameters and a last one with
 * from = 0 on the CPU backend and where the backend downloads layer by layer, and a single
 * from = 0 where the gradient comes from the device at the end in one copy. */
typedef struct {
  const float *grad;    /* the step's gradient vector, being written */
  size_t n;
  float *seen;          /* [n]: each float as it was when first said to be final */
  size_t low;           /* the lowest `from` so far */
  int calls, rising;
} ready_log;

static void on_ready(void *ctx, size_t from) {
  ready_log *r = ctx;
  if (from > r->low) r->rising++;
  for (size_t i = from; i < r->low; i++) r->seen[i] = r->grad[i];
  if (from < r->low) r->low = from;
  r->calls++;
}

static void test_grad_ready(pst_backend *cpu) {
  static const int32_t labels[B] = {2, 0, 1};
  fixture f;
  fixture_init(&f, cpu, 5, 17, labels);
  size_t n = f.m.n_params;
  float *grad = f.a, *seen = f.b;
  for (int dev = 0; dev < 3; dev++) {
    double loss;
    int correct;
    pst_net *net = reference_net(&f, backend(cpu, dev), 11, &loss, &correct);
    if (!net) continue;
    ready_log r = {grad, n, seen, n, 0, 0};
    memset(grad, 0xff, n * 4); /* NaN until written */
    pst_net_on_grad_ready(net, on_ready, &r);
    downloads = 0;
    CHECK(pst_net_train_step(net, f.x, f.labels, B, 0.5f, grad, &loss, &correct) == 0);
    CHECK(r.low == 0 && r.rising == 0);
    CHECK(r.calls == (dev == 1 ? 1 : f.with_params + 1));
    /* One download per layer with parameters, and one for the rest (none here). */
    CHECK(downloads == (dev == 2 ? f.with_params + 1 : 0));
    CHECK(memcmp(seen, f.want, n * 4) == 0 && memcmp(grad, f.want, n * 4) == 0);
    pst_net_on_grad_ready(net, NULL, NULL);
    pst_net_destroy(net);
  }
  fixture_free(&f);
}

/* pst_net_load_params_streamed: the host vector starts as NaN and each wait fills in only
 * what it is asked for, so a layer that ran before its wait would poison the step; the step
 * must match one on fully loaded weights bit for bit, ask for ever larger prefixes (one per
 * layer with parameters, on every backend; uploaded where the backend can), and end on a
 * wait's error with that error. */
typedef struct {
  const float *src;    /* the real weights */
  float *dst;          /* the vector the net reads, filled as asked */
  size_t got, n;
  int calls, shrinking, fail_at; /* fail_at: the call that fails (0: none) */
} stream_log;

static int on_wait(void *ctx, size_t upto) {
  stream_log *s = ctx;
  s->calls++;
  if (s->calls == s->fail_at) return -ECANCELED;
  if (upto <= s->got || upto > s->n) s->shrinking++;
  for (size_t i = s->got; i < upto && i < s->n; i++) s->dst[i] = s->src[i];
  if (upto > s->got) s->got = upto;
  return 0;
}

static void test_streamed_params(pst_backend *cpu) {
  static const int32_t labels[B] = {1, 2, 0};
  fixture f;
  fixture_init(&f, cpu, 9, 23, labels);
  size_t n = f.m.n_params;
  const float *params = f.params, *want = f.want, *x = f.x;
  const int32_t *lab = f.labels;
  float *arriving = f.a, *grad = f.b;
  for (int dev = 0; dev < 3; dev++) {
    double loss, want_loss, eval_loss, want_eval;
    int correct, want_correct;
    pst_net *net = reference_net(&f, backend(cpu, dev), 3, &want_loss, &want_correct);
    if (!net) continue;
    CHECK(pst_net_evaluate(net, x, lab, B, &want_eval, &correct) == 0);

    /* A training step on weights that arrive as asked. The device's copy is NaN first, so
     * that a layer running on the previous weights would show too. */
    memset(arriving, 0xff, n * 4);
    CHECK(pst_net_load_params(net, arriving) == 0);
    stream_log s = {params, arriving, 0, n, 0, 0, 0};
    CHECK(pst_net_load_params_streamed(net, arriving, on_wait, &s) == 0);
    uploads = 0;
    CHECK(pst_net_train_step(net, x, lab, B, 0.5f, grad, &loss, &correct) == 0);
    CHECK(memcmp(grad, want, n * 4) == 0 && loss == want_loss && correct == want_correct);
    CHECK(s.got == n && s.shrinking == 0);
    CHECK(s.calls == f.with_params && uploads == (dev == 2 ? f.with_params : 0));
    /* The weights stay loaded: an evaluation after it waits for nothing. */
    CHECK(pst_net_evaluate(net, x, lab, B, &eval_loss, &correct) == 0);
    CHECK(eval_loss == want_eval && s.calls == f.with_params);

    /* An evaluation streams the same way. */
    memset(arriving, 0xff, n * 4);
    CHECK(pst_net_load_params(net, arriving) == 0);
    stream_log e = {params, arriving, 0, n, 0, 0, 0};
    CHECK(pst_net_load_params_streamed(net, arriving, on_wait, &e) == 0);
    CHECK(pst_net_evaluate(net, x, lab, B, &eval_loss, &correct) == 0);
    CHECK(eval_loss == want_eval && e.got == n && e.shrinking == 0);

    /* The weights stop coming at the second wait: the step ends with the wait's error. */
    memset(arriving, 0xff, n * 4);
    stream_log f = {params, arriving, 0, n, 0, 0, 2};
    CHECK(pst_net_load_params_streamed(net, arriving, on_wait, &f) == 0);
    CHECK(pst_net_train_step(net, x, lab, B, 0.5f, grad, &loss, &correct) == -ECANCELED);
    CHECK(f.calls == f.fail_at);
    /* And a whole load afterwards trains as before. */
    CHECK(pst_net_load_params(net, params) == 0);
    CHECK(pst_net_train_step(net, x, lab, B, 0.5f, grad, &loss, &correct) == 0);
    CHECK(memcmp(grad, want, n * 4) == 0);
    CHECK(pst_net_load_params_streamed(net, arriving, NULL, NULL) == -EINVAL);
    pst_net_destroy(net);
  }
  fixture_free(&f);
}

/* pst_net_on_grad_part: each call's [lo, hi) is checked final (against the step's end) as
 * it is said, lo the layer's first float and hi growing. */
typedef struct {
  const float *grad;
  float *seen;
  size_t lo, hi;
  int calls, bad;
} part_log;

static void on_part(void *ctx, size_t lo, size_t hi) {
  part_log *p = ctx;
  if (lo != p->lo || hi <= p->hi) p->bad++;
  for (size_t i = lo; i < hi; i++) p->seen[i] = p->grad[i];
  p->hi = hi;
  p->calls++;
}

/* pst_net_set_row_cuts: the first dense layer (27 inputs x 5) cut at a row boundary and
 * inside a row, on the three backends, with the weights streamed (NaN until asked for) and
 * the gradient announced: within rounding of the whole layers' step, the same bit for bit
 * run after run, each piece waited for and announced on its own (two more waits and two more
 * calls than whole layers, the froms going down), every announced float final; no cuts
 * again: the whole layers' step bit for bit. Cuts out of order are refused, and a backend
 * without the row operations runs every layer whole. */
static void test_row_pieces(pst_backend *cpu) {
  static const int32_t labels[B] = {0, 2, 1};
  fixture f;
  fixture_init(&f, cpu, 13, 29, labels);
  size_t n = f.m.n_params;
  int d1 = 0;
  for (int l = 1; l < f.m.n_layers && !d1; l++)
    if (f.m.layers[l].kind == PST_LAYER_DENSE) d1 = l;
  const pst_layer *L = &f.m.layers[d1];
  CHECK(d1 > 0 && L->in_c == 27 && L->units == 5);
  /* Row 7 (a cut 2 floats into it) and row 20; one below the layer is not inside it. */
  size_t cuts[] = {L->w_offset, L->w_offset + 7 * 5 + 2, L->w_offset + 20 * 5};
  float *grad = f.a, *seen = f.b, *arriving = malloc(n * 4), *again = malloc(n * 4);
  for (int dev = 0; dev < 3; dev++) {
    double loss, want_loss, loss2;
    int correct, want_correct;
    pst_net *net = reference_net(&f, backend(cpu, dev), 7, &want_loss, &want_correct);
    if (!net) continue;
    CHECK(pst_net_set_row_cuts(net, cuts, 3) == 0);
    CHECK(pst_net_layer_pieces(net, d1) == 3);
    for (int l = 1; l < f.m.n_layers; l++) CHECK(l == d1 || pst_net_layer_pieces(net, l) == 1);
    for (int run = 0; run < 2; run++) {
      memset(arriving, 0xff, n * 4);
      CHECK(pst_net_load_params(net, arriving) == 0);
      stream_log s = {f.params, arriving, 0, n, 0, 0, 0};
      CHECK(pst_net_load_params_streamed(net, arriving, on_wait, &s) == 0);
      ready_log r = {grad, n, seen, n, 0, 0};
      memset(grad, 0xff, n * 4);
      pst_net_on_grad_ready(net, on_ready, &r);
      downloads = 0;
      CHECK(pst_net_train_step(net, f.x, f.labels, B, 0.5f, grad, &loss, &correct) == 0);
      pst_net_on_grad_ready(net, NULL, NULL);
      CHECK(s.got == n && s.shrinking == 0 && s.calls == f.with_params + 2);
      CHECK(r.low == 0 && r.rising == 0);
      CHECK(r.calls == (dev == 1 ? 1 : f.with_params + 3));
      CHECK(memcmp(seen, grad, n * 4) == 0);
      int far = 0;
      for (size_t i = 0; i < n; i++) far += !t_close(grad[i], f.want[i], 1e-5, 1e-5);
      CHECK(far == 0 && t_close(loss, want_loss, 1e-5, 1e-5) && correct == want_correct);
      if (run == 0) memcpy(again, grad, n * 4), loss2 = loss;
      else CHECK(memcmp(again, grad, n * 4) == 0 && loss == loss2);
    }
    /* With grad_part the cut layer is made from its first rows up: each piece but the last
     * says [w_offset, end of its rows) is final, growing; grad_ready then says the whole
     * layer as for an uncut one (no extra calls). The same weights bit for bit: each piece
     * writes only its own rows, whatever the order. */
    part_log pl = {grad, seen, L->w_offset, 0, 0, 0};
    ready_log r = {grad, n, seen, n, 0, 0};
    memset(grad, 0xff, n * 4);
    memset(seen, 0xff, n * 4);
    CHECK(pst_net_load_params(net, f.params) == 0);
    pst_net_on_grad_ready(net, on_ready, &r);
    pst_net_on_grad_part(net, on_part, &pl);
    CHECK(pst_net_train_step(net, f.x, f.labels, B, 0.5f, grad, &loss, &correct) == 0);
    pst_net_on_grad_ready(net, NULL, NULL);
    pst_net_on_grad_part(net, NULL, NULL);
    CHECK(pl.calls == (dev == 1 ? 0 : 2) && pl.bad == 0);
    CHECK(pl.hi == (dev == 1 ? 0 : L->w_offset + 20 * 5));
    CHECK(r.calls == (dev == 1 ? 1 : f.with_params + 1) && r.rising == 0 && r.low == 0);
    CHECK(memcmp(grad, again, n * 4) == 0 && memcmp(seen, grad, n * 4) == 0);
    /* No cuts: the whole layers' step again. */
    CHECK(pst_net_set_row_cuts(net, NULL, 0) == 0 && pst_net_layer_pieces(net, d1) == 1);
    CHECK(pst_net_load_params(net, f.params) == 0);
    CHECK(pst_net_train_step(net, f.x, f.labels, B, 0.5f, grad, &loss, &correct) == 0);
    CHECK(memcmp(grad, f.want, n * 4) == 0 && loss == want_loss);
    size_t backwards[] = {cuts[2], cuts[1]};
    CHECK(pst_net_set_row_cuts(net, backwards, 2) == -EINVAL);
    pst_net_destroy(net);
  }
  pst_backend whole = *cpu;
  whole.dense_forward_rows = NULL;
  whole.dense_backward_rows = NULL;
  pst_net *net = NULL;
  CHECK(pst_net_create(&f.m, &whole, B, &net) == 0);
  if (net) {
    CHECK(pst_net_set_row_cuts(net, cuts, 3) == 0 && pst_net_layer_pieces(net, d1) == 1);
    pst_net_destroy(net);
  }
  free(arriving), free(again);
  fixture_free(&f);
}

int main(void) {
  pst_log_init("net_layers_test", PST_LOG_INFO);
  pst_backend *cpu = NULL;
  CHECK(pst_cpu_backend_create(1, &cpu) == 0);
  test_grad_ready(cpu);
  test_streamed_params(cpu);
  test_row_pieces(cpu);
  cpu->destroy(cpu);
  return t_summary();
}
