/* fnv.h - FNV-1a, a stable 64-bit hash of bytes: a fixed-size stand-in for what ranks compare or
 * group by (a node's name, a GPU's bus id, the list of data shards). Not for security. */
#ifndef ST_CORE_FNV_H
#define ST_CORE_FNV_H

#include <stddef.h>
#include <stdint.h>

#define FNV_OFFSET_BASIS 14695981039346656037ull

/* `hash` continued over `n` bytes; start from FNV_OFFSET_BASIS. */
static inline uint64_t fnv1a(uint64_t hash, const void *bytes, size_t n) {
  const unsigned char *b = (const unsigned char *)bytes;
  for (size_t i = 0; i < n; i++) hash = (hash ^ b[i]) * 1099511628211ull;
  return hash;
}

#endif /* ST_CORE_FNV_H */
