/* cudnn_attention.h - causal attention through cuDNN's fused scaled-dot-product attention
 * (cudnn_attention.cpp, C++17 over the cuDNN frontend), the third kind ST_CUDA_ATTENTION offers
 * (context.h). Same tensors and saved state as attention.cu: qkv [B, T, 3C] read in place, out
 * [B, T, C], one fp32 log-sum-exp of the scaled scores per (batch, head, query row), [B, NH, T],
 * so a forward of one kind and a backward of another agree; dqkv is overwritten, as by the others.
 *
 * libcudnn.so.9 is opened with dlopen when a context asks for this kind, never linked: binaries
 * start where cuDNN is absent, and a missing library means the other kinds run instead.
 * A build made without the frontend headers (tools/setup.sh did not install them) has only
 * cudnn_attention_absent.c: cuda_cudnn_attention_built() is 0 and create refuses.
 * Private to kernels/cuda/. */
#ifndef ST_KERNELS_CUDA_CUDNN_ATTENTION_H
#define ST_KERNELS_CUDA_CUDNN_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "shardtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One backend's cuDNN state: its handle, its region of the context's workspace and the graphs
 * built so far, one per (batch, heads, sequence, head size, dtype, direction). */
typedef struct cuda_cudnn_attention cuda_cudnn_attention;

/* 1 when this build has the cuDNN attention. */
int cuda_cudnn_attention_built(void);

/* Loads cuDNN (once per process) and creates a handle on the current device; `sm_version` is
 * the GPU's compute capability as 10 major + minor, and [workspace, workspace + bytes) the
 * device region every graph's workspace lives in (no op allocates). ST_ERR_UNSUPPORTED when the
 * build has no cuDNN attention, or libcudnn.so.9 cannot be loaded, is not cuDNN 9 or cannot create
 * a handle (the caller runs another kind then); ST_ERR_OOM. */
st_status cuda_cudnn_attention_create(cuda_cudnn_attention **out, int sm_version, void *workspace,
                                      size_t workspace_bytes);

/* Releases the handle and the graphs; accepts NULL. */
void cuda_cudnn_attention_destroy(cuda_cudnn_attention *a);

/* attention_forward (kernels.h). *ran = 0, with nothing enqueued and ST_OK, when cuDNN does not
 * run this call: a dtype other than bf16 and fp16, a head size that is not a multiple of 8 up
 * to 128, a row not 16-byte aligned (silently), or a shape cuDNN refused or whose graph needs
 * more than the region even one sequence at a time (a warning the first time). The caller then
 * runs another kind. */
st_status cuda_cudnn_attention_forward(cuda_cudnn_attention *a, const st_tensor *out,
                                       const st_tensor *state, const st_tensor *qkv, int64_t n_head,
                                       const st_stream *stream, int *ran);

/* attention_backward (kernels.h): dqkv = the gradient, deterministic (the same bits on every
 * run of a shape). *ran as for the forward. */
st_status cuda_cudnn_attention_backward(cuda_cudnn_attention *a, const st_tensor *dqkv,
                                        const st_tensor *dout, const st_tensor *qkv,
                                        const st_tensor *out, const st_tensor *state,
                                        int64_t n_head, const st_stream *stream, int *ran);

#ifdef __cplusplus
}
#endif

#endif /* ST_KERNELS_CUDA_CUDNN_ATTENTION_H */
