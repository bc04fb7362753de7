// cuda_fp16.h (CUDA emulation) - the IEEE half type as shardtrain's device code uses it: a
// 2-byte trivially copyable struct holding the bits (kernels reinterpret uint16_t buffers as
// it) and the two float conversions, rounding to nearest even.
//
// Not emulated: half arithmetic and comparison operators, constructors from float, __half2,
// the intrinsics (__hadd, __hmul, ...), C. NaN converts to a quiet NaN of the same sign (and
// leading payload bits), not to CUDA's canonical 0x7fff.
#ifndef CUDA_EMU_CUDA_FP16_H
#define CUDA_EMU_CUDA_FP16_H

#include <stdint.h>
#include <string.h>

#include <type_traits>

struct __half {
  unsigned short __x;
};
typedef __half half;

static_assert(sizeof(__half) == 2 && alignof(__half) == 2, "__half must be 2 bytes");
static_assert(std::is_trivially_copyable<__half>::value && std::is_standard_layout<__half>::value,
              "__half must be a trivially copyable standard-layout type");

// float -> half, rounded to nearest even; overflow gives infinity.
inline __half __float2half(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t exp = (u >> 23) & 0xffu;  // biased by 127
  const uint32_t mant = u & 0x7fffffu;
  uint32_t h;
  if (exp == 0xffu) {
    h = mant ? (0x7e00u | (mant >> 13)) : 0x7c00u;  // quiet NaN keeping its payload's top; inf
  } else if (exp > 127u + 15u) {
    h = 0x7c00u;  // |f| >= 2^16: past the largest half
  } else if (exp >= 127u - 14u) {
    // A normal half: 10 of the 23 mantissa bits, the other 13 decide the rounding. A carry out
    // of the mantissa steps the exponent, up to infinity (0x7c00), as it should.
    h = ((exp - (127u - 15u)) << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  } else if (exp >= 127u - 25u) {
    // A half subnormal (multiples of 2^-24) or zero after rounding: the full significand
    // (implicit bit included) shifted right by the missing exponent.
    const uint32_t sig = mant | 0x800000u;
    const uint32_t shift = (127u - 14u - exp) + 13u;  // 14 ..= 24
    h = sig >> shift;
    const uint32_t rest = sig & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (h & 1u))) h++;  // may round up to 2^-14: fine
  } else {
    h = 0;  // below half of the smallest subnormal (zeros and float subnormals included)
  }
  __half out;
  out.__x = (unsigned short)(sign | h);
  return out;
}

// half -> float, exact; NaN stays a quiet NaN with its payload.
inline float __half2float(__half x) {
  const uint32_t sign = (uint32_t)(x.__x & 0x8000u) << 16;
  const uint32_t exp = (x.__x >> 10) & 0x1fu;
  uint32_t mant = x.__x & 0x3ffu;
  uint32_t u;
  if (exp == 0x1fu) {
    u = sign | 0x7f800000u | (mant ? 0x400000u | (mant << 13) : 0u);
  } else if (exp != 0) {
    u = sign | ((exp + 127u - 15u) << 23) | (mant << 13);
  } else if (mant == 0) {
    u = sign;
  } else {
    // Subnormal: normalise. mant * 2^-24 with the leading bit moved to the implicit place.
    int e = 127 - 14;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      e--;
    }
    u = sign | ((uint32_t)e << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

#endif  // CUDA_EMU_CUDA_FP16_H
