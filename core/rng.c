/* rng.c - splitmix64-based counter RNG. */
#include "core/rng.h"

#include <math.h>

static uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rng_stream_of(const char *name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    h = (h ^ *p) * 0x100000001b3ull;
  }
  return h;
}

static double uniform_bits(uint64_t bits) {
  /* 53 random bits, shifted half a step so 0 and 1 never occur. */
  return ((double)(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double rng_uniform_at(uint64_t seed, uint64_t stream, uint64_t index) {
  return uniform_bits(mix(mix(seed ^ mix(stream)) + index));
}

double rng_normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t base = mix(mix(seed ^ mix(stream)) + index);
  double u1 = uniform_bits(base), u2 = uniform_bits(mix(base));
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
