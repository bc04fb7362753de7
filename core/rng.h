/* rng.h - counter-based random numbers: every value is a pure function of (seed, stream,
 * index), so a tensor initialised piecewise on any mesh (any TP slice, any shard) gets the
 * same values as on one rank. splitmix64 mixing; normals by Box-Muller from two uniforms. */
#ifndef ST_CORE_RNG_H
#define ST_CORE_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A stream id from a name (FNV-1a), e.g. the parameter's name. */
uint64_t rng_stream_of(const char *name);

/* Uniform in (0, 1). */
double rng_uniform_at(uint64_t seed, uint64_t stream, uint64_t index);

/* Standard normal. */
double rng_normal_at(uint64_t seed, uint64_t stream, uint64_t index);

#ifdef __cplusplus
}
#endif

#endif /* ST_CORE_RNG_H */
