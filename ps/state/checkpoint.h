/* Checkpoints: one safetensors file per saved version, readable by Python's `safetensors`
 * and by PyTorch (safetensors.torch.load_file).
 *
 * The file: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON padded with trailing
 * spaces to a multiple of 8, then the data section. The JSON maps each tensor name to
 * {"dtype":"F32","shape":[...],"data_offsets":[begin,end]} (offsets relative to the data
 * section, tensors back-to-back in the order written) and "__metadata__" to an object of
 * string values. The module adds four metadata keys of its own, which callers may not set:
 *   format          "pstrain-checkpoint"
 *   format_version  "1"
 *   data_fnv1a64    16 hex digits: FNV-1a 64 over the whole data section
 *   header_fnv1a64  16 hex digits: FNV-1a 64 over the header's content (below), so that a
 *                   corrupt tensor name, shape or metadata value is caught as surely as a
 *                   corrupt weight
 * The header hash covers, in the JSON's order: each metadata key and value except
 * header_fnv1a64 (key bytes, 0x00, value bytes, 0x00), then one 0x01 byte, then each tensor:
 * name bytes, 0x00, dtype bytes, 0x00, ndim as one byte, each dimension, begin and end as
 * u64 little-endian. It is computed from the parsed values, not from the JSON text, so any
 * JSON writer that keeps the order produces the same hash.
 *
 * Checkpoints of one run live in one directory as ckpt-<version as %012 digits>.safetensors,
 * written by one process at a time (pst_ckpt_write removes other writers' temporary files).
 * Tensor data is float32 in host order; pstrain builds for little-endian hosts only. */
#ifndef PSTRAIN_PS_CHECKPOINT_H
#define PSTRAIN_PS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

#define PST_CKPT_NAME_MAX 96
#define PST_CKPT_MAX_DIMS 4
/* Tensors pst_ckpt_model_tensors gives at most for one prefix (a kernel and a bias per layer,
 * four for batchnorm). */
#define PST_CKPT_MAX_MODEL_TENSORS (4 * PST_MODEL_MAX_LAYERS)
/* pst_ckpt_load refuses larger headers before allocating anything. */
#define PST_CKPT_MAX_HEADER ((uint64_t)16 << 20)

typedef struct {
  char name[PST_CKPT_NAME_MAX]; /* e.g. "dense/kernel", "optimizer/m/dense/kernel" */
  const float *data;            /* count floats, little-endian float32 */
  size_t count;
  int ndim;                     /* 0 (a scalar, count 1) to PST_CKPT_MAX_DIMS */
  int64_t shape[PST_CKPT_MAX_DIMS];
} pst_ckpt_tensor;

typedef struct {
  const char *key;
  const char *value;
} pst_ckpt_kv;

/* A loaded checkpoint; owns its memory (pst_ckpt_free). */
typedef struct {
  char file[256];               /* the file's base name, for messages */
  int n_tensors;
  pst_ckpt_tensor *tensors;     /* in data order (increasing offsets); data points inside */
  int n_meta;
  pst_ckpt_kv *meta;            /* every __metadata__ entry, in the file's order */
  size_t data_bytes;            /* size of the data section */
  void *data_;                  /* private: the data section */
  void *json_;                  /* private: the parsed header (meta points into it) */
} pst_ckpt;

/* Tensors for one flat parameter vector `vec` laid out like `m` (each layer's
 * w_offset/w_count, b_offset/b_count), named Keras-style: the first dense layer's
 * "dense/kernel" and "dense/bias", the second's "dense_1/...", conv layers "conv2d/...",
 * "conv2d_1/...", batchnorm layers "batch_normalization/{gamma,beta,moving_mean,
 * moving_variance}" (the last two model state, not trained); each name prefixed with `prefix` ("" for weights, "optimizer/m/" for an
 * optimizer slot). Shapes are pstrain's own layouts: dense kernel [in, out], conv2d kernel
 * [Cout, KH, KW, Cin] (neither Keras's [KH, KW, Cin, Cout] nor PyTorch's [Cout, Cin, KH, KW]:
 * whoever loads the file elsewhere transposes), bias [out]. The tensors come in increasing
 * offset order and tile [0, n_params), so their concatenation is the vector itself. `vec`
 * may be NULL (names and shapes only; data NULL). Returns how many were written to out, or
 * -ENOSPC when more than max, -ENAMETOOLONG when a prefixed name does not fit, -EINVAL when
 * the layers do not tile the vector in order (never for a model from model/model.c). */
int pst_ckpt_model_tensors(const pst_model *m, const float *vec, const char *prefix,
                           pst_ckpt_tensor *out, int max);

/* Writes a checkpoint-format file at exactly `path`, atomically (atomic_file.h): the nt
 * tensors in the order given, the caller's metadata followed by the module's four keys. */
int pst_ckpt_write_file(const char *path, const pst_ckpt_tensor *t, int nt,
                        const pst_ckpt_kv *meta, int nmeta, char *err, size_t errlen);

/* Writes DIR/ckpt-<version as %012 digits>.safetensors atomically (a temporary file in DIR,
 * written fully, fsync'd, renamed over the final name, then DIR fsync'd), creating DIR
 * (mode 0750) if needed. First removes stale temporary files of earlier crashed writes
 * (".ckpt-*.safetensors.tmp.PID"); afterwards removes all but the newest `keep` checkpoints
 * by version (keep <= 0: none are removed), never the one just written. Failing to remove an
 * old file is not an error (the next write tries again). path_out (may be NULL) receives the
 * final path.
 *
 * Test-only fault hook: when the environment variable PSTRAIN_CKPT_FAULT_AT is set, this
 * function calls abort() at a chosen point of the write (S = the size of the complete file):
 *   "B", 0 <= B <= S  the moment exactly B bytes of the temporary file are written (B = 0: it
 *                     exists and is empty; B = S: complete but neither fsync'd nor renamed)
 *   "B", B > S        after the temporary file is fsync'd and closed, just before the rename
 *   "renamed"         just after the rename, before the directory fsync and the clean-up
 * Any other value is refused (-EINVAL). pst_ckpt_write_file has no such hook. */
int pst_ckpt_write(const char *dir, uint64_t version, const pst_ckpt_tensor *t, int nt,
                   const pst_ckpt_kv *meta, int nmeta, int keep, char *path_out, size_t pathlen,
                   char *err, size_t errlen);

/* Loads and checks a checkpoint: header length sane (at most PST_CKPT_MAX_HEADER, inside the
 * file), JSON parses, every tensor F32 with offsets inside the data section, contiguous from
 * 0 to its end, non-overlapping, shape product matching the byte count, the format keys
 * present, both checksums matching. Any failure: a negative code (-ENOENT, -EIO, -EINVAL,
 * -ENOMEM, ...) and a one-line reason such as "ckpt-000000000120.safetensors: data checksum
 * mismatch (file truncated or corrupt?)". ck needs no initialisation; on failure it holds
 * nothing to free (pst_ckpt_free is still harmless). */
int pst_ckpt_load(const char *path, pst_ckpt *ck, char *err, size_t errlen);
/* A metadata value, or NULL if absent. */
const char *pst_ckpt_meta(const pst_ckpt *ck, const char *key);
/* A tensor's data and element count, or NULL if absent. */
const float *pst_ckpt_find(const pst_ckpt *ck, const char *name, size_t *count);
/* Copies the tensors of a model-shaped vector (the names pst_ckpt_model_tensors gives for
 * `prefix`) into vec[m->n_params]: -ENOENT if one is missing, -EINVAL if one's shape
 * differs, each with a reason. vec is partly written on failure. */
int pst_ckpt_read_model(const pst_ckpt *ck, const pst_model *m, const char *prefix, float *vec,
                        char *err, size_t errlen);
void pst_ckpt_free(pst_ckpt *ck);

/* The path of version's checkpoint in dir (DIR/ckpt-<version as %012 digits>.safetensors):
 * 0, or -ENAMETOOLONG when it does not fit in out. */
int pst_ckpt_path(const char *dir, uint64_t version, char *out, size_t outlen);
/* Parses a checkpoint file name "ckpt-<digits>.safetensors" (a base name): 0 and *version,
 * or -EINVAL. */
int pst_ckpt_parse_name(const char *name, uint64_t *version);
/* The directory of ps shard `index` of `count` inside a job's checkpoint directory
 * (DIR/shard-I-of-K): each shard keeps its own part there, and must never resume from
 * another's. 0, or -ENAMETOOLONG when it does not fit in out. */
int pst_ckpt_shard_dir(const char *dir, int index, int count, char *out, size_t outlen);

/* Renames every checkpoint in dir newer than `version` to NAME.abandoned, so that a run
 * going back to `version` never resumes from the timeline it left (the files are kept).
 * Returns how many were renamed, or a negative errno. */
int pst_ckpt_abandon_after(const char *dir, uint64_t version);

/* The newest checkpoint in dir that loads and that `accept` (may be NULL; returns 0 to
 * accept, else non-zero with a reason in why) accepts: tries them newest first; each one
 * skipped is reported through `skipped(path, reason, arg)` (may be NULL) and the next older
 * one is tried. Returns 0 and fills ck and path_out (may be NULL), -ENOENT when there is
 * none (no directory, or no valid checkpoint in it; err says which), or another negative
 * code (the directory cannot be read). */
int pst_ckpt_load_latest(const char *dir,
                         int (*accept)(const pst_ckpt *ck, void *arg, char *why, size_t whylen),
                         void (*skipped)(const char *path, const char *reason, void *arg),
                         void *arg, pst_ckpt *ck, char *path_out, size_t pathlen,
                         char *err, size_t errlen);

#endif
