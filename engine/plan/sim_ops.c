/* sim_ops.c - the op lists and their roofline costs (see sim_ops.h). The byte counts follow the
 * kernels' passes: the kernels/cpu sources for the CPU list (e.g. a matmul with a bias first copies
 * the bias into every output row, then sgemm reads the output back; the LayerNorm backward
 * reads its input twice, once per row and once per column block), DESIGN.md's fused op
 * vocabulary for the other. What a pass costs beyond its bytes and flops (the exp in the
 * softmax, the tanh in GELU, sgemm below its peak) is the per-class efficiency's business. */
#include "engine/plan/sim_ops.h"

#include <math.h>

static double cost_matmul(const sim_shape *s, sim_kind kind, double m, double n, double k, int bias,
                          int gelu_epilogue, double *bytes) {
  const double a = s->act_bytes;
  const int fwd = kind == SIM_K_MATMUL_FWD || kind == SIM_K_HEAD_FWD;
  if (s->kernels == SIM_KERNELS_CPU) {
    if (fwd) {
      *bytes = a * (m * k + k * n + m * n) + (bias ? 2 * a * m * n : 0);
    } else {
      /* dinp: read dout and w, write dinp; dw: read dout and inp, read and write dw; the bias
       * sums read dout once more. */
      *bytes =
          a * (m * n + k * n + m * k) + a * (m * n + m * k + 2 * k * n) + (bias ? a * m * n : 0);
    }
  } else {
    *bytes = fwd ? a * (m * k + k * n + m * n) + (gelu_epilogue ? a * m * n : 0)
                 : 2 * a * (m * n + k * n + m * k) + (gelu_epilogue ? a * m * n : 0);
  }
  return (fwd ? 2 : 4) * m * n * k;
}

/* Attention over `heads` heads of size d for `batch` sequences of T tokens. The CPU computes
 * full T x T scores (two products forward, four backward) and passes over them: written by
 * sgemm, softmaxed in place, read by the next product; backward: dprobs written, probs read
 * twice, the softmax gradient in place, read by two products. Its rows of d: forward q, k, v
 * read and out written; backward dout and v read by dprobs, dout again by dv, k by dq and q by
 * dk, and dv, dq, dk each written (sgemm writes dqkv, beta = 0). Flash attention does the
 * causal half, recomputes the scores in the backward (five products) and never stores T x T. */
static double cost_attention(const sim_shape *s, int backward, double batch, double heads, double T,
                             double d, double *bytes) {
  const double a = s->act_bytes, square = batch * heads * T * T, rows = batch * T * heads * d;
  if (s->kernels == SIM_KERNELS_CPU) {
    *bytes = backward ? a * 7 * square + a * 8 * rows : a * 4 * square + a * 4 * rows;
    return backward ? 8 * square * d + 4 * square : 4 * square * d + 5 * square;
  }
  *bytes = backward ? a * 8 * rows : a * 4 * rows;
  return backward ? 5 * square * d : 2 * square * d;
}

sim_op sim_op_make(const sim_shape *s, sim_kind kind, const char *label, int64_t m, int64_t n,
                   int64_t k, int64_t d, int bias) {
  sim_op op = {.kind = kind, .label = label, .m = m, .n = n, .k = k, .d = d, .bias = bias};
  const double a = s->act_bytes, mn = (double)m * (double)n;
  const int cpu = s->kernels == SIM_KERNELS_CPU;
  switch (kind) {
    case SIM_K_MATMUL_FWD:
    case SIM_K_MATMUL_BWD:
    case SIM_K_HEAD_FWD:
    case SIM_K_HEAD_BWD:
      op.cls = SIM_MATMUL;
      /* Fused: the MLP up-projection writes GELU's input and output (forward), and its
       * backward first turns the gradient of GELU's output into that of its input
       * (kernel_matmul_gelu_backward's dGELU pass over [m, n]). */
      op.flops =
          cost_matmul(s, kind, (double)m, (double)n, (double)k, bias, !cpu && d == 1, &op.bytes);
      break;
    case SIM_K_LN_FWD:
      op.cls = SIM_NORM_FWD;
      op.flops = 8 * mn;
      /* fused: + the residual add, unless d = 1 */
      op.bytes = cpu ? a * 2 * mn + 8.0 * (double)m : a * (d == 1 ? 2 : 4) * mn;
      break;
    case SIM_K_LN_BWD:
      op.cls = SIM_NORM_BWD;
      op.flops = 12 * mn;
      op.bytes = cpu ? a * 6 * mn : a * 5 * mn;
      break;
    case SIM_K_GELU_FWD:
      op.cls = SIM_GELU_FWD;
      op.flops = 10 * mn;
      op.bytes = a * 2 * mn;
      break;
    case SIM_K_GELU_BWD:
      /* Only the CPU list has it: the engine's dGELU (kernel_matmul_gelu_backward) overwrites
       * dout in place from dout and the saved input. */
      op.cls = SIM_GELU_BWD;
      op.flops = 16 * mn;
      op.bytes = a * 3 * mn;
      break;
    case SIM_K_RESIDUAL:
      op.cls = SIM_ELEMENTWISE;
      op.flops = mn;
      op.bytes = a * 3 * mn;
      break;
    case SIM_K_ATTN_FWD:
    case SIM_K_ATTN_BWD:
      op.cls = kind == SIM_K_ATTN_FWD ? SIM_ATTENTION_FWD : SIM_ATTENTION_BWD;
      op.flops = cost_attention(s, kind == SIM_K_ATTN_BWD, (double)m, (double)n, (double)k,
                                (double)d, &op.bytes);
      break;
    case SIM_K_EMBED_FWD:
      op.cls = SIM_ELEMENTWISE;
      op.flops = mn;
      op.bytes = a * 3 * mn;
      break;
    case SIM_K_EMBED_BWD:
      op.cls = SIM_ELEMENTWISE;
      op.flops = 2 * mn;
      op.bytes = a * 5 * mn;
      break;
    case SIM_K_CE_FWD:
      /* CPU: a max pass and an exp pass over the real vocabulary (losses only, as evaluation
       * runs it). Fused: the classifier reads the logits once and writes their gradient. */
      op.cls = SIM_LOSS_FWD;
      op.flops = cpu ? 3.0 * (double)m * (double)d : 6.0 * (double)m * (double)d;
      op.bytes = a * 2 * (cpu ? (double)m * (double)d : mn);
      break;
    case SIM_K_CE_BWD:
      /* CPU, the training forward's one classifier call: the statistics and the losses, then
       * exp, scale and write the gradient per element. */
      op.cls = SIM_LOSS_BWD;
      op.flops = 6.0 * (double)m * (double)d;
      op.bytes = a * (3 * (double)m * (double)d + mn);
      break;
    case SIM_K_ADAMW:
      /* Reads the gradient, master, m and v; writes master, m, v and the param. */
      op.cls = SIM_OPTIMIZER;
      op.flops = 16.0 * (double)m;
      op.bytes = (double)m * ((double)n + 24.0 + (double)k);
      break;
    case SIM_K_SUMSQ:
      op.cls = SIM_GRAD_NORM;
      op.flops = 2.0 * (double)m;
      op.bytes = (double)m * (double)n;
      break;
    case SIM_K_CAST:
      op.cls = SIM_CAST;
      op.flops = (double)m;
      op.bytes = (double)m * (double)(n + k);
      break;
    case SIM_K_ZERO:
    default:
      op.cls = SIM_FILL;
      op.flops = 0;
      op.bytes = a * mn;
      break;
  }
  return op;
}

#define OP(kind, label, m, nn, k, d, bias) ops[n++] = sim_op_make(s, kind, label, m, nn, k, d, bias)

/* A block's forward up to its MLP's GELU, opening with a norm that adds the residual or (the
 * recompute's, plain_norm) does not. */
static int block_ops_to_gelu(const sim_shape *s, int plain_norm, sim_op *ops) {
  const int64_t B = s->B, T = s->T, BT = B * T, C = s->cfg.n_embd, CL = C / s->tp;
  const int64_t NH = s->cfg.n_head / s->tp, hs = C / s->cfg.n_head;
  const int cpu = s->kernels == SIM_KERNELS_CPU;
  int n = 0;
  OP(SIM_K_LN_FWD, "ln1", BT, C, 0, plain_norm, 0);
  OP(SIM_K_MATMUL_FWD, "qkv", BT, 3 * CL, C, 0, 1);
  OP(SIM_K_ATTN_FWD, "attention", B, NH, T, hs, 0);
  OP(SIM_K_MATMUL_FWD, "attproj", BT, C, CL, 0, 1);
  if (cpu) OP(SIM_K_RESIDUAL, "res2", BT, C, 0, 0, 0);
  OP(SIM_K_LN_FWD, "ln2", BT, C, 0, 0, 0);
  OP(SIM_K_MATMUL_FWD, "fc", BT, 4 * CL, C, 1, 1);          /* d = 1 marks the GELU epilogue */
  if (cpu) OP(SIM_K_GELU_FWD, "gelu", BT, 4 * CL, C, 0, 0); /* k: fan-in of its input */
  return n;
}

int sim_phase_ops(const sim_shape *s, sim_phase phase, sim_op *ops) {
  const gpt_config *c = &s->cfg;
  const int64_t B = s->B, T = s->T, BT = B * T, C = c->n_embd, CL = C / s->tp;
  const int64_t NH = c->n_head / s->tp, hs = C / c->n_head, V = c->vocab_padded;
  const int cpu = s->kernels == SIM_KERNELS_CPU;
  int n = 0;
  switch (phase) {
    case SIM_EMBED_FWD: OP(SIM_K_EMBED_FWD, "embedding", BT, C, 0, 0, 0); break;
    case SIM_BLOCK_FWD:
      n += block_ops_to_gelu(s, 0, ops + n);
      OP(SIM_K_MATMUL_FWD, "fcproj", BT, C, 4 * CL, 0, 1);
      if (cpu) OP(SIM_K_RESIDUAL, "res3", BT, C, 0, 0, 0);
      break;
    case SIM_FINAL_FWD:
      /* The training forward's classifier leaves the logits' gradient for the backward. */
      OP(SIM_K_LN_FWD, "ln_f", BT, C, 0, 0, 0);
      OP(SIM_K_HEAD_FWD, "head", BT, V, C, 0, 0);
      OP(cpu ? SIM_K_CE_BWD : SIM_K_CE_FWD, "loss", BT, V, 0, c->vocab, 0);
      break;
    case SIM_FINAL_BWD:
      /* The engine runs the head's backward inside its training forward, chunk by chunk after
       * each chunk's loss (gpt_head.c); the replay issues no collective between the two
       * phases, so counting them here moves no time. */
      OP(SIM_K_HEAD_BWD, "head", BT, V, C, 0, 0);
      if (cpu) OP(SIM_K_ZERO, "dres", BT, C, 0, 0, 0);
      OP(SIM_K_LN_BWD, "ln_f", BT, C, 0, 0, 0);
      break;
    case SIM_BLOCK_RECOMPUTE:
      /* engine/model/gpt_recompute.c: the GELU from its saved input, or the block's forward up
       * to its GELU from the kept input */
      if (s->recompute == GPT_RECOMPUTE_GELU) OP(SIM_K_GELU_FWD, "gelu", BT, 4 * CL, C, 0, 0);
      if (s->recompute == GPT_RECOMPUTE_BLOCK) n += block_ops_to_gelu(s, 1, ops + n);
      break;
    case SIM_BLOCK_BWD:
      /* A linear layer's and the attention's backwards write their input's gradient. */
      OP(SIM_K_MATMUL_BWD, "fcproj", BT, C, 4 * CL, 0, 1);
      if (cpu) OP(SIM_K_GELU_BWD, "gelu", BT, 4 * CL, C, 0, 0); /* the dGELU epilogue, in place */
      OP(SIM_K_MATMUL_BWD, "fc", BT, 4 * CL, C, 1, 1);          /* fused: d = 1, the dGELU pass */
      OP(SIM_K_LN_BWD, "ln2", BT, C, 0, 0, 0);
      OP(SIM_K_MATMUL_BWD, "attproj", BT, C, CL, 0, 1);
      OP(SIM_K_ATTN_BWD, "attention", B, NH, T, hs, 0);
      OP(SIM_K_MATMUL_BWD, "qkv", BT, 3 * CL, C, 0, 1);
      OP(SIM_K_LN_BWD, "ln1", BT, C, 0, 0, 0);
      break;
    case SIM_EMBED_BWD: OP(SIM_K_EMBED_BWD, "embedding", BT, C, 0, 0, 0); break;
    default: break;
  }
  return n;
}
#undef OP

double sim_op_gemm_dim(const sim_op *op) {
  switch (op->kind) {
    case SIM_K_MATMUL_FWD:
    case SIM_K_MATMUL_BWD:
    case SIM_K_HEAD_FWD:
    case SIM_K_HEAD_BWD: {
      const int64_t mn = op->m < op->n ? op->m : op->n;
      return (double)(mn < op->k ? mn : op->k);
    }
    default: return 0;
  }
}

double sim_op_roofline(const sim_hardware *hw, const sim_op *op, double peak) {
  const double compute = op->flops / peak, memory = op->bytes / hw->mem_bw;
  return compute > memory ? compute : memory;
}

double sim_op_time(const sim_hardware *hw, const sim_op *op, double peak) {
  const sim_call_size size = {sim_op_roofline(hw, op, peak), sim_op_gemm_dim(op)};
  /* An efficiency above 1 can beat the bandwidth's roofline (caches, updates in place), never
   * the peak: no call computes its FLOPs faster, whatever the file or --efficiency-scale says. */
  const double t = size.roofline_s / sim_hw_class_efficiency(hw, op->cls, size);
  return fmax(t, op->flops / peak) + hw->op_overhead;
}

double sim_bytes_time(const sim_hardware *hw, sim_op_class cls, double bytes) {
  const sim_call_size size = {bytes / hw->mem_bw, 0};
  return size.roofline_s / sim_hw_class_efficiency(hw, cls, size) + hw->op_overhead;
}

double sim_phase_time(const sim_hardware *hw, const sim_shape *s, sim_phase phase, double peak,
                      double *by_class) {
  sim_op ops[SIM_MAX_PHASE_OPS];
  const int n = sim_phase_ops(s, phase, ops);
  double total = 0;
  for (int i = 0; i < n; i++) {
    double t = sim_op_time(hw, &ops[i], peak);
    if (by_class) by_class[ops[i].cls] += t;
    total += t;
  }
  return total;
}
