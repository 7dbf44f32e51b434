/* FNV-1a 64: the one hash pstrain uses for fingerprints (model specs) and checksums
 * (weights, checkpoint sections). Streaming: hashing A then B with pst_fnv1a64_more gives
 * the hash of A followed by B, so a vector hashed in parts (a worker's shards) gives the same
 * checksum as the whole vector hashed at once. One function, two offset bases (below). */
#ifndef PSTRAIN_COMMON_FNV_H
#define PSTRAIN_COMMON_FNV_H

#include <stddef.h>
#include <stdint.h>

/* The offset basis of weights checksums and checkpoint hashes: FNV's own basis,
 * 14695981039346656037, with its last digit lost when it was first typed in. Checkpoint
 * files and recorded checksums carry hashes made with it, so it stays. Model fingerprints
 * use FNV's basis (PST_FNV1A64_STD_BASIS). */
#define PST_FNV1A64_BASIS 1469598103934665603ull
#define PST_FNV1A64_STD_BASIS 0xcbf29ce484222325ull

static inline uint64_t pst_fnv1a64_more(uint64_t h, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

static inline uint64_t pst_fnv1a64(const void *data, size_t len) {
  return pst_fnv1a64_more(PST_FNV1A64_BASIS, data, len);
}

#endif
