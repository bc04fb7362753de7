/* flash_attention.h - the tiled tensor-core attention (flash_attention.cu) that attention.cu's
 * ops hand a shape to when the context enables it and the kernels take the shape: 16-bit
 * dtype, head size 64. Same tensors and saved state (one log-sum-exp per row) as attention.cu.
 * Private to kernels/cuda/. */
#ifndef ST_KERNELS_CUDA_FLASH_ATTENTION_H
#define ST_KERNELS_CUDA_FLASH_ATTENTION_H

#include <stdint.h>

#include "core/device.h"
#include "shardtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the kernels take qkv [B, T, 3C] with n_head heads: bf16 or fp16, C = 64 n_head, rows
 * 16-byte aligned; else 0. */
int cuda_flash_attention_takes(const st_tensor *qkv, int64_t n_head);

st_status cuda_flash_attention_forward(const st_tensor *out, const st_tensor *state,
                                       const st_tensor *qkv, int64_t n_head,
                                       const st_stream *stream);

st_status cuda_flash_attention_backward(const st_tensor *dqkv, const st_tensor *dout,
                                        const st_tensor *qkv, const st_tensor *out,
                                        const st_tensor *state, int64_t n_head,
                                        const st_stream *stream);

#ifdef __cplusplus
}
#endif

#endif /* ST_KERNELS_CUDA_FLASH_ATTENTION_H */
