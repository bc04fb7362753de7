/* cmd_plan.c - `shardtrain plan`: for a model and a number of ranks, every data-parallel mesh
 * (R x S with R x S = ranks) and ZeRO stage, the memory per rank the planner predicts and the
 * bytes per step each rank sends, next to docs/SHARDING.md's formulas, and whether it fits in the
 * given GPU memory. Computes everything from the config: nothing is allocated or run.
 * `plan --fit` chooses a configuration instead (cmd_plan_fit.c). */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "engine/cli/commands.h"
#include "engine/flags/cli_flags.h"
#include "engine/model/gpt.h"
#include "engine/plan/planner.h"
#include "engine/train/train_options.h"

typedef struct plan_options {
  const char *model;
  int ranks, micro_batch, seq_len, grad_accum, prefetch;
  double gpu_gib;
  const char *param_dtype, *reduce_dtype, *device, *recompute, *offload;
  const char *loss_scale; /* checked as train checks it; scaling changes no memory */
  int loss_scale_window;
  int ckpt;       /* the run saves checkpoints (train's --ckpt-dir) */
  int ckpt_async; /* ... in the background (train's --ckpt-async) */
  int fit;        /* always 0 here: --fit runs cmd_plan_fit */
} plan_options;

static double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

static void print_row(const plan_input *in, const memory_plan *mp, const comm_plan *cp,
                      double gpu_gib) {
  const double psi = (double)mp->psi, S = in->S;
  const double p = (double)dtype_size(in->precision.param),
               g = (double)dtype_size(in->precision.reduce);
  const double states_formula[4] = {(p + g + 12) * psi, (p + g) * psi + 12 * psi / S,
                                    p * psi + (g + 12) * psi / S, (p + g + 12) * psi / S};
  /* Bytes gathered and reduce-scattered per element: stage 0 all-gathers gradients, stages
   * 1-2 parameters once, stage 3 parameters twice. */
  const double per_element[4] = {2 * g, p + g, p + g, 2 * p + g};
  const double comm_formula = per_element[in->stage] * psi * (S - 1) / S;
  const double device = (double)mp->device_bytes;
  double sent = (double)(cp->shard_all_gather + cp->shard_reduce_scatter);
  printf(
      "%3d x %-3d %5d %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f | %9.3f %9.3f %9.3f "
      "%s\n",
      in->R, in->S, in->stage, gib((double)mp->bytes[MEM_PARAMS]),
      gib((double)mp->bytes[MEM_GRADS]), gib((double)mp->bytes[MEM_OPTIMIZER]),
      gib((double)mp->bytes[MEM_GATHERED]), gib((double)mp->bytes[MEM_ACTIVATIONS]), gib(device),
      gib((double)mp->host_bytes), gib((double)mp->model_states), gib(states_formula[in->stage]),
      gib(sent), gib(comm_formula), gib((double)cp->replicate_all_reduce),
      gpu_gib > 0 ? (gib(device) <= gpu_gib ? "fits" : "too big") : "");
}

/* The precision of the flags, the planned device's kind (whose kernels size the attention state
 * and choose the activation dtype) and whether it keeps fp32 compute copies. */
static st_status plan_precision(const plan_options *o, unit_precision *precision,
                                st_device_kind *device, int *copies) {
  train_options t;
  train_options_defaults(&t);
  t.param_dtype = o->param_dtype;
  t.reduce_dtype = o->reduce_dtype;
  t.loss_scale = o->loss_scale;
  t.loss_scale_window = o->loss_scale_window;
  ST_CHECK(train_options_precision(&t, precision));
  loss_scaler scaler;
  ST_CHECK(train_options_loss_scaler(&t, *precision, &scaler));
  if (strcmp(o->device, "cpu") == 0) {
    const st_device cpu = device_cpu();
    if (device_check_param_dtype(&cpu, precision->param) != ST_OK) {
      return st_error(ST_ERR_INVALID_ARG, "--param-dtype %s: %s", o->param_dtype, st_last_error());
    }
    *device = ST_DEVICE_CPU;
    *copies = plan_compute_copies(*device, *precision);
    return ST_OK;
  }
  if (strcmp(o->device, "cuda") != 0) {
    return st_error(ST_ERR_INVALID_ARG, "--device '%s' is not cpu or cuda", o->device);
  }
  /* A GPU run is planned without a GPU, with the CUDA kernels' answers (this build's): never
   * one that gpt_create refuses there. */
  *device = ST_DEVICE_CUDA;
  *copies = plan_compute_copies(*device, *precision);
  return gpt_check_precision(*device, *precision);
}

static st_status run_plan(const plan_options *o) {
  gpt_config cfg;
  unit_precision precision;
  st_device_kind device = ST_DEVICE_CPU;
  int copies = 0;
  ST_CHECK(plan_precision(o, &precision, &device, &copies));
  train_options t;
  train_options_defaults(&t);
  t.recompute = o->recompute;
  t.offload = o->offload;
  t.micro_batch = o->micro_batch;
  t.grad_accum = o->grad_accum;
  t.prefetch = o->prefetch;
  gpt_recompute recompute;
  int offload = 0;
  ST_CHECK(train_options_batch(&t));
  ST_CHECK(train_options_recompute(&t, &recompute));
  ST_CHECK(train_options_offload(&t, &offload));
  if (o->gpu_gib < 0) {
    return st_error(ST_ERR_INVALID_ARG, "--gpu-gib must be >= 0 (0: no verdict), got %g",
                    o->gpu_gib);
  }
  ST_CHECK(gpt_config_named(o->model, &cfg));
  if (o->seq_len) cfg.max_seq = o->seq_len;
  ST_CHECK(gpt_config_finish(&cfg, 1));
  if (o->ranks < 1 || o->ranks > PLAN_MAX_RANKS) {
    return st_error(ST_ERR_INVALID_ARG, "--ranks %d is out of range (1 to %d)", o->ranks,
                    PLAN_MAX_RANKS);
  }
  printf(
      "shardtrain plan: model %s (%.1f M parameters), %d rank%s, micro-batch %d x %d tokens, "
      "params %s, reduce %s, %s, prefetch %d, recompute %s, offload %s, checkpoints %s\n",
      o->model, (double)gpt_config_num_params(&cfg) / 1e6, o->ranks, o->ranks == 1 ? "" : "s",
      o->micro_batch, cfg.max_seq, dtype_name(precision.param), dtype_name(precision.reduce),
      o->device, o->prefetch, gpt_recompute_name(recompute), offload ? "optimizer" : "none",
      o->ckpt_async ? "in the background"
      : o->ckpt     ? "yes"
                    : "no");
  printf(
      "memory per rank in GiB, on the device (its total compared with --gpu-gib) and in host "
      "memory; 'states' = params + grads + optimizer wherever they are (an offloaded optimizer's "
      "with its pinned staging), next to the formula of docs/SHARDING.md (\"ZeRO stages\");\n"
      "bytes per step per rank in GiB: shard group (all-gather + reduce-scatter) next to the "
      "ring formula, and the replicate group's all-reduce\n");
  printf("%-9s %5s %9s %9s %9s %9s %9s %9s %9s %9s %9s | %9s %9s %9s\n", "R x S", "stage", "params",
         "grads", "optim", "gathered", "activ", "device", "host", "states", "formula", "shard tx",
         "formula", "repl tx");
  for (int R = 1; R <= o->ranks; R++) {
    if (o->ranks % R) continue;
    for (int stage = 0; stage <= 3; stage++) {
      const plan_input in = {.cfg = cfg,
                             .R = R,
                             .S = o->ranks / R,
                             .T = 1,
                             .stage = stage,
                             .micro_batch = o->micro_batch,
                             .seq_len = cfg.max_seq,
                             .grad_accum = o->grad_accum,
                             .prefetch = o->prefetch,
                             .reshard_after_forward = 1,
                             .precision = precision,
                             .device = device,
                             .compute_copies = copies,
                             .offload_optimizer = offload,
                             .device_is_host = device == ST_DEVICE_CPU,
                             .recompute = recompute,
                             .checkpoints = o->ckpt || o->ckpt_async,
                             .checkpoints_async = o->ckpt_async};
      memory_plan mp;
      comm_plan cp;
      ST_CHECK(plan_memory(&in, &mp));
      ST_CHECK(plan_comm(&in, &cp));
      print_row(&in, &mp, &cp, o->gpu_gib);
    }
  }
  return ST_OK;
}

/* 1 when the flags turn --fit on (--fit, --fit=true or --fit=1, the last one counting); any
 * other value is left to the parser below, which knows --fit as a switch and refuses a value
 * that is not one. */
static int asks_for_fit(int argc, char **argv) {
  int fit = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--fit") == 0) fit = 1;
    if (strncmp(argv[i], "--fit=", 6) == 0) {
      fit = strcmp(argv[i] + 6, "true") == 0 || strcmp(argv[i] + 6, "1") == 0;
    }
  }
  return fit;
}

int cmd_plan(int argc, char **argv) {
  if (asks_for_fit(argc, argv)) return cmd_plan_fit(argc, argv);
  plan_options o = {.model = "d12",
                    .ranks = 8,
                    .micro_batch = 4,
                    .grad_accum = 1,
                    .prefetch = 1,
                    .param_dtype = "fp32",
                    .reduce_dtype = "fp32",
                    .device = "cuda",
                    .recompute = "none",
                    .offload = "none",
                    .loss_scale_window = LOSS_SCALER_DEFAULT_WINDOW};
  const cli_flag flags[] = {
      {"model", FLAG_STRING, &o.model, "named config: tiny, d6, d12, d24, d36, d48"},
      {"ranks", FLAG_INT, &o.ranks, "number of ranks (every R x S = ranks is listed)"},
      {"micro-batch", FLAG_INT, &o.micro_batch, "sequences per rank per micro-step"},
      {"seq-len", FLAG_INT, &o.seq_len, "tokens per sequence (0: the model's)"},
      {"grad-accum", FLAG_INT, &o.grad_accum, "micro-batches per step"},
      {"prefetch", FLAG_INT, &o.prefetch, "units gathered ahead (stage 3)"},
      {"gpu-gib", FLAG_DOUBLE, &o.gpu_gib, "GPU memory to compare with (0: no verdict)"},
      {"param-dtype", FLAG_STRING, &o.param_dtype, "parameters: fp32, bf16 or fp16"},
      {"reduce-dtype", FLAG_STRING, &o.reduce_dtype,
       "gradients and their reductions: fp32, bf16 or fp16"},
      {"device", FLAG_STRING, &o.device, "cuda (GPUs, the default) or cpu (fp32 compute copies)"},
      {"recompute", FLAG_STRING, &o.recompute,
       "activations recomputed in the backward: none, gelu or block (as for train)"},
      {"offload", FLAG_STRING, &o.offload,
       "optimizer or none (as for train): master, m and v, with the staging, in host memory"},
      {"loss-scale", FLAG_STRING, &o.loss_scale,
       "fp16 only, as for train (checked the same way; no effect on memory)"},
      {"loss-scale-window", FLAG_INT, &o.loss_scale_window, "as for train"},
      {"ckpt", FLAG_BOOL, &o.ckpt,
       "the run saves checkpoints (train's --ckpt-dir): a save's 1 MiB host staging"},
      {"ckpt-async", FLAG_BOOL, &o.ckpt_async,
       "the run saves them in the background (train's --ckpt-async): a host snapshot of the "
       "optimizer state"},
      {"fit", FLAG_BOOL, &o.fit, "choose a configuration instead (plan --fit --help)"},
  };
  int nflags = (int)(sizeof flags / sizeof flags[0]), help = 0;
  st_status status = cli_parse(argc, argv, 2, flags, nflags, &help);
  if (help) {
    cli_print_help(stdout, "shardtrain plan [flags]",
                   "Predicts memory per rank and communication per step for every mesh and ZeRO\n"
                   "stage, from the model config alone (no MPI, no allocation).",
                   flags, nflags);
    return 0;
  }
  if (status == ST_OK) status = run_plan(&o);
  if (status != ST_OK) fprintf(stderr, "shardtrain plan: error: %s\n", st_last_error());
  return exit_code_for(status);
}
