/* train_options.c - flags, defaults and validation for `shardtrain train`. */
#include "engine/train/train_options.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

void train_options_defaults(train_options *o) {
  const adamw_hparams adam = ADAMW_HPARAMS_DEFAULT;
  *o = (train_options){.model = "tiny",
                       .micro_batch = 8,
                       .grad_accum = 1,
                       .steps = 100,
                       .lr = 1e-3,
                       .min_lr = 0.0,
                       .warmup = 0,
                       .lr_schedule = "cosine",
                       .weight_decay = 0.1,
                       .clip = 1.0,
                       .beta1 = adam.beta1,
                       .beta2 = adam.beta2,
                       .eps = adam.eps,
                       .seed = 1337,
                       .log_every = 1,
                       .eval_every = 0,
                       .eval_batches = 8,
                       .device = NULL,
                       .zero = 0,
                       .dp_replicate = 1,
                       .dp_shard = 0,
                       .tp = 1,
                       .prefetch = 1,
                       .reshard_after_forward = 1,
                       .param_dtype = "fp32",
                       .reduce_dtype = "fp32",
                       .offload = "none",
                       .recompute = "none",
                       .loss_scale = NULL,
                       .loss_scale_window = LOSS_SCALER_DEFAULT_WINDOW,
                       .peak_tflops = 0,
                       .nccl_max_ctas = ST_NCCL_MAX_CTAS_DEFAULT};
}

int train_options_flags(train_options *o, cli_flag f[TRAIN_MAX_FLAGS]) {
  const cli_flag table[] = {
      {"model", FLAG_STRING, &o->model, "named config: tiny, d6, d12, d24, d36, d48"},
      {"n-layer", FLAG_INT, &o->n_layer, "override: transformer blocks (0: the model's)"},
      {"n-head", FLAG_INT, &o->n_head, "override: attention heads (0: the model's)"},
      {"n-embd", FLAG_INT, &o->n_embd, "override: embedding width (0: the model's)"},
      {"vocab", FLAG_INT, &o->vocab, "override: vocabulary size (0: the model's)"},
      {"seq-len", FLAG_INT, &o->seq_len, "tokens per sequence and positions (0: the model's)"},
      {"data-train", FLAG_STRING, &o->data_train, "glob of training token shards (llm.c format)"},
      {"data-val", FLAG_STRING, &o->data_val, "glob of validation token shards"},
      {"micro-batch", FLAG_INT, &o->micro_batch, "sequences per data-parallel rank per micro-step"},
      {"grad-accum", FLAG_INT, &o->grad_accum, "micro-batches per optimizer step"},
      {"steps", FLAG_INT, &o->steps, "optimizer steps"},
      {"lr", FLAG_DOUBLE, &o->lr, "peak learning rate"},
      {"min-lr", FLAG_DOUBLE, &o->min_lr,
       "learning rate at the last step (cosine, linear, wsd; 0: that step changes nothing)"},
      {"warmup", FLAG_INT, &o->warmup, "linear warmup steps"},
      {"lr-schedule", FLAG_STRING, &o->lr_schedule,
       "after warmup: cosine, linear or constant; or wsd (constant, then a 1-sqrt decay over the "
       "last --decay-steps)"},
      {"decay-steps", FLAG_INT, &o->decay_steps,
       "wsd: steps of the final decay to --min-lr (0: a fifth of --steps)"},
      {"weight-decay", FLAG_DOUBLE, &o->weight_decay, "AdamW decay on tensors of rank >= 2"},
      {"clip", FLAG_DOUBLE, &o->clip, "max global gradient norm (0: no clipping)"},
      {"beta1", FLAG_DOUBLE, &o->beta1, "AdamW decay of the first moment, in [0, 1)"},
      {"beta2", FLAG_DOUBLE, &o->beta2, "AdamW decay of the second moment, in [0, 1)"},
      {"eps", FLAG_DOUBLE, &o->eps, "AdamW denominator term, > 0"},
      {"seed", FLAG_INT, &o->seed, "seed of the initial weights"},
      {"init-from", FLAG_STRING, &o->init_from, "load every parameter from a HF GPT-2 safetensors"},
      {"save-init", FLAG_STRING, &o->save_init, "write the initial parameters (HF names) here"},
      {"export", FLAG_STRING, &o->export_path, "write the trained parameters (HF names) here"},
      {"metrics", FLAG_STRING, &o->metrics, "append one JSON line per step to this file"},
      {"quiet", FLAG_BOOL, &o->quiet,
       "nothing on stdout (no step lines, no summary); info, warnings and errors still go to "
       "stderr, --metrics is still written"},
      {"log-every", FLAG_INT, &o->log_every,
       "a step line every N steps, and for steps that evaluate, skip (fp16), end or stop the run "
       "(--metrics keeps every step)"},
      {"eval-every", FLAG_INT, &o->eval_every, "validation every N steps and at the end (0: end)"},
      {"eval-batches", FLAG_INT, &o->eval_batches, "validation batches per evaluation"},
      {"device", FLAG_STRING, &o->device, "cpu, cuda or auto (default: $ST_DEVICE, else auto)"},
      {"zero", FLAG_INT, &o->zero, "ZeRO stage: 0 (DDP), 1, 2 or 3 (full sharding)"},
      {"dp-replicate", FLAG_INT, &o->dp_replicate, "replicate groups R (outer data parallel)"},
      {"dp-shard", FLAG_INT, &o->dp_shard, "shard group size S (0: world / (R x tp))"},
      {"tp", FLAG_INT, &o->tp, "tensor-parallel size T (must divide n_head)"},
      {"prefetch", FLAG_INT, &o->prefetch, "units gathered ahead of the one computing"},
      {"reshard-after-forward", FLAG_BOOL, &o->reshard_after_forward,
       "free each block's gathered parameters (stage 3) and fp32 compute copy after its forward"},
      {"param-dtype", FLAG_STRING, &o->param_dtype,
       "parameters as held, gathered and computed with: fp32, bf16 or fp16"},
      {"reduce-dtype", FLAG_STRING, &o->reduce_dtype,
       "gradients as stored and reduced: fp32, bf16 or fp16"},
      {"loss-scale", FLAG_STRING, &o->loss_scale,
       "fp16 only: dynamic (from 65536, halved on overflow) or a fixed positive number "
       "(default: dynamic)"},
      {"loss-scale-window", FLAG_INT, &o->loss_scale_window,
       "clean steps in a row that double a dynamic loss scale"},
      {"ckpt-dir", FLAG_STRING, &o->ckpt_dir,
       "write checkpoints to DIR/step_<N> (every --ckpt-every steps and at the last step)"},
      {"ckpt-every", FLAG_INT, &o->ckpt_every, "steps between checkpoints (0: the last step only)"},
      {"keep", FLAG_INT, &o->keep, "complete checkpoints kept in --ckpt-dir (0: all)"},
      {"ckpt-async", FLAG_BOOL, &o->ckpt_async,
       "write each checkpoint in the background from a host copy of the optimizer state, "
       "while training goes on (complete some steps later)"},
      {"resume", FLAG_BOOL, &o->resume,
       "continue from the newest complete checkpoint in --ckpt-dir (none there: start anew)"},
      {"stop-at", FLAG_INT, &o->stop_at,
       "end this run after that many steps, checkpointing there; the schedule still spans "
       "--steps (0: --steps)"},
      {"resume-from", FLAG_STRING, &o->resume_from,
       "continue from this checkpoint step directory (any mesh, stage and param dtype)"},
      {"offload", FLAG_STRING, &o->offload,
       "optimizer: fp32 master, Adam m and v in host memory, AdamW on the host; or none"},
      {"recompute", FLAG_STRING, &o->recompute,
       "activations recomputed in the backward to save memory: none, gelu (the MLP's GELU "
       "output) or block (all but each block's output)"},
      {"no-fit-check", FLAG_BOOL, &o->no_fit_check,
       "start even when the planner predicts that the run does not fit the device's memory"},
      {"peak-tflops", FLAG_DOUBLE, &o->peak_tflops,
       "one device's peak TFLOP/s for the MFU (0: the GPU's datasheet peak by its name; none "
       "on the CPU)"},
      {"nccl-max-ctas", FLAG_INT, &o->nccl_max_ctas,
       "NCCL: thread blocks (SMs) one collective may take, 1-32, leaving the rest to compute"},
  };
  _Static_assert(sizeof table / sizeof table[0] <= TRAIN_MAX_FLAGS, "raise TRAIN_MAX_FLAGS");
  int n = (int)(sizeof table / sizeof table[0]);
  memcpy(f, table, (size_t)n * sizeof *f);
  return n;
}

static st_status require_positive(const char *flag, int value) {
  if (value < 1) return st_error(ST_ERR_INVALID_ARG, "--%s must be >= 1, got %d", flag, value);
  return ST_OK;
}

static st_status require_non_negative(const char *flag, int value) {
  if (value < 0) return st_error(ST_ERR_INVALID_ARG, "--%s must be >= 0, got %d", flag, value);
  return ST_OK;
}

static st_status resolve_config(const train_options *o, gpt_config *cfg) {
  ST_CHECK(gpt_config_named(o->model, cfg));
  const struct {
    const char *flag;
    int value;
    int *field;
  } overrides[] = {{"n-layer", o->n_layer, &cfg->n_layer},
                   {"n-head", o->n_head, &cfg->n_head},
                   {"n-embd", o->n_embd, &cfg->n_embd},
                   {"vocab", o->vocab, &cfg->vocab},
                   {"seq-len", o->seq_len, &cfg->max_seq}};
  for (size_t i = 0; i < sizeof overrides / sizeof overrides[0]; i++) {
    ST_CHECK(require_non_negative(overrides[i].flag, overrides[i].value));
    if (overrides[i].value) *overrides[i].field = overrides[i].value;
  }
  if (cfg->vocab > 65536) {
    return st_error(ST_ERR_INVALID_ARG, "--vocab %d: token shards hold uint16 ids (at most 65536)",
                    cfg->vocab);
  }
  ST_CHECK(require_positive("tp", o->tp));
  return gpt_config_finish(cfg, o->tp);
}

int train_options_end(const train_options *o) {
  return o->stop_at > 0 && o->stop_at < o->steps ? o->stop_at : o->steps;
}

static st_status check_checkpoint_flags(const train_options *o) {
  ST_CHECK(require_non_negative("ckpt-every", o->ckpt_every));
  ST_CHECK(require_non_negative("stop-at", o->stop_at));
  ST_CHECK(require_non_negative("keep", o->keep));
  if (o->resume && o->resume_from) {
    return st_error(ST_ERR_INVALID_ARG, "--resume and --resume-from %s: give one of them",
                    o->resume_from);
  }
  if (o->init_from && (o->resume || o->resume_from)) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--init-from %s and %s%s: a resumed run takes its parameters from the "
                    "checkpoint; give one of them",
                    o->init_from, o->resume ? "--resume" : "--resume-from ",
                    o->resume ? "" : o->resume_from);
  }
  if (o->resume && !o->ckpt_dir) {
    return st_error(ST_ERR_INVALID_ARG, "--resume needs --ckpt-dir (where the checkpoints are)");
  }
  /* --stop-at ends a piece of a job, which the next piece resumes from its checkpoint. */
  if ((o->ckpt_every || o->keep || o->ckpt_async || o->stop_at) && !o->ckpt_dir) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--ckpt-every, --keep, --ckpt-async and --stop-at need --ckpt-dir");
  }
  return ST_OK;
}

/* AdamW computes in fp32, so a beta must stay below 1 once rounded (0.999999999 would divide
 * by 1 - beta^t = 0) and eps must stay a positive fp32. */
static st_status require_beta(const char *flag, double value) {
  if (!(value >= 0 && value < 1)) {
    return st_error(ST_ERR_INVALID_ARG, "--%s must be in [0, 1), got %g", flag, value);
  }
  if ((float)value >= 1.0f) {
    return st_error(ST_ERR_INVALID_ARG, "--%s %.10g rounds to 1 in fp32: it must be below 1", flag,
                    value);
  }
  return ST_OK;
}

/* wsd's decay: --decay-steps, which must fit in the steps after the warmup, or where it is 0 a
 * fifth of --steps (at least 1, at most those steps). A run of --steps 0 trains nothing: 1.
 * The other shapes take no --decay-steps. */
static st_status resolve_decay_steps(const train_options *o, lr_shape shape, int *out) {
  *out = 0;
  if (shape != LR_WSD) {
    if (o->decay_steps == 0) return ST_OK;
    return st_error(ST_ERR_INVALID_ARG, "--decay-steps is for --lr-schedule wsd, not %s",
                    lr_shape_name(shape));
  }
  if (o->decay_steps < 0) {
    return st_error(ST_ERR_INVALID_ARG, "--decay-steps must be >= 0, got %d", o->decay_steps);
  }
  *out = 1;
  if (o->steps == 0) return ST_OK;
  const int after = o->steps - o->warmup;
  if (after < 1) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--lr-schedule wsd has no step left to decay in: --warmup %d takes all of "
                    "--steps %d",
                    o->warmup, o->steps);
  }
  if (o->decay_steps > after) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--decay-steps %d is more than the %d step%s after --warmup %d of --steps %d",
                    o->decay_steps, after, after == 1 ? "" : "s", o->warmup, o->steps);
  }
  const int fifth = o->steps / 5 > 1 ? o->steps / 5 : 1;
  *out = o->decay_steps ? o->decay_steps : fifth < after ? fifth : after;
  return ST_OK;
}

/* A value the update uses in fp32 (checked >= 0 before) and checkpoints record: one above `most`
 * (train_step.h's bounds), or that would round from non-zero to 0 in fp32 (--clip 1e-50 would
 * turn clipping off), is refused. */
static st_status require_fp32(const char *flag, double value, double most) {
  if (value > most) {
    return st_error(ST_ERR_INVALID_ARG, "--%s %g is above %g, the largest a run takes", flag, value,
                    most);
  }
  if (value != 0 && (float)value == 0.0f) {
    return st_error(ST_ERR_INVALID_ARG, "--%s %g is outside fp32's range", flag, value);
  }
  return ST_OK;
}

static st_status resolve_adam(const train_options *o, adamw_hparams *adam) {
  ST_CHECK(require_beta("beta1", o->beta1));
  ST_CHECK(require_beta("beta2", o->beta2));
  if (!(o->eps > 0)) return st_error(ST_ERR_INVALID_ARG, "--eps must be > 0, got %g", o->eps);
  ST_CHECK(require_fp32("eps", o->eps, TRAIN_MAX_EPS));
  *adam = (adamw_hparams){(float)o->beta1, (float)o->beta2, (float)o->eps};
  return ST_OK;
}

st_status train_options_precision(const train_options *o, unit_precision *out) {
  const int param = dtype_parse(o->param_dtype), reduce = dtype_parse(o->reduce_dtype);
  if (param < 0) {
    return st_error(ST_ERR_INVALID_ARG, "--param-dtype '%s' is not a dtype (fp32, bf16, fp16)",
                    o->param_dtype);
  }
  if (reduce < 0) {
    return st_error(ST_ERR_INVALID_ARG, "--reduce-dtype '%s' is not a dtype (fp32, bf16, fp16)",
                    o->reduce_dtype);
  }
  *out = (unit_precision){(st_dtype)param, (st_dtype)reduce};
  return ST_OK;
}

st_status train_options_loss_scaler(const train_options *o, unit_precision precision,
                                    loss_scaler *out) {
  const int fp16 = precision.param == ST_FP16 || precision.reduce == ST_FP16;
  if (o->loss_scale && !fp16) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--loss-scale %s: only fp16 scales the loss (param %s, reduce %s never do)",
                    o->loss_scale, dtype_name(precision.param), dtype_name(precision.reduce));
  }
  ST_CHECK(require_positive("loss-scale-window", o->loss_scale_window));
  if (!fp16) {
    loss_scaler_init_none(out);
  } else if (!o->loss_scale || strcmp(o->loss_scale, "dynamic") == 0) {
    loss_scaler_init_dynamic(out, LOSS_SCALER_INITIAL_SCALE, o->loss_scale_window);
  } else {
    char *end = NULL;
    const double scale = strtod(o->loss_scale, &end);
    const float rounded = (float)scale; /* the step multiplies in fp32 */
    if (end == o->loss_scale || *end != '\0' || !(rounded > 0) || !isfinite(rounded)) {
      return st_error(ST_ERR_INVALID_ARG,
                      "--loss-scale '%s' is not dynamic or a positive fp32 number", o->loss_scale);
    }
    if (rounded < LOSS_SCALER_MIN_SCALE || rounded > LOSS_SCALER_MAX_SCALE) {
      return st_error(ST_ERR_INVALID_ARG,
                      "--loss-scale %s is out of range: a fixed scale is %.0f to %.0f (2^24)",
                      o->loss_scale, LOSS_SCALER_MIN_SCALE, LOSS_SCALER_MAX_SCALE);
    }
    loss_scaler_init_fixed(out, rounded);
  }
  /* The default is taken by every run; a window given otherwise where nothing doubles is a
   * flag that would do nothing, refused as --loss-scale is without fp16. */
  if (out->mode != LOSS_SCALER_DYNAMIC && o->loss_scale_window != LOSS_SCALER_DEFAULT_WINDOW) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--loss-scale-window %d: only a dynamic loss scale (fp16's default) has a "
                    "window, and this run's is %s",
                    o->loss_scale_window, out->mode == LOSS_SCALER_FIXED ? "fixed" : "none");
  }
  return ST_OK;
}

st_status train_options_batch(const train_options *o) {
  ST_CHECK(require_positive("micro-batch", o->micro_batch));
  ST_CHECK(require_positive("grad-accum", o->grad_accum));
  if (o->grad_accum > TRAIN_MAX_GRAD_ACCUM) {
    return st_error(ST_ERR_INVALID_ARG, "--grad-accum %d: at most %d", o->grad_accum,
                    TRAIN_MAX_GRAD_ACCUM);
  }
  return require_non_negative("prefetch", o->prefetch);
}

st_status train_options_offload(const train_options *o, int *optimizer) {
  *optimizer = strcmp(o->offload, "optimizer") == 0;
  if (!*optimizer && strcmp(o->offload, "none") != 0) {
    return st_error(ST_ERR_INVALID_ARG, "--offload '%s' is not optimizer or none", o->offload);
  }
  return ST_OK;
}

st_status train_options_recompute(const train_options *o, gpt_recompute *out) {
  const int mode = gpt_recompute_parse(o->recompute);
  if (mode < 0) {
    return st_error(ST_ERR_INVALID_ARG, "--recompute '%s' is not none, gelu or block",
                    o->recompute ? o->recompute : "");
  }
  *out = (gpt_recompute)mode;
  return ST_OK;
}

st_status train_options_resolve(const train_options *o, int dp_size, gpt_config *cfg,
                                train_hparams *h) {
  ST_CHECK(resolve_config(o, cfg));
  ST_CHECK(train_options_batch(o));
  ST_CHECK(require_non_negative("steps", o->steps));
  ST_CHECK(require_non_negative("warmup", o->warmup));
  ST_CHECK(require_non_negative("eval-every", o->eval_every));
  ST_CHECK(require_positive("log-every", o->log_every));
  ST_CHECK(require_positive("eval-batches", o->eval_batches));
  if (o->zero < 0 || o->zero > 3) {
    return st_error(ST_ERR_INVALID_ARG, "--zero %d is not 0, 1, 2 or 3", o->zero);
  }
  unit_precision precision;
  ST_CHECK(train_options_precision(o, &precision));
  int offload = 0;
  ST_CHECK(train_options_offload(o, &offload));
  gpt_recompute recompute;
  ST_CHECK(train_options_recompute(o, &recompute));
  loss_scaler scaler;
  ST_CHECK(train_options_loss_scaler(o, precision, &scaler));

  if (o->steps > 0 && !o->data_train) {
    return st_error(ST_ERR_INVALID_ARG, "--data-train is required to train (--steps %d)", o->steps);
  }
  int shape = lr_shape_parse(o->lr_schedule);
  if (shape < 0) {
    return st_error(ST_ERR_INVALID_ARG, "--lr-schedule '%s' is not cosine, linear, constant or wsd",
                    o->lr_schedule);
  }
  int decay_steps = 0;
  ST_CHECK(resolve_decay_steps(o, (lr_shape)shape, &decay_steps));
  /* optim's check names no flag: the learning rates are checked here first. */
  if (!(o->lr > 0) || !isfinite(o->lr)) {
    return st_error(ST_ERR_INVALID_ARG, "--lr must be a finite number > 0, got %g", o->lr);
  }
  if (!(o->min_lr >= 0 && o->min_lr <= o->lr)) {
    return st_error(ST_ERR_INVALID_ARG, "--min-lr must lie in [0, --lr %g], got %g", o->lr,
                    o->min_lr);
  }
  if (!(o->weight_decay >= 0)) {
    return st_error(ST_ERR_INVALID_ARG, "--weight-decay must be >= 0, got %g", o->weight_decay);
  }
  if (!(o->clip >= 0)) return st_error(ST_ERR_INVALID_ARG, "--clip must be >= 0, got %g", o->clip);
  ST_CHECK(require_fp32("lr", o->lr, TRAIN_MAX_LR));
  ST_CHECK(require_fp32("weight-decay", o->weight_decay, TRAIN_MAX_WEIGHT_DECAY));
  ST_CHECK(require_fp32("clip", o->clip, TRAIN_MAX_CLIP));
  if (o->peak_tflops < 0) {
    return st_error(ST_ERR_INVALID_ARG,
                    "--peak-tflops must be a number of TFLOP/s > 0, or 0 for the GPU's datasheet "
                    "peak, got %g",
                    o->peak_tflops);
  }
  if (o->nccl_max_ctas < 1 || o->nccl_max_ctas > ST_NCCL_MAX_CTAS_LIMIT) {
    return st_error(ST_ERR_INVALID_ARG, "--nccl-max-ctas must be in 1..%d, got %d",
                    ST_NCCL_MAX_CTAS_LIMIT, o->nccl_max_ctas);
  }
  ST_CHECK(check_checkpoint_flags(o));
  adamw_hparams adam;
  ST_CHECK(resolve_adam(o, &adam));
  *h = (train_hparams){
      .schedule = {(lr_shape)shape, o->lr, o->min_lr, o->warmup, o->steps > 0 ? o->steps : 1,
                   decay_steps},
      .adam = adam,
      .weight_decay = (float)o->weight_decay,
      .clip = (float)o->clip,
      .grad_accum = o->grad_accum,
      .global_tokens = (int64_t)o->micro_batch * cfg->max_seq * dp_size * o->grad_accum};
  return lr_schedule_check(&h->schedule);
}
