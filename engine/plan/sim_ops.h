/* sim_ops.h - the compute of one GPT micro-batch as a list of kernel calls per phase, each
 * with its FLOPs and the bytes it moves, and the roofline time of a call on a device:
 *
 *   roofline = max(flops / peak, bytes / mem_bw)
 *   time = max(roofline / efficiency[class](size), flops / peak) + op_overhead
 *
 * (the class's one efficiency, or its curve's value at the call's size: its roofline time, or
 * for a GEMM its smallest dimension where the matmul curve is keyed by it: sim_hw.h). An
 * efficiency above 1 (measured for memory-bound calls whose bytes stay in cache) shortens the
 * memory-bound part only: no call runs faster than its FLOPs at the peak.
 *
 * Two op lists: the CPU backend's (kernels/cpu: fp32, every op a separate pass, gradients
 * accumulated into zero-filled buffers, attention over dense T x T scores, twice the causal
 * work) and the fused list of DESIGN.md's CUDA backend (bias and GELU epilogues, LayerNorm
 * fused with the residual add, one classifier pass, causal flash attention, activations in the
 * param dtype). Shapes are those of one tensor-parallel rank: the attention and MLP inner
 * widths are divided by tp, the embeddings, norms and LM head are not (they are replicated).
 *
 * It knows nothing of sharding or communication (sim_schedule.c adds those). */
#ifndef ST_ENGINE_PLAN_SIM_OPS_H
#define ST_ENGINE_PLAN_SIM_OPS_H

#include <stdint.h>

#include "engine/model/gpt_config.h"
#include "engine/model/gpt_recompute.h"
#include "engine/plan/sim_hw.h"

typedef enum sim_kind {
  SIM_K_MATMUL_FWD, /* out[m, n] = inp[m, k] @ w[k, n] (+ bias) */
  SIM_K_MATMUL_BWD, /* dinp[m, k] += dout @ w^T, dw[k, n] += inp^T @ dout (+ bias sums) */
  SIM_K_HEAD_FWD,   /* logits[m, n = padded vocab] = inp[m, k = C] @ wte^T */
  SIM_K_HEAD_BWD,
  SIM_K_LN_FWD, /* m rows of n channels; d = 1: without the residual add (fused kernels) */
  SIM_K_LN_BWD,
  SIM_K_GELU_FWD, /* m x n elements (k: the fan-in of the layer that produced them) */
  SIM_K_GELU_BWD,
  SIM_K_RESIDUAL,  /* m x n */
  SIM_K_ATTN_FWD,  /* batch m, heads n, sequence k, head size d */
  SIM_K_ATTN_BWD,  /* same dims */
  SIM_K_EMBED_FWD, /* m rows of n channels */
  SIM_K_EMBED_BWD,
  SIM_K_CE_FWD, /* classifier losses; m rows, n padded vocabulary, d real vocabulary */
  SIM_K_CE_BWD, /* classifier losses and gradient in one call (same dims) */
  SIM_K_ZERO,   /* m x n elements zero-filled */
  SIM_K_ADAMW,  /* m elements of the owned shard: gradients of n bytes, params of k bytes */
  SIM_K_SUMSQ,  /* m gradient elements of n bytes: the squared norm's sum */
  SIM_K_CAST,   /* m elements from n bytes to k bytes each */
  SIM_K_COUNT
} sim_kind;

typedef struct sim_op {
  sim_kind kind;
  sim_op_class cls;
  const char *label;  /* the layer it belongs to: "qkv", "ln1", "head", ... */
  int64_t m, n, k, d; /* per kind above; matmuls: d = 1 marks the GELU epilogue (fused) */
  int bias;           /* matmuls: with a bias (its sums in the backward) */
  double flops;       /* arithmetic; exp/tanh count as one */
  double bytes;       /* read + written, as the kernel's passes over memory */
} sim_op;

/* The phases of a micro-batch, in the order a unit meets them. */
typedef enum sim_phase {
  SIM_EMBED_FWD,
  SIM_BLOCK_FWD,
  SIM_FINAL_FWD, /* final LayerNorm, LM head, loss */
  SIM_FINAL_BWD,
  SIM_BLOCK_RECOMPUTE, /* what activation recompute computes again before a block's backward */
  SIM_BLOCK_BWD,
  SIM_EMBED_BWD,
  SIM_PHASE_COUNT
} sim_phase;

typedef struct sim_shape {
  gpt_config cfg; /* finished */
  int B, T;       /* micro-batch: sequences and tokens per sequence */
  int tp;
  int act_bytes; /* bytes per activation element: 4 on the CPU, the param dtype's when fused */
  sim_kernels kernels;
  gpt_recompute recompute; /* SIM_BLOCK_RECOMPUTE's ops ({0}: none) */
} sim_shape;

enum { SIM_MAX_PHASE_OPS = 32 };

/* The kernel calls of `phase` for one micro-batch on one tp rank, in order. Returns the count
 * (at most SIM_MAX_PHASE_OPS). */
int sim_phase_ops(const sim_shape *s, sim_phase phase, sim_op *ops);

/* One op of `kind` with these dims, its flops and bytes filled in for the shape's kernels. */
sim_op sim_op_make(const sim_shape *s, sim_kind kind, const char *label, int64_t m, int64_t n,
                   int64_t k, int64_t d, int bias);

/* The smallest of a GEMM call's m, n and k (matmuls and the LM head); 0 for other ops. */
double sim_op_gemm_dim(const sim_op *op);

/* A call's roofline time at efficiency 1, with `peak` the FLOP/s of its compute dtype. */
double sim_op_roofline(const sim_hardware *hw, const sim_op *op, double peak);

/* The time of a call (formula above), with `peak` the FLOP/s of its compute dtype. */
double sim_op_time(const sim_hardware *hw, const sim_op *op, double peak);

/* A memory-bound op of class `cls` moving `bytes` (optimizer passes, casts, fills). */
double sim_bytes_time(const sim_hardware *hw, sim_op_class cls, double bytes);

/* The time of a phase on a device; adds each op's time to by_class[op.cls] when given. */
double sim_phase_time(const sim_hardware *hw, const sim_shape *s, sim_phase phase, double peak,
                      double *by_class);

#endif /* ST_ENGINE_PLAN_SIM_OPS_H */
