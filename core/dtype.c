/* dtype.c - dtype names, sizes and the IEEE half conversions. */
#include "core/dtype.h"

#include <math.h>

size_t dtype_size(st_dtype dtype) { return dtype == ST_FP32 ? 4 : 2; }

const char *dtype_name(st_dtype dtype) {
  static const char *const names[ST_DTYPE_COUNT] = {"fp32", "bf16", "fp16"};
  return (unsigned)dtype < ST_DTYPE_COUNT ? names[dtype] : "invalid";
}

int dtype_parse(const char *name) {
  static const char *const aliases[][2] = {
      {"fp32", "float32"}, {"bf16", "bfloat16"}, {"fp16", "float16"}};
  for (int d = 0; d < ST_DTYPE_COUNT; d++) {
    if (strcmp(name, aliases[d][0]) == 0 || strcmp(name, aliases[d][1]) == 0) return d;
  }
  return -1;
}

uint16_t fp16_from_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  float a = fabsf(f);
  if (isnan(f)) return (uint16_t)(sign | 0x7e00u);
  if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00u); /* overflows to infinity */
  if (a < 6.103515625e-05f) {
    /* subnormal: multiples of 2^-24, rounded to nearest even by rintf */
    return (uint16_t)(sign | (uint16_t)rintf(a * 16777216.0f));
  }
  uint32_t exp = ((u >> 23) & 0xffu) - 127u + 15u;
  uint32_t mant = u & 0x7fffffu;
  uint32_t half = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half++; /* carries into exponent */
  return (uint16_t)(sign | half);
}

float f32_from_fp16(uint16_t h) {
  float sign = (h & 0x8000u) ? -1.0f : 1.0f;
  int exp = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  if (exp == 0) return sign * ldexpf((float)mant, -24);
  if (exp == 31) return mant ? NAN : sign * INFINITY;
  return sign * ldexpf((float)(mant | 0x400), exp - 25);
}

void dtype_convert(void *dst, st_dtype dst_dtype, const void *src, st_dtype src_dtype, size_t n) {
  if (dst_dtype == src_dtype) {
    if (n) memmove(dst, src, n * dtype_size(src_dtype));
    return;
  }
  for (size_t i = 0; i < n; i++)
    dtype_store_f32(dst, dst_dtype, i, dtype_load_f32(src, src_dtype, i));
}
