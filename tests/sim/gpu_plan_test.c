/* gpu_plan_test.c - the memory the planner predicts for a GPU run, against bytes worked out by
 * hand for a small config (2 blocks, 4 heads, C = 64, vocabulary 256, micro-batch 2 x 32
 * tokens, one rank): the activations in the compute dtype (bf16) with CUDA attention's saved
 * state (one fp32 log-sum-exp per row, never T x T), the CUDA kernel backend's fixed workspace,
 * and `simulate --gpu h100` / `plan --fit` sizing them the same way; fp16 planned with bf16's
 * memory and simulated with loss scaling's extra finite check; bf16 parameters with fp32
 * gradients, which param/gradient pairs each device takes (gpt_check_precision), and what a
 * run that saves checkpoints adds (a save's host staging). The CUDA
 * answers are the CUDA backend's facts (kernels/cuda_facts.h), which every build has: this runs
 * the same in a build without the CUDA kernels (`--config=nocuda`), as a login node without CUDA
 * plans a GPU run. */
#include <stdlib.h>
#include <string.h>

#include "engine/model/gpt.h"
#include "engine/plan/fit.h"
#include "engine/plan/planner.h"
#include "engine/plan/sim_report.h"
#include "engine/plan/sim_schedule.h"
#include "kernels/kernels.h"
#include "tests/testing.h"

enum { BATCH = 2, SEQ = 32 };

static plan_input small_run(st_device_kind device, st_dtype dtype) {
  plan_input in = {.R = 1,
                   .S = 1,
                   .T = 1,
                   .stage = 0,
                   .micro_batch = BATCH,
                   .seq_len = SEQ,
                   .grad_accum = 1,
                   .prefetch = 1,
                   .reshard_after_forward = 1,
                   .precision = {dtype, dtype},
                   .device = device};
  in.cfg = (gpt_config){.n_layer = 2, .n_head = 4, .n_embd = 64, .vocab = 256, .max_seq = SEQ};
  CHECK_OK(gpt_config_finish(&in.cfg, 1));
  in.compute_copies = plan_compute_copies(device, in.precision);
  return in;
}

/* The CUDA context's workspace: cuBLASLt 32 MiB + reduction partials 1024 doubles (8 KiB) +
 * column-sum partials 2^20 floats (4 MiB) + 32768 AdamW segments of 32 bytes (1 MiB) + the sort
 * 8 MiB, every region a multiple of 256 bytes; and 1 MiB of host staging for the segments. With
 * the flash attention kernels, which main asks for: the default, cuDNN's, adds a region of its
 * own (tests/kernels/interface_test.c). */
static const uint64_t cuda_device_workspace = 33554432u + 8192u + 4194304u + 1048576u + 8388608u;
static const uint64_t cuda_host_workspace = 1048576u;

/* Rows BT = 64, C = 64, padded vocabulary 256, every buffer rounded up to 64 bytes.
 * bf16 activations, per block: ln1, atty, attproj, res2, ln2, fcproj, res3 (BT x C x 2 = 8192
 * each: 57344), qkv (BT x 3C x 2 = 24576), fch and fch_gelu (BT x 4C x 2 = 32768 each), four
 * fp32 statistics of BT (256 each), the attention state B x NH x T = 256 fp32 (1024): 149504.
 * Besides the blocks: encoded and ln_f (8192 each), ln_f's two statistics (256 each) and the
 * losses (256): 316160 in all. The logits are not kept (the head's chunk is workspace). */
static const uint64_t bf16_activations = 8192u + 2 * 149504u + 8192u + 512u + 256u;

/* The LM head's one chunk of logits: gpt_head_rows = BT x 4C / 256 rounded down to 64 rows,
 * all 64 of BT, x 256 x 2 bytes (32768); the backward's buffers dres, dln, datty (8192 each),
 * dqkv (24576), dfch_gelu (32768), the device tokens (2 x 256), the step's 3 fp32 scalars (64
 * after rounding): 115264; the host tokens of the micro-batch, inputs and targets
 * (2 x 64 x 4 = 512). CUDA's attention backward takes no scratch of its own. */
static const uint64_t bf16_step_workspace =
    32768u + 3 * 8192u + 24576u + 32768u + 512u + 64u + 512u;

/* The model's tables in host memory: its own (gpt_table_bytes) and each of its 4 units'
 * parameter table (embedding, 2 blocks, final), whose first allocation holds 16 entries, as
 * many as any unit needs. */
static uint64_t table_bytes(const plan_input *in) {
  return (uint64_t)gpt_table_bytes(&in->cfg) + 4u * 16u * sizeof(unit_param);
}

static void check_cuda_plan(void) {
  CHECK_EQ_INT(kernel_kind_workspace_bytes(ST_DEVICE_CUDA, MEM_DEVICE), cuda_device_workspace);
  CHECK_EQ_INT(kernel_kind_workspace_bytes(ST_DEVICE_CUDA, MEM_HOST), cuda_host_workspace);
  CHECK_EQ_INT(kernel_kind_workspace_bytes(ST_DEVICE_CUDA, MEM_PINNED), 0);
  CHECK_EQ_INT(kernel_kind_attention_scratch_bytes(ST_DEVICE_CUDA, SEQ), 0);

  const plan_input in = small_run(ST_DEVICE_CUDA, ST_BF16);
  CHECK(!in.compute_copies);
  memory_plan mp;
  CHECK_OK(plan_memory(&in, &mp));
  CHECK_EQ_INT(mp.bytes[MEM_ACTIVATIONS], bf16_activations);
  CHECK_EQ_INT(mp.bytes[MEM_WORKSPACE], bf16_step_workspace + cuda_device_workspace +
                                            cuda_host_workspace + table_bytes(&in));
  CHECK_EQ_INT(mp.host_bytes, 512u + cuda_host_workspace + table_bytes(&in));
  CHECK_EQ_INT(mp.device_bytes, mp.total - mp.host_bytes);

  /* simulate --gpu h100 and plan --fit plan the same GPU run, whatever the input said. */
  sim_hardware h100;
  CHECK_OK(sim_hw_builtin("h100", &h100));
  plan_input unset = in;
  unset.device = ST_DEVICE_CPU;
  unset.compute_copies = 1;
  memory_plan sim;
  CHECK_OK(sim_memory(&h100, &unset, &sim));
  for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
    CHECK_MSG(sim.bytes[c] == mp.bytes[c], "simulate's category %d: %llu bytes, plan's %llu", c,
              (unsigned long long)sim.bytes[c], (unsigned long long)mp.bytes[c]);
  }

  /* fp16 plans exactly like bf16: 2-byte activations computed in fp16, no fp32 copies. Loss
   * scaling keeps its state on the host (a scale and two counters) and its overflow flag among
   * the step's three device scalars, which every run has. */
  const plan_input half = small_run(ST_DEVICE_CUDA, ST_FP16);
  CHECK(!half.compute_copies);
  memory_plan hp;
  CHECK_OK(plan_memory(&half, &hp));
  for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
    CHECK_MSG(hp.bytes[c] == mp.bytes[c], "fp16's category %d: %llu bytes, bf16's %llu", c,
              (unsigned long long)hp.bytes[c], (unsigned long long)mp.bytes[c]);
  }

  /* The step: fp16's finite check reads the owned gradients a second time, as long as the sum
   * of squares takes (both are the same pass over the same bytes); the overflow flag rides
   * with the norm. The forward and backward cost what bf16's do. */
  plan_input two = small_run(ST_DEVICE_CUDA, ST_BF16),
             two_half = small_run(ST_DEVICE_CUDA, ST_FP16);
  two.S = two_half.S = 2;
  sim_costs cb, ch;
  CHECK_OK(sim_costs_of(&h100, &two, &cb));
  CHECK_OK(sim_costs_of(&h100, &two_half, &ch));
  for (int k = 0; k < 3; k++) {
    CHECK_NEAR(ch.sumsq[k], 2 * cb.sumsq[k], 1e-15);
    CHECK_NEAR(ch.fwd[k], cb.fwd[k], 1e-15);
    CHECK_NEAR(ch.bwd[k], cb.bwd[k], 1e-15);
  }
  CHECK(ch.scalars > cb.scalars);
}

/* The CPU plans what its kernels do: fp32 activations with T x T probabilities, one head's
 * T x T scores as the backward's scratch, no fixed workspace. */
static void check_cpu_plan(void) {
  CHECK_EQ_INT(kernel_kind_workspace_bytes(ST_DEVICE_CPU, MEM_DEVICE), 0);
  CHECK_EQ_INT(kernel_kind_workspace_bytes(ST_DEVICE_CPU, MEM_HOST), 0);
  CHECK_EQ_INT(kernel_kind_attention_scratch_bytes(ST_DEVICE_CPU, SEQ), SEQ * SEQ * 4);
  const plan_input in = small_run(ST_DEVICE_CPU, ST_BF16);
  CHECK(in.compute_copies);
  memory_plan mp;
  CHECK_OK(plan_memory(&in, &mp));
  /* Of the bf16 sum above, 2816 bytes are fp32 statistics (four per block, ln_f's two and the
   * losses: 11 x 256) and 2048 the two blocks' attention states; the other 311296 double in
   * fp32, and each block's state becomes B x NH x T x T fp32 probabilities (32768 bytes). */
  CHECK_EQ_INT(311296u + 2816u + 2048u, bf16_activations);
  CHECK_EQ_INT(mp.bytes[MEM_ACTIVATIONS], 2 * 311296u + 2816u + 2 * 32768u);
  CHECK_EQ_INT(mp.host_bytes, 512u + table_bytes(&in));
}

/* bf16 parameters with fp32 gradients on a GPU (the kernels accumulate a weight's gradient in
 * fp32 beside bf16 activations): no compute copies; params 2 bytes and grads 4 bytes per
 * element, and everything else as bf16/bf16 plans it. Psi for this config, every parameter a
 * multiple of 16 elements: the embedding 256 x 64 + 32 x 64 = 18432; a block 128 (ln_1) +
 * 12288 + 192 (c_attn) + 4096 + 64 (attn.c_proj) + 128 (ln_2) + 16384 + 256 (c_fc) + 16384 + 64
 * (mlp.c_proj) = 49984; ln_f 128: 118528 at stage 0. */
static void check_cuda_fp32_grads(void) {
  const uint64_t psi = 18432u + 2 * 49984u + 128u;
  plan_input in = small_run(ST_DEVICE_CUDA, ST_BF16);
  in.precision.reduce = ST_FP32;
  in.compute_copies = plan_compute_copies(ST_DEVICE_CUDA, in.precision);
  CHECK(!in.compute_copies);
  CHECK_OK(gpt_check_precision(ST_DEVICE_CUDA, in.precision));
  const plan_input same = small_run(ST_DEVICE_CUDA, ST_BF16);
  memory_plan mixed, bf16;
  CHECK_OK(plan_memory(&in, &mixed));
  CHECK_OK(plan_memory(&same, &bf16));
  CHECK_EQ_INT(mixed.bytes[MEM_PARAMS], 2 * psi);
  CHECK_EQ_INT(mixed.bytes[MEM_GRADS], 4 * psi);
  CHECK_EQ_INT(bf16.bytes[MEM_GRADS], 2 * psi);
  CHECK_EQ_INT(mixed.bytes[MEM_OPTIMIZER], 12 * psi);
  for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
    if (c == MEM_GRADS) continue;
    CHECK_MSG(mixed.bytes[c] == bf16.bytes[c], "bf16/fp32's category %d: %llu bytes, bf16's %llu",
              c, (unsigned long long)mixed.bytes[c], (unsigned long long)bf16.bytes[c]);
  }
  CHECK_EQ_INT(mixed.total, bf16.total + 2 * psi);
}

/* The start-up check's suggestion for a fp32 GPU run that bf16 makes fit: bf16 parameters with
 * the run's fp32 gradients where that fits (2 bytes per parameter saved, the gradients still
 * accumulated and reduced in fp32), else bf16 gradients too. The run: fp32, already
 * recomputing whole blocks, one rank, no accumulation allowed, so that only bf16 can fit. */
static void check_cuda_fit_suggestion(void) {
  plan_input in = small_run(ST_DEVICE_CUDA, ST_FP32);
  in.recompute = GPT_RECOMPUTE_BLOCK;
  const unit_precision tries[2] = {{ST_BF16, ST_FP32}, {ST_BF16, ST_BF16}};
  for (int i = 0; i < 2; i++) {
    plan_input target = in;
    target.precision = tries[i];
    target.compute_copies = plan_compute_copies(ST_DEVICE_CUDA, target.precision);
    memory_plan mp;
    CHECK_OK(plan_memory(&target, &mp));
    const uint64_t limit = fit_need(&target, &mp);
    CHECK_OK(plan_memory(&in, &mp));
    CHECK(fit_need(&in, &mp) > limit);
    const fit_bounds bounds = {.max_grad_accum = 1, .max_ranks = 1, .bf16_possible = 1};
    fit_suggestion s;
    CHECK_OK(fit_suggest(&in, limit, &bounds, &s));
    CHECK_EQ_INT(s.change, FIT_BF16);
    CHECK_MSG(s.run.precision.param == tries[i].param && s.run.precision.reduce == tries[i].reduce,
              "limit of bf16/%s: suggested params %s, gradients %s", dtype_name(tries[i].reduce),
              dtype_name(s.run.precision.param), dtype_name(s.run.precision.reduce));
    CHECK_OK(gpt_check_precision(ST_DEVICE_CUDA, s.run.precision));
    char text[160];
    fit_describe(&in, &s, &bounds, text, sizeof text);
    CHECK_MSG(!strstr(text, "--reduce-dtype") == (tries[i].reduce == ST_FP32),
              "suggestion '%s' for gradients in %s", text, dtype_name(tries[i].reduce));
  }
}

/* Plans `in` without and with checkpoints (in the background when `async`); checks that only
 * the workspace changes, by `extra`, and that the host bytes grow by `host_extra` (the device's
 * by the rest). */
static void check_saving(plan_input in, int async, uint64_t extra, uint64_t host_extra,
                         const char *what) {
  memory_plan plain, saving;
  in.checkpoints = 0;
  CHECK_OK(plan_memory(&in, &plain));
  in.checkpoints = 1;
  in.checkpoints_async = async;
  CHECK_OK(plan_memory(&in, &saving));
  for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
    const uint64_t want = plain.bytes[c] + (c == MEM_WORKSPACE ? extra : 0);
    CHECK_MSG(saving.bytes[c] == want, "%s: category %d with checkpoints %llu bytes, want %llu",
              what, c, (unsigned long long)saving.bytes[c], (unsigned long long)want);
  }
  CHECK_MSG(saving.total == plain.total + extra, "%s: total %llu, want %llu", what,
            (unsigned long long)saving.total, (unsigned long long)(plain.total + extra));
  CHECK_MSG(saving.host_bytes == plain.host_bytes + host_extra, "%s: host %llu, want %llu", what,
            (unsigned long long)saving.host_bytes,
            (unsigned long long)(plain.host_bytes + host_extra));
  CHECK_MSG(saving.device_bytes == plain.device_bytes + (extra - host_extra),
            "%s: device %llu, want %llu", what, (unsigned long long)saving.device_bytes,
            (unsigned long long)(plain.device_bytes + (extra - host_extra)));
}

/* A run that saves checkpoints (train's --ckpt-dir, plan's --ckpt): a save copies each rank's
 * master, m and v to its file through one host buffer of 2^18 floats (1 MiB, category
 * workspace), taken between steps, once the step's transients are freed. On a GPU, where the
 * step's attention takes no scratch, the workspace and the host bytes grow by all of it and
 * the device's bytes not at all. On the CPU it stands in for the attention backward's T x T
 * scores: at 32 tokens (4096 bytes) the workspace grows by the difference; at 1024 tokens
 * (4 MiB of scores, more than the staging) not at all. */
static void check_checkpoint_plan(void) {
  const uint64_t staging = 1048576u;
  check_saving(small_run(ST_DEVICE_CUDA, ST_BF16), 0, staging, staging, "cuda");
  check_saving(small_run(ST_DEVICE_CPU, ST_FP32), 0, staging - SEQ * SEQ * 4,
               staging - SEQ * SEQ * 4, "cpu, 32 tokens");
  plan_input longer = small_run(ST_DEVICE_CPU, ST_FP32);
  longer.cfg.max_seq = longer.seq_len = 1024;
  CHECK_OK(gpt_config_finish(&longer.cfg, 1));
  check_saving(longer, 0, 0, 0, "cpu, 1024 tokens");
}

/* Saving in the background (train's --ckpt-async): no staging, but a host snapshot of the owned
 * master, m and v, alive through the steps: the optimizer's bytes, which the step's attention
 * scratch does not stand in for, in host memory on both devices. */
static void check_background_checkpoint_plan(void) {
  const st_device_kind kinds[2] = {ST_DEVICE_CUDA, ST_DEVICE_CPU};
  for (int k = 0; k < 2; k++) {
    const plan_input in = small_run(kinds[k], kinds[k] == ST_DEVICE_CUDA ? ST_BF16 : ST_FP32);
    memory_plan plain;
    CHECK_OK(plan_memory(&in, &plain));
    CHECK(plain.bytes[MEM_OPTIMIZER] > 0);
    check_saving(in, 1, plain.bytes[MEM_OPTIMIZER], plain.bytes[MEM_OPTIMIZER],
                 kinds[k] == ST_DEVICE_CUDA ? "cuda, in the background" : "cpu, in the background");
  }
}

/* gpt_check_precision's matrix: the CPU computes in fp32 from copies and takes every pair; a
 * GPU takes a 16-bit param dtype with its own dtype or fp32 for the gradients, fp32 params with
 * fp32 gradients, and refuses the rest with one line naming what it would take. */
static void check_precision_matrix(void) {
  const st_dtype dtypes[3] = {ST_FP32, ST_BF16, ST_FP16};
  for (int p = 0; p < 3; p++) {
    for (int g = 0; g < 3; g++) {
      const unit_precision pr = {dtypes[p], dtypes[g]};
      CHECK_MSG(gpt_check_precision(ST_DEVICE_CPU, pr) == ST_OK, "cpu refuses %s/%s: %s",
                dtype_name(pr.param), dtype_name(pr.reduce), st_last_error());
      const int takes = g == p || dtypes[g] == ST_FP32;
      const st_status got = gpt_check_precision(ST_DEVICE_CUDA, pr);
      CHECK_MSG((got == ST_OK) == takes, "cuda %s params with %s gradients: %s",
                dtype_name(pr.param), dtype_name(pr.reduce),
                got == ST_OK ? "accepted" : st_last_error());
      if (got != ST_OK) CHECK_EQ_INT(got, ST_ERR_UNSUPPORTED);
    }
  }
  CHECK_STATUS(gpt_check_precision(ST_DEVICE_CUDA, (unit_precision){ST_FP16, ST_BF16}),
               ST_ERR_UNSUPPORTED);
  CHECK_MSG(strstr(st_last_error(), "params in fp16 and gradients in bf16") &&
                strstr(st_last_error(), "give --reduce-dtype fp16 or fp32"),
            "detail: %s", st_last_error());
  CHECK_STATUS(gpt_check_precision(ST_DEVICE_CUDA, (unit_precision){ST_FP32, ST_BF16}),
               ST_ERR_UNSUPPORTED);
  CHECK_MSG(
      strstr(st_last_error(), "give --reduce-dtype fp32") && !strstr(st_last_error(), "or fp32"),
      "detail: %s", st_last_error());
}

int main(void) {
  setenv("ST_CUDA_ATTENTION", "flash", 1);
  check_cpu_plan();
  check_precision_matrix();
  check_cuda_plan();
  check_cuda_fp32_grads();
  check_cuda_fit_suggestion();
  check_checkpoint_plan();
  check_background_checkpoint_plan();
  return test_finish("gpu_plan_test");
}
