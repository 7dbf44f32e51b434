/* Tensor encodings on the wire (issue 27): what a PUSH or WEIGHTS payload carries in place of
 * raw float32, and the one table of their names that the ps, the worker and the launcher share.
 *
 * The ps decides a job's encodings (--push-compress, --pull-compress) and its WELCOME tells the
 * workers. The ps keeps fp32 master weights and state: a pull in fp16 or bf16 is rounded from
 * them, and a push in either is decoded back to float32 before it is validated and summed like
 * any other, so a sync step's sum is exact for the decoded values and in worker order.
 *
 * Rounding is to nearest, ties to even, as IEEE 754 conversions do. A finite value beyond the
 * encoding's range is clamped to its largest finite value (fp16: 65504), never turned into an
 * infinity: with error feedback the part cut off is sent in later steps. Infinities and NaNs
 * stay what they are, so that the ps rejects such a push as it rejects one in float32.
 *
 * Every routine has a scalar reference and vectorised paths (F16C with AVX2, which the build's
 * -march=x86-64-v3 assumes, and AVX-512 when the CPU has it, chosen at run time); all give the
 * same bits. */
#ifndef PSTRAIN_COMMON_CODEC_H
#define PSTRAIN_COMMON_CODEC_H

#include <stddef.h>
#include <stdint.h>

/* The values are the wire's (Welcome.push_encoding and pull_encoding). TOPK is for pushes
 * only: each chunk sends its k largest values by magnitude as (index, value) pairs, k the
 * job's fraction of the chunk (Welcome.topk_fraction; see pst_topk_k). */
typedef enum {
  PST_ENC_NONE = 0,
  PST_ENC_FP16 = 1,
  PST_ENC_BF16 = 2,
  PST_ENC_TOPK = 3,
  PST_ENC_INT8 = 4, /* pushes only: a float32 scale, then one signed byte per value */
  /* Pulls only: a reply is either float32 (Header.delta false) or, per chunk, an int8 chunk
   * of the change from the weights this worker holds to the ps's (Header.delta true), which
   * the worker adds to them (pst_int8_add). The ps keeps, per worker connection, the weights
   * that worker holds, so what int8 rounds off is sent with the next change, never lost.
   * ps/net/pull.c says when a reply is float32. */
  PST_ENC_DELTA = 5,
  PST_ENC_COUNT
} pst_enc;

/* Every encoding this build knows, as the bits 1 << encoding (Hello.encodings). */
#define PST_ENC_KNOWN ((1u << PST_ENC_COUNT) - 1u)

/* The name of an encoding ("none", "fp16", "bf16"), or "?" for a value out of range. */
const char *pst_enc_name(pst_enc e);
/* Parses a pull encoding's name (none, fp16, bf16, delta). 0, or -EINVAL. */
int pst_enc_parse(const char *s, pst_enc *e);
/* Parses a push encoding: none, fp16, bf16, int8, or topk:FRACTION (0 < FRACTION <= 0.5;
 * *fraction is set for it, 0 otherwise). 0, or -EINVAL. */
int pst_enc_parse_push(const char *s, pst_enc *e, double *fraction);
/* The names joined for messages and help texts: "none|fp16|bf16|delta" for pulls, and
 * "none|fp16|bf16|int8|topk:FRACTION" for pushes. */
const char *pst_enc_choices(void);
const char *pst_enc_push_choices(void);
/* Bytes per value on the wire: 4, 2, 2; 8 per pair for TOPK (a u32 index and a float32); 1
 * for INT8 and DELTA (and 4 for the chunk's scale; a DELTA reply may also be float32). 0 for
 * a value out of range. */
unsigned pst_enc_bytes(pst_enc e);

/* ---- int8 (pushes) ---- */

/* Encodes x[n] (+ resid[n], error feedback) as a little-endian float32 scale s = max|v| / 127
 * and n signed bytes q = round(v / s) (to nearest even, within -127..127), into out[4 + n]; v
 * is decoded as q x s, and resid keeps v - q x s. A non-finite value makes the scale a NaN (the
 * ps rejects the chunk, as a float32 one with it), its residual 0 and the others' their values
 * (nothing of them was sent). Returns 4 + n. */
size_t pst_int8_encode(const float *x, float *resid, size_t n, uint8_t *out);
/* Decodes bytes (which must be 4 + n, n >= 1) into out[n]; -EINVAL otherwise. in and out must
 * not overlap. */
int pst_int8_decode(const uint8_t *in, size_t bytes, float *out, size_t n);

/* Adds the values of an int8 chunk (bytes = 4 + n, n >= 1) to acc[n]: acc[i] += q[i] x
 * scale, each a float32 multiply and add. The ps and the worker both take a delta pull's
 * chunk with this one routine, so that the ps's copy of what the worker holds and the
 * worker's weights stay equal bit for bit. -EINVAL, acc untouched, for a wrong length or a
 * scale that is not finite (what a lying ps could send). */
int pst_int8_add(const uint8_t *in, size_t bytes, float *acc, size_t n);
/* A delta pull's chunk, as the ps makes it: the change target[n] - held[n] as an int8 chunk
 * into out[4 + n], added to held (held += decoded change), in two passes over the values.
 * The same bytes and the same held as pst_int8_encode of the change followed by
 * pst_int8_add. -EINVAL, nothing written, when n is 0 or the change is not finite (send
 * float32 then). */
int pst_int8_delta(const float *target, float *held, size_t n, uint8_t *out);

/* A delta pull's chunk as the values that changed (Header.sparse): (u32 little-endian index,
 * ascending; float32 new value) pairs, where no more than n / PST_SPARSE_SHARE of n values
 * changed (8-byte pairs then take no more than int8's n + 4 bytes). Where the ps's optimizer
 * changes few weights a step (top-k pushes with momentum correction, plain SGD and no
 * weight decay: only what some worker pushed), this is smaller than int8 and exact.
 * pst_sparse_delta writes the pairs of target[n] against held[n] (values whose bits differ)
 * into out[8 x pairs] and makes held equal to target there; it returns the pairs (0 when
 * nothing changed), or -E2BIG, held untouched (out may hold some pairs), when
 * n < PST_SPARSE_SHARE or more changed. */
#define PST_SPARSE_SHARE 8
int pst_sparse_delta(const float *target, float *held, size_t n, uint8_t *out);
/* Sets w[n] at the pairs of in[bytes] (the worker's side, and what the ps's copy got). 0, or
 * -EINVAL, w untouched, for a length that is no number of pairs or more than
 * n / PST_SPARSE_SHARE of them, indices not strictly ascending within n, or a value that is
 * not finite (what a lying ps could send). */
int pst_sparse_apply(const uint8_t *in, size_t bytes, float *w, size_t n);

/* ---- top-k (pushes) ---- */

#define PST_TOPK_MAX_FRACTION 0.5
/* The pairs a chunk of n values sends at `fraction`: round(fraction x n), at least 1 and at
 * most max(1, n / 2), so that the pairs (8 bytes each) fit in the chunk's own n floats. */
size_t pst_topk_k(double fraction, size_t n);
/* Warm-up of the sparsity (Deep Gradient Compression's): the fraction a push of weights
 * `version` sends when the job's fraction is `fraction` and its warm-up lasts `warmup`
 * versions. It starts at PST_TOPK_WARMUP_START and falls exponentially to `fraction` at
 * version `warmup` (DGC: 25%, 6.25%, 1.6%, ... a quarter each epoch); `fraction` itself
 * after that, with no warm-up, or when `fraction` is already as large. A function of the
 * version alone, so that every worker of a step sends alike and a sync run stays
 * bit-identical from run to run and across a resume. */
#define PST_TOPK_WARMUP_START 0.25
double pst_topk_fraction_at(double fraction, uint64_t warmup, uint64_t version);
/* Encodes the k values of x[n] (+ resid[n], error feedback) of largest magnitude as k pairs
 * (u32 little-endian index, ascending; float32 value) into out[8k]; resid then holds what
 * was not sent (0 where a value was sent, or was not finite). Ties at the k-th magnitude go
 * to the lower indices; non-finite values are taken first, so that the ps rejects them.
 * scratch: n u32s. Returns the bytes written (8k). */
size_t pst_topk_encode(const float *x, float *resid, size_t n, size_t k, uint32_t *scratch,
                       uint8_t *out);
/* Deep Gradient Compression's momentum correction, for a job whose optimizer is momentum m:
 * the worker keeps the momentum instead of the ps. u[n] (its velocity) becomes m x u + x,
 * the pairs are those of pst_topk_encode of u (+ resid), and u is zeroed where a value was
 * sent (DGC's momentum factor masking), so that a sent value's momentum is not applied again
 * by later steps. The ps then steps with momentum 0 (ps/main.c). Returns the bytes written. */
size_t pst_topk_encode_momentum(const float *x, float *u, float *resid, size_t n, size_t k,
                                float m, uint32_t *scratch, uint8_t *out);
/* Top-k by tensor, as Deep Gradient Compression selects: kind[n] says what each value of
 * the chunk is. Each run of PST_TOPK_SPARSE values (a weight matrix or filter bank, or the
 * part of one in this chunk) sends its own pst_topk_k(fraction, run) largest; every
 * PST_TOPK_DENSE value (biases, batch norm's gamma and beta: vectors, a few values a layer,
 * which a chunk-wide top-k starves) and every PST_TOPK_STATE value (batch norm's moving
 * statistics, no gradient) is sent, each step, with its residual. With u (momentum
 * correction at m; NULL: none) the sparse runs are pst_topk_encode_momentum's, the dense
 * values send m x u + x and keep that velocity (sent whole every step, the workers'
 * velocities sum to the momentum of the summed gradient, as on the ps without correction),
 * and the state values never pass through u. Where the pairs would not fit the chunk's
 * max(1, n / 2), the chunk is one run (pst_topk_encode, or _momentum, of k =
 * pst_topk_k(fraction, n)). Pairs ascend; returns the bytes written. */
enum { PST_TOPK_SPARSE = 0, PST_TOPK_DENSE = 1, PST_TOPK_STATE = 2 };
size_t pst_topk_encode_tensors(const float *x, float *u, float *resid, const uint8_t *kind,
                               size_t n, double fraction, float m, uint32_t *scratch,
                               uint8_t *out);
/* Decodes `bytes` bytes of pairs into out[n] (the rest zero). -EINVAL when bytes is not a
 * positive multiple of 8 within max(1, n / 2) pairs, or the indices do not ascend strictly
 * within n; out may then hold anything. in and out must not overlap. */
int pst_topk_decode(const uint8_t *in, size_t bytes, float *out, size_t n);

/* The largest finite value of each 16-bit format, what finite values beyond it clamp to. */
#define PST_FP16_MAX 65504.0f

/* Encodes x[n] into out (n values of pst_enc_bytes(e) bytes each; e must not be NONE). With
 * resid (error feedback), what is encoded is x[i] + resid[i], and resid[i] becomes what
 * that lost to rounding and clamping (0 when the value was not finite), to be added to the
 * next step's gradient. out must not overlap x or resid. */
void pst_enc_encode(pst_enc e, const float *x, float *resid, void *out, size_t n);
/* Decodes n values whose encoded bytes sit at the start of buf into buf's n floats, in place
 * (from the last value back, so that no encoded byte is overwritten before it is read). */
void pst_enc_decode_inplace(pst_enc e, float *buf, size_t n);

/* The scalar conversions, the reference the vector paths are checked against. */
uint16_t pst_fp16_from_float(float f);
float pst_fp16_to_float(uint16_t h);
uint16_t pst_bf16_from_float(float f);
float pst_bf16_to_float(uint16_t h);

/* Which instructions the routines use: the best this CPU has (the default), or, for tests,
 * a lower one. 0, or -ENOTSUP when the CPU lacks it. */
typedef enum { PST_ISA_SCALAR = 0, PST_ISA_AVX2 = 1, PST_ISA_AVX512 = 2, PST_ISA_BEST = 3 } pst_isa;
int pst_codec_use(pst_isa isa);
/* The one in use now. */
pst_isa pst_codec_isa(void);

#endif
