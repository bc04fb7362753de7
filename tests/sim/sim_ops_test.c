/* sim_ops_test.c - the CPU op list against the calls the engine makes (gpt_forward.c,
 * gpt_backward.c, gpt_head.c, written out here by hand in their order), and the FLOPs and bytes
 * of the CPU kernels' passes against counts worked out by hand from kernels/cpu (each case's
 * comment lists what the kernel reads and writes), plus the roofline time of a call at a class's
 * one efficiency and on its curve. */
#include "engine/plan/sim_ops.h"

#include <math.h>
#include <string.h>

#include "tests/testing.h"

/* fp32 on the CPU kernels; the FLOP and byte cases below need no model. */
static sim_shape cpu_shape(void) {
  sim_shape s;
  memset(&s, 0, sizeof s);
  s.act_bytes = 4;
  s.kernels = SIM_KERNELS_CPU;
  return s;
}

/* One CPU op and its FLOPs and bytes worked out by hand (fp32 activations: 4 bytes for each
 * float a comment counts). */
typedef struct hand_case {
  sim_kind kind;
  int64_t m, n, k, d;
  int bias;
  sim_op_class cls;
  double flops, bytes;
} hand_case;

static const hand_case hand_cases[] = {
    /* A matmul forward with bias, m = 2, n = 3, k = 5: the bias copied into every row of out (6
     * written), then sgemm reads inp (10), w (15) and out (6, beta = 1) and writes out (6): 43
     * floats. 60 FLOPs. */
    {SIM_K_MATMUL_FWD, 2, 3, 5, 0, 1, SIM_MATMUL, 60, 172},
    /* Its backward: dinp = dout @ w^T reads dout (6) and w (15) and writes dinp (10, beta = 0);
     * dw += inp^T @ dout reads dout (6) and inp (10) and reads and writes dw (2 x 15); the bias
     * sums read dout (6): 83 floats. Two products of 2 x 3 x 5 multiply-adds: 120 FLOPs.
     * Without the bias 77 floats, and the tied head's backward makes the same passes
     * (dinp = dout @ w, dw += dout^T @ inp). */
    {SIM_K_MATMUL_BWD, 2, 3, 5, 0, 1, SIM_MATMUL, 120, 332},
    {SIM_K_MATMUL_BWD, 2, 3, 5, 0, 0, SIM_MATMUL, 120, 308},
    {SIM_K_HEAD_BWD, 2, 3, 5, 0, 0, SIM_MATMUL, 120, 308},
    /* Attention backward, 1 sequence, 2 heads, T = 4, head size 8: per head dprobs = dout v^T
     * writes T x T, dv += P^T dout reads P, the softmax gradient reads P and reads and writes
     * dprobs, dq and dk read it once each: 7 T x T per head, 2 x 16 x 7 = 224 floats. Rows of 8
     * per token and head (T x heads = 8 of them): dout and v (dprobs), dout read and dv
     * written, k read and dq written, q read and dk written: 8 x 64 = 512 floats. 736
     * floats. FLOPs: per head four products of T x T x 8 multiply-adds, 2 FLOPs each (1024), for
     * 2 heads 2048, and 4 per score for the softmax gradient (2 x 16 x 4 = 128): 2176. */
    {SIM_K_ATTN_BWD, 1, 2, 4, 8, 0, SIM_ATTENTION_BWD, 2176, 2944},
    /* The dGELU in place (kernel_matmul_gelu_backward on the CPU), 3 x 5 elements (k, the
     * fan-in, costs nothing): reads dout and the saved input, writes dout: 45 floats; 16 FLOPs
     * an element. */
    {SIM_K_GELU_BWD, 3, 5, 256, 0, 0, SIM_GELU_BWD, 240, 180},
    /* AdamW over 1000 elements (kernels/cpu/adamw.c): reads the gradient, master, m and v,
     * writes master, m, v and the parameter. fp32 gradients and parameters (n, k = 4 bytes):
     * 4 x 4 + 4 x 4 = 32 bytes an element, 16 FLOPs; bf16 ones: 2 + 12 + 12 + 2 = 28. The
     * gradients' sum of squares reads them once (bf16: 2 bytes), 2 FLOPs an element. */
    {SIM_K_ADAMW, 1000, 4, 4, 0, 0, SIM_OPTIMIZER, 16000, 32000},
    {SIM_K_ADAMW, 1000, 2, 2, 0, 0, SIM_OPTIMIZER, 16000, 28000},
    {SIM_K_SUMSQ, 1000, 2, 0, 0, 0, SIM_GRAD_NORM, 2000, 2000},
};

static void check_hand_cases(void) {
  const sim_shape s = cpu_shape();
  for (size_t i = 0; i < sizeof hand_cases / sizeof hand_cases[0]; i++) {
    const hand_case *c = &hand_cases[i];
    const sim_op op = sim_op_make(&s, c->kind, "op", c->m, c->n, c->k, c->d, c->bias);
    CHECK_MSG(op.cls == c->cls && op.flops == c->flops && op.bytes == c->bytes,
              "case %zu (kind %d): class %d, %.0f FLOPs, %.0f bytes; by hand %d, %.0f, %.0f", i,
              (int)c->kind, (int)op.cls, op.flops, op.bytes, (int)c->cls, c->flops, c->bytes);
  }
}

/* The roofline: 4 GFLOP at 2 TFLOP/s is 2 ms, 1 GB at 1 TB/s 1 ms; the larger over the class's
 * efficiency 0.5, plus the 1 us overhead: 4.001 ms. The memory side rules a copy-sized op. */
static void check_roofline(void) {
  sim_hardware hw;
  memset(&hw, 0, sizeof hw);
  hw.mem_bw = 1e12;
  hw.op_overhead = 1e-6;
  for (int c = 0; c < SIM_CLASS_COUNT; c++) hw.efficiency[c] = 0.5;
  sim_op op = {.cls = SIM_MATMUL, .flops = 4e9, .bytes = 1e9};
  CHECK_NEAR(sim_op_time(&hw, &op, 2e12), 4.001e-3, 1e-15);
  op.bytes = 3e9;
  CHECK_NEAR(sim_op_time(&hw, &op, 2e12), 6.001e-3, 1e-15);
}

/* A class curve by roofline time: 0.4 at 1 ms, 0.8 at 4 ms. A 4 GFLOP matmul at 2 TFLOP/s has a
 * 2 ms roofline (its 1 GB at 1 TB/s, 1 ms, is the smaller), halfway between the points in
 * log(time): 0.6, so 2 / 0.6 ms plus the 1 us overhead. A pass of 0.5 GB (0.5 ms, below the
 * first point) runs at 0.4: 1.25 ms; one of 8 GB (8 ms, above the last) at 0.8: 10 ms. A class
 * without a curve keeps its one efficiency. */
static void check_class_curve(void) {
  sim_hardware hw;
  memset(&hw, 0, sizeof hw);
  hw.mem_bw = 1e12;
  hw.op_overhead = 1e-6;
  for (int c = 0; c < SIM_CLASS_COUNT; c++) hw.efficiency[c] = 0.5;
  hw.efficiency_curve[SIM_MATMUL] =
      (sim_curve){.points = 2, .size = {1e-3, 4e-3}, .efficiency = {0.4, 0.8}};
  const sim_op op = {.cls = SIM_MATMUL, .flops = 4e9, .bytes = 1e9};
  CHECK_NEAR(sim_op_time(&hw, &op, 2e12), 2e-3 / 0.6 + 1e-6, 1e-15);
  CHECK_NEAR(sim_bytes_time(&hw, SIM_MATMUL, 5e8), 1.25e-3 + 1e-6, 1e-15);
  CHECK_NEAR(sim_bytes_time(&hw, SIM_MATMUL, 8e9), 10e-3 + 1e-6, 1e-15);
  CHECK_NEAR(sim_bytes_time(&hw, SIM_OPTIMIZER, 8e9), 16e-3 + 1e-6, 1e-15);
}

/* The matmul curve by the GEMM's smallest dimension: 0.5 at 64, 0.9 at 256. A 64 x 512 x 1536
 * forward (m = 64) runs at 0.5, a 1024 x 128 x 256 one at 128, halfway in log(dim): 0.7, and
 * the LM head's backward of 1024 rows, 256 channels and a 50304 vocabulary at 256: 0.9. Each
 * time is its roofline over that, the roofline computed by hand from the op's FLOPs and bytes. */
static void check_dim_curve(void) {
  sim_hardware hw;
  memset(&hw, 0, sizeof hw);
  hw.mem_bw = 1e12;
  for (int c = 0; c < SIM_CLASS_COUNT; c++) hw.efficiency[c] = 0.5;
  hw.efficiency_curve[SIM_MATMUL] =
      (sim_curve){.points = 2, .size = {64, 256}, .efficiency = {0.5, 0.9}};
  hw.efficiency_key[SIM_MATMUL] = SIM_KEY_GEMM_DIM;
  const sim_shape s = cpu_shape();
  const struct {
    sim_kind kind;
    int64_t m, n, k;
    double dim, efficiency;
  } cases[] = {{SIM_K_MATMUL_FWD, 64, 1536, 512, 64, 0.5},
               {SIM_K_MATMUL_BWD, 1024, 128, 256, 128, 0.7},
               {SIM_K_HEAD_BWD, 1024, 50304, 256, 256, 0.9}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const sim_op op =
        sim_op_make(&s, cases[i].kind, "op", cases[i].m, cases[i].n, cases[i].k, 0, 0);
    CHECK_NEAR(sim_op_gemm_dim(&op), cases[i].dim, 0);
    const double roofline = fmax(op.flops / 2e12, op.bytes / 1e12);
    CHECK_NEAR(sim_op_roofline(&hw, &op, 2e12), roofline, 1e-18);
    CHECK_NEAR(sim_op_time(&hw, &op, 2e12) * cases[i].efficiency, roofline, 1e-15);
  }
  /* Not a GEMM: no dimension. */
  const sim_op norm = sim_op_make(&s, SIM_K_LN_FWD, "ln", 1024, 256, 0, 0, 0);
  CHECK_NEAR(sim_op_gemm_dim(&norm), 0, 0);
}

typedef struct expected_op {
  sim_kind kind;
  const char *label;
} expected_op;

static void check_list(const sim_shape *s, sim_phase phase, const expected_op *want, int count) {
  sim_op ops[SIM_MAX_PHASE_OPS];
  const int n = sim_phase_ops(s, phase, ops);
  CHECK_EQ_INT(n, count);
  for (int i = 0; i < n && i < count; i++) {
    CHECK_MSG(ops[i].kind == want[i].kind && strcmp(ops[i].label, want[i].label) == 0,
              "phase %d op %d: %s (kind %d), the engine calls %s (kind %d)", (int)phase, i,
              ops[i].label, (int)ops[i].kind, want[i].label, (int)want[i].kind);
  }
}

/* A block as the engine runs it on the CPU. Forward (gpt_forward.c): the opening norm, whose
 * residual add (the previous block's res3, a separate pass on the CPU) is counted as this list's
 * res3; qkv; attention; attproj; the norm with res2's add fused (res2's pass, then the norm);
 * fc with its GELU epilogue (sgemm, then gelu.c's loop); fcproj. Backward (gpt_backward.c):
 * fcproj's backward (a layer's backward writes its input's gradient: nothing zeroed before);
 * fc's GELU backward (the dGELU in place, then the products); ln2; attproj; attention (it
 * writes dqkv); qkv; ln1. The head (gpt_head.c): per chunk the logits, the classifier's losses
 * and gradient, the head's backward (its rows of dln written); then dres zeroed and the final
 * norm's backward. */
static void check_cpu_lists(void) {
  sim_shape s = cpu_shape();
  s.cfg = (gpt_config){.n_layer = 1, .n_head = 4, .n_embd = 64, .vocab = 256, .max_seq = 16};
  CHECK_OK(gpt_config_finish(&s.cfg, 1));
  s.B = 2;
  s.T = 16;
  s.tp = 1;
  const expected_op fwd[] = {{SIM_K_LN_FWD, "ln1"},         {SIM_K_MATMUL_FWD, "qkv"},
                             {SIM_K_ATTN_FWD, "attention"}, {SIM_K_MATMUL_FWD, "attproj"},
                             {SIM_K_RESIDUAL, "res2"},      {SIM_K_LN_FWD, "ln2"},
                             {SIM_K_MATMUL_FWD, "fc"},      {SIM_K_GELU_FWD, "gelu"},
                             {SIM_K_MATMUL_FWD, "fcproj"},  {SIM_K_RESIDUAL, "res3"}};
  check_list(&s, SIM_BLOCK_FWD, fwd, (int)(sizeof fwd / sizeof fwd[0]));
  const expected_op bwd[] = {{SIM_K_MATMUL_BWD, "fcproj"},  {SIM_K_GELU_BWD, "gelu"},
                             {SIM_K_MATMUL_BWD, "fc"},      {SIM_K_LN_BWD, "ln2"},
                             {SIM_K_MATMUL_BWD, "attproj"}, {SIM_K_ATTN_BWD, "attention"},
                             {SIM_K_MATMUL_BWD, "qkv"},     {SIM_K_LN_BWD, "ln1"}};
  check_list(&s, SIM_BLOCK_BWD, bwd, (int)(sizeof bwd / sizeof bwd[0]));
  const expected_op final_fwd[] = {
      {SIM_K_LN_FWD, "ln_f"}, {SIM_K_HEAD_FWD, "head"}, {SIM_K_CE_BWD, "loss"}};
  check_list(&s, SIM_FINAL_FWD, final_fwd, 3);
  const expected_op final_bwd[] = {
      {SIM_K_HEAD_BWD, "head"}, {SIM_K_ZERO, "dres"}, {SIM_K_LN_BWD, "ln_f"}};
  check_list(&s, SIM_FINAL_BWD, final_bwd, 3);
}

int main(void) {
  check_hand_cases();
  check_roofline();
  check_class_curve();
  check_dim_curve();
  check_cpu_lists();
  return test_finish("sim_ops_test");
}
