/* train_options.h - the flags of `shardtrain train`, their defaults, and their translation
 * into a model config and training hyperparameters. Every bad value is refused here, before
 * MPI starts or anything is allocated, with a message that names the flag and the value. */
#ifndef ST_ENGINE_TRAIN_TRAIN_OPTIONS_H
#define ST_ENGINE_TRAIN_TRAIN_OPTIONS_H

#include "engine/flags/cli_flags.h"
#include "engine/model/gpt_config.h"
#include "engine/model/gpt_recompute.h"
#include "engine/train/train_step.h"

/* Micro-batches per step at most (their tokens are held at once). */
#define TRAIN_MAX_GRAD_ACCUM 64

typedef struct train_options {
  const char *model;
  int n_layer, n_head, n_embd, vocab, seq_len; /* 0: the named model's value */
  const char *data_train, *data_val;
  int micro_batch, grad_accum, steps;
  double lr, min_lr;
  int warmup;
  const char *lr_schedule;
  int decay_steps; /* wsd: steps of the final decay; 0: a fifth of --steps */
  double weight_decay, clip;
  double beta1, beta2, eps; /* AdamW (optim/adamw.h) */
  int seed;
  const char *init_from, *save_init, *export_path, *metrics;
  int quiet;     /* nothing on stdout: no summaries, no step lines */
  int log_every; /* a step line every N steps (and at evaluations, skips, the end and a stop) */
  int eval_every, eval_batches;
  const char *device;
  int zero, dp_replicate, dp_shard, tp, prefetch, reshard_after_forward;
  const char *param_dtype, *reduce_dtype;
  const char *ckpt_dir, *resume_from;
  int ckpt_every, keep, resume;
  int ckpt_async;         /* saves written in the background (engine/checkpoint/ckpt_writer.h) */
  int stop_at;            /* 0: --steps */
  const char *offload;    /* "none" or "optimizer" */
  const char *recompute;  /* "none", "gelu" or "block" (engine/model/gpt_recompute.h) */
  int no_fit_check;       /* skip the start-up memory check (engine/train/train_fit.h) */
  const char *loss_scale; /* fp16: "dynamic" or a fixed positive number; NULL: dynamic */
  int loss_scale_window;  /* clean steps that double a dynamic loss scale */
  double peak_tflops;     /* one device's peak for the MFU; 0: the GPU's by name (step_mfu.h) */
  int nccl_max_ctas;      /* thread blocks (SMs) an NCCL collective may take (st_mesh_config) */
} train_options;

void train_options_defaults(train_options *o);

/* Room for `shardtrain train`'s flags (a table that outgrows it is caught at start-up). */
#define TRAIN_MAX_FLAGS 64

/* The flag table over `o` (pointers into it) into `flags` (TRAIN_MAX_FLAGS entries); returns
 * the number of flags. */
int train_options_flags(train_options *o, cli_flag flags[TRAIN_MAX_FLAGS]);

/* Checks the values and derives the model config and the hyperparameters. dp_size is the
 * number of data-parallel ranks (the global batch is micro_batch x dp_size x grad_accum). */
st_status train_options_resolve(const train_options *o, int dp_size, gpt_config *cfg,
                                train_hparams *h);

/* The step this run stops after: --stop-at, else --steps (the schedule always spans --steps). */
int train_options_end(const train_options *o);

/* The mixed-precision policy of --param-dtype and --reduce-dtype. A dtype name shardtrain does
 * not know is ST_ERR_INVALID_ARG; whether the
 * device can hold parameters in the param dtype is checked once the device is known. */
st_status train_options_precision(const train_options *o, unit_precision *out);

/* The loss scaler of --loss-scale and --loss-scale-window for `precision`: dynamic (initial
 * scale LOSS_SCALER_INITIAL_SCALE) or fixed when the param or reduce dtype is fp16, none
 * otherwise. ST_ERR_INVALID_ARG for a --loss-scale that is neither "dynamic" nor a finite
 * positive number, for --loss-scale without fp16 (bf16 and fp32 never scale), and for a window
 * below 1. */
st_status train_options_loss_scaler(const train_options *o, unit_precision precision,
                                    loss_scaler *out);

/* --micro-batch (>= 1), --grad-accum (1 to TRAIN_MAX_GRAD_ACCUM) and --prefetch (>= 0), as train
 * takes them; ST_ERR_INVALID_ARG naming the flag otherwise. plan and simulate check theirs here
 * too, so that they never predict a run that train refuses. */
st_status train_options_batch(const train_options *o);

/* *optimizer = 1 for --offload optimizer, 0 for none; anything else is ST_ERR_INVALID_ARG. */
st_status train_options_offload(const train_options *o, int *optimizer);

/* The mode of --recompute; a name that is not none, gelu or block is ST_ERR_INVALID_ARG. */
st_status train_options_recompute(const train_options *o, gpt_recompute *out);

#endif /* ST_ENGINE_TRAIN_TRAIN_OPTIONS_H */
