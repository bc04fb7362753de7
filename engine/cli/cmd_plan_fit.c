/* cmd_plan_fit.c - `shardtrain plan --fit`: chooses a configuration for the user. For a model,
 * a number of GPUs, their memory and a global batch, it searches the meshes, stages,
 * micro-batches, stage-3 options, optimizer offload and activation recompute the engine runs
 * (engine/plan/sim_fit.h), drops what does not
 * fit in memory (the planner), ranks the rest by the simulator's tokens/s and prints the best few
 * with their memory and time, and the `shardtrain train` flags of the best. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "engine/cli/commands.h"
#include "engine/flags/cli_flags.h"
#include "engine/model/gpt.h"
#include "engine/plan/fit.h"
#include "engine/plan/sim_fit.h"
#include "engine/plan/sim_report.h"
#include "engine/train/train_options.h"

enum { FIT_MAX_TOP = 50 };
/* 2^40 tokens a step: far above any real batch, and it keeps the micro-batch search short. */
#define FIT_MAX_GLOBAL_TOKENS 1099511627776.0

typedef struct fit_options {
  sim_model_flags model;
  sim_cluster_flags cluster;
  int fit, gpus, top;
  double gpu_gib, global_batch;
  const char *param_dtype, *reduce_dtype;
} fit_options;

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double gib(double bytes) { return bytes / 1073741824.0; }

static st_status make_request(const fit_options *o, const sim_hardware *hw, fit_request *req) {
  if (o->gpu_gib < 0) {
    return st_error(ST_ERR_INVALID_ARG, "--gpu-gib must be >= 0 (0: the hardware's), got %g",
                    o->gpu_gib);
  }
  train_options t;
  train_options_defaults(&t);
  t.param_dtype = o->param_dtype;
  t.reduce_dtype = o->reduce_dtype;
  /* Checked before the conversion below, which a value beyond int64 would make undefined. */
  if (!(o->global_batch >= 1 && o->global_batch <= FIT_MAX_GLOBAL_TOKENS)) {
    return st_error(ST_ERR_INVALID_ARG, "--global-batch %g is out of range (1 to %.0f tokens)",
                    o->global_batch, FIT_MAX_GLOBAL_TOKENS);
  }
  *req = (fit_request){.gpus = o->gpus,
                       .gpu_gib = o->gpu_gib > 0 ? o->gpu_gib : hw->memory_gib,
                       .global_tokens = (int64_t)o->global_batch,
                       .max_grad_accum = TRAIN_MAX_GRAD_ACCUM};
  ST_CHECK(train_options_precision(&t, &req->precision));
  plan_input device = {.precision = req->precision};
  sim_device_fields(hw, &device);
  ST_CHECK(gpt_check_precision(device.device, device.precision)); /* what gpt_create refuses */
  if (o->gpus < 1 || o->gpus > PLAN_MAX_RANKS) {
    return st_error(ST_ERR_INVALID_ARG, "--gpus %d is out of range (1 to %d)", o->gpus,
                    PLAN_MAX_RANKS);
  }
  if (!sim_hw_whole_nodes(hw, o->gpus)) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--gpus %d is not a whole number of nodes of %d GPUs (--gpus-per-node)",
                    o->gpus, hw->gpus_per_node);
  }
  if (o->top < 1 || o->top > FIT_MAX_TOP) {
    return st_error(ST_ERR_INVALID_ARG, "--top must be 1-%d, got %d", FIT_MAX_TOP, o->top);
  }
  if (req->gpu_gib <= 0) {
    return st_error(ST_ERR_INVALID_ARG, "--gpu-gib: the hardware '%s' does not say its memory",
                    hw->name);
  }
  if (o->global_batch != (double)req->global_tokens) {
    return st_error(ST_ERR_INVALID_ARG, "--global-batch %g is not a whole number of tokens",
                    o->global_batch);
  }
  return sim_model_resolve(&o->model, 1, &req->cfg);
}

static void print_table(const fit_candidate *best, int found) {
  printf("%4s %-10s %4s %5s %5s %4s %4s %4s %-5s %10s %10s %6s %9s %8s %8s %8s %8s %8s\n", "rank",
         "mesh", "zero", "mb", "accum", "pf", "rs", "off", "recmp", "step ms", "tok/s/GPU", "MFU %",
         "exposed", "mem GiB", "states", "gathered", "activ", "work");
  for (int i = 0; i < found; i++) {
    const fit_candidate *c = &best[i];
    /* on the device, like the other columns: an offloaded optimizer's part is the host's */
    const double states = (double)(c->mp.model_states - c->mp.bytes[MEM_OPTIMIZER_HOST]);
    char mesh[32];
    snprintf(mesh, sizeof mesh, "%dx%dx%d", c->in.R, c->in.S, c->in.T);
    printf(
        "%4d %-10s %4d %5d %5d %4d %4d %4d %-5s %10.2f %10.0f %6.1f %9.2f %8.3f %8.3f %8.3f "
        "%8.3f %8.3f\n",
        i + 1, mesh, c->in.stage, c->in.micro_batch, c->in.grad_accum, c->in.prefetch,
        c->in.reshard_after_forward, c->in.offload_optimizer, gpt_recompute_name(c->in.recompute),
        c->r.step_s * 1e3, c->r.tokens_per_s_per_gpu, 100 * c->r.mfu, c->r.exposed_s * 1e3,
        gib((double)fit_need(&c->in, &c->mp)), gib(states), gib((double)c->mp.bytes[MEM_GATHERED]),
        gib((double)c->mp.bytes[MEM_ACTIVATIONS]), gib((double)c->mp.bytes[MEM_WORKSPACE]));
  }
}

static st_status run_fit(const fit_options *o) {
  sim_hardware hw;
  fit_request req;
  ST_CHECK(sim_cluster_resolve(&o->cluster, &hw));
  ST_CHECK(make_request(o, &hw, &req));
  fit_candidate best[FIT_MAX_TOP];
  int found = 0;
  fit_stats stats;
  const double start = seconds_now();
  ST_CHECK(sim_fit(&hw, &req, best, o->top, &found, &stats));
  const double took = seconds_now() - start;
  printf(
      "shardtrain plan --fit: %s (%.1f M parameters) on %d x %s (%d per node, %.1f GiB each), "
      "global batch %lld tokens (%lld x %d), params %s, reduce %s\n",
      o->model.model, (double)gpt_config_num_params(&req.cfg) / 1e6, req.gpus, hw.name,
      hw.gpus_per_node, req.gpu_gib, (long long)req.global_tokens,
      (long long)(req.global_tokens / req.cfg.max_seq), req.cfg.max_seq,
      dtype_name(req.precision.param), dtype_name(req.precision.reduce));
  printf("hardware %s: %s\n", hw.name, hw.calibration);
  printf(
      "searched %ld configurations (mesh R x S x T, ZeRO stage, micro-batch, grad-accum <= %d, "
      "prefetch and resharding at stage 3, optimizer offload, activation recompute) in %.3f s: "
      "%ld fit in memory\n",
      stats.enumerated, TRAIN_MAX_GRAD_ACCUM, took, stats.fitting);
  if (found == 0) {
    return st_error(ST_ERR_INVALID_ARG,
                    "no configuration of %s fits in %.1f GiB per GPU on %d "
                    "GPU%s with a global batch of %lld tokens",
                    o->model.model, req.gpu_gib, req.gpus, req.gpus == 1 ? "" : "s",
                    (long long)req.global_tokens);
  }
  printf(
      "\nbest %d by predicted tokens/s (memory per rank on the device in GiB, from the planner):\n",
      found);
  print_table(best, found);
  printf("\nthe best, step by step:\n");
  sim_print(stdout, &hw, &best[0].r, &best[0].mp);
  char flags[512];
  sim_train_flags(&best[0].in, flags, sizeof flags);
  printf("\nrun it with:\n  mpirun -np %d shardtrain train --model %s", req.gpus, o->model.model);
  const struct {
    const char *flag;
    int value;
  } overrides[] = {{"n-layer", o->model.n_layer},
                   {"n-head", o->model.n_head},
                   {"n-embd", o->model.n_embd},
                   {"vocab", o->model.vocab},
                   {"seq-len", o->model.seq_len}};
  for (size_t i = 0; i < sizeof overrides / sizeof overrides[0]; i++) {
    if (overrides[i].value) printf(" --%s %d", overrides[i].flag, overrides[i].value);
  }
  printf(" %s ...\n", flags);
  return ST_OK;
}

int cmd_plan_fit(int argc, char **argv) {
  fit_options o = {.model = {.model = "d12"},
                   .gpus = 8,
                   .top = 5,
                   .global_batch = 524288,
                   .param_dtype = "bf16",
                   .reduce_dtype = "bf16"};
  cli_flag flags[24];
  int nflags = 0, help = 0;
  sim_flags_add(&o.model, &o.cluster, flags, &nflags);
  const cli_flag own[] = {
      {"fit", FLAG_BOOL, &o.fit, "choose the configuration (this mode)"},
      {"gpus", FLAG_INT, &o.gpus, "number of GPUs (ranks)"},
      {"gpu-gib", FLAG_DOUBLE, &o.gpu_gib, "memory per GPU in GiB (0: the hardware's)"},
      {"global-batch", FLAG_DOUBLE, &o.global_batch, "tokens per optimizer step"},
      {"param-dtype", FLAG_STRING, &o.param_dtype,
       "parameters: fp32, bf16 or fp16 (fp16: bf16's memory, plus loss scaling's checks)"},
      {"reduce-dtype", FLAG_STRING, &o.reduce_dtype, "gradients: fp32, bf16 or fp16"},
      {"top", FLAG_INT, &o.top, "configurations to print"},
  };
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) flags[nflags++] = own[i];
  st_status status = cli_parse(argc, argv, 2, flags, nflags, &help);
  if (help) {
    cli_print_help(stdout, "shardtrain plan --fit [flags]",
                   "Chooses the mesh, ZeRO stage, micro-batch and gradient accumulation for a\n"
                   "model on N GPUs: drops what does not fit in memory, ranks the rest by the\n"
                   "simulator's predicted tokens/s (docs/SIMULATOR.md).",
                   flags, nflags);
    return 0;
  }
  if (status == ST_OK) status = run_fit(&o);
  if (status != ST_OK) fprintf(stderr, "shardtrain plan: error: %s\n", st_last_error());
  return exit_code_for(status);
}
