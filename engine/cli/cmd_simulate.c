/* cmd_simulate.c - `shardtrain simulate`: the predicted time of one training step for a model,
 * mesh, stage, batch and precision on a described cluster (--gpu or --hardware, --gpus-per-node,
 * --nodes), with its breakdown (compute per op class, exposed communication, optimizer), MFU,
 * tokens/s and the planner's memory per rank; --csv writes it as a CSV row. --sweep N1,N2,...
 * repeats it over GPU counts for several configurations (--configs) at a fixed micro-batch
 * per GPU, for tools/plot_scaling.py. Runs no MPI and allocates no model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/cli/commands.h"
#include "engine/flags/cli_flags.h"
#include "engine/model/gpt.h"
#include "engine/plan/sim_report.h"
#include "engine/train/train_options.h"

typedef struct simulate_options {
  sim_model_flags model;
  sim_cluster_flags cluster;
  int nodes;
  int zero, dp_replicate, dp_shard, tp, micro_batch, grad_accum, prefetch, reshard;
  const char *param_dtype, *reduce_dtype, *offload, *recompute;
  const char *csv, *sweep, *configs, *label;
  double efficiency_scale;
} simulate_options;

/* The precision of the flags, checked as train checks it. fp16 is simulated like bf16 (2 bytes
 * per element) plus its loss scaling's finite check and overflow flag (sim_schedule.h). */
static st_status precision_of(const simulate_options *o, unit_precision *out) {
  train_options t;
  train_options_defaults(&t);
  t.param_dtype = o->param_dtype;
  t.reduce_dtype = o->reduce_dtype;
  return train_options_precision(&t, out);
}

/* The run on `gpus` GPUs with replicate size R (0: the rest) and shard size S (0: the rest). */
static st_status make_input(const simulate_options *o, int gpus, int stage, int R, int S,
                            const sim_hardware *hw, plan_input *in) {
  const int T = o->tp;
  if (T < 1 || R < 0 || S < 0) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--tp %d, --dp-replicate %d, --dp-shard %d: must be >= 1 "
                    "(--dp-shard 0: the rest)",
                    T, R, S);
  }
  if (R == 0 && S == 0) R = 1;
  if (R && S && R * S * T != gpus) {
    return st_error(ST_ERR_INVALID_ARG, "mesh %dx%dx%d needs %d GPUs, the cluster has %d", R, S, T,
                    R * S * T, gpus);
  }
  const int fixed = (R ? R : 1) * (S ? S : 1) * T;
  if (gpus % fixed != 0) {
    char r[16] = "?", sh[16] = "?";
    if (R) snprintf(r, sizeof r, "%d", R);
    if (S) snprintf(sh, sizeof sh, "%d", S);
    return st_error(ST_ERR_INVALID_ARG, "mesh %sx%sx%d does not divide %d GPUs", r, sh, T, gpus);
  }
  if (!R) R = gpus / fixed;
  if (!S) S = gpus / fixed;
  *in = (plan_input){.R = R,
                     .S = S,
                     .T = T,
                     .stage = stage,
                     .micro_batch = o->micro_batch,
                     .grad_accum = o->grad_accum,
                     .prefetch = o->prefetch,
                     .reshard_after_forward = o->reshard};
  ST_CHECK(sim_model_resolve(&o->model, T, &in->cfg));
  in->seq_len = in->cfg.max_seq;
  ST_CHECK(precision_of(o, &in->precision));
  sim_device_fields(hw, in);
  ST_CHECK(gpt_check_precision(in->device, in->precision)); /* what gpt_create would refuse */
  train_options t;
  train_options_defaults(&t);
  t.offload = o->offload;
  t.recompute = o->recompute;
  t.micro_batch = o->micro_batch;
  t.grad_accum = o->grad_accum;
  t.prefetch = o->prefetch;
  ST_CHECK(train_options_offload(&t, &in->offload_optimizer));
  ST_CHECK(train_options_recompute(&t, &in->recompute));
  if (stage < 0 || stage > 3) return st_error(ST_ERR_INVALID_ARG, "--zero %d is not 0-3", stage);
  return train_options_batch(&t);
}

static st_status open_csv(const char *path, FILE **out) {
  *out = NULL;
  if (!path) return ST_OK;
  *out = fopen(path, "w");
  if (!*out) return st_error(ST_ERR_INVALID_ARG, "--csv %s: cannot open for writing", path);
  sim_csv_header(*out);
  return ST_OK;
}

static st_status run_one(const simulate_options *o, const sim_hardware *hw) {
  if (o->nodes < 1) return st_error(ST_ERR_INVALID_ARG, "--nodes must be >= 1, got %d", o->nodes);
  const int gpus = hw->gpus_per_node * o->nodes;
  plan_input in;
  ST_CHECK(make_input(o, gpus, o->zero, o->dp_replicate, o->dp_shard, hw, &in));
  sim_result r;
  memory_plan mp;
  ST_CHECK(sim_step(hw, &in, &r));
  ST_CHECK(sim_memory(hw, &in, &mp));
  FILE *csv = NULL;
  ST_CHECK(open_csv(o->csv, &csv));
  printf(
      "shardtrain simulate: %s (%.1f M parameters) on %d x %s (%d node%s of %d), mesh "
      "%dx%dx%d, ZeRO-%d, micro-batch %d x %d, grad-accum %d, %s/%s, prefetch %d, recompute "
      "%s\n",
      o->model.model, (double)gpt_config_num_params(&in.cfg) / 1e6, gpus, hw->name, o->nodes,
      o->nodes > 1 ? "s" : "", hw->gpus_per_node, in.R, in.S, in.T, in.stage, in.micro_batch,
      in.seq_len, in.grad_accum, dtype_name(in.precision.param), dtype_name(in.precision.reduce),
      in.prefetch, gpt_recompute_name(in.recompute));
  printf("hardware %s: %s\n", hw->name, hw->calibration);
  sim_print(stdout, hw, &r, &mp);
  if (csv) {
    sim_csv_row(csv, o->label, o->model.model, hw, &in, &r, (double)mp.total);
    fclose(csv);
  }
  return ST_OK;
}

/* One configuration of the sweep on `gpus` GPUs: "zeroK" (one shard group of all the GPUs) or
 * "hsdpK" (shard groups of a node, replicated across nodes). */
static st_status sweep_input(const simulate_options *o, const char *config, int gpus,
                             const sim_hardware *hw, plan_input *in) {
  int stage = -1, hybrid = strncmp(config, "hsdp", 4) == 0;
  char tail = 0;
  if (sscanf(config + 4, "%d%c", &stage, &tail) != 1 ||
      (!hybrid && strncmp(config, "zero", 4) != 0) || stage < 0 || stage > 3) {
    return st_error(ST_ERR_INVALID_ARG, "--configs: '%s' is not zero0-zero3 or hsdp0-hsdp3",
                    config);
  }
  const int per_node = gpus < hw->gpus_per_node ? gpus : hw->gpus_per_node;
  return make_input(o, gpus, stage, hybrid ? gpus / per_node : 1, 0, hw, in);
}

static st_status run_sweep(const simulate_options *o, sim_hardware *hw) {
  FILE *csv = NULL;
  ST_CHECK(open_csv(o->csv, &csv));
  printf("%-8s %6s %-10s %10s %12s %7s %10s %9s\n", "config", "gpus", "mesh", "step ms",
         "tok/s/GPU", "MFU %", "exposed ms", "mem GiB");
  char list[1024], configs[256];
  snprintf(list, sizeof list, "%s", o->sweep);
  st_status status = ST_OK;
  int rows = 0;
  for (char *save = NULL, *n = strtok_r(list, ",", &save); n && status == ST_OK;
       n = strtok_r(NULL, ",", &save)) {
    char *end = NULL;
    long gpus = strtol(n, &end, 10);
    if (*end || gpus < 1 || gpus > 1 << 20 ||
        (gpus > hw->gpus_per_node && gpus % hw->gpus_per_node)) {
      status = st_error(ST_ERR_INVALID_ARG,
                        "--sweep: '%s' is not a GPU count (whole nodes of %d "
                        "above one node)",
                        n, hw->gpus_per_node);
      break;
    }
    snprintf(configs, sizeof configs, "%s", o->configs);
    for (char *save2 = NULL, *c = strtok_r(configs, ",", &save2); c && status == ST_OK;
         c = strtok_r(NULL, ",", &save2)) {
      plan_input in;
      sim_result r;
      memory_plan mp;
      status = sweep_input(o, c, (int)gpus, hw, &in);
      if (status == ST_OK) status = sim_step(hw, &in, &r);
      if (status == ST_OK) status = sim_memory(hw, &in, &mp);
      if (status != ST_OK) break;
      char mesh[32];
      snprintf(mesh, sizeof mesh, "%dx%dx%d", in.R, in.S, in.T);
      printf("%-8s %6ld %-10s %10.2f %12.0f %7.1f %10.2f %9.2f\n", c, gpus, mesh, r.step_s * 1e3,
             r.tokens_per_s_per_gpu, 100 * r.mfu, r.exposed_s * 1e3,
             (double)mp.total / 1073741824.0);
      if (csv) sim_csv_row(csv, c, o->model.model, hw, &in, &r, (double)mp.total);
      rows++;
    }
  }
  if (csv) fclose(csv);
  if (status == ST_OK && rows == 0) {
    status = st_error(ST_ERR_INVALID_ARG, "--sweep '%s' --configs '%s': nothing to simulate",
                      o->sweep, o->configs);
  }
  return status;
}

int cmd_simulate(int argc, char **argv) {
  simulate_options o = {.model = {.model = "d12"},
                        .nodes = 1,
                        .dp_replicate = 1,
                        .tp = 1,
                        .micro_batch = 8,
                        .grad_accum = 1,
                        .prefetch = 1,
                        .reshard = 1,
                        .param_dtype = "bf16",
                        .reduce_dtype = "bf16",
                        .offload = "none",
                        .recompute = "none",
                        .configs = "zero0,zero1,zero2,zero3,hsdp3",
                        .label = "run",
                        .efficiency_scale = 1.0};
  cli_flag flags[40];
  int nflags = 0, help = 0;
  sim_flags_add(&o.model, &o.cluster, flags, &nflags);
  const cli_flag own[] = {
      {"nodes", FLAG_INT, &o.nodes, "nodes (GPUs = gpus-per-node x nodes)"},
      {"zero", FLAG_INT, &o.zero, "ZeRO stage 0-3"},
      {"dp-replicate", FLAG_INT, &o.dp_replicate, "replicate groups R"},
      {"dp-shard", FLAG_INT, &o.dp_shard, "shard group size S (0: GPUs / (R x tp))"},
      {"tp", FLAG_INT, &o.tp, "tensor-parallel size T"},
      {"micro-batch", FLAG_INT, &o.micro_batch, "sequences per data-parallel rank per micro-step"},
      {"grad-accum", FLAG_INT, &o.grad_accum, "micro-batches per step"},
      {"prefetch", FLAG_INT, &o.prefetch, "units gathered ahead (stage 3)"},
      {"reshard-after-forward", FLAG_BOOL, &o.reshard, "release blocks after their forward"},
      {"param-dtype", FLAG_STRING, &o.param_dtype,
       "parameters: fp32, bf16 or fp16 (fp16: bf16's memory, plus loss scaling's checks)"},
      {"reduce-dtype", FLAG_STRING, &o.reduce_dtype, "gradients: fp32, bf16 or fp16"},
      {"offload", FLAG_STRING, &o.offload,
       "optimizer: master weights and Adam moments in host memory, AdamW on the host; or none"},
      {"recompute", FLAG_STRING, &o.recompute,
       "activations recomputed in the backward: none, gelu or block (as for train)"},
      {"csv", FLAG_STRING, &o.csv, "write the result(s) as CSV to this file"},
      {"label", FLAG_STRING, &o.label, "the CSV row's label (single runs)"},
      {"efficiency-scale", FLAG_DOUBLE, &o.efficiency_scale,
       "what-if: multiply every kernel efficiency of the hardware by this"},
      {"sweep", FLAG_STRING, &o.sweep,
       "comma-separated GPU counts: simulate each of --configs on each"},
      {"configs", FLAG_STRING, &o.configs,
       "with --sweep: zeroK (one shard group of all GPUs) or hsdpK (shard within a node)"},
  };
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) flags[nflags++] = own[i];
  st_status status = cli_parse(argc, argv, 2, flags, nflags, &help);
  if (help) {
    cli_print_help(stdout, "shardtrain simulate [flags]",
                   "Predicts one training step's time, its breakdown, MFU, tokens/s and memory\n"
                   "per rank on a described cluster (docs/SIMULATOR.md). No MPI, no GPU needed.",
                   flags, nflags);
    return 0;
  }
  sim_hardware hw;
  if (status == ST_OK) status = sim_cluster_resolve(&o.cluster, &hw);
  if (status == ST_OK && !(o.efficiency_scale > 0)) {
    status =
        st_error(ST_ERR_INVALID_ARG, "--efficiency-scale must be > 0, got %g", o.efficiency_scale);
  }
  if (status == ST_OK && o.efficiency_scale != 1.0) {
    sim_hw_scale_class_efficiency(&hw, o.efficiency_scale);
    snprintf(hw.calibration, sizeof hw.calibration, "kernel efficiencies x %g (what-if)",
             o.efficiency_scale);
    status = sim_hw_check(&hw);
  }
  if (status == ST_OK) status = o.sweep ? run_sweep(&o, &hw) : run_one(&o, &hw);
  if (status != ST_OK) fprintf(stderr, "shardtrain simulate: error: %s\n", st_last_error());
  return exit_code_for(status);
}
