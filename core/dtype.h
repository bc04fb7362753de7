/* dtype.h - element types and the fp32 <-> bf16 / fp16 conversions every backend shares.
 *
 * bf16 is the upper half of an fp32 (round to nearest even on the way down, NaN kept quiet);
 * fp16 is IEEE half. The conversions are tiny and called per element in loops, hence inline. */
#ifndef ST_CORE_DTYPE_H
#define ST_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shardtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

/* st_dtype (ST_FP32, ST_BF16, ST_FP16) is public: shardtrain.h. */
#define ST_DTYPE_COUNT 3

size_t dtype_size(st_dtype dtype);
const char *dtype_name(st_dtype dtype);
/* Parses "fp32", "bf16", "fp16" (also "float32", "bfloat16", "float16"); -1 if unknown. */
int dtype_parse(const char *name);

static inline uint16_t bf16_from_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float f32_from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t fp16_from_f32(float f);
float f32_from_fp16(uint16_t h);

/* Element i of a buffer of `dtype`, as fp32; and its store, rounding to the dtype. */
static inline float dtype_load_f32(const void *src, st_dtype dtype, size_t i) {
  switch (dtype) {
    case ST_BF16: return f32_from_bf16(((const uint16_t *)src)[i]);
    case ST_FP16: return f32_from_fp16(((const uint16_t *)src)[i]);
    default: return ((const float *)src)[i];
  }
}

static inline void dtype_store_f32(void *dst, st_dtype dtype, size_t i, float value) {
  switch (dtype) {
    case ST_BF16: ((uint16_t *)dst)[i] = bf16_from_f32(value); break;
    case ST_FP16: ((uint16_t *)dst)[i] = fp16_from_f32(value); break;
    default: ((float *)dst)[i] = value; break;
  }
}

/* dst = src converted elementwise (n elements, host memory; the same dtype is a copy). */
void dtype_convert(void *dst, st_dtype dst_dtype, const void *src, st_dtype src_dtype, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* ST_CORE_DTYPE_H */
