/* cmd_simulate.c - `shardtrain simulate`: the predicted time of one training step for a model,
 * mesh, stage, batch and precision on a described cluster (--gpu or --hardware, --gpus-per-node,
 * --nodes), with its breakdown (compute per op class, exposed communication, optimizer), MFU,
 * tokens/s and the planner's memory per rank; --csv writes it as a CSV row. --sweep N1,N2,...
 * repeats it over GPU counts for several configurations (--configs) at a fixed micro-batch
 * per GPU, for tools/plot_scaling.py. Runs no MPI and allocates no model. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
  const struct {
    const char *flag;
    int value;
  } sizes[] = {{"tp", T}, {"dp-replicate", R}, {"dp-shard", S}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (sizes[i].value > gpus) {
      return st_error(ST_ERR_INVALID_ARG, "--%s %d is more than the cluster's %d GPU%s",
                      sizes[i].flag, sizes[i].value, gpus, gpus == 1 ? "" : "s");
    }
  }
  if (R == 0 && S == 0) R = 1;
  /* Each size is at most 2^20 GPUs: the products fit in 64 bits. */
  const long long mesh = (long long)R * S * T;
  if (R && S && mesh != gpus) {
    return st_error(ST_ERR_INVALID_ARG, "mesh %dx%dx%d needs %lld GPU%s, the cluster has %d", R, S,
                    T, mesh, mesh == 1 ? "" : "s", gpus);
  }
  const long long fixed = (long long)(R ? R : 1) * (S ? S : 1) * T;
  if (gpus % fixed != 0) {
    char r[16] = "?", sh[16] = "?";
    if (R) snprintf(r, sizeof r, "%d", R);
    if (S) snprintf(sh, sizeof sh, "%d", S);
    return st_error(ST_ERR_INVALID_ARG, "mesh %sx%sx%d does not divide %d GPU%s", r, sh, T, gpus,
                    gpus == 1 ? "" : "s");
  }
  if (!R) R = (int)(gpus / fixed);
  if (!S) S = (int)(gpus / fixed);
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

/* --csv is written to a temporary file beside the target and renamed over it only when the run
 * succeeds, so a refused or failed run leaves an existing file as it was. */
typedef struct csv_out {
  FILE *f;
  char tmp[4096];
} csv_out;

static st_status csv_open(const char *path, csv_out *c) {
  c->f = NULL;
  if (!path) return ST_OK;
  if (snprintf(c->tmp, sizeof c->tmp, "%s.tmpXXXXXX", path) >= (int)sizeof c->tmp) {
    return st_error(ST_ERR_INVALID_ARG, "--csv %s: path too long", path);
  }
  const int fd = mkstemp(c->tmp);
  if (fd < 0 || !(c->f = fdopen(fd, "w"))) {
    if (fd >= 0) {
      close(fd);
      unlink(c->tmp);
    }
    return st_error(ST_ERR_INVALID_ARG, "--csv %s: cannot open for writing (%s)", path,
                    strerror(errno));
  }
  /* mkstemp's file is private (0600); give it the mode a plain fopen would have. */
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);
  sim_csv_header(c->f);
  return ST_OK;
}

/* Renames the temporary file over `path` when status is ST_OK, else removes it. */
static st_status csv_close(const char *path, csv_out *c, st_status status) {
  if (!c->f) return status;
  const int failed = ferror(c->f) | (fclose(c->f) != 0);
  c->f = NULL;
  if (status == ST_OK && failed) {
    status = st_error(ST_ERR_INVALID_ARG, "--csv %s: write failed", path);
  }
  if (status == ST_OK && rename(c->tmp, path) != 0) {
    status = st_error(ST_ERR_INVALID_ARG, "--csv %s: cannot write (%s)", path, strerror(errno));
  }
  if (status != ST_OK) unlink(c->tmp);
  return status;
}

/* The cluster's GPU count, refused up front beyond PLAN_MAX_RANKS (the product in 64 bits). */
static st_status cluster_gpus(const simulate_options *o, const sim_hardware *hw, int *gpus) {
  if (o->nodes < 1 || o->nodes > PLAN_MAX_RANKS) {
    return st_error(ST_ERR_INVALID_ARG, "--nodes %d is out of range (1 to %d)", o->nodes,
                    PLAN_MAX_RANKS);
  }
  const long long n = (long long)hw->gpus_per_node * o->nodes;
  if (n > PLAN_MAX_RANKS) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%d nodes of %d GPUs is %lld GPUs, more than the %d a simulation describes",
                    o->nodes, hw->gpus_per_node, n, PLAN_MAX_RANKS);
  }
  *gpus = (int)n;
  return ST_OK;
}

static st_status run_one(const simulate_options *o, const sim_hardware *hw) {
  int gpus = 0;
  ST_CHECK(cluster_gpus(o, hw, &gpus));
  plan_input in;
  ST_CHECK(make_input(o, gpus, o->zero, o->dp_replicate, o->dp_shard, hw, &in));
  sim_result r;
  memory_plan mp;
  ST_CHECK(sim_step(hw, &in, &r));
  ST_CHECK(sim_memory(hw, &in, &mp));
  csv_out csv;
  ST_CHECK(csv_open(o->csv, &csv));
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
  if (csv.f) sim_csv_row(csv.f, o->label, o->model.model, hw, &in, &r, (double)mp.total);
  return csv_close(o->csv, &csv, ST_OK);
}

/* Refuses an empty comma-separated list or one with an empty item ("8,,16", "8,"): strtok_r
 * would skip it silently. */
static st_status check_list(const char *flag, const char *text, size_t cap) {
  const size_t n = strlen(text);
  if (n >= cap)
    return st_error(ST_ERR_INVALID_ARG, "--%s: longer than %zu characters", flag, cap - 1);
  if (n == 0 || text[0] == ',' || text[n - 1] == ',' || strstr(text, ",,")) {
    return st_error(ST_ERR_INVALID_ARG, "--%s '%s': empty item", flag, text);
  }
  return ST_OK;
}

/* One configuration of the sweep on `gpus` GPUs: "zeroK" (one shard group of all the GPUs) or
 * "hsdpK" (shard groups of a node, replicated across nodes). */
static st_status sweep_input(const simulate_options *o, const char *config, int gpus,
                             const sim_hardware *hw, plan_input *in) {
  const int hybrid = strncmp(config, "hsdp", 4) == 0;
  /* The stage is one digit: "zero 1" and "hsdp+1" are not configurations. */
  if ((!hybrid && strncmp(config, "zero", 4) != 0) || strlen(config) != 5 || config[4] < '0' ||
      config[4] > '3') {
    return st_error(ST_ERR_INVALID_ARG, "--configs: '%s' is not zero0-zero3 or hsdp0-hsdp3",
                    config);
  }
  const int stage = config[4] - '0';
  const int per_node = gpus < hw->gpus_per_node ? gpus : hw->gpus_per_node;
  return make_input(o, gpus, stage, hybrid ? gpus / per_node : 1, 0, hw, in);
}

enum { SWEEP_LIST_MAX = 1024, SWEEP_CONFIGS_MAX = 256 };
#define SWEEP_DEFAULT_CONFIGS "zero0,zero1,zero2,zero3,hsdp3"

/* One pass over every GPU count and configuration. The first pass (emit 0) checks and simulates
 * everything without printing; the second prints the table and the CSV rows, so a refused item
 * leaves neither a partial table nor a partial file. */
static st_status sweep_pass(const simulate_options *o, const sim_hardware *hw, int emit, FILE *csv,
                            int *rows) {
  char list[SWEEP_LIST_MAX], configs[SWEEP_CONFIGS_MAX];
  snprintf(list, sizeof list, "%s", o->sweep);
  *rows = 0;
  for (char *save = NULL, *n = strtok_r(list, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
    char *end = NULL;
    errno = 0;
    long gpus = strtol(n, &end, 10); /* digits only: strtol would take " 8" and "+8" */
    if (!isdigit((unsigned char)n[0]) || *end || errno || gpus < 1 || gpus > PLAN_MAX_RANKS ||
        !sim_hw_whole_nodes(hw, gpus)) {
      return st_error(ST_ERR_INVALID_ARG,
                      "--sweep: '%s' is not a GPU count of 1 to %d (whole nodes of %d above one "
                      "node)",
                      n, PLAN_MAX_RANKS, hw->gpus_per_node);
    }
    snprintf(configs, sizeof configs, "%s", o->configs);
    for (char *save2 = NULL, *c = strtok_r(configs, ",", &save2); c;
         c = strtok_r(NULL, ",", &save2)) {
      plan_input in;
      sim_result r;
      memory_plan mp;
      ST_CHECK(sweep_input(o, c, (int)gpus, hw, &in));
      ST_CHECK(sim_step(hw, &in, &r));
      ST_CHECK(sim_memory(hw, &in, &mp));
      (*rows)++;
      if (!emit) continue;
      char mesh[32];
      snprintf(mesh, sizeof mesh, "%dx%dx%d", in.R, in.S, in.T);
      printf("%-8s %6ld %-10s %10.2f %12.0f %7.1f %10.2f %9.2f\n", c, gpus, mesh, r.step_s * 1e3,
             r.tokens_per_s_per_gpu, 100 * r.mfu, r.exposed_s * 1e3,
             (double)mp.total / 1073741824.0);
      if (csv) sim_csv_row(csv, c, o->model.model, hw, &in, &r, (double)mp.total);
    }
  }
  return ST_OK;
}

static st_status run_sweep(const simulate_options *o, const sim_hardware *hw) {
  ST_CHECK(check_list("sweep", o->sweep, SWEEP_LIST_MAX));
  ST_CHECK(check_list("configs", o->configs, SWEEP_CONFIGS_MAX));
  int rows = 0;
  ST_CHECK(sweep_pass(o, hw, 0, NULL, &rows));
  if (rows == 0) {
    return st_error(ST_ERR_INVALID_ARG, "--sweep '%s' --configs '%s': nothing to simulate",
                    o->sweep, o->configs);
  }
  csv_out csv;
  ST_CHECK(csv_open(o->csv, &csv));
  printf("%-8s %6s %-10s %10s %12s %7s %10s %9s\n", "config", "gpus", "mesh", "step ms",
         "tok/s/GPU", "MFU %", "exposed ms", "mem GiB");
  return csv_close(o->csv, &csv, sweep_pass(o, hw, 1, csv.f, &rows));
}

/* Refuses a --csv that is the --hardware file (the same device and inode, through any path):
 * the CSV would replace it. */
static st_status check_output(const simulate_options *o) {
  struct stat in, out;
  if (o->csv && o->cluster.hardware && stat(o->csv, &out) == 0 &&
      stat(o->cluster.hardware, &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
    return st_error(ST_ERR_INVALID_ARG, "--csv %s is the --hardware file %s: it would be replaced",
                    o->csv, o->cluster.hardware);
  }
  return ST_OK;
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
       "with --sweep: zeroK (one shard group of all GPUs) or hsdpK (shard within a node); "
       "default " SWEEP_DEFAULT_CONFIGS},
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
  if (status == ST_OK) status = check_output(&o);
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
  if (status == ST_OK && o.configs && !o.sweep) {
    status = st_error(ST_ERR_INVALID_ARG,
                      "--configs '%s' needs --sweep (a single run has one "
                      "configuration: --zero, --dp-replicate, ...)",
                      o.configs);
  }
  if (status == ST_OK && !o.configs) o.configs = SWEEP_DEFAULT_CONFIGS;
  if (status == ST_OK) status = o.sweep ? run_sweep(&o, &hw) : run_one(&o, &hw);
  if (status != ST_OK) fprintf(stderr, "shardtrain simulate: error: %s\n", st_last_error());
  return exit_code_for(status);
}
