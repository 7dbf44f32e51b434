/* Tensor encodings (common/codec.h): the scalar reference and its vectorised twins. */
#include "common/codec.h"

#include <cpuid.h>
#include <errno.h>
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- names: the one table ---- */

static const char *const enc_names[PST_ENC_COUNT] = {"none", "fp16", "bf16", "topk", "int8",
                                                     "delta"};
static const unsigned enc_bytes[PST_ENC_COUNT] = {4, 2, 2, 8, 1, 1};

const char *pst_enc_name(pst_enc e) {
  return (unsigned)e < PST_ENC_COUNT ? enc_names[e] : "?";
}

/* The names both directions take: none, fp16, bf16. */
static int parse_dense(const char *s, pst_enc *e) {
  for (unsigned i = 0; i < PST_ENC_TOPK; i++)
    if (s && strcmp(s, enc_names[i]) == 0) {
      *e = (pst_enc)i;
      return 0;
    }
  return -EINVAL;
}

int pst_enc_parse(const char *s, pst_enc *e) {
  if (s && strcmp(s, enc_names[PST_ENC_DELTA]) == 0) {
    *e = PST_ENC_DELTA;
    return 0;
  }
  return parse_dense(s, e);
}

const char *pst_enc_choices(void) { return "none|fp16|bf16|delta"; }
const char *pst_enc_push_choices(void) {
  return "none|fp16|bf16|int8|topk:FRACTION (0 < FRACTION <= 0.5)";
}

int pst_enc_parse_push(const char *s, pst_enc *e, double *fraction) {
  *fraction = 0;
  size_t len = strlen(enc_names[PST_ENC_TOPK]);
  if (s && strncmp(s, enc_names[PST_ENC_TOPK], len) == 0 && s[len] == ':') {
    char *end;
    double f = strtod(s + len + 1, &end);
    if (end == s + len + 1 || *end || !(f > 0 && f <= PST_TOPK_MAX_FRACTION)) return -EINVAL;
    *e = PST_ENC_TOPK;
    *fraction = f;
    return 0;
  }
  if (s && strcmp(s, enc_names[PST_ENC_INT8]) == 0) {
    *e = PST_ENC_INT8;
    return 0;
  }
  return parse_dense(s, e);
}

/* ---- int8 ----
 * A scalar reference, and AVX2 paths that apply the same operations in the same order to
 * each value, each rounded on its own (no FMA), so they give the same bits (codec_test
 * checks them against each other). GCC 12 vectorises none of these loops by itself. */

/* The int8 grid of a chunk whose largest magnitude is m: a value v is sent as
 * round(v x inv). 127 / m overflows for m under about 3.7e-37 (subnormal changes); inv is
 * then capped at FLT_MAX, so that a 0 still rounds to 0 (0 x infinity would be a NaN). */
static float int8_inv(float m) {
  float inv = m > 0 ? 127.0f / m : 0.0f;
  return inv <= FLT_MAX ? inv : FLT_MAX;
}

/* v[i] = a[i] + b[i] (sub 0; b may be NULL: a[i]) or a[i] - b[i] (sub 1), eight at a time. */
__attribute__((target("avx2"))) static inline __m256 v8(const float *a, const float *b, int sub,
                                                        size_t i) {
  __m256 va = _mm256_loadu_ps(a + i);
  if (!b) return va;
  __m256 vb = _mm256_loadu_ps(b + i);
  return sub ? _mm256_sub_ps(va, vb) : _mm256_add_ps(va, vb);
}

/* The largest |v| of the first n / 8 x 8 values, into *m, and whether one is not finite
 * (the largest is then not used). Exact in any order: a maximum rounds nothing. */
__attribute__((target("avx2"))) static size_t absmax_avx2(const float *a, const float *b, int sub,
                                                          size_t n, float *m, int *bad) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 big = _mm256_set1_ps(FLT_MAX);
  __m256 vmax = _mm256_setzero_ps(), ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_and_ps(v8(a, b, sub, i), absmask);
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(x, big, _CMP_LE_OQ));
    vmax = _mm256_max_ps(x, vmax);
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, vmax);
  for (int k = 0; k < 8; k++) *m = lanes[k] > *m ? lanes[k] : *m;
  *bad |= _mm256_movemask_ps(ok) != 0xff;
  return i;
}

/* 4 x 8 int32 -> 32 int8 in order (the packs work within 128-bit lanes). */
__attribute__((target("avx2"))) static inline void store_q32(int8_t *q, const __m256i qi[4]) {
  __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]),
                                 _mm256_packs_epi32(qi[2], qi[3]));
  _mm256_storeu_si256((__m256i *)(void *)q,
                      _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* round(v x inv) to nearest even, clamped to -127..127. */
__attribute__((target("avx2"))) static inline __m256 grid8(__m256 v, __m256 inv) {
  __m256 r = _mm256_round_ps(_mm256_mul_ps(v, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
}

/* pst_int8_encode's second pass over its first n / 32 x 32 values, every value finite. */
__attribute__((target("avx2"))) static size_t encode_int8_avx2(const float *x, float *resid,
                                                               size_t n, float scale, float inv,
                                                               int8_t *q) {
  const __m256 vinv = _mm256_set1_ps(inv), vscale = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i qi[4];
    for (int k = 0; k < 4; k++) {
      __m256 v = v8(x, resid, 0, i + 8 * k);
      __m256 r = grid8(v, vinv);
      qi[k] = _mm256_cvtps_epi32(r);
      if (resid) _mm256_storeu_ps(resid + i + 8 * k, _mm256_sub_ps(v, _mm256_mul_ps(r, vscale)));
    }
    store_q32(q + i, qi);
  }
  return i;
}

size_t pst_int8_encode(const float *x, float *resid, size_t n, uint8_t *out) {
  float m = 0;
  int bad = 0, avx2 = pst_codec_isa() >= PST_ISA_AVX2;
  for (size_t i = avx2 ? absmax_avx2(x, resid, 0, n, &m, &bad) : 0; i < n; i++) {
    float v = resid ? x[i] + resid[i] : x[i];
    float a = fabsf(v);
    bad |= !(a <= FLT_MAX);
    m = a > m ? a : m;
  }
  float scale = bad ? NAN : m / 127.0f;
  float inv = bad ? 0.0f : int8_inv(m);
  memcpy(out, &scale, 4);
  int8_t *q = (int8_t *)(out + 4);
  /* A chunk with a value that is not finite goes the scalar way (its NaN scale is refused). */
  for (size_t i = avx2 && !bad ? encode_int8_avx2(x, resid, n, scale, inv, q) : 0; i < n; i++) {
    float v = resid ? x[i] + resid[i] : x[i];
    float r = nearbyintf(v * inv); /* the default rounding: to nearest, ties to even */
    r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
    if (!(fabsf(v) <= FLT_MAX)) r = 0;
    q[i] = (int8_t)r;
    float back = r * scale; /* its own statement: never fused with the subtraction */
    if (resid) resid[i] = !(fabsf(v) <= FLT_MAX) ? 0.0f : bad ? v : v - back;
  }
  return 4 + n;
}

int pst_int8_decode(const uint8_t *in, size_t bytes, float *out, size_t n) {
  if (n == 0 || bytes != n + 4) return -EINVAL;
  float scale;
  memcpy(&scale, in, 4);
  const int8_t *q = (const int8_t *)(in + 4);
  for (size_t i = 0; i < n; i++) out[i] = (float)q[i] * scale;
  return 0;
}

/* pst_int8_add's first n / 32 x 32 values with AVX2: the same multiply and add per value. */
__attribute__((target("avx2"))) static size_t add_avx2(const int8_t *q, float scale, float *acc,
                                                       size_t n) {
  const __m256 vscale = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(q + i));
    __m128i half[2] = {_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)};
    for (int k = 0; k < 4; k++) {
      __m128i part = k % 2 ? _mm_srli_si128(half[k / 2], 8) : half[k / 2];
      __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part)), vscale);
      _mm256_storeu_ps(acc + i + 8 * k, _mm256_add_ps(_mm256_loadu_ps(acc + i + 8 * k), v));
    }
  }
  return i;
}

int pst_int8_add(const uint8_t *in, size_t bytes, float *acc, size_t n) {
  if (n == 0 || bytes != n + 4) return -EINVAL;
  float scale;
  memcpy(&scale, in, 4);
  if (!isfinite(scale)) return -EINVAL;
  const int8_t *q = (const int8_t *)(in + 4);
  /* A multiply and an add, each rounded, never fused into one (an FMA would round once),
   * whatever the compiler's contraction default. */
  for (size_t i = pst_codec_isa() >= PST_ISA_AVX2 ? add_avx2(q, scale, acc, n) : 0; i < n; i++) {
    float v = (float)q[i] * scale;
    acc[i] += v;
  }
  return 0;
}

/* pst_int8_delta's values [from, n), scalar: the reference, and the vector path's tail. */
static void delta_scalar(const float *target, float *held, size_t from, size_t n, float scale,
                         float inv, int8_t *q) {
  for (size_t i = from; i < n; i++) {
    float r = nearbyintf((target[i] - held[i]) * inv);
    r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
    q[i] = (int8_t)r;
    float v = (float)q[i] * scale;
    held[i] += v;
  }
}

/* The same with AVX2 over the first n / 32 x 32 values. */
__attribute__((target("avx2"))) static size_t delta_avx2(const float *target, float *held,
                                                         size_t n, float scale, float inv,
                                                         int8_t *q) {
  const __m256 vinv = _mm256_set1_ps(inv), vscale = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i qi[4];
    for (int k = 0; k < 4; k++) {
      __m256 h = _mm256_loadu_ps(held + i + 8 * k);
      __m256 r = grid8(_mm256_sub_ps(_mm256_loadu_ps(target + i + 8 * k), h), vinv);
      qi[k] = _mm256_cvtps_epi32(r);
      _mm256_storeu_ps(held + i + 8 * k, _mm256_add_ps(h, _mm256_mul_ps(r, vscale)));
    }
    store_q32(q + i, qi);
  }
  return i;
}

int pst_int8_delta(const float *target, float *held, size_t n, uint8_t *out) {
  float m = 0;
  int bad = 0, avx2 = pst_codec_isa() >= PST_ISA_AVX2;
  for (size_t i = avx2 ? absmax_avx2(target, held, 1, n, &m, &bad) : 0; i < n; i++) {
    float a = fabsf(target[i] - held[i]);
    bad |= !(a <= FLT_MAX);
    m = a > m ? a : m;
  }
  if (n == 0 || bad) return -EINVAL;
  /* As pst_int8_encode and pst_int8_add do it, step for step, so the bits are theirs. */
  float scale = m / 127.0f, inv = int8_inv(m);
  memcpy(out, &scale, 4);
  int8_t *q = (int8_t *)(out + 4);
  size_t done = avx2 ? delta_avx2(target, held, n, scale, inv, q) : 0;
  delta_scalar(target, held, done, n, scale, inv, q);
  return 0;
}

/* ---- sparse pairs (delta pulls and top-k pushes): u32 index, float32 value ---- */

static void put_pair(uint8_t *out, uint32_t idx, float v) {
  memcpy(out, &idx, 4);
  memcpy(out + 4, &v, 4);
}

/* ---- sparse deltas ---- */

int pst_sparse_delta(const float *target, float *held, size_t n, uint8_t *out) {
  if (n < PST_SPARSE_SHARE) return -E2BIG;
  size_t max = n / PST_SPARSE_SHARE, p = 0;
  /* One pass writing the pairs, given up as soon as there are too many (where every value
   * changes, with Adam, after about an eighth of the chunk); held is set from the pairs once
   * they are all there. Bits, not values: -0 against 0 is a change to send. */
  for (size_t i = 0; i < n; i++) {
    if (memcmp(&target[i], &held[i], sizeof *held) == 0) continue;
    if (p == max) return -E2BIG;
    put_pair(out + 8 * p, (uint32_t)i, target[i]);
    p++;
  }
  for (size_t q = 0; q < p; q++) {
    uint32_t idx;
    memcpy(&idx, out + 8 * q, 4);
    memcpy(&held[idx], &target[idx], sizeof *held);
  }
  return (int)p;
}

int pst_sparse_apply(const uint8_t *in, size_t bytes, float *w, size_t n) {
  if (bytes % 8 || (bytes > 0 && (n < PST_SPARSE_SHARE || bytes / 8 > n / PST_SPARSE_SHARE)))
    return -EINVAL;
  size_t pairs = bytes / 8;
  uint32_t prev = 0;
  for (size_t p = 0; p < pairs; p++) {
    uint32_t idx;
    float v;
    memcpy(&idx, in + 8 * p, 4);
    memcpy(&v, in + 8 * p + 4, 4);
    if (idx >= n || (p > 0 && idx <= prev) || !isfinite(v)) return -EINVAL;
    prev = idx;
  }
  for (size_t p = 0; p < pairs; p++) {
    uint32_t idx;
    memcpy(&idx, in + 8 * p, 4);
    memcpy(&w[idx], in + 8 * p + 4, 4);
  }
  return 0;
}

/* ---- top-k ---- */

size_t pst_topk_k(double fraction, size_t n) {
  size_t max = n / 2 > 1 ? n / 2 : 1;
  double k = fraction * (double)n + 0.5;
  size_t kk = k >= (double)max ? max : (size_t)k;
  return kk < 1 ? 1 : kk;
}

double pst_topk_fraction_at(double fraction, uint64_t warmup, uint64_t version) {
  if (version >= warmup || fraction >= PST_TOPK_WARMUP_START) return fraction;
  double done = (double)version / (double)warmup;
  return PST_TOPK_WARMUP_START * pow(fraction / PST_TOPK_WARMUP_START, done);
}

/* A magnitude's sort key: |x|'s bits, which order finite magnitudes as the values do, put
 * infinities above them and NaNs above everything. */
static uint32_t mag_key(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return b & 0x7fffffffu;
}

/* The k-th largest of a[n] (1 <= k <= n), by quickselect with a three-way partition; a is
 * reordered. */
static uint32_t kth_largest(uint32_t *a, size_t n, size_t k) {
  size_t lo = 0, hi = n, want = k - 1;
  for (;;) {
    if (hi - lo == 1) return a[lo];
    uint32_t pivot = a[lo + (hi - lo) / 2], t;
    /* [lo, lt): above the pivot; [lt, i): equal; [gt, hi): below. */
    size_t lt = lo, i = lo, gt = hi;
    while (i < gt) {
      if (a[i] > pivot) {
        t = a[lt], a[lt++] = a[i], a[i++] = t;
      } else if (a[i] < pivot) {
        t = a[--gt], a[gt] = a[i], a[i] = t;
      } else {
        i++;
      }
    }
    if (want < lt) hi = lt;
    else if (want < gt) return pivot;
    else lo = gt;
  }
}

/* Writes the pairs of x[n] (+ resid) whose key is above t, and the first `k - above` whose
 * key equals t, from index `from` on (sent pairs so far: *sent, ties still to send: *ties),
 * and sets resid[i] for each value passed: what the scalar reference and the vector path's
 * blocks that hold a candidate both do. */
static void topk_emit(const float *x, float *resid, size_t from, size_t to, uint32_t t,
                      size_t *ties, size_t *sent, uint8_t *out) {
  for (size_t i = from; i < to; i++) {
    float v = resid ? x[i] + resid[i] : x[i];
    uint32_t m = mag_key(v);
    int take = m > t || (m == t && *ties > 0);
    if (m == t && take) (*ties)--;
    if (take) put_pair(out + 8 * (*sent)++, (uint32_t)i, v);
    if (resid) resid[i] = take || !isfinite(v) ? 0.0f : v;
  }
}

/* The scalar reference: the keys, their k-th largest by quickselect, a count of those above
 * it, then the pairs. */
static size_t topk_scalar(const float *x, float *resid, size_t n, size_t k, uint32_t *scratch,
                          uint8_t *out) {
  for (size_t i = 0; i < n; i++) {
    float v = resid ? x[i] + resid[i] : x[i];
    scratch[i] = mag_key(v);
  }
  uint32_t t = kth_largest(scratch, n, k);
  /* How many above the threshold; the rest of the k are ties at it, lowest indices first. */
  size_t above = 0;
  for (size_t i = 0; i < n; i++) {
    float v = resid ? x[i] + resid[i] : x[i];
    above += mag_key(v) > t;
  }
  size_t ties = k - above, sent = 0;
  topk_emit(x, resid, 0, n, t, &ties, &sent, out);
  return 8 * sent;
}

/* The k-th largest of keys[n] (1 <= k <= n, every key below 2^31) by radix selection, most
 * significant digit first: 11 bits, then 10, then 10. Each digit's histogram says which bin
 * holds the k-th key; only that bin's keys (compacted to the front of keys) are looked at for
 * the next digit. *above gets how many keys are larger than the one returned. Three passes at
 * most, the first over all n keys and the others over the candidates left, where quickselect
 * makes about 2n data-dependent swaps. */
static uint32_t kth_largest_radix(uint32_t *keys, size_t n, size_t k, size_t *above) {
  static const unsigned shift[3] = {20, 10, 0};
  uint32_t hist[2048];
  uint32_t prefix = 0;
  size_t m = n, want = k, over = 0;
  for (int d = 0; d < 3; d++) {
    uint32_t bins = d == 0 ? 2048 : 1024, mask = bins - 1;
    memset(hist, 0, bins * sizeof *hist);
    for (size_t i = 0; i < m; i++) hist[(keys[i] >> shift[d]) & mask]++;
    /* The bin, from the top, in which the count of keys reaches want. */
    size_t cum = 0;
    uint32_t b = bins - 1;
    while (cum + hist[b] < want) cum += hist[b--];
    over += cum;
    want -= cum;
    prefix |= b << shift[d];
    if (d == 2) break;
    size_t j = 0;
    for (size_t i = 0; i < m; i++)
      if (((keys[i] >> shift[d]) & mask) == b) keys[j++] = keys[i];
    m = j;
  }
  *above = over;
  return prefix;
}

/* The keys of x[n] (+ resid) into keys, eight at a time. */
__attribute__((target("avx2"))) static void topk_keys_avx2(const float *x, const float *resid,
                                                             size_t n, uint32_t *keys) {
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    if (resid) v = _mm256_add_ps(v, _mm256_loadu_ps(resid + i));
    _mm256_storeu_si256((__m256i *)(void *)(keys + i),
                        _mm256_and_si256(_mm256_castps_si256(v), absmask));
  }
  for (; i < n; i++) keys[i] = mag_key(resid ? x[i] + resid[i] : x[i]);
}

/* The pairs, eight values at a time: a block with no key at or above t only keeps its
 * residuals (its finite values; 0 for the others), which is all but about k / 8 blocks; a
 * block with one goes through topk_emit, so that ties are taken in index order. */
__attribute__((target("avx2"))) static size_t topk_emit_avx2(const float *x, float *resid,
                                                             size_t n, uint32_t t, size_t ties,
                                                             uint8_t *out) {
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  /* Keys are below 2^31, so a signed compare orders them; t - 1 is -1 for t = 0. */
  const __m256i below = _mm256_set1_epi32((int32_t)t - 1);
  size_t sent = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    if (resid) v = _mm256_add_ps(v, _mm256_loadu_ps(resid + i));
    __m256i key = _mm256_and_si256(_mm256_castps_si256(v), absmask);
    __m256i hit = _mm256_cmpgt_epi32(key, below);
    if (!_mm256_testz_si256(hit, hit)) {
      topk_emit(x, resid, i, i + 8, t, &ties, &sent, out);
      continue;
    }
    if (resid) {
      __m256i finite = _mm256_cmpgt_epi32(inf, key);
      _mm256_storeu_ps(resid + i, _mm256_and_ps(v, _mm256_castsi256_ps(finite)));
    }
  }
  topk_emit(x, resid, i, n, t, &ties, &sent, out);
  return 8 * sent;
}

size_t pst_topk_encode(const float *x, float *resid, size_t n, size_t k, uint32_t *scratch,
                       uint8_t *out) {
  if (n == 0 || k == 0) return 0;
  if (k > n) k = n;
  if (pst_codec_isa() < PST_ISA_AVX2) return topk_scalar(x, resid, n, k, scratch, out);
  topk_keys_avx2(x, resid, n, scratch);
  size_t above;
  uint32_t t = kth_largest_radix(scratch, n, k, &above);
  return topk_emit_avx2(x, resid, n, t, k - above, out);
}

size_t pst_topk_encode_momentum(const float *x, float *u, float *resid, size_t n, size_t k,
                                float m, uint32_t *scratch, uint8_t *out) {
  for (size_t i = 0; i < n; i++) u[i] = m * u[i] + x[i];
  size_t bytes = pst_topk_encode(u, resid, n, k, scratch, out);
  for (size_t p = 0; p < bytes / 8; p++) {
    uint32_t idx;
    memcpy(&idx, out + 8 * p, 4);
    u[idx] = 0.0f;
  }
  return bytes;
}

/* The end of the run of equal kinds that starts at a. */
static size_t run_end(const uint8_t *kind, size_t a, size_t n) {
  size_t b = a + 1;
  while (b < n && kind[b] == kind[a]) b++;
  return b;
}

size_t pst_topk_encode_tensors(const float *x, float *u, float *resid, const uint8_t *kind,
                               size_t n, double fraction, float m, uint32_t *scratch,
                               uint8_t *out) {
  if (n == 0) return 0;
  /* The pairs the tensors would send, against what the chunk may carry. */
  size_t want = 0, max = n / 2 > 1 ? n / 2 : 1;
  for (size_t a = 0, b; a < n; a = b) {
    b = run_end(kind, a, n);
    want += kind[a] == PST_TOPK_SPARSE ? pst_topk_k(fraction, b - a) : b - a;
  }
  if (want > max) {
    size_t k = pst_topk_k(fraction, n);
    return u ? pst_topk_encode_momentum(x, u, resid, n, k, m, scratch, out)
             : pst_topk_encode(x, resid, n, k, scratch, out);
  }
  size_t bytes = 0;
  for (size_t a = 0, b; a < n; a = b) {
    b = run_end(kind, a, n);
    if (kind[a] == PST_TOPK_SPARSE) {
      size_t k = pst_topk_k(fraction, b - a);
      size_t got = u ? pst_topk_encode_momentum(x + a, u + a, resid + a, b - a, k, m, scratch,
                                                out + bytes)
                     : pst_topk_encode(x + a, resid + a, b - a, k, scratch, out + bytes);
      /* The run's indices are its own: made the chunk's. */
      for (size_t p = bytes; p < bytes + got; p += 8) {
        uint32_t idx;
        memcpy(&idx, out + p, 4);
        idx += (uint32_t)a;
        memcpy(out + p, &idx, 4);
      }
      bytes += got;
    } else {
      for (size_t i = a; i < b; i++) {
        float g = x[i];
        if (u && kind[i] == PST_TOPK_DENSE) g = u[i] = m * u[i] + x[i];
        float v = resid ? g + resid[i] : g;
        if (resid) resid[i] = 0.0f;
        put_pair(out + bytes, (uint32_t)i, v);
        bytes += 8;
      }
    }
  }
  return bytes;
}

int pst_topk_decode(const uint8_t *in, size_t bytes, float *out, size_t n) {
  size_t max = n / 2 > 1 ? n / 2 : 1;
  if (bytes == 0 || bytes % 8 || bytes / 8 > max || n == 0) return -EINVAL;
  memset(out, 0, n * sizeof *out);
  uint32_t prev = 0;
  for (size_t p = 0; p < bytes / 8; p++) {
    uint32_t idx;
    float v;
    memcpy(&idx, in + 8 * p, 4);
    memcpy(&v, in + 8 * p + 4, 4);
    if (idx >= n || (p > 0 && idx <= prev)) return -EINVAL;
    out[idx] = v;
    prev = idx;
  }
  return 0;
}

unsigned pst_enc_bytes(pst_enc e) { return (unsigned)e < PST_ENC_COUNT ? enc_bytes[e] : 0; }

/* ---- scalar reference ---- */

static uint32_t bits_of(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

static float float_of(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

uint16_t pst_fp16_from_float(float f) {
  uint32_t x = bits_of(f);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  /* A NaN stays a quiet NaN with the top of its payload, as F16C's conversion does. */
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  /* 65520 and above (infinity included) round to infinity. */
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (ax >= 0x38800000u) { /* a normal half: rebias the exponent by 127 - 15 */
    uint32_t r = ax - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
  }
  /* Below 2^-25 (float subnormals too) everything rounds to zero; 2^-25 itself ties to 0. */
  if (ax < 0x33000000u) return (uint16_t)sign;
  /* A subnormal half: k units of 2^-24, k = mantissa x 2^(e - 126), rounded to even (k may
   * reach 0x400, the smallest normal, whose encoding is the same number). */
  uint32_t e = ax >> 23, mant = (ax & 0x7fffffu) | 0x800000u, s = 126u - e;
  uint32_t k = mant >> s, rem = mant & ((1u << s) - 1u), half = 1u << (s - 1u);
  if (rem > half || (rem == half && (k & 1u))) k++;
  return (uint16_t)(sign | k);
}

float pst_fp16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return float_of(sign | 0x7f800000u | (m << 13));
  if (e != 0) return float_of(sign | ((e + 112u) << 23) | (m << 13));
  /* Zero or a subnormal half: m units of 2^-24, exact in float. */
  float v = (float)m * 0x1p-24f;
  return sign ? -v : v;
}

uint16_t pst_bf16_from_float(float f) {
  uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float pst_bf16_to_float(uint16_t h) { return float_of((uint32_t)h << 16); }

/* The largest finite bf16, as a float. */
#define BF16_MAX_BITS 0x7f7f0000u

/* A finite value beyond the format's range, clamped to its largest finite value (sign kept);
 * anything else as it is. */
static float clamp_finite(float v, float max) {
  if (isfinite(v) && fabsf(v) > max) return copysignf(max, v);
  return v;
}

static void encode_scalar(pst_enc e, const float *x, float *resid, void *out, size_t from,
                          size_t n) {
  uint16_t *o = out;
  float max = e == PST_ENC_FP16 ? PST_FP16_MAX : float_of(BF16_MAX_BITS);
  for (size_t i = from; i < n; i++) {
    float v = resid ? x[i] + resid[i] : x[i];
    float c = clamp_finite(v, max);
    uint16_t h = e == PST_ENC_FP16 ? pst_fp16_from_float(c) : pst_bf16_from_float(c);
    o[i] = h;
    if (resid) {
      float d = e == PST_ENC_FP16 ? pst_fp16_to_float(h) : pst_bf16_to_float(h);
      resid[i] = isfinite(v) ? v - d : 0.0f;
    }
  }
}

/* Decodes values [from, to) of buf in place, the last first. */
static void decode_scalar_back(pst_enc e, float *buf, size_t from, size_t to) {
  const uint16_t *in = (const uint16_t *)(void *)buf;
  for (size_t i = to; i-- > from;) {
    uint16_t h = in[i];
    buf[i] = e == PST_ENC_FP16 ? pst_fp16_to_float(h) : pst_bf16_to_float(h);
  }
}

/* ---- AVX2 with F16C (always there under -march=x86-64-v3) ---- */

/* The target attribute lets this compile without the build's -march too (the fuzzers'
 * clang build); the dispatch below calls it only on a CPU that has the instructions. */
__attribute__((target("avx2,f16c"))) static void encode_avx2(pst_enc e, const float *x, float *resid, void *out, size_t n) {
  uint8_t *o = out;
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_castsi256_ps(_mm256_set1_epi32(0x7f800000));
  const __m256 max = e == PST_ENC_FP16 ? _mm256_set1_ps(PST_FP16_MAX)
                                       : _mm256_castsi256_ps(_mm256_set1_epi32((int)BF16_MAX_BITS));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    if (resid) v = _mm256_add_ps(v, _mm256_loadu_ps(resid + i));
    __m256 a = _mm256_and_ps(v, absmask);
    __m256 finite = _mm256_cmp_ps(a, inf, _CMP_LT_OQ); /* false for NaN */
    __m256 big = _mm256_and_ps(_mm256_cmp_ps(a, max, _CMP_GT_OQ), finite);
    __m256 c = _mm256_blendv_ps(v, _mm256_or_ps(_mm256_andnot_ps(absmask, v), max), big);
    __m128i h;
    __m256 d;
    if (e == PST_ENC_FP16) {
      h = _mm256_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      d = _mm256_cvtph_ps(h);
    } else {
      __m256i b = _mm256_castps_si256(c);
      __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
      __m256i r = _mm256_srli_epi32(
          _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
      __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
      __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(c, c, _CMP_UNORD_Q));
      r = _mm256_blendv_epi8(r, qnan, nan);
      __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
      h = _mm256_castsi256_si128(p);
      d = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    _mm_storeu_si128((__m128i *)(void *)(o + 2 * i), h);
    if (resid) _mm256_storeu_ps(resid + i, _mm256_and_ps(_mm256_sub_ps(v, d), finite));
  }
  encode_scalar(e, x, resid, out, i, n);
}

__attribute__((target("avx2,f16c"))) static void decode_avx2_back(pst_enc e, float *buf, size_t n) {
  size_t blocks = n / 8;
  decode_scalar_back(e, buf, blocks * 8, n);
  const uint8_t *in = (const uint8_t *)buf;
  for (size_t b = blocks; b-- > 0;) {
    /* The block's 16 encoded bytes are loaded before its 32 decoded bytes are stored over
     * them and over encoded values of later blocks, already decoded. */
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(in + 16 * b));
    __m256 d = e == PST_ENC_FP16
                   ? _mm256_cvtph_ps(h)
                   : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    _mm256_storeu_ps(buf + 8 * b, d);
  }
}

/* ---- AVX-512 (chosen at run time) ---- */

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
encode_avx512(pst_enc e, const float *x, float *resid, void *out, size_t n) {
  uint8_t *o = out;
  const __m512 max = e == PST_ENC_FP16 ? _mm512_set1_ps(PST_FP16_MAX)
                                       : _mm512_castsi512_ps(_mm512_set1_epi32((int)BF16_MAX_BITS));
  const __m512 inf = _mm512_castsi512_ps(_mm512_set1_epi32(0x7f800000));
  const __m512i signbit = _mm512_set1_epi32((int)0x80000000u);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    if (resid) v = _mm512_add_ps(v, _mm512_loadu_ps(resid + i));
    __m512 a = _mm512_abs_ps(v);
    __mmask16 finite = _mm512_cmp_ps_mask(a, inf, _CMP_LT_OQ);
    __mmask16 big = _mm512_mask_cmp_ps_mask(finite, a, max, _CMP_GT_OQ);
    __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), signbit);
    __m512 c = _mm512_mask_mov_ps(v, big, _mm512_castsi512_ps(_mm512_or_si512(
                                              sign, _mm512_castps_si512(max))));
    __m256i h;
    __m512 d;
    if (e == PST_ENC_FP16) {
      h = _mm512_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      d = _mm512_cvtph_ps(h);
    } else {
      __m512i b = _mm512_castps_si512(c);
      __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
      __m512i r = _mm512_srli_epi32(
          _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
      __m512i qnan = _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40));
      __mmask16 nan = _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
      r = _mm512_mask_mov_epi32(r, nan, qnan);
      h = _mm512_cvtepi32_epi16(r);
      d = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    _mm256_storeu_si256((__m256i *)(void *)(o + 2 * i), h);
    if (resid) _mm512_storeu_ps(resid + i, _mm512_maskz_sub_ps(finite, v, d));
  }
  encode_scalar(e, x, resid, out, i, n);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
decode_avx512_back(pst_enc e, float *buf, size_t n) {
  size_t blocks = n / 16;
  decode_scalar_back(e, buf, blocks * 16, n);
  const uint8_t *in = (const uint8_t *)buf;
  for (size_t b = blocks; b-- > 0;) {
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(in + 32 * b));
    __m512 d = e == PST_ENC_FP16
                   ? _mm512_cvtph_ps(h)
                   : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    _mm512_storeu_ps(buf + 16 * b, d);
  }
}

/* ---- dispatch ---- */

/* -1 until the first call picks the best; a plain int store of the same value from two
 * threads is harmless, and atomics keep the sanitizers quiet about it. */
static _Atomic int g_isa = -1;

static pst_isa best_isa(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return PST_ISA_AVX512;
  /* F16C from CPUID itself: clang's __builtin_cpu_supports does not know the name. */
  unsigned a, b, c, d;
  int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
  if (__builtin_cpu_supports("avx2") && f16c) return PST_ISA_AVX2;
  return PST_ISA_SCALAR;
}

pst_isa pst_codec_isa(void) {
  int isa = atomic_load_explicit(&g_isa, memory_order_relaxed);
  if (isa < 0) {
    isa = (int)best_isa();
    atomic_store_explicit(&g_isa, isa, memory_order_relaxed);
  }
  return (pst_isa)isa;
}

int pst_codec_use(pst_isa isa) {
  pst_isa best = best_isa();
  if (isa == PST_ISA_BEST) isa = best;
  if (isa > best) return -ENOTSUP;
  atomic_store_explicit(&g_isa, (int)isa, memory_order_relaxed);
  return 0;
}

void pst_enc_encode(pst_enc e, const float *x, float *resid, void *out, size_t n) {
  if (e != PST_ENC_FP16 && e != PST_ENC_BF16) return; /* top-k: pst_topk_encode */
  switch (pst_codec_isa()) {
    case PST_ISA_AVX512: encode_avx512(e, x, resid, out, n); break;
    case PST_ISA_AVX2: encode_avx2(e, x, resid, out, n); break;
    default: encode_scalar(e, x, resid, out, 0, n); break;
  }
}

void pst_enc_decode_inplace(pst_enc e, float *buf, size_t n) {
  if (e != PST_ENC_FP16 && e != PST_ENC_BF16) return;
  switch (pst_codec_isa()) {
    case PST_ISA_AVX512: decode_avx512_back(e, buf, n); break;
    case PST_ISA_AVX2: decode_avx2_back(e, buf, n); break;
    default: decode_scalar_back(e, buf, 0, n); break;
  }
}
