/* kernels.h - the compute ops of shardtrain: one interface, one implementation per device.
 *
 * A kernel backend is an object: a table of ops plus its context (CPU: OpenBLAS + OpenMP,
 * kernels/cpu/; CUDA: cuBLASLt + CUDA kernels, kernels/cuda/). Its owner creates it for a
 * device and calls the kernel_<op>() wrappers below, which check shapes, dtypes, devices and
 * contiguity the same way for every backend and then dispatch; callers never test which
 * backend they hold (they ask kernel_supports), and a backend may assume its arguments were
 * checked.
 *
 * Conventions shared by every op:
 * - Rows: an activation's last dimension is its features and every other dimension counts
 *   rows, so [B, T, C] and [B*T, C] are the same N = B*T rows of C.
 * - Arguments: the backend, outputs, inputs, scalars, then the stream the op runs on. The
 *   CPU backend runs synchronously; on CUDA an op only enqueues work, and no op waits for the
 *   host or makes the host wait (results that the host reads, such as the sum of squares, are
 *   left in device memory; kernel_adamw's long segment tables are the one exception).
 * - Dtypes: activations, weights and their gradients of one op share a compute dtype that
 *   kernel_supports accepts (CPU: fp32; CUDA: fp32, bf16, fp16), accumulated in fp32 inside the
 *   kernels; statistics (LayerNorm mean/rstd, per-token losses, attention state, scalars) are
 *   fp32. One exception: the PARAMETER gradients a backward writes (dweight, dbias, the
 *   embedding's dwte and dwpe) may be fp32 beside 16-bit activations and weights where
 *   kernel_supports_grad_dtype says so (bf16 parameters with fp32 gradient accumulation, FSDP's
 *   reduce_dtype); the gradients of activations (dinp, dqkv) stay in the compute dtype.
 * - Gradients ACCUMULATE: every backward op adds (+=) into every gradient it produces.
 *   Parameter gradients sum over micro-batches, and an activation's gradient is the sum over
 *   the branches that read it (the residual stream), so the engine zeroes a gradient buffer
 *   where its sum starts and never needs a separate add. The exceptions say so: the
 *   classifier starts the chain and overwrites dlogits; the GELU-epilogue backward overwrites
 *   its dout with the pre-activation's gradient; a linear layer's and the attention's
 *   backwards overwrite their input's gradient (one branch reads a linear layer's input, a
 *   LayerNorm's output or the attention's, and the attention's, qkv; the tied head's chunks
 *   are rows of its input), which saves zeroing it and reading it back.
 * - Determinism: every op gives the same bits for the same inputs, whatever the thread count
 *   or launch order (fixed reduction orders, no unordered atomics in sums).
 * - Outputs never alias inputs unless an op says so.
 * - Token ids and targets are int32 arrays in the device's memory, as many as the rows of the
 *   tensor they go with: core's st_dtype has no integer type, so they travel as pointers.
 */
#ifndef ST_KERNELS_KERNELS_H
#define ST_KERNELS_KERNELS_H

#include <stdint.h>

#include "core/alloc.h"
#include "core/device.h"
#include "core/tensor.h"
#include "shardtrain.h"

/* LayerNorm's epsilon (GPT-2's). */
#define KERNEL_LAYERNORM_EPS 1e-5f

/* The rows convention: the extent of the last dimension, and the product of all the others. */
int64_t kernel_cols(const st_tensor *t);
int64_t kernel_rows(const st_tensor *t);

/* How a linear layer's weight is stored: [in, out] (Hugging Face Conv1D, every layer of GPT-2)
 * or [out, in] (the LM head, which is the token embedding wte[V, C] itself). */
typedef enum kernel_weight_layout {
  KERNEL_WEIGHT_IN_OUT = 0,
  KERNEL_WEIGHT_OUT_IN = 1
} kernel_weight_layout;

/* A kernel backend: the ops of one device and their context (the CPU has none; CUDA holds the
 * cuBLASLt handle, its workspace and the matmul descriptors and heuristics cached per shape).
 * Created for a device by the code that computes on it (the GPT model, the public unit API's
 * optimizer) and destroyed by the same owner; one backend serves every stream of its device,
 * from one thread at a time. */
typedef struct kernel_backend kernel_backend;

/* Whether this build has kernels for a kind of device: can run it. (The kernel_kind_* answers
 * below do not depend on it: every build knows the facts of every backend.) */
int kernel_has_backend(st_device_kind kind);

/* A backend for `dev`. ST_ERR_UNSUPPORTED when this build has no kernels for that device;
 * ST_ERR_OOM (or the device's error) when its context cannot be made. */
st_status kernel_backend_create(const st_device *dev, kernel_backend **out);
/* Accepts NULL. Waits for nothing: the owner has synchronised the streams that used it. */
void kernel_backend_destroy(kernel_backend *kb);

/* "cpu" or "cuda". */
const char *kernel_backend_name(const kernel_backend *kb);

/* The op vocabulary, for the capability query. One entry covers an op's forward and backward
 * and, where they exist, its variants (both weight layouts of the matmul; the LayerNorm with
 * and without the residual add). */
typedef enum kernel_op {
  KERNEL_OP_MATMUL = 0,       /* matmul, optional bias epilogue, forward and backward */
  KERNEL_OP_MATMUL_GELU,      /* matmul with the bias + GELU epilogue, and its dGELU backward */
  KERNEL_OP_LAYERNORM,        /* LayerNorm, plain and with the residual add fused */
  KERNEL_OP_GELU,             /* GELU on its own */
  KERNEL_OP_ATTENTION,        /* causal attention, forward and backward */
  KERNEL_OP_ATTENTION_CACHED, /* attention over a key/value cache, for generation */
  KERNEL_OP_RESIDUAL,         /* elementwise add */
  KERNEL_OP_EMBEDDING,        /* token + position embedding, forward and backward */
  KERNEL_OP_CLASSIFIER,       /* softmax, cross-entropy and dlogits in one pass */
  KERNEL_OP_CAST,             /* fp32 <-> the dtype asked about */
  KERNEL_OP_ADAMW,            /* AdamW writing parameters in the dtype asked about */
  KERNEL_OP_SUM_SQUARES,      /* sum of squares into a device scalar */
  KERNEL_OP_SUM,              /* sum into a device scalar (the loss) */
  KERNEL_OP_SCALE,            /* x *= factor */
  KERNEL_OP_FINITE_CHECK,     /* overflow flag for loss scaling */
  KERNEL_OP_STEP_FACTORS,     /* AdamW's gradient factor and skip flag from the step's scalars */
  KERNEL_OP_COUNT
} kernel_op;

/* "matmul", "layernorm", ...: the op's name in messages and tests. */
const char *kernel_op_name(kernel_op op);

/* 1 when `kb` runs `op` on tensors of `dtype` (the dtype of the op's activations and weights;
 * for cast, scale, finite check and sum of squares the dtype of the low-precision side or the
 * buffer; for AdamW the dtype of the parameters and gradients). The engine chooses fused ops
 * or composites, and fp32 compute copies, from this answer; it never tests which backend it
 * holds. Every wrapper below refuses (ST_ERR_UNSUPPORTED) a call its backend does not
 * support. */
int kernel_supports(const kernel_backend *kb, kernel_op op, st_dtype dtype);

/* kernel_supports for the backend of devices of `kind`, answered without a backend (the memory
 * planner asks before any device exists), the same in every build: a build without the CUDA
 * kernels answers for CUDA as a CUDA build does (kernels/cuda_facts.h). 0 for an unknown kind. */
int kernel_kind_supports(st_device_kind kind, kernel_op op, st_dtype dtype);

/* 1 when `kb` runs `op` on activations and weights of `dtype` (kernel_supports) with the
 * parameter gradients its backward writes in `grad_dtype`. grad_dtype == dtype is every
 * supported op; the other answer that exists is fp32 gradients of 16-bit activations, for the
 * ops whose backward writes parameter gradients (matmul in each form, its GELU epilogue,
 * LayerNorm, embedding) on a backend that accumulates them in fp32 (CUDA; the CPU computes in
 * fp32 only). The wrappers refuse (ST_ERR_INVALID_ARG) a parameter gradient in another dtype. */
int kernel_supports_grad_dtype(const kernel_backend *kb, kernel_op op, st_dtype dtype,
                               st_dtype grad_dtype);

/* kernel_supports_grad_dtype for the backend of devices of `kind`, without a backend (the model's
 * precision check and the memory planner ask before any device exists). */
int kernel_kind_supports_grad_dtype(st_device_kind kind, kernel_op op, st_dtype dtype,
                                    st_dtype grad_dtype);

/* The fixed memory the backend for devices of `kind` holds in `where` memory
 * (MEM_DEVICE or MEM_HOST; MEM_PINNED: none), in the allocator's workspace category, from
 * kernel_backend_create to its destroy, whatever the ops run: CUDA's one device workspace
 * (cuBLASLt's scratch and the regions of the reductions, column sums, AdamW segments and the
 * embedding sort, and with ST_CUDA_ATTENTION=cudnn the cuDNN attention's) and the host staging
 * of long AdamW segment lists; 0 for the CPU, whose ops take their scratch per call. The same in
 * every build. The backend's context allocates exactly this, and the memory planner counts it
 * per backend a rank creates. Bookkeeping structs of a few kilobytes are not included. */
uint64_t kernel_kind_workspace_bytes(st_device_kind kind, mem_kind where);

/* 1 when that backend runs every op of a training step on activations and weights (DESIGN.md's
 * vocabulary: matmul and its GELU epilogue, LayerNorm, attention, embedding, classifier) in
 * `dtype`: a model can then compute in it, with its activations in it; else it computes in fp32
 * from fp32 copies of its low-precision parameters (the CPU with bf16). */
int kernel_kind_computes_in(st_device_kind kind, st_dtype dtype);

/* ---- Linear layers ------------------------------------------------------------------------- */

/* out[N, OC] = inp[N, C] @ weight[C, OC] + bias[OC]. The weight is stored [in, out] like
 * Hugging Face GPT-2's Conv1D. bias may be NULL (no bias). */
st_status kernel_matmul_forward(const kernel_backend *kb, const st_tensor *out,
                                const st_tensor *inp, const st_tensor *weight,
                                const st_tensor *bias, const st_stream *stream);

/* dinp = dout @ weight^T (OVERWRITTEN: a layer's input gradient has no other term), and
 * dweight += inp^T @ dout, dbias += dout summed over rows. dbias is NULL exactly when the
 * forward had no bias. */
st_status kernel_matmul_backward(const kernel_backend *kb, const st_tensor *dinp,
                                 const st_tensor *dweight, const st_tensor *dbias,
                                 const st_tensor *dout, const st_tensor *inp,
                                 const st_tensor *weight, const st_stream *stream);

/* The tied LM head: out[N, V] = inp[N, C] @ weight[V, C]^T, the weight stored [out, in]; no
 * bias. */
st_status kernel_matmul_wt_forward(const kernel_backend *kb, const st_tensor *out,
                                   const st_tensor *inp, const st_tensor *weight,
                                   const st_stream *stream);

/* dinp = dout @ weight (overwritten), dweight[V, C] += dout^T @ inp. */
st_status kernel_matmul_wt_backward(const kernel_backend *kb, const st_tensor *dinp,
                                    const st_tensor *dweight, const st_tensor *dout,
                                    const st_tensor *inp, const st_tensor *weight,
                                    const st_stream *stream);

/* The MLP's first layer with its activation fused: pre_gelu[N, OC] = inp[N, C] @ weight[C, OC]
 * + bias[OC], saved for the backward, and out = gelu(pre_gelu) (kernel_gelu_forward's GELU).
 * Weight stored [in, out]; the bias is required. */
st_status kernel_matmul_gelu_forward(const kernel_backend *kb, const st_tensor *out,
                                     const st_tensor *pre_gelu, const st_tensor *inp,
                                     const st_tensor *weight, const st_tensor *bias,
                                     const st_stream *stream);

/* Its backward. dout, the gradient of out, is OVERWRITTEN with the gradient of pre_gelu,
 * dout * gelu'(pre_gelu) (the dGELU epilogue); then, as in kernel_matmul_backward,
 * dinp = dpre @ weight^T (overwritten), dweight += inp^T @ dpre and dbias += dpre summed over
 * rows. */
st_status kernel_matmul_gelu_backward(const kernel_backend *kb, const st_tensor *dinp,
                                      const st_tensor *dweight, const st_tensor *dbias,
                                      const st_tensor *dout, const st_tensor *pre_gelu,
                                      const st_tensor *inp, const st_tensor *weight,
                                      const st_stream *stream);

/* ---- Normalisation and activation ---------------------------------------------------------- */

/* out = (inp - mean) * rstd * weight + bias over each row of C features, with
 * rstd = 1 / sqrt(var + KERNEL_LAYERNORM_EPS) (biased variance). Saves mean[N] and rstd[N]
 * for the backward. */
st_status kernel_layernorm_forward(const kernel_backend *kb, const st_tensor *out,
                                   const st_tensor *mean, const st_tensor *rstd,
                                   const st_tensor *inp, const st_tensor *weight,
                                   const st_tensor *bias, const st_stream *stream);

/* The residual add fused with the LayerNorm that follows it: residual = a + b, then out, mean
 * and rstd as kernel_layernorm_forward computes them from residual. residual may alias a or b
 * (the residual stream updated in place). Its backward is kernel_layernorm_backward with
 * inp = residual: the gradient it adds into dinp is the residual stream's, which reaches a
 * and b unchanged. */
st_status kernel_layernorm_residual_forward(const kernel_backend *kb, const st_tensor *residual,
                                            const st_tensor *out, const st_tensor *mean,
                                            const st_tensor *rstd, const st_tensor *a,
                                            const st_tensor *b, const st_tensor *weight,
                                            const st_tensor *bias, const st_stream *stream);

/* dinp, dweight, dbias += the gradients of layernorm_forward, from the saved mean and rstd. */
st_status kernel_layernorm_backward(const kernel_backend *kb, const st_tensor *dinp,
                                    const st_tensor *dweight, const st_tensor *dbias,
                                    const st_tensor *dout, const st_tensor *inp,
                                    const st_tensor *weight, const st_tensor *mean,
                                    const st_tensor *rstd, const st_stream *stream);

/* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's tanh-approximated GELU. */
st_status kernel_gelu_forward(const kernel_backend *kb, const st_tensor *out, const st_tensor *inp,
                              const st_stream *stream);

/* dinp += dout * gelu'(inp). */
st_status kernel_gelu_backward(const kernel_backend *kb, const st_tensor *dinp,
                               const st_tensor *dout, const st_tensor *inp,
                               const st_stream *stream);

/* ---- Attention ----------------------------------------------------------------------------- */

/* The attention kernels `kb` runs, for reports and tests: CUDA's "simple", "flash" or "cudnn"
 * (ST_CUDA_ATTENTION after the fallbacks made when the backend was created: no cuDNN library,
 * for one; a kind that takes only some shapes still leaves the others to the next kind), or the
 * backend's name where it has one kind ("cpu"). */
const char *kernel_attention_kind(const kernel_backend *kb);

/* How many attention calls (forward or backward) since `kb` was created the kernels of
 * kernel_attention_kind did not take, so that another kind's ran them: a shape cuDNN refused, or
 * one the flash kernels do not tile. 0 where the backend has one kind. For tests and reports: a
 * kind that silently takes nothing shows here. */
int64_t kernel_attention_fallbacks(const kernel_backend *kb);

/* How many fp32 values the backend saves between the attention's forward and backward for
 * `batch` sequences of `seq` tokens and `n_head` heads: the CPU keeps the probabilities
 * (batch * n_head * seq * seq), CUDA the per-row softmax statistics (never seq x seq). The
 * engine allocates the state with this size and never reads it. */
int64_t kernel_attention_state_numel(const kernel_backend *kb, int64_t batch, int64_t n_head,
                                     int64_t seq);

/* The same size for the backend of devices of `kind`, without a backend (the memory planner's
 * prediction), the same in every build; 0 for an unknown kind. */
int64_t kernel_kind_attention_state_numel(st_device_kind kind, int64_t batch, int64_t n_head,
                                          int64_t seq);

/* The bytes of workspace one attention backward over sequences of `seq` tokens takes for the
 * length of the call (the CPU: one head's T x T scores in fp32; CUDA: none, its scratch lives
 * in the context's workspace), for the backend of devices of `kind`, the same in every build. The
 * CPU backend allocates exactly this; the memory planner counts it. */
uint64_t kernel_kind_attention_scratch_bytes(st_device_kind kind, int64_t seq);

/* Causal multi-head self-attention. qkv[B, T, 3C] holds q, k, v side by side in that order
 * (Hugging Face GPT-2's c_attn output); head h owns features [h*hs, (h+1)*hs) of each, with
 * hs = C / n_head. out[B, T, C] = softmax(q k^T / sqrt(hs), causal) v, heads side by side.
 * state (fp32, kernel_attention_state_numel values, any shape) receives what the backward
 * reads. */
st_status kernel_attention_forward(const kernel_backend *kb, const st_tensor *out,
                                   const st_tensor *state, const st_tensor *qkv, int64_t n_head,
                                   const st_stream *stream);

/* dqkv = the gradient of attention_forward with respect to qkv (OVERWRITTEN), from the
 * forward's qkv, out and state. A backend may use scratch memory from the allocator's
 * workspace category (kernel_kind_attention_scratch_bytes). */
st_status kernel_attention_backward(const kernel_backend *kb, const st_tensor *dqkv,
                                    const st_tensor *dout, const st_tensor *qkv,
                                    const st_tensor *out, const st_tensor *state, int64_t n_head,
                                    const st_stream *stream);

/* Causal attention of N new tokens of one sequence over a key/value cache, for generation: the
 * new tokens sit at positions [past, past + N). qkv[N, 3C] holds their q, k and v as in
 * attention_forward (n_head heads of hs = C / n_head features). Their k and v are first stored
 * in rows [past, past + N) of k_cache and v_cache [S, C] (past + N <= S); then out[N, C] holds,
 * for new token i and each head, softmax(q_i k[0 .. past + i]^T / sqrt(hs)) v[0 .. past + i],
 * heads side by side. Cache rows from past + N on are neither read nor written, and nothing is
 * kept for a backward. A backend may take scratch memory from the allocator's workspace
 * category (the CPU takes N x (past + N) floats). */
st_status kernel_attention_cached_forward(const kernel_backend *kb, const st_tensor *out,
                                          const st_tensor *k_cache, const st_tensor *v_cache,
                                          const st_tensor *qkv, int64_t past, int64_t n_head,
                                          const st_stream *stream);

/* ---- Residual stream and embeddings -------------------------------------------------------- */

/* out = a + b, elementwise; out may alias a or b. There is no residual backward op: the
 * gradient of out reaches a and b unchanged, and since every backward op accumulates, the
 * engine keeps one gradient buffer for the residual stream and lets each branch add to it. */
st_status kernel_residual_forward(const kernel_backend *kb, const st_tensor *out,
                                  const st_tensor *a, const st_tensor *b, const st_stream *stream);

/* out[b, t, :] = wte[tokens[b*T + t], :] + wpe[t, :] for out[B, T, C], wte[V, C] and
 * wpe[maxT, C] with T <= maxT. Token ids must lie in [0, V). */
st_status kernel_embedding_forward(const kernel_backend *kb, const st_tensor *out,
                                   const int32_t *tokens, const st_tensor *wte,
                                   const st_tensor *wpe, const st_stream *stream);

/* dwte[tokens[b*T + t], :] += dout[b, t, :] and dwpe[t, :] += dout[b, t, :]. Deterministic:
 * the result does not depend on thread count or scheduling (no atomics). */
st_status kernel_embedding_backward(const kernel_backend *kb, const st_tensor *dwte,
                                    const st_tensor *dwpe, const st_tensor *dout,
                                    const int32_t *tokens, const st_stream *stream);

/* ---- Loss ---------------------------------------------------------------------------------- */

/* The fused classifier, for logits[N, Vp] with 1 <= vocab <= Vp (columns [vocab, Vp) are
 * padding and take no part) and targets in [0, vocab): losses[n] (fp32, N values)
 * = -log softmax(logits[n, :vocab])[targets[n]]; and, when dlogits is not NULL,
 * dlogits = (softmax(logits[n, :vocab]) - onehot(targets[n])) * dloss_scale, 0 in the padding
 * columns: the gradient of dloss_scale * sum(losses). dlogits is OVERWRITTEN and may alias
 * logits (the engine reuses the largest activation in place). The engine passes
 * dloss_scale = loss scale / (tokens in the global batch); NULL dlogits (evaluation) computes
 * the losses only. */
st_status kernel_classifier(const kernel_backend *kb, const st_tensor *losses,
                            const st_tensor *dlogits, const st_tensor *logits,
                            const int32_t *targets, int64_t vocab, float dloss_scale,
                            const st_stream *stream);

/* ---- Whole buffers ------------------------------------------------------------------------- */

/* dst = src converted elementwise between fp32 and bf16 or fp16 (round to nearest even, NaN
 * stays NaN, fp16 overflow becomes inf), or copied when the dtypes are equal; the two hold the
 * same number of elements. Bit-identical on every backend (core/dtype.h's rounding). */
st_status kernel_cast(const kernel_backend *kb, const st_tensor *dst, const st_tensor *src,
                      const st_stream *stream);

/* x *= factor elementwise, in place, for x in fp32, bf16 or fp16 (computed in fp32, rounded
 * back). Unscales gradients for loss scaling. */
st_status kernel_scale(const kernel_backend *kb, const st_tensor *x, float factor,
                       const st_stream *stream);

/* out[0] += sum of x[i]^2 over a fp32, bf16 or fp16 buffer, where out is an fp32 tensor of one
 * element in device memory: the engine sums its gradient ranges into one device scalar and
 * all-reduces it from there. The sum over x is accumulated in at least fp32 in an order fixed
 * by x's length alone (the same bits for the same buffer, whatever the threads). */
st_status kernel_sum_squares(const kernel_backend *kb, const st_tensor *out, const st_tensor *x,
                             const st_stream *stream);

/* out[0] += sum of x[i] over an fp32 buffer, out an fp32 scalar in device memory as for
 * kernel_sum_squares, with the same fixed summation order: the step's per-token losses summed
 * where they are, so the host reads one number per step. */
st_status kernel_sum(const kernel_backend *kb, const st_tensor *out, const st_tensor *x,
                     const st_stream *stream);

/* Sets flag[0] (an fp32 tensor of one element in device memory) to 1 when x (fp32, bf16 or
 * fp16) holds an inf or a NaN, and leaves it unchanged otherwise, so one flag collects a whole
 * step's gradients (zero it with stream_memset first). Loss scaling skips a step whose flag is
 * set on any rank. */
st_status kernel_finite_check(const kernel_backend *kb, const st_tensor *flag, const st_tensor *x,
                              const st_stream *stream);

/* ---- Optimizer ----------------------------------------------------------------------------- */

/* The two fp32 values kernel_step_factors writes and kernel_adamw reads (kernel_adamw_step's
 * factors), in this order. */
enum kernel_step_factor { KERNEL_STEP_GRAD_SCALE = 0, KERNEL_STEP_SKIP = 1, KERNEL_STEP_FACTORS };

/* The step's decision, made where its scalars are (device memory), so the host need not read them
 * before AdamW is enqueued. From sumsq (the reduced squared gradient norm, of gradients scaled by
 * loss_scale) and flag (the reduced overflow flag), both fp32 scalars, it writes factors (fp32,
 * KERNEL_STEP_FACTORS values):
 *   skip       = 1 when flag != 0 or sumsq is not finite (an overflow, or a diverged step), else 0;
 *   grad_scale = clip(sqrt(sumsq) / loss_scale) / loss_scale in double, rounded to fp32, with
 *                clip(norm) = min(1, max_norm / (norm + 1e-6)) (torch.nn.utils.clip_grad_norm_'s
 *                coefficient) and 1 when max_norm <= 0; 0 when skipped.
 * Every backend runs the one rule of step_rule.h, so the factor has the same bits on every
 * backend. */
st_status kernel_step_factors(const kernel_backend *kb, const st_tensor *factors,
                              const st_tensor *sumsq, const st_tensor *flag, double max_norm,
                              double loss_scale, const st_stream *stream);

/* The scalars of one AdamW step (PyTorch's torch.optim.AdamW, decoupled decay applied first,
 * bias-corrected moments), the same for every range of the step:
 *   g = grad * grad_scale;  p -= lr * wd * p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)
 * grad_scale folds the clipping coefficient and 1 / loss scale (or comes from `factors`). */
typedef struct kernel_adamw_step {
  float lr, beta1, beta2, eps;
  float grad_scale;
  int step; /* counts from 1 */
  /* NULL, or KERNEL_STEP_FACTORS fp32 values in the memory of the op's device (kernel_step_factors
   * writes them): read when the op runs, in place of grad_scale, and a non-zero skip leaves every
   * buffer untouched. The host enqueues the update without reading the step's scalars. */
  const float *factors;
} kernel_adamw_step;

/* A run of elements that one parameter owns inside the range: [begin, begin + count) with its
 * weight decay (non-zero only for tensors of rank >= 2). */
typedef struct kernel_adamw_segment {
  int64_t begin, count;
  float weight_decay;
} kernel_adamw_segment;

/* AdamW over one flat range of n elements in one pass (one launch per unit on CUDA, not one per
 * parameter): master, m and v (fp32, n each) updated in place from grad (fp32, bf16 or fp16,
 * n); when param is not NULL (n elements of fp32, bf16 or fp16), it receives the updated master
 * rounded to its dtype. Only the elements inside the segments are touched (the padding between
 * parameters is not); segments are sorted, disjoint, inside [0, n), any number of them. On CUDA
 * a call with more than 64 non-empty segments makes the host wait for it (its table goes through
 * a region the backend shares between streams); with fewer, none waits. */
st_status kernel_adamw(const kernel_backend *kb, const st_tensor *param, const st_tensor *master,
                       const st_tensor *m, const st_tensor *v, const st_tensor *grad,
                       const kernel_adamw_step *step, const kernel_adamw_segment *segments,
                       int segment_count, const st_stream *stream);

#endif /* ST_KERNELS_KERNELS_H */
