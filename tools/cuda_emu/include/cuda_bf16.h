// cuda_bf16.h (CUDA emulation) - bfloat16 as shardtrain's device code uses it: a 2-byte
// trivially copyable struct holding the bits (kernels reinterpret uint16_t buffers as it) and
// the two float conversions, rounding to nearest even.
//
// Not emulated: bfloat16 arithmetic and comparison operators, constructors from float,
// __nv_bfloat162, the intrinsics, C. NaN converts to a quiet NaN of the same sign (and leading
// payload bits), not to CUDA's canonical 0x7fff.
#ifndef CUDA_EMU_CUDA_BF16_H
#define CUDA_EMU_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

#include <type_traits>

struct __nv_bfloat16 {
  unsigned short __x;
};

static_assert(sizeof(__nv_bfloat16) == 2 && alignof(__nv_bfloat16) == 2,
              "__nv_bfloat16 must be 2 bytes");
static_assert(std::is_trivially_copyable<__nv_bfloat16>::value &&
                  std::is_standard_layout<__nv_bfloat16>::value,
              "__nv_bfloat16 must be a trivially copyable standard-layout type");

// float -> bfloat16: the top 16 bits, rounded to nearest even on the low 16; overflow gives
// infinity.
inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  __nv_bfloat16 out;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    out.__x = (unsigned short)((u >> 16) | 0x40u);  // NaN: set the quiet bit
    return out;
  }
  const uint32_t rest = u & 0xffffu;
  uint32_t top = u >> 16;
  if (rest > 0x8000u || (rest == 0x8000u && (top & 1u))) top++;  // carries into the exponent
  out.__x = (unsigned short)top;
  return out;
}

// bfloat16 -> float, exact.
inline float __bfloat162float(__nv_bfloat16 x) {
  const uint32_t u = (uint32_t)x.__x << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

#endif  // CUDA_EMU_CUDA_BF16_H
