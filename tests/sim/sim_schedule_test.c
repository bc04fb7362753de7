/* sim_schedule_test.c - the step replay against timelines worked out by hand (the comments
 * walk through each), the op list against the 6 N FLOPs-per-token rule, the MFU's FLOPs against
 * the trainer's count worked out by hand, the offloaded
 * optimizer's costs against its byte counts, activation recompute's ops and its place in the
 * replay, and plan --fit's search against its contract (sorted, fitting, runnable, offloading
 * or recomputing only where that is what fits, at batches and GPU counts at the edges of its
 * search), a step without communication exposing nothing but rounding, never a negative time,
 * and steps that cannot be reported (a mesh past 2^20 ranks, an infinite step, an MFU of 0 or
 * above 1) refused or bounded.
 *
 * The hand cases: 2 blocks (units: embedding, two blocks, final), every unit's forward 1 s and
 * backward 2 s, stage 3 gathers of 0.5 s and reduce-scatters of 0.25 s, prefetch 1. */
#include "engine/plan/sim_schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/plan/sim_fit.h"
#include "engine/plan/sim_ops.h"
#include "tests/testing.h"

static plan_input hand_input(int stage, int reshard) {
  plan_input in = {.R = 1,
                   .S = 2,
                   .T = 1,
                   .stage = stage,
                   .micro_batch = 1,
                   .seq_len = 1,
                   .grad_accum = 1,
                   .prefetch = 1,
                   .reshard_after_forward = reshard};
  in.cfg.n_layer = 2;
  return in;
}

static sim_costs hand_costs(int overlap) {
  sim_costs c;
  memset(&c, 0, sizeof c);
  for (int k = 0; k < 3; k++) {
    c.fwd[k] = c.fwd_class[k][SIM_MATMUL] = 1.0;
    c.bwd[k] = c.bwd_class[k][SIM_MATMUL] = 2.0;
    c.gather[k] = 0.5;
    c.reduce_scatter[k] = 0.25;
  }
  c.slowdown = 1;
  c.overlap = overlap;
  return c;
}

/* Stage 3, resharding, overlap. Forward: the embedding's gather is waited for in full (0.5 s
 * exposed), each later gather runs under the previous unit's forward. Forward ends at 4.5.
 * Backward: the final unit's backward ends at 6.5 and queues its reduce-scatter (6.5-6.75);
 * block 2 was resharded, so its gather is queued behind that reduce-scatter (6.75-7.25): 0.75 s
 * exposed. Block 1's gather runs under block 2's backward; the embedding stayed gathered. The
 * last reduce-scatter (13.25-13.5) is waited for at the end: 0.25 s. Step 13.5 s, compute 12 s,
 * exposed 1.5 s; gathers 6 x 0.5 s (blocks twice), reduce-scatters 4 x 0.25 s. */
static void check_stage3_overlap(void) {
  const plan_input in = hand_input(3, 1);
  const sim_costs c = hand_costs(1);
  sim_result r;
  CHECK_OK(sim_replay(&in, &c, &r));
  CHECK_NEAR(r.step_s, 13.5, 1e-12);
  CHECK_NEAR(r.compute_s, 12.0, 1e-12);
  CHECK_NEAR(r.exposed_s, 1.5, 1e-12);
  CHECK_NEAR(r.comm_s[SIM_COMM_GATHER], 3.0, 1e-12);
  CHECK_NEAR(r.comm_s[SIM_COMM_REDUCE], 1.0, 1e-12);
  CHECK_NEAR(r.class_s[SIM_MATMUL], 12.0, 1e-12);
}

/* The same without resharding: blocks stay gathered into the backward, so only the first
 * gather (0.5) and the last reduce-scatter (0.25) are exposed: 12.75 s, 4 gathers. */
static void check_stage3_no_reshard(void) {
  const plan_input in = hand_input(3, 0);
  const sim_costs c = hand_costs(1);
  sim_result r;
  CHECK_OK(sim_replay(&in, &c, &r));
  CHECK_NEAR(r.step_s, 12.75, 1e-12);
  CHECK_NEAR(r.exposed_s, 0.75, 1e-12);
  CHECK_NEAR(r.comm_s[SIM_COMM_GATHER], 2.0, 1e-12);
}

/* Without overlap (MPI on the CPU) every collective runs while the stream waits: 12 s of
 * compute + 3 s of gathers + 1 s of reduce-scatters. */
static void check_stage3_no_overlap(void) {
  const plan_input in = hand_input(3, 1);
  const sim_costs c = hand_costs(0);
  sim_result r;
  CHECK_OK(sim_replay(&in, &c, &r));
  CHECK_NEAR(r.step_s, 16.0, 1e-12);
  CHECK_NEAR(r.exposed_s, 4.0, 1e-12);
}

/* Stage 0 on 2 x 2 (hybrid), in the engine's order (unit_reduce_handoff: finish the previous
 * unit's reduction, then start this one's). Gradients zeroed first (4 x 0.1 s), no gathers; the
 * forward ends at 4.4, the final unit's backward at 6.4, and its reduce-scatter runs 6.4-6.65
 * under block 2's backward (6.4-8.4). Finishing the final unit's reduction after block 2 is
 * blocking: the replicate all-reduce (0.5 s) and the all-gather of the reduced gradients
 * (0.25 s), to 9.15; only then block 2's reduce-scatter starts (9.15-9.4, under block 1's
 * backward, 9.15-11.15). After block 1 and after the embedding it goes the same way (block 2's
 * reduction finished at 11.9, block 1's at 14.65), so 4 x 0.75 s are exposed in all with the
 * embedding's own below; the embedding's reduce-scatter, started at 14.65 with
 * nothing left to hide it, is waited for in full (0.25 s) before its own replicate all-reduce
 * and all-gather (to 15.65); then the scalars (0.05 s) and AdamW (4 x 0.2 s). Step: 0.4 + 12 +
 * 3 + 0.25 + 0.05 + 0.8 = 16.5 s; exposed 3.3 s; the optimizer phase is its last 0.85 s. */
static void check_stage0_hybrid(void) {
  plan_input in = hand_input(0, 1);
  in.R = 2;
  sim_costs c = hand_costs(1);
  for (int k = 0; k < 3; k++) {
    c.gather[k] = 0; /* unused below stage 3 */
    c.replicate[k] = 0.5;
    c.grad_gather[k] = 0.25;
    c.fill[k] = 0.1;
    c.adamw[k] = 0.2;
  }
  c.scalars = 0.05;
  sim_result r;
  CHECK_OK(sim_replay(&in, &c, &r));
  CHECK_NEAR(r.step_s, 16.5, 1e-12);
  CHECK_NEAR(r.compute_s, 13.2, 1e-12);
  CHECK_NEAR(r.exposed_s, 3.3, 1e-12);
  CHECK_NEAR(r.optimizer_s, 0.85, 1e-12);
  CHECK_NEAR(r.comm_s[SIM_COMM_REPLICATE], 2.0, 1e-12);
  CHECK_NEAR(r.comm_s[SIM_COMM_PUBLISH], 1.0, 1e-12);
  CHECK_NEAR(r.comm_s[SIM_COMM_REDUCE], 1.0, 1e-12);
  /* Three ranks on two compute slots: all compute stretches by 1.5, communication does not
   * (every reduce-scatter but the last still runs under a backward of 3 s). */
  c.slowdown = 1.5;
  CHECK_OK(sim_replay(&in, &c, &r));
  CHECK_NEAR(r.step_s, 1.5 * 13.2 + 3.3, 1e-12);
}

/* Recompute, without overlap (everything adds up): of the 2 blocks only the first recomputes
 * (the last one's activations are in place), so GELU recompute adds its 0.5 s once to the
 * 16 s step. Block recompute adds its 0.5 s and repeats one tp all-reduce (0.1 s), on top of
 * the 8 the blocks make anyway (2 per block forward and backward): 16 + 0.8 + 0.6. */
static void check_recompute_replay(void) {
  plan_input in = hand_input(3, 1);
  sim_costs c = hand_costs(0);
  c.recompute = c.recompute_class[SIM_MATMUL] = 0.5;
  sim_result r;
  in.recompute = GPT_RECOMPUTE_GELU;
  CHECK_OK(sim_replay(&in, &c, &r));
  CHECK_NEAR(r.step_s, 16.5, 1e-12);
  CHECK_NEAR(r.class_s[SIM_MATMUL], 12.5, 1e-12);
  c.tp_all_reduce = 0.1;
  in.recompute = GPT_RECOMPUTE_BLOCK;
  CHECK_OK(sim_replay(&in, &c, &r));
  CHECK_NEAR(r.step_s, 17.4, 1e-12);
  CHECK_NEAR(r.comm_s[SIM_COMM_TP], 0.9, 1e-12);
}

/* Matmul FLOPs of a micro-batch, forward and backward: 6 x (12 C^2 per block + V C for the
 * head) per token, divided by tp for the blocks. The recompute's ops: none for `none`; one
 * GELU over B T x 4C/tp for `gelu`; for `block` the forward's products but the MLP's output
 * projection, 2 x (3 + 1 + 4) C^2 / tp per token, and its attention. */
static void check_op_flops(void) {
  sim_shape s = {.cfg = {.n_layer = 1, .n_head = 4, .n_embd = 64, .vocab = 256, .max_seq = 32},
                 .B = 3,
                 .T = 32,
                 .tp = 1,
                 .act_bytes = 4,
                 .kernels = SIM_KERNELS_CPU};
  for (int tp = 1; tp <= 2; tp++) {
    s.tp = tp;
    CHECK_OK(gpt_config_finish(&s.cfg, tp));
    double block = 0, head = 0;
    for (int ph = 0; ph < SIM_PHASE_COUNT; ph++) {
      sim_op ops[SIM_MAX_PHASE_OPS];
      const int n = sim_phase_ops(&s, (sim_phase)ph, ops);
      for (int i = 0; i < n; i++) {
        if (ops[i].cls != SIM_MATMUL) continue;
        if (ops[i].kind == SIM_K_HEAD_FWD || ops[i].kind == SIM_K_HEAD_BWD) {
          head += ops[i].flops;
        } else {
          block += ops[i].flops;
        }
      }
    }
    const double tokens = 3.0 * 32, C = 64;
    CHECK_NEAR(block, 6 * 12 * C * C * tokens / tp, 1e-6);
    CHECK_NEAR(head, 6 * (double)s.cfg.vocab_padded * C * tokens, 1e-6);

    sim_op ops[SIM_MAX_PHASE_OPS];
    CHECK_EQ_INT(sim_phase_ops(&s, SIM_BLOCK_RECOMPUTE, ops), 0);
    s.recompute = GPT_RECOMPUTE_GELU;
    CHECK_EQ_INT(sim_phase_ops(&s, SIM_BLOCK_RECOMPUTE, ops), 1);
    CHECK(ops[0].kind == SIM_K_GELU_FWD && ops[0].m == 3 * 32 && ops[0].n == 4 * 64 / tp);
    s.recompute = GPT_RECOMPUTE_BLOCK;
    const int n = sim_phase_ops(&s, SIM_BLOCK_RECOMPUTE, ops);
    double recomputed = 0;
    int attention = 0;
    for (int i = 0; i < n; i++) {
      if (ops[i].cls == SIM_MATMUL) recomputed += ops[i].flops;
      attention += ops[i].kind == SIM_K_ATTN_FWD;
    }
    CHECK_NEAR(recomputed, 2 * 8 * C * C * tokens / tp, 1e-6);
    CHECK_EQ_INT(attention, 1);
    s.recompute = GPT_RECOMPUTE_NONE;
  }
}

/* d12 in bf16 at ZeRO-1 on 1 x 8 x 1, 4 sequences of 1024 tokens per rank. */
static plan_input d12_zero1_on_8(void) {
  plan_input in = {.R = 1,
                   .S = 8,
                   .T = 1,
                   .stage = 1,
                   .micro_batch = 4,
                   .grad_accum = 1,
                   .prefetch = 1,
                   .reshard_after_forward = 1,
                   .precision = {ST_BF16, ST_BF16}};
  CHECK_OK(gpt_config_named("d12", &in.cfg));
  CHECK_OK(gpt_config_finish(&in.cfg, 1));
  in.seq_len = in.cfg.max_seq;
  return in;
}

/* The simulator's MFU counts the trainer's FLOPs (gpt_config_flops_per_token): d12 on 8 H100s,
 * ZeRO-1, 4 sequences per rank and 2 micro-batches, is 8 x 4 x 2 = 64 sequences of 1024
 * tokens a step at 6 x 124,439,808 + 6 x 12 x 768 x 1024 = 803,261,952 FLOPs per token; MFU
 * divides them by the step time, the 8 GPUs and the H100's 989 TFLOP/s of dense bf16. */
static void check_model_flops(void) {
  sim_hardware hw;
  CHECK_OK(sim_hw_builtin("h100", &hw));
  plan_input in = d12_zero1_on_8();
  in.grad_accum = 2;
  sim_result r;
  CHECK_OK(sim_step(&hw, &in, &r));
  const double flops = 64.0 * 1024 * 803261952.0;
  CHECK_NEAR(r.model_flops / flops, 1.0, 1e-15);
  CHECK_NEAR(r.mfu / (flops / (r.step_s * 8 * 989e12)), 1.0, 1e-12);
}

/* plan --fit on 8 built-in H100s for d12: sorted by step time, every answer fits, divides the
 * GPUs and the global batch; nothing fits in 0.01 GiB. */
static void check_fit(void) {
  sim_hardware hw;
  CHECK_OK(sim_hw_builtin("h100", &hw));
  fit_request req = {.gpus = 8,
                     .gpu_gib = 80,
                     .global_tokens = 524288,
                     .precision = {ST_BF16, ST_BF16},
                     .max_grad_accum = 64};
  CHECK_OK(gpt_config_named("d12", &req.cfg));
  CHECK_OK(gpt_config_finish(&req.cfg, 1));
  fit_candidate best[10];
  int found = 0;
  fit_stats stats;
  CHECK_OK(sim_fit(&hw, &req, best, 10, &found, &stats));
  CHECK_EQ_INT(found, 10);
  CHECK(stats.fitting >= found && stats.enumerated >= stats.fitting);
  for (int i = 0; i < found; i++) {
    const plan_input *in = &best[i].in;
    CHECK_EQ_INT(in->R * in->S * in->T, 8);
    CHECK_EQ_INT((long long)in->micro_batch * in->R * in->S * in->grad_accum * in->seq_len, 524288);
    CHECK((double)best[i].mp.total <= 80.0 * 1073741824.0);
    CHECK(in->grad_accum <= 64);
    if (i) CHECK(best[i - 1].r.step_s <= best[i].r.step_s * (1 + 1e-6));
  }
  req.gpu_gib = 0.01;
  CHECK_OK(sim_fit(&hw, &req, best, 10, &found, &stats));
  CHECK_EQ_INT(found, 0);
  req.global_tokens = 1000; /* not whole 1024-token sequences */
  CHECK_STATUS(sim_fit(&hw, &req, best, 10, &found, &stats), ST_ERR_INVALID_ARG);
}

/* The offloaded optimizer (--offload optimizer) on a GPU: its AdamW pipelines the chunks of
 * every unit's owned range (K = owned / 2^20 elements for a unit, at least 1) through the copies
 * over the host link, (g + p) bytes an element, and the host update, (g + 24 + p) bytes an
 * element at the host's memory bandwidth: K max(c, h) a unit for c and h its per-chunk times,
 * and once a step the first chunk's min(c, h). With one of the two bandwidths made enormous the
 * other's total is left alone, so their ratio is (g + 24 + p) / (g + p) = 7 in bf16 at equal
 * bandwidths, and the fill is nothing; doubling both halves everything. At a host 7 times faster
 * than the link, c = h: a unit costs its copies' total (the link-only time) and the fill is one
 * chunk of the embedding's copies, K from that total's elements, 4 bytes each at 1 GB/s (d12's
 * embedding: 4.9 M owned elements, 4.7 chunks). The replay adds the fill once. On the CPU, where
 * device memory is host RAM, offloading changes nothing; hardware without a host link cannot
 * simulate it. */
static void check_offload(void) {
  sim_hardware hw;
  CHECK_OK(sim_hw_builtin("h100", &hw));
  plan_input in = d12_zero1_on_8();
  in.offload_optimizer = 1;
  sim_costs link_only, host_only, doubled;
  hw.host_link_bw = 1e9;
  hw.host_mem_bw = 1e30;
  CHECK_OK(sim_costs_of(&hw, &in, &link_only));
  hw.host_link_bw = 1e30;
  hw.host_mem_bw = 1e9;
  CHECK_OK(sim_costs_of(&hw, &in, &host_only));
  for (int k = 0; k < 3; k++) {
    CHECK_NEAR(host_only.adamw[k] / link_only.adamw[k], 7.0, 1e-9);
  }
  CHECK(link_only.adamw_fill < 1e-12 && host_only.adamw_fill < 1e-12);
  sim_costs balanced;
  hw.host_link_bw = 1e9;
  hw.host_mem_bw = 7e9;
  CHECK_OK(sim_costs_of(&hw, &in, &balanced));
  for (int k = 0; k < 3; k++) CHECK_NEAR(balanced.adamw[k], link_only.adamw[k], 1e-12);
  const double owned = link_only.adamw[0] * 1e9 / 4, chunks = owned / (1 << 20);
  CHECK(chunks > 4.5 && chunks < 5);
  CHECK_NEAR(balanced.adamw_fill, link_only.adamw[0] / chunks, 1e-15);
  sim_result with_fill, without_fill;
  CHECK_OK(sim_replay(&in, &balanced, &with_fill));
  balanced.adamw_fill = 0;
  CHECK_OK(sim_replay(&in, &balanced, &without_fill));
  CHECK_NEAR(with_fill.optimizer_s - without_fill.optimizer_s, link_only.adamw[0] / chunks, 1e-12);
  hw.host_link_bw = 2e9;
  hw.host_mem_bw = 4e9;
  sim_costs base;
  CHECK_OK(sim_costs_of(&hw, &in, &base));
  hw.host_link_bw = 4e9;
  hw.host_mem_bw = 8e9;
  CHECK_OK(sim_costs_of(&hw, &in, &doubled));
  for (int k = 0; k < 3; k++) CHECK_NEAR(doubled.adamw[k], base.adamw[k] / 2, 1e-12);
  CHECK_NEAR(doubled.adamw_fill, base.adamw_fill / 2, 1e-15);
  CHECK(base.adamw_fill > 0);
  hw.host_link_bw = 0;
  CHECK_STATUS(sim_costs_of(&hw, &in, &base), ST_ERR_INVALID_ARG);

  hw.kernels = SIM_KERNELS_CPU;
  sim_result resident, offloaded;
  CHECK_OK(sim_step(&hw, &in, &offloaded));
  in.offload_optimizer = 0;
  CHECK_OK(sim_step(&hw, &in, &resident));
  CHECK(offloaded.step_s == resident.step_s);
}

/* The fit of d12 on 8 GPUs of `gib` GiB each, 8 sequences a step, in bf16. */
static fit_request small_d12(double gib) {
  fit_request req = {.gpus = 8,
                     .gpu_gib = gib,
                     .global_tokens = 8 * 1024,
                     .precision = {ST_BF16, ST_BF16},
                     .max_grad_accum = 64};
  CHECK_OK(gpt_config_named("d12", &req.cfg));
  CHECK_OK(gpt_config_finish(&req.cfg, 1));
  return req;
}

/* sim_fit's best (at most `most`) answers for req on hw into best; how many it found. */
static int fit_best(const sim_hardware *hw, const fit_request *req, fit_candidate *best, int most) {
  int found = 0;
  fit_stats stats;
  CHECK_OK(sim_fit(hw, req, best, most, &found, &stats));
  return found;
}

/* plan --fit searches the offload: for d12 on 8 H100s with so little memory (0.5 GiB) that
 * only the offloaded optimizer fits (with block recompute: the planner puts ZeRO-3 at one
 * sequence per rank at 0.63 GiB on the device without the offload, 0.46 GiB with it, the CUDA
 * backend's workspace included), every answer offloads and its device part fits; without a
 * host link in the hardware nothing does. */
static void check_fit_offload(void) {
  sim_hardware hw;
  CHECK_OK(sim_hw_builtin("h100", &hw));
  fit_request req = small_d12(0.5);
  fit_candidate best[4];
  int found = fit_best(&hw, &req, best, 4);
  CHECK(found > 0);
  for (int i = 0; i < found; i++) {
    CHECK(best[i].in.offload_optimizer);
    CHECK(best[i].mp.device_bytes <= 0.5 * 1073741824.0 && best[i].mp.host_bytes > 0);
  }
  hw.host_link_bw = 0;
  CHECK_EQ_INT(fit_best(&hw, &req, best, 4), 0);
}

/* plan --fit searches activation recompute: d12 on 8 H100s without a host link (no offload)
 * and 0.7 GiB each fits only by recomputing whole blocks (ZeRO-3, one sequence per rank: 0.63
 * GiB; with the GELU recompute alone 0.84 GiB), so every answer does; with 80 GiB nothing
 * needs it and the fastest answer recomputes nothing (the recompute's forward costs time). */
static void check_fit_recompute(void) {
  sim_hardware hw;
  CHECK_OK(sim_hw_builtin("h100", &hw));
  hw.host_link_bw = 0;
  fit_request req = small_d12(0.7);
  fit_candidate best[4];
  const int found = fit_best(&hw, &req, best, 4);
  CHECK(found > 0);
  for (int i = 0; i < found; i++) {
    CHECK_EQ_INT(best[i].in.recompute, GPT_RECOMPUTE_BLOCK);
    CHECK(best[i].mp.device_bytes <= 0.7 * 1073741824.0);
  }
  req.gpu_gib = 80;
  CHECK_EQ_INT(fit_best(&hw, &req, best, 1), 1);
  CHECK_EQ_INT(best[0].in.recompute, GPT_RECOMPUTE_NONE);
}

/* One rank, nothing to communicate: nothing is exposed but rounding. The step's time adds the
 * same compute times along the timeline that compute_s adds class by class; over these tenths
 * (none exact in binary) the two orders round apart either way, and a step an ulp short of its
 * compute must read 0 exposed, never a negative time ("-0.00 ms"). */
static void check_nothing_exposed(void) {
  plan_input in = hand_input(0, 1);
  in.S = 1;
  int short_steps = 0;
  for (int i = 0; i < 64; i++) {
    sim_costs c;
    memset(&c, 0, sizeof c);
    for (int k = 0; k < 3; k++) {
      c.fwd_class[k][SIM_MATMUL] = 0.1 * (1 + (i + k) % 7);
      c.fwd_class[k][SIM_ELEMENTWISE] = 0.1 * (1 + (i / 7 + k) % 5);
      c.fwd[k] = c.fwd_class[k][SIM_MATMUL] + c.fwd_class[k][SIM_ELEMENTWISE];
      c.bwd_class[k][SIM_MATMUL] = 0.3 * (1 + (i + 2 * k) % 3);
      c.bwd[k] = c.bwd_class[k][SIM_MATMUL];
      c.fill[k] = 0.1 * (1 + (i + k) % 2);
      c.adamw[k] = 0.7;
    }
    c.slowdown = 1;
    c.overlap = 1;
    sim_result r;
    CHECK_OK(sim_replay(&in, &c, &r));
    CHECK_MSG(r.exposed_s >= 0.0 && r.exposed_s <= 1e-12 * r.compute_s,
              "case %d: %.17g s exposed without communication", i, r.exposed_s);
    CHECK_MSG(fabs(r.step_s - r.compute_s) <= 1e-12 * r.compute_s,
              "case %d: step %.17g s, compute %.17g s", i, r.step_s, r.compute_s);
    short_steps += r.step_s < r.compute_s;
  }
  CHECK_MSG(short_steps > 0, "no case rounds its step below its compute: the clamp is untested");
}

/* A step that cannot be reported is refused: a mesh past 2^20 ranks (8 x 536870913 x 1 once
 * wrapped to 8 in an int and was simulated as 8 GPUs), a kernel overhead that makes the step
 * infinite, efficiencies so small that the MFU underflows to 0. Efficiencies far above 1 speed
 * up memory-bound calls only: no call computes faster than the peak, so the MFU stays below 1. */
static void check_step_limits(void) {
  sim_hardware hw;
  CHECK_OK(sim_hw_builtin("h100", &hw));
  plan_input in = d12_zero1_on_8();
  in.R = 8;
  in.S = 536870913;
  sim_result r;
  CHECK_STATUS(sim_step(&hw, &in, &r), ST_ERR_INVALID_ARG);
  in = d12_zero1_on_8();
  hw.op_overhead = 1e308;
  CHECK_STATUS(sim_step(&hw, &in, &r), ST_ERR_INVALID_ARG);
  CHECK_OK(sim_hw_builtin("h100", &hw));
  sim_hw_scale_class_efficiency(&hw, 1e-300);
  CHECK_STATUS(sim_step(&hw, &in, &r), ST_ERR_INVALID_ARG);
  CHECK_OK(sim_hw_builtin("h100", &hw));
  sim_hw_scale_class_efficiency(&hw, 1000);
  CHECK_OK(sim_step(&hw, &in, &r));
  CHECK_MSG(r.mfu > 0.5 && r.mfu < 1, "MFU %g with every efficiency x 1000", r.mfu);
}

/* tiny on `gpus` H100s (one per node) with a global batch of `sequences` sequences. */
static fit_request tiny_fit(int gpus, int64_t sequences, double gib) {
  fit_request req = {
      .gpus = gpus, .gpu_gib = gib, .precision = {ST_BF16, ST_BF16}, .max_grad_accum = 64};
  CHECK_OK(gpt_config_named("tiny", &req.cfg));
  CHECK_OK(gpt_config_finish(&req.cfg, 1));
  req.global_tokens = sequences * req.cfg.max_seq;
  return req;
}

/* plan --fit at the edges of its search. 2^32 sequences on 8 GPUs: nothing fits, found at once
 * (the search once tried every micro-batch up to the batch, then cast 2^32 to an int: 0, and
 * divided by it). 720720 sequences on 8 GPUs: 90090 per rank split by at most 64 micro-batches
 * (1430 x 63, ...), though 720720 has more than 64 divisors (the search once kept the first 64,
 * all too small). 10080 GPUs, one a node (tp 1): every one of its 72 divisors is a replicate
 * size, each searched with one micro-batch (10080 sequences) at 7 stage settings (stages 0-2,
 * and stage 3 with prefetch 1 or 2 and resharding on or off) x 2 offloads x 3 recomputes. */
static void check_fit_limits(void) {
  sim_hardware hw;
  CHECK_OK(sim_hw_builtin("h100", &hw));
  hw.gpus_per_node = 1;
  fit_candidate best[4];
  int found = 0;
  fit_stats stats;
  fit_request req = tiny_fit(8, (int64_t)1 << 32, 80);
  CHECK_OK(sim_fit(&hw, &req, best, 4, &found, &stats));
  CHECK(found == 0 && stats.enumerated > 0);
  req = tiny_fit(8, 720720, 1e5);
  CHECK_OK(sim_fit(&hw, &req, best, 4, &found, &stats));
  CHECK_EQ_INT(found, 4);
  for (int i = 0; i < found; i++) {
    const plan_input *in = &best[i].in;
    CHECK_EQ_INT((long long)in->micro_batch * in->R * in->S * in->grad_accum, 720720);
  }
  req = tiny_fit(10080, 10080, 80);
  CHECK_OK(sim_fit(&hw, &req, best, 1, &found, &stats));
  CHECK_EQ_INT(stats.enumerated, 72 * 7 * 2 * 3);
}

int main(void) {
  /* The memory figures of the --fit cases below are those of the flash attention kernels: the
   * default, cuDNN's, holds 256 MiB more workspace (tests/kernels/interface_test.c). */
  setenv("ST_CUDA_ATTENTION", "flash", 1);
  check_nothing_exposed();
  check_stage3_overlap();
  check_stage3_no_reshard();
  check_stage3_no_overlap();
  check_stage0_hybrid();
  check_op_flops();
  check_model_flops();
  check_fit();
  check_offload();
  check_fit_offload();
  check_fit_recompute();
  check_recompute_replay();
  check_step_limits();
  check_fit_limits();
  return test_finish("sim_schedule_test");
}
