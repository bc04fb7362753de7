/* planner_test.c - the memory planner and the communication formulas against what one real
 * training step takes and sends, on every rank, for every ZeRO stage on 1x4x1, 2x2x1 and 1x2x2
 * meshes in fp32 and in bf16 (params and reduce), fp16 params with loss scaling on 2x2x1 and
 * 1x2x2 and fp16 params and reduce at stage 3 on 1x4x1, plus stage 3 with prefetch 2, with
 * reshard-after-forward off, on 1x1x4, the two mixed policies, and the optimizer offloaded
 * (every stage; bf16; and with the pinned staging of a GPU forced on the CPU, on 1x4x1 and on
 * 1x2x2 at stage 1 in bf16), and activation recompute of the GELU output and of whole blocks
 * (every stage on 1x4x1, 1x2x2, bf16 offloaded), and a deep narrow model (24 layers of width 16,
 * stages 0 and 3) whose tables weigh as much as its workspace:
 *   - measured peak bytes per category = the planner's prediction within 3%, and so is the
 *     peak of the total (what the start-up fit check relies on, engine/plan/fit.h); a second
 *     step allocates no full-unit buffer (the pool kept the first's) and keeps that peak;
 *   - offloaded, the host-resident optimizer state (category optimizer_host, staging
 *     included) equals the prediction exactly and nothing is left in optimizer;
 *   - model states (params + grads + optimizer) follow DESIGN.md's formulas exactly, with Psi
 *     the padded flat length and p, g the bytes of the param and reduce dtypes:
 *     (p+g+12) Psi / (p+g) Psi + 12 Psi/S / p Psi + (g+12) Psi/S / (p+g+12) Psi/S, which is
 *     20 / 8 + 12/S / 4 + 16/S / 20/S in fp32 and the ZeRO paper's 16 / 4 + 12/S / 2 + 14/S /
 *     16/S in bf16;
 *   - the bytes counted on the shard group (all-gather, reduce-scatter) and the replicate group
 *     (all-reduce) equal the ring formulas per unit (planner's plan_comm, checked here against
 *     the closed forms (2g or p+g) Psi (S-1)/S for stages 0-2 and per-unit counts for stage 3),
 *     and on the tp group 4 all-reduces of B x T x C activations per block per micro-batch
 *     (with block recompute, one more in every block but the last: counted in the test);
 *     besides these, the step's scalars: the squared norm over the tp group and, with loss
 *     scaling, the overflow flag beside it and alone over the replicate group.
 * Under the sanitizers (ST_TEST_SANITIZED, .bazelrc) the loops over every stage take stages 0
 * and 3 only: what stages 1 and 2 change, lazy_step_test and the sharding unit tests run there. */
#include "engine/plan/planner.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tests/testing_mpi.h"
#include "tests/train/test_step.h"

enum { B = 4, SEQ = 64 };

/* The model: 3 layers 128 wide; deep, 24 layers 16 wide, whose tables (each unit's parameter
 * table, the model's per-layer records) weigh as much as its workspace. */
static gpt_config test_config(int deep) {
  gpt_config c = {.n_layer = 3, .n_head = 4, .n_embd = 128, .vocab = 256, .max_seq = SEQ};
  if (deep)
    c = (gpt_config){.n_layer = 24, .n_head = 2, .n_embd = 16, .vocab = 256, .max_seq = SEQ};
  return c;
}

typedef struct test_case {
  int R, S, T, stage, prefetch, reshard;
  st_dtype param, reduce;
  int offload; /* 1: --offload optimizer; 2: and staged as on a GPU */
  gpt_recompute recompute;
  int deep; /* test_config's deep model */
} test_case;

static void check_case(test_case tc) {
  const int R = tc.R, S = tc.S, T = tc.T, stage = tc.stage;
  const unit_precision precision = {tc.param, tc.reduce};
  st_mesh_config mc = ST_MESH_CONFIG_INIT;
  mc.dp_replicate = R;
  mc.dp_shard = S;
  mc.tp = T;
  mc.device = "cpu";
  st_mesh *mesh = NULL;
  CHECK_OK(st_mesh_create(&mesh, &mc));
  if (!mesh) return;
  gpt_config cfg = test_config(tc.deep);
  gpt_config_finish(&cfg, T);
  gpt_parallel par = {mesh,      stage,          tc.prefetch, tc.reshard,
                      precision, tc.offload > 0, tc.recompute};
  gpt_model *m = NULL;
  CHECK_OK(gpt_create(&m, &cfg, mesh_device(mesh), B, SEQ, &par));
  if (!m) {
    st_mesh_destroy(mesh);
    return;
  }
  /* The CPU's memory is host RAM, so its units stage nothing; forcing the staging runs the
   * GPU's copies (host to host here) for the planner to predict. */
  int64_t largest_owned = 0;
  for (int u = 0; u < m->n_units; u++) {
    if (tc.offload == 2) m->units[u].offload_staging = 1;
    if (m->units[u].owned_numel > largest_owned) largest_owned = m->units[u].owned_numel;
  }
  CHECK_OK(gpt_init_params(m, 3));
  CHECK_OK(train_state_reset(m));
  int32_t inputs[B * SEQ], targets[B * SEQ];
  test_step_tokens(inputs, targets, B * SEQ);
  const int32_t *in[1] = {inputs}, *tg[1] = {targets};
  const train_hparams h = test_step_hparams((int64_t)B * SEQ * R * S);
  for (int g = 0; g < ST_GROUP_COUNT; g++) comm_counters_reset(mesh_comm(mesh, (st_group)g));
  mem_reset_peak();
  step_stats s;
  loss_scaler scaler;
  const int scaled = tc.param == ST_FP16 || tc.reduce == ST_FP16;
  if (scaled) {
    loss_scaler_init_dynamic(&scaler, LOSS_SCALER_INITIAL_SCALE, LOSS_SCALER_DEFAULT_WINDOW);
  } else {
    loss_scaler_init_none(&scaler);
  }
  CHECK_OK(train_step(m, &h, &scaler, 0, in, tg, &s));
  /* an applied step: a skipped one would not publish what the plan counts */
  CHECK_MSG(!s.skipped, "mesh %dx%dx%d stage %d: the fp16 step overflowed", R, S, T, stage);
  mem_stats measured;
  mem_stats_get(&measured);

  const plan_input pin = {.cfg = cfg,
                          .R = R,
                          .S = S,
                          .T = T,
                          .stage = stage,
                          .micro_batch = B,
                          .seq_len = SEQ,
                          .grad_accum = 1,
                          .prefetch = tc.prefetch,
                          .reshard_after_forward = tc.reshard,
                          .precision = precision,
                          .compute_copies = 1,
                          .offload_optimizer = tc.offload > 0,
                          .device_is_host = tc.offload != 2,
                          .recompute = tc.recompute};
  memory_plan plan;
  CHECK_OK(plan_memory(&pin, &plan));
  char label[128];
  snprintf(label, sizeof label,
           "mesh %dx%dx%d stage %d prefetch %d reshard %d %s/%s offload %d recompute %s%s", R, S, T,
           stage, tc.prefetch, tc.reshard, dtype_name(tc.param), dtype_name(tc.reduce), tc.offload,
           gpt_recompute_name(tc.recompute), tc.deep ? " deep" : "");
  /* Workspace also holds what planner.h leaves out, the bookkeeping of the mesh's communicators
   * and the buffer pool (a few KiB, whatever the mesh), which the smallest scratch (tp 4) no
   * longer hides within 3%; the model's own tables are predicted. */
  const double bookkeeping = 8192;
  for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
    double want = (double)plan.bytes[c], got = (double)measured.peak[c];
    double slack = 0.03 * want + (c == MEM_WORKSPACE ? bookkeeping : 0);
    int ok = want == 0 ? got == 0 : fabs(got - want) <= slack;
    CHECK_MSG(ok, "%s: %s measured %.0f bytes, planned %.0f", label,
              mem_category_name((mem_category)c), got, want);
  }

  const double total = (double)plan.total, total_got = (double)measured.total_peak;
  CHECK_MSG(fabs(total_got - total) <= 0.03 * total, "%s: total peak %.0f bytes, planned %.0f",
            label, total_got, total);
  CHECK_MSG(plan.total == plan.device_bytes + plan.host_bytes, "%s: device + host != total", label);
  if (tc.offload) {
    CHECK_MSG(measured.peak[MEM_OPTIMIZER] == 0 &&
                  measured.peak[MEM_OPTIMIZER_HOST] == plan.bytes[MEM_OPTIMIZER_HOST],
              "%s: offloaded optimizer: %llu bytes on the device, %llu on the host, planned %llu",
              label, (unsigned long long)measured.peak[MEM_OPTIMIZER],
              (unsigned long long)measured.peak[MEM_OPTIMIZER_HOST],
              (unsigned long long)plan.bytes[MEM_OPTIMIZER_HOST]);
  }

  /* DESIGN.md's model-state formulas, on the padded flat length (offloaded, the optimizer's
   * part lives on the host, less the staging). */
  double psi = 0;
  for (int u = 0; u < m->n_units; u++) psi += (double)m->units[u].layout.numel;
  const double p = (double)dtype_size(tc.param), g = (double)dtype_size(tc.reduce);
  const double formula[4] = {(p + g + 12) * psi, (p + g) * psi + 12 * psi / S,
                             p * psi + (g + 12) * psi / S, (p + g + 12) * psi / S};
  /* The staging: a ring of 4 chunks, each the smaller of 2^20 elements and the largest owned
   * range (host_staging.h). */
  const double slot = largest_owned < (1 << 20) ? (double)largest_owned : (double)(1 << 20);
  const double staging = tc.offload == 2 ? 4 * slot * (p + g) : 0;
  double states = (double)(measured.peak[MEM_PARAMS] + measured.peak[MEM_GRADS] +
                           measured.peak[MEM_OPTIMIZER] + measured.peak[MEM_OPTIMIZER_HOST]) -
                  staging;
  CHECK_MSG(fabs(states - formula[stage]) < 0.5, "%s: model states %.0f bytes, formula %.0f", label,
            states, formula[stage]);
  /* (the deep model's 16-wide tensors pad more: 1.4%) */
  CHECK_MSG(fabs(psi - (double)plan.psi) <= (tc.deep ? 0.02 : 0.01) * psi, "%s: padding %.0f vs %lld parameters",
            label, psi, (long long)plan.psi);

  /* Bytes sent: shard group all-gather and reduce-scatter, replicate group all-reduce. */
  comm_plan cp;
  CHECK_OK(plan_comm(&pin, &cp));
  comm_counters shard, repl, tp;
  comm_counters_get(mesh_comm(mesh, ST_GROUP_SHARD), &shard);
  comm_counters_get(mesh_comm(mesh, ST_GROUP_REPLICATE), &repl);
  comm_counters_get(mesh_comm(mesh, ST_GROUP_TP), &tp);
  /* Besides the activations, the tp group sums the squared gradient norm: one fp32, and with
   * loss scaling the overflow flag beside it, which the replicate group then reduces alone. */
  const size_t scalars = (scaled ? 2 : 1) * sizeof(float);
  uint64_t tp_want = cp.tp_all_reduce + comm_ring_bytes(COMM_ALL_REDUCE, T, scalars);
  const uint64_t repl_want =
      cp.replicate_all_reduce + (scaled ? comm_ring_bytes(COMM_ALL_REDUCE, R, sizeof(float)) : 0);
  CHECK_MSG(tp.bytes_sent[COMM_ALL_REDUCE] == tp_want, "%s: tp all-reduce %llu bytes, planned %llu",
            label, (unsigned long long)tp.bytes_sent[COMM_ALL_REDUCE], (unsigned long long)tp_want);
  /* The closed form on the tp group: 4 all-reduces of B x T x C fp32 activations (the CPU's
   * activation dtype) per block, and with block recompute the attention's again in every block
   * but the last. */
  const int tp_sums = 4 * cfg.n_layer + (tc.recompute == GPT_RECOMPUTE_BLOCK ? cfg.n_layer - 1 : 0);
  const uint64_t tp_closed =
      tp_sums * comm_ring_bytes(COMM_ALL_REDUCE, T, (size_t)B * SEQ * cfg.n_embd * sizeof(float));
  CHECK_MSG(cp.tp_all_reduce == tp_closed, "%s: tp all-reduce planned %llu bytes, %d sums %llu",
            label, (unsigned long long)cp.tp_all_reduce, tp_sums, (unsigned long long)tp_closed);
  CHECK_MSG(shard.bytes_sent[COMM_ALL_GATHER] == cp.shard_all_gather,
            "%s: all-gather %llu bytes, planned %llu", label,
            (unsigned long long)shard.bytes_sent[COMM_ALL_GATHER],
            (unsigned long long)cp.shard_all_gather);
  CHECK_MSG(shard.bytes_sent[COMM_REDUCE_SCATTER] == cp.shard_reduce_scatter,
            "%s: reduce-scatter %llu bytes, planned %llu", label,
            (unsigned long long)shard.bytes_sent[COMM_REDUCE_SCATTER],
            (unsigned long long)cp.shard_reduce_scatter);
  CHECK_MSG(repl.bytes_sent[COMM_ALL_REDUCE] == repl_want,
            "%s: replicate all-reduce %llu bytes, planned %llu", label,
            (unsigned long long)repl.bytes_sent[COMM_ALL_REDUCE], (unsigned long long)repl_want);
  /* The closed forms on the shard group for stages 0-2: stage 0 reduce-scatters and
   * all-gathers gradients (2g bytes per element), stages 1-2 gradients and parameters (g+p). */
  if (stage < 3) {
    const double per_element = stage == 0 ? 2 * g : p + g;
    const double total = (double)(cp.shard_all_gather + cp.shard_reduce_scatter),
                 want = per_element * psi * (S - 1) / S;
    CHECK_MSG(fabs(total - want) <= 2.0 * m->n_units,
              "%s: %.0f bytes on the shard group, (%g bytes) Psi (S-1)/S = %.0f", label, total,
              per_element, want);
  }

  /* A second step reuses the full-unit buffers the pool kept from the first: it allocates none
   * (on a GPU each allocation in a step synchronises the device), and the gathered category's
   * peak stays the first step's, the one checked against the plan above. */
  const long pool_allocations = m->streams.pool.allocations;
  CHECK_OK(train_step(m, &h, &scaler, 1, in, tg, &s));
  mem_stats again;
  mem_stats_get(&again);
  CHECK_MSG(m->streams.pool.allocations == pool_allocations,
            "%s: the second step allocated %ld full-unit buffers", label,
            m->streams.pool.allocations - pool_allocations);
  CHECK_MSG(again.peak[MEM_GATHERED] == measured.peak[MEM_GATHERED],
            "%s: gathered peak %llu bytes in the second step, %llu in the first", label,
            (unsigned long long)again.peak[MEM_GATHERED],
            (unsigned long long)measured.peak[MEM_GATHERED]);
  gpt_destroy(m);
  st_mesh_destroy(mesh);
}

/* The step between the stages a loop over every stage takes: 1, or 3 under the sanitizers. */
static int stage_stride(void) { return getenv("ST_TEST_SANITIZED") ? 3 : 1; }

int main(int argc, char **argv) {
  CHECK_OK(st_init(&argc, &argv));
  const int stride = stage_stride();
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const st_dtype dtypes[2] = {ST_FP32, ST_BF16};
  for (int d = 0; d < 2; d++) {
    const st_dtype x = dtypes[d];
    for (int stage = 0; stage <= 3; stage += stride) {
      check_case((test_case){1, world, 1, stage, 1, 1, x, x, 0, GPT_RECOMPUTE_NONE, 0});
      if (world % 2 == 0)
        check_case((test_case){2, world / 2, 1, stage, 1, 1, x, x, 0, GPT_RECOMPUTE_NONE, 0});
      if (world % 2 == 0)
        check_case((test_case){1, world / 2, 2, stage, 1, 1, x, x, 0, GPT_RECOMPUTE_NONE, 0});
    }
    check_case((test_case){1, world, 1, 3, 2, 1, x, x, 0, GPT_RECOMPUTE_NONE, 0});
    check_case((test_case){1, world, 1, 3, 1, 0, x, x, 0, GPT_RECOMPUTE_NONE, 0});
  }
  /* fp16 with dynamic loss scaling: parameters only (every mesh and stage), and gradients too */
  for (int stage = 0; stage <= 3; stage += stride) {
    if (world % 2 == 0)
      check_case(
          (test_case){2, world / 2, 1, stage, 1, 1, ST_FP16, ST_FP32, 0, GPT_RECOMPUTE_NONE, 0});
    if (world % 2 == 0)
      check_case(
          (test_case){1, world / 2, 2, stage, 1, 1, ST_FP16, ST_FP32, 0, GPT_RECOMPUTE_NONE, 0});
  }
  check_case((test_case){1, world, 1, 3, 1, 1, ST_FP16, ST_FP16, 0, GPT_RECOMPUTE_NONE, 0});
  if (world % 4 == 0)
    check_case((test_case){1, world / 4, 4, 3, 1, 1, ST_FP32, ST_FP32, 0, GPT_RECOMPUTE_NONE, 0});
  check_case((test_case){1, world, 1, 3, 1, 1, ST_BF16, ST_FP32, 0, GPT_RECOMPUTE_NONE, 0});
  check_case((test_case){1, world, 1, 1, 1, 1, ST_FP32, ST_BF16, 0, GPT_RECOMPUTE_NONE, 0});
  for (int stage = 0; stage <= 3; stage += stride) {
    check_case((test_case){1, world, 1, stage, 1, 1, ST_FP32, ST_FP32, 1, GPT_RECOMPUTE_NONE, 0});
  }
  if (world % 2 == 0)
    check_case((test_case){2, world / 2, 1, 2, 1, 1, ST_BF16, ST_BF16, 1, GPT_RECOMPUTE_NONE, 0});
  check_case((test_case){1, world, 1, 3, 1, 1, ST_BF16, ST_BF16, 1, GPT_RECOMPUTE_NONE, 0});
  check_case((test_case){1, world, 1, 0, 1, 1, ST_FP32, ST_FP32, 2, GPT_RECOMPUTE_NONE, 0});
  check_case((test_case){1, world, 1, 3, 1, 1, ST_BF16, ST_FP32, 2, GPT_RECOMPUTE_NONE, 0});
  /* staged on tp 2 x 2 shards: owned ranges a tp slice's shard, gradients in bf16 as well */
  if (world % 2 == 0)
    check_case((test_case){1, world / 2, 2, 1, 1, 1, ST_BF16, ST_BF16, 2, GPT_RECOMPUTE_NONE, 0});
  /* activation recompute: every stage; tensor parallel (block recompute repeats an all-reduce);
   * bf16; the optimizer offloaded beside it */
  for (int mode = GPT_RECOMPUTE_GELU; mode <= GPT_RECOMPUTE_BLOCK; mode++) {
    for (int stage = 0; stage <= 3; stage += stride) {
      check_case((test_case){1, world, 1, stage, 1, 1, ST_FP32, ST_FP32, 0, mode, 0});
    }
    if (world % 2 == 0)
      check_case((test_case){1, world / 2, 2, 3, 1, 1, ST_FP32, ST_FP32, 0, mode, 0});
    check_case((test_case){1, world, 1, 3, 1, 1, ST_BF16, ST_BF16, 1, mode, 0});
  }
  /* a model whose tables are as large as its workspace */
  for (int stage = 0; stage <= 3; stage += 3) {
    check_case((test_case){1, world, 1, stage, 1, 1, ST_FP32, ST_FP32, 0, GPT_RECOMPUTE_NONE, 1});
  }
  int rc = test_finish_mpi("planner_test");
  st_finalize();
  return rc;
}
