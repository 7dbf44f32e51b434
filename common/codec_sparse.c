/* The encodings that send (u32 index, float32 value) pairs (common/codec.h): the sparse
 * chunks of delta pulls (pst_sparse_delta, pst_sparse_apply) and top-k pushes, with their
 * error feedback, momentum correction and per-tensor runs (pst_topk_*). The vector path of
 * top-k follows the instruction set that codec.c chooses (pst_codec_isa). */
#include "common/codec.h"

#include <errno.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

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
