/* backend_ops.h - what a kernel backend implements: its table of ops and its context, for
 * kernels.c's dispatch and the backends themselves (kernels/cpu/, kernels/cuda/); the rest of
 * shardtrain sees only kernels.h.
 *
 * Every op receives its backend's context first and arguments already checked by the
 * kernel_<op> wrapper (shapes, devices, contiguity, and a dtype the backend's supports()
 * accepted). A NULL entry is an op the backend does not implement: kernel_supports answers 0
 * for it and its wrapper refuses the call (and its facts' supports must answer 0 too, for the
 * planner, which sees the facts alone). */
#ifndef ST_KERNELS_BACKEND_OPS_H
#define ST_KERNELS_BACKEND_OPS_H

#include "core/alloc.h"
#include "kernels/kernels.h"

/* What a backend is, apart from running ops: the answers the memory planner reads for a device
 * kind without creating a backend (kernel_kind_*), and that the backend itself goes by. They
 * need no device, so every build has the facts of every backend, the CUDA one's included
 * (cuda_facts.h), whether or not it has the backend's kernels. */
typedef struct kernel_facts {
  /* Which dtypes an op runs on (kernel_supports); 0 for an op the backend's table lacks. */
  int (*supports)(kernel_op op, st_dtype dtype);
  /* 1: every backward that writes parameter gradients (kernel_supports_grad_dtype's ops) also
   * takes them in fp32 beside 16-bit activations and weights, accumulating into fp32. */
  int fp32_param_grads;
  /* The bytes a context holds in `where` memory (MEM_DEVICE or MEM_HOST), allocator category
   * workspace, from its creation to its release: exactly what context_create allocates, and
   * what the memory planner counts (kernel_kind_workspace_bytes). NULL: none. */
  uint64_t (*context_bytes)(mem_kind where);
  /* The fp32 values saved between an attention's forward and backward. */
  int64_t (*attention_state_numel)(int64_t batch, int64_t n_head, int64_t seq);
  /* The scratch one attention backward takes for itself (kernel_kind_attention_scratch_bytes);
   * NULL: none. */
  uint64_t (*attention_scratch_bytes)(int64_t seq);
} kernel_facts;

typedef struct kernel_ops {
  const char *name;
  st_device_kind device;
  const kernel_facts *facts;
  /* The context of a backend on `dev` (NULL is a valid context), and its release. */
  st_status (*context_create)(const st_device *dev, void **ctx);
  void (*context_destroy)(void *ctx);

  /* pre_gelu is NULL unless the GELU epilogue is asked for (then bias is not NULL). */
  st_status (*matmul_forward)(void *ctx, const st_tensor *out, const st_tensor *pre_gelu,
                              const st_tensor *inp, const st_tensor *weight,
                              kernel_weight_layout layout, const st_tensor *bias,
                              const st_stream *stream);
  /* pre_gelu not NULL: dout is first overwritten with dout * gelu'(pre_gelu). dbias may be
   * NULL (no bias). dinp is overwritten; dweight and dbias are added to. */
  st_status (*matmul_backward)(void *ctx, const st_tensor *dinp, const st_tensor *dweight,
                               const st_tensor *dbias, const st_tensor *dout,
                               const st_tensor *pre_gelu, const st_tensor *inp,
                               const st_tensor *weight, kernel_weight_layout layout,
                               const st_stream *stream);
  /* residual is NULL for the plain LayerNorm (then inp is a and b is NULL); otherwise
   * residual = a + b is written and normalised. */
  st_status (*layernorm_forward)(void *ctx, const st_tensor *residual, const st_tensor *out,
                                 const st_tensor *mean, const st_tensor *rstd, const st_tensor *a,
                                 const st_tensor *b, const st_tensor *weight, const st_tensor *bias,
                                 const st_stream *stream);
  st_status (*layernorm_backward)(void *ctx, const st_tensor *dinp, const st_tensor *dweight,
                                  const st_tensor *dbias, const st_tensor *dout,
                                  const st_tensor *inp, const st_tensor *weight,
                                  const st_tensor *mean, const st_tensor *rstd,
                                  const st_stream *stream);
  st_status (*gelu_forward)(void *ctx, const st_tensor *out, const st_tensor *inp,
                            const st_stream *stream);
  st_status (*gelu_backward)(void *ctx, const st_tensor *dinp, const st_tensor *dout,
                             const st_tensor *inp, const st_stream *stream);
  /* The attention kernels the context runs (kernel_attention_kind); NULL: the table's name. */
  const char *(*attention_kind)(void *ctx);
  /* kernel_attention_fallbacks; NULL: 0. */
  int64_t (*attention_fallbacks)(void *ctx);
  st_status (*attention_forward)(void *ctx, const st_tensor *out, const st_tensor *state,
                                 const st_tensor *qkv, int64_t n_head, const st_stream *stream);
  st_status (*attention_backward)(void *ctx, const st_tensor *dqkv, const st_tensor *dout,
                                  const st_tensor *qkv, const st_tensor *out,
                                  const st_tensor *state, int64_t n_head, const st_stream *stream);
  st_status (*attention_cached_forward)(void *ctx, const st_tensor *out, const st_tensor *k_cache,
                                        const st_tensor *v_cache, const st_tensor *qkv,
                                        int64_t past, int64_t n_head, const st_stream *stream);
  st_status (*residual_forward)(void *ctx, const st_tensor *out, const st_tensor *a,
                                const st_tensor *b, const st_stream *stream);
  st_status (*embedding_forward)(void *ctx, const st_tensor *out, const int32_t *tokens,
                                 const st_tensor *wte, const st_tensor *wpe,
                                 const st_stream *stream);
  st_status (*embedding_backward)(void *ctx, const st_tensor *dwte, const st_tensor *dwpe,
                                  const st_tensor *dout, const int32_t *tokens,
                                  const st_stream *stream);
  st_status (*classifier)(void *ctx, const st_tensor *losses, const st_tensor *dlogits,
                          const st_tensor *logits, const int32_t *targets, int64_t vocab,
                          float dloss_scale, const st_stream *stream);
  st_status (*cast)(void *ctx, const st_tensor *dst, const st_tensor *src, const st_stream *stream);
  st_status (*scale)(void *ctx, const st_tensor *x, float factor, const st_stream *stream);
  st_status (*sum_squares)(void *ctx, const st_tensor *out, const st_tensor *x,
                           const st_stream *stream);
  st_status (*sum)(void *ctx, const st_tensor *out, const st_tensor *x, const st_stream *stream);
  st_status (*finite_check)(void *ctx, const st_tensor *flag, const st_tensor *x,
                            const st_stream *stream);
  st_status (*step_factors)(void *ctx, const st_tensor *factors, const st_tensor *sumsq,
                            const st_tensor *flag, double max_norm, double loss_scale,
                            const st_stream *stream);
  st_status (*adamw)(void *ctx, const st_tensor *param, const st_tensor *master, const st_tensor *m,
                     const st_tensor *v, const st_tensor *grad, const kernel_adamw_step *step,
                     const kernel_adamw_segment *segments, int segment_count,
                     const st_stream *stream);
} kernel_ops;

struct kernel_backend {
  const kernel_ops *ops;
  void *ctx;
  st_device device;
};

/* Whether `kb`'s table has every entry of vocabulary op `op` (forward and backward). */
int kernel_backend_has(const kernel_backend *kb, kernel_op op);

/* The tables this build has. The CUDA one exists only in CUDA builds. */
extern const kernel_ops kernel_ops_cpu;
#ifdef ST_HAVE_CUDA
extern const kernel_ops kernel_ops_cuda;
#endif

#endif /* ST_KERNELS_BACKEND_OPS_H */
