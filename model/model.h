/* Models as data: a Keras-like layer stack, or graph, read from a small text format.
 *
 *   # comment
 *   input 28x28x1          (H x W x C; "input 784" means a flat vector)
 *   conv2d 32 3x3 relu     (filters, kernel; options: stride=S, padding=valid|same; default valid, 1)
 *   maxpool 2x2            (window; option stride=S, default = window)
 *   flatten
 *   avgpool 2x2            (average pooling; options stride=S, padding=valid|same; with
 *                           same padding the padding cells are left out of the mean)
 *   global_avgpool         (mean over H and W: HxWxC -> C, a flat vector)
 *   dropout 0.25           (rate in [0, 1): training zeroes that fraction and scales the
 *                           rest by 1/(1-rate); identity at evaluation)
 *   depthwise_conv2d 3x3 relu6 (one filter per channel, depth multiplier 1; options
 *                           stride=S, padding=valid|same and an activation, as conv2d)
 *   activation relu6       (relu or relu6 as a layer of its own, Keras's Activation: what
 *                           follows a batch norm)
 *   batchnorm              (batch normalisation over the last axis, the channels of an
 *                           image or the features of a flat vector; options momentum=M in
 *                           [0, 1), default 0.99, and eps=E in (0, 1], default 1e-3, as
 *                           Keras. Training normalises with the batch's own mean and
 *                           (biased) variance; evaluation with the moving mean and variance.
 *                           Parameters gamma [C], beta [C] (trained) and moving_mean [C],
 *                           moving_var [C]: model state that the ps holds and serves like
 *                           weights but the optimizer never touches; see
 *                           pst_model_state_ranges and kernels/net.h for how it moves)
 *   dense 128 relu         (units, optional activation relu|relu6|softmax|linear; conv2d
 *                           takes relu, relu6 and linear. dense, conv2d and depthwise_conv2d
 *                           take bias=no for no bias, Keras's use_bias=False)
 *   dense 10 softmax       (the last layer must be dense with softmax: training uses
 *                           softmax cross-entropy on its logits)
 *   optimizer adam lr=0.002  (optional, anywhere, at most once: the optimizer this model
 *                           trains with by default; options lr=, momentum= (momentum),
 *                           beta1=, beta2=, eps= (adam), weight_decay= (all))
 *
 * A graph, not only a stack: any layer line may carry name=NAME (letters, digits and '_',
 * not starting with a digit, at most 31 characters, unique) and every layer but input may
 * carry inputs=A,B,... naming the layers whose outputs it takes. A layer without inputs=
 * takes the output of the layer on the line above it, so a spec without names is the
 * sequential stack it always was (same canonical text, same fingerprint). Two merge layers
 * take two or more named inputs (at most 8) and no implicit one:
 *   add inputs=a,b [relu]  (element-wise sum of equal shapes, the residual connection;
 *                           optional activation relu|relu6|linear after the sum)
 *   concatenate inputs=a,b (joins along the channels: equal H and W for images, any
 *                           lengths for flat vectors)
 * A residual block:
 *   input 8x8x16 name=x
 *   conv2d 16 3x3 padding=same relu
 *   conv2d 16 3x3 padding=same name=f
 *   add inputs=x,f relu
 * Inputs must be defined above the layer that takes them, so that the spec order is an
 * order to compute the layers in (and the parameters are laid out in it, as before); a
 * reference to the layer itself or to one below it is an error (a cycle, when that layer
 * depends on this one), as are unknown names, shapes that do not match and a layer whose
 * output nothing takes (every layer must lead to the last one, the model's only output).
 * Parameters stay one flat vector, assigned layer by layer in spec order.
 *
 * Presets: "mlp" (784-256-128-10 ReLU), "cnn", "cnn2" (see model.c).
 * The canonical text (one normalised layer a line) is what travels to the workers; its
 * 64-bit FNV-1a hash is the model fingerprint. The optimizer line is not part of it: it
 * describes training, not the network, so it changes neither the weights' layout nor the
 * fingerprint. A layer's name= is (after the layer's options), and so is inputs= where the
 * inputs are not just the line above: names are part of the model, as Keras keeps them. */
#ifndef PSTRAIN_MODEL_MODEL_H
#define PSTRAIN_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Room for MobileNetV2-sized graphs (about 150 layers with batch normalisation). */
#define PST_MODEL_MAX_LAYERS 256
/* The canonical text travels in the ps's WELCOME header, whose protobuf is capped at 64 KiB
 * (PST_WIRE_MAX_HEADER, proto/wire.h): half of it leaves ample room for the other fields.
 * 256 layers of 128 characters fit. */
#define PST_MODEL_MAX_TEXT (32 * 1024)
#define PST_MODEL_MAX_NAME 32   /* a layer name's bytes, NUL included */
#define PST_LAYER_MAX_INPUTS 8  /* inputs of one add or concatenate */
#define PST_MODEL_MAX_SETTINGS 7 /* the optimizer's kind and its six numbers */

typedef enum {
  PST_LAYER_INPUT = 0,
  PST_LAYER_DENSE,
  PST_LAYER_CONV2D,
  PST_LAYER_MAXPOOL,
  PST_LAYER_FLATTEN,
  PST_LAYER_AVGPOOL,
  PST_LAYER_GLOBAL_AVGPOOL,  /* stored as an avgpool whose window is the whole input */
  PST_LAYER_DROPOUT,
  PST_LAYER_DEPTHWISE_CONV2D, /* depth multiplier 1: one KHxKW filter per channel */
  PST_LAYER_ADD,             /* element-wise sum of its inputs */
  PST_LAYER_CONCATENATE,     /* its inputs joined along the channels */
  PST_LAYER_ACTIVATION,      /* relu or relu6 alone (act), the shape unchanged */
  PST_LAYER_BATCHNORM,       /* per-channel batch normalisation; its moving statistics are
                                state (s_offset), not trained */
} pst_layer_kind;

/* Keras's BatchNormalization defaults, the batchnorm line's when it names none. */
#define PST_BATCHNORM_MOMENTUM 0.99f
#define PST_BATCHNORM_EPS 1e-3f

typedef enum { PST_ACT_LINEAR = 0, PST_ACT_RELU, PST_ACT_SOFTMAX, PST_ACT_RELU6 } pst_activation;

typedef struct {
  pst_layer_kind kind;
  pst_activation act;
  int units;                 /* dense: output features */
  int filters;               /* conv2d: output channels */
  int k_h, k_w;              /* conv2d kernel / pooling window */
  int stride_h, stride_w;
  int same_padding;          /* conv2d/pooling: 1 = "same", 0 = "valid" */
  float rate;                /* dropout: the fraction of activations zeroed in training */
  int pad_top, pad_left;     /* derived from same_padding */
  /* Per-sample shapes, derived by pst_model_parse: dense/flatten use h = w = 1. */
  int in_h, in_w, in_c;
  int out_h, out_w, out_c;
  /* Parameters inside the flat parameter vector (float offsets); counts are 0 if none. */
  size_t w_offset, w_count;  /* dense [in, out]; conv2d [Cout, KH, KW, Cin];
                                depthwise_conv2d [C, KH, KW] (OHWI with I = 1, the layout
                                cuDNN's grouped convolution reads) */
  size_t b_offset, b_count;  /* [out] / [Cout] / [C]; batchnorm: w is gamma [C], b beta [C] */
  /* The graph. inputs[] are indices of layers above this one whose outputs it takes, in
   * order: one for every kind but add and concatenate (two or more), none for input. in_h,
   * in_w and in_c are inputs[0]'s output shape. */
  int n_inputs;
  int inputs[PST_LAYER_MAX_INPUTS];
  char name[PST_MODEL_MAX_NAME]; /* as given by name=, or "" */
  int flat;                  /* 1: the output is a flat vector [C]; 0: an image [H, W, C] */
  /* batchnorm only: moving_mean [C] then moving_var [C] right after beta, so s_count = 2C;
   * model state, not trainable (pst_model_state_ranges). 0 for every other layer. */
  size_t s_offset, s_count;
  float momentum, eps;       /* batchnorm: moving-average momentum, variance epsilon */
} pst_layer;

/* One training default from the spec's optimizer line, named after the ps option it sets
 * ("optimizer", "lr", "momentum", "beta1", "beta2", "eps", "weight-decay"). Like the compile()
 * settings a saved Keras model carries, these apply only where the configuration leaves
 * the option at its built-in default: a flag, a config file or the environment wins. */
typedef struct {
  char name[16];
  char value[32];            /* as written; numbers are checked to be in range */
} pst_model_setting;

typedef struct {
  int n_layers;              /* layers[0] is the input layer */
  pst_layer layers[PST_MODEL_MAX_LAYERS];
  size_t n_params;           /* total floats in the flat parameter vector */
  int input_size;            /* floats per sample */
  int classes;               /* outputs of the last layer */
  int graph;                 /* 1 when some layer takes other inputs than the line above */
  uint64_t fingerprint;      /* FNV-1a 64 of text */
  char text[PST_MODEL_MAX_TEXT]; /* canonical spec */
  int n_settings;            /* 0 when the spec has no optimizer line */
  int settings_line;         /* the optimizer line's number, for messages */
  pst_model_setting settings[PST_MODEL_MAX_SETTINGS];
} pst_model;

/* Parses spec text. On error returns -EINVAL and writes one line such as
 * "my.spec:3: conv2d needs a kernel like 3x3" into err. `source` names the text in errors. */
int pst_model_parse(const char *text, const char *source, pst_model *m, char *err, size_t errlen);
/* Every preset's name, comma-separated (mobilenetv2 and resnet20 take options after a colon:
 * model/presets.c). */
#define PST_MODEL_PRESETS "mlp,cnn,cnn2,mobilenetv2,resnet20"
/* Loads a preset name (PST_MODEL_PRESETS) or else a spec file path. */
int pst_model_load(const char *name_or_path, pst_model *m, char *err, size_t errlen);
/* The spec's training defaults for a run that uses optimizer `kind` (NULL: the one the spec
 * names), as name/value pairs in names[] and values[] (room for PST_MODEL_MAX_SETTINGS);
 * returns how many. A spec written for another optimizer gives none: its numbers were
 * chosen for that optimizer (an SGD learning rate is no Adam one). */
int pst_model_defaults(const pst_model *m, const char *kind, const char **names,
                       const char **values);
/* The ranges of the flat parameter vector that hold model state (batchnorm's moving
 * statistics) rather than trainable weights, in increasing order: off[i], count[i] for i
 * below the return value (at most PST_MODEL_MAX_LAYERS). For these the workers push, in the
 * gradient's place, the change they want (kernels/net.h), which the ps adds without the
 * optimizer (ps/train/optim.h). 0 for a model without batchnorm. */
int pst_model_state_ranges(const pst_model *m, size_t *off, size_t *count);
/* The chunks a part [lo, lo + n) of the parameter vector travels in on the wire (the ps and
 * every worker compute them alike; issue 26). They follow the layers, so that a worker can
 * send each layer's gradient as its backward pass makes it and run each layer's forward
 * pass once that layer's weights are in, at any chunk size: a layer of at least
 * PST_CHUNK_GROUP_FLOATS (or max_floats, when smaller) is a chunk of its own, cut into
 * pieces of max_floats (the last shorter) when larger than that; smaller layers in a row
 * share a chunk until it holds that many, and never more than max_floats. A layer that the
 * part cuts counts with its floats inside the part. Returns the number of chunks (0 when n
 * or max_floats is 0) and, when starts is not NULL, writes their count + 1 boundaries
 * relative to lo: starts[0] = 0, ascending, starts[count] = n. */
#define PST_CHUNK_GROUP_FLOATS (16u * 1024u)
size_t pst_model_chunks(const pst_model *m, size_t lo, size_t n, size_t max_floats,
                        size_t *starts);
/* The text of a preset, or NULL. */
const char *pst_model_preset(const char *name);
/* Deterministic initialisation from seed: He-uniform for ReLU layers, Glorot-uniform
 * otherwise, zero biases; batchnorm as Keras: gamma 1, beta 0, moving mean 0, moving
 * variance 1. params has n_params floats. */
void pst_model_init_params(const pst_model *m, uint64_t seed, float *params);
/* Keras-style summary table: layer, output shape, parameter count, totals; for a graph
 * also each layer's inputs (Keras's "Connected to"). Layers show their name= or else
 * Keras's automatic name ("conv2d_1"). */
void pst_model_summary(const pst_model *m, FILE *out);
/* Layer l's name, the one source of it for the summary, the partition's log and the
 * checkpoints' tensor names: its name= when it has one and `given` is set, else Keras's
 * automatic name, the kind's Keras name with "_N" for the N-th earlier layer of that kind
 * ("dense", "dense_1", "batch_normalization_2"). */
void pst_model_layer_name(const pst_model *m, int l, int given, char *buf, size_t len);

#endif
