/* cast.h - fp32 <-> bf16 conversion of device buffers on a CUDA stream (CUDA builds only).
 * Rounding matches core/dtype.h (nearest even, NaN stays NaN), so the CPU and GPU paths
 * produce the same bits. */
#ifndef ST_KERNELS_CUDA_CAST_H
#define ST_KERNELS_CUDA_CAST_H

#include <stddef.h>
#include <stdint.h>

#include "shardtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

st_status cuda_cast_f32_to_bf16(uint16_t *dst, const float *src, size_t n, void *stream);
st_status cuda_cast_bf16_to_f32(float *dst, const uint16_t *src, size_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* ST_KERNELS_CUDA_CAST_H */
