/* gpt.h - the GPT-2 model on the unit API: token + position embeddings, n_layer blocks of
 * (pre-LayerNorm causal self-attention, pre-LayerNorm tanh-GELU MLP, residuals), final
 * LayerNorm, LM head tied to the token embedding.
 *
 * Units, in order: "embedding" (wte, wpe), one per block ("h.<l>"), "final" (ln_f). Parameter
 * names inside a unit are Hugging Face GPT-2's with the unit's prefix removed, so
 * prefix + name is the HF name ("h.3." + "attn.c_attn.weight"); weights are stored [in, out].
 * The model is a user of sharding/unit.h like any C or C++ program would be. With tensor
 * parallelism (Megatron-style) qkv and MLP-up are column-parallel (each tp rank holds whole
 * heads, C/tp of each of q, k, v, and 4C/tp MLP columns), attention-out and MLP-down are
 * row-parallel and joined by an all-reduce over the tp group (g), with their bias added once;
 * the backward all-reduces the input gradient of the column-parallel layers (f). Norms, the
 * embeddings and the tied head are replicated. It owns its
 * activations (planned up front from B, T and the config) and its backward scratch. The head
 * and its loss run a chunk of rows at a time (gpt_head.c): the full logits never exist. */
#ifndef ST_ENGINE_MODEL_GPT_H
#define ST_ENGINE_MODEL_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "engine/model/gpt_config.h"
#include "engine/model/gpt_recompute.h"
#include "kernels/kernels.h"
#include "sharding/mesh.h"
#include "sharding/unit.h"

/* A bound on the depth that catches a mistyped --n-layer before it allocates anything (no table
 * is sized by it; the deepest GPT-style models have about 128 layers). */
#define GPT_MAX_LAYERS 1024

enum gpt_embedding_param { GPT_WTE = 0, GPT_WPE = 1 };
enum gpt_block_param {
  GPT_LN1_W = 0,
  GPT_LN1_B,
  GPT_QKV_W,
  GPT_QKV_B,
  GPT_ATTPROJ_W,
  GPT_ATTPROJ_B,
  GPT_LN2_W,
  GPT_LN2_B,
  GPT_FC_W,
  GPT_FC_B,
  GPT_FCPROJ_W,
  GPT_FCPROJ_B,
  GPT_BLOCK_PARAMS
};
enum gpt_final_param { GPT_LNF_W = 0, GPT_LNF_B = 1 };

/* How the model is distributed. A NULL gpt_parallel (or mesh) means one rank at stage 0. */
typedef struct gpt_parallel {
  const st_mesh *mesh;
  int stage;                 /* ZeRO stage 0..3 */
  int prefetch;              /* units gathered ahead of the one computing (stage 3) */
  int reshard_after_forward; /* release each block after its forward (stage 3: its params) */
  unit_precision precision;  /* param and reduce dtypes ({0}: fp32) */
  int offload_optimizer;     /* master, m, v in host memory (unit_offload_optimizer) */
  gpt_recompute recompute;   /* activations recomputed in the backward (gpt_recompute.h) */
} gpt_parallel;

/* Layer l's activations kept for the backward, in the model's activation dtype (gpt_model.act;
 * the statistics, float *, in fp32): res2 and res3 are the residual stream after the attention
 * and the MLP (res3 is written by the next LayerNorm's fused add); fch is the MLP's
 * pre-activation, saved by the GELU epilogue; att_state is what the backend keeps between the
 * attention's forward and backward (kernel_attention_state_numel). With recompute, the buffers
 * the backward recomputes are one set that every layer's pointers share (gpt_recompute.h). */
typedef struct gpt_layer_acts {
  void *ln1, *qkv, *atty, *attproj, *res2, *ln2, *fch, *fch_gelu, *fcproj, *res3;
  float *ln1_mean, *ln1_rstd, *att_state, *ln2_mean, *ln2_rstd;
} gpt_layer_acts;

/* The step's device scalars (gpt_acts.scalars): train_step sums into them and reads them once.
 * The overflow flag of loss scaling sits beside the squared norm, so one all-reduce carries
 * both; the step's factors (kernel_step_factors: AdamW's gradient factor and skip flag,
 * KERNEL_STEP_FACTORS values) follow. */
enum gpt_scalar {
  GPT_LOSS_SUM = 0,
  GPT_GRAD_SUMSQ = 1,
  GPT_OVERFLOW = 2,
  GPT_STEP_FACTORS = 3,
  GPT_SCALARS = GPT_STEP_FACTORS + KERNEL_STEP_FACTORS
};

/* Activations and the backward's gradient buffers (void *: the activation dtype) and the
 * statistics (float *: fp32). logits holds one chunk of the head: head_rows rows of the padded
 * vocabulary (gpt_head_rows), in the scratch. dln also carries d(lnf), which the training
 * forward's head writes, to the start of the backward. */
typedef struct gpt_acts {
  void *arena;   /* one MEM_ACTIVATIONS block holding the buffers kept for the backward */
  void *scratch; /* one MEM_WORKSPACE block: the logits chunk and the gradient buffers */
  void *encoded, *lnf, *logits;
  float *lnf_mean, *lnf_rstd, *losses;
  int64_t head_rows; /* rows of logits per chunk (gpt_head_rows; gpt_set_head_rows) */
  gpt_layer_acts *layers;
  void *dres, *dln, *datty, *dqkv, *dfch_gelu;
  int32_t *inputs, *targets; /* the micro-batch's tokens in device memory (in the scratch) */
  float *scalars;            /* GPT_SCALARS fp32 values in device memory (in the scratch) */
  float *scalars_host;       /* their copy in pinned host memory, which the host reads */
} gpt_acts;

typedef struct gpt_model {
  gpt_config cfg;
  gpt_parallel par;
  comm *dp; /* data-parallel group (NULL on one rank): losses are averaged over it */
  comm *tp; /* tensor-parallel group (NULL on one rank) */
  int tp_size, tp_rank;
  const st_device *dev;
  kernel_backend *kb;
  st_dtype act;         /* activations and their gradients (gpt_activation_dtype) */
  st_stream stream;     /* C: every kernel of the model; the units' compute stream */
  unit_streams streams; /* the units' gather and reduce streams and their buffer pool */
  st_stream tp_stream;  /* the tp group's f/g all-reduces, ordered after C by tp_ready */
  st_event tp_ready;
  int B, T;             /* micro-batch: sequences and tokens per sequence */
  int n_units;          /* n_layer + 2 */
  unit *units;          /* embedding, blocks..., final */
  char (*prefixes)[16]; /* HF name prefix per unit */
  gpt_acts acts;
} gpt_model;

/* Declares the units and plans the activations for micro-batches of B x T tokens (T at most
 * cfg->max_seq). cfg must have passed gpt_config_finish. par may be NULL (one rank). */
st_status gpt_create(gpt_model **out, const gpt_config *cfg, const st_device *dev, int B, int T,
                     const gpt_parallel *par);
void gpt_destroy(gpt_model *model);

/* Declares unit `index`'s parameters (0: embedding, 1..n_layer: blocks, n_layer + 1: final)
 * into an initialised layout: the model's structure, shared with the memory planner. */
st_status gpt_declare_unit(const gpt_config *cfg, int index, unit_layout *layout);

/* The Hugging Face name prefix of unit `index`'s parameters: "" for the embedding and the
 * final norm, "h.<l>." for block l. */
void gpt_unit_prefix(const gpt_config *cfg, int index, char *out, size_t size);

/* The dtype of the activations on a device of `device` kind with parameters in `param`: the
 * param dtype where the device's kernels compute in it (kernel_kind_computes_in: bf16 on a GPU),
 * else fp32 (the CPU, which computes from fp32 copies of bf16 parameters). */
st_dtype gpt_activation_dtype(st_device_kind device, st_dtype param);

/* Whether a model on a device of `device` kind can train with `precision`: the kernels write
 * a weight's gradient in the activations' dtype or, where they can (kernel_kind_supports_grad_
 * dtype: CUDA beside bf16 or fp16 activations), in fp32, so the gradients (or their compute
 * copies) must be held in one of those (the CPU: fp32 whatever the flags; a GPU: the param
 * dtype, or fp32 for 16-bit params). ST_ERR_UNSUPPORTED naming both dtypes otherwise (fp32
 * params with bf16 gradients; fp16 with bf16). gpt_create refuses what this refuses, and the
 * planner's suggestions never propose it. */
st_status gpt_check_precision(st_device_kind device, unit_precision precision);

/* The host bytes of the model's own struct and tables (its units, their names, the per-layer
 * activation records, the step's scalars read by the host; MEM_WORKSPACE), which gpt_create
 * allocates for `cfg`, besides each unit's parameter table (sharding/unit_layout.h:
 * unit_layout_table_bytes). */
int64_t gpt_table_bytes(const gpt_config *cfg);

/* Bytes of activations (forward, kept for backward) and of backward scratch for a micro-batch
 * on a rank of a tensor-parallel group of tp, on a device of `device` kind (whose kernels size
 * the attention state and choose the activation dtype) with parameters in `param`, with the
 * activations of `recompute` shared between layers: what gpt_create will allocate, for the
 * memory planner. */
void gpt_activation_bytes(const gpt_config *cfg, st_device_kind device, st_dtype param, int B,
                          int T, int tp, gpt_recompute recompute, int64_t *activations,
                          int64_t *scratch);

/* GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layer)), biases
 * 0, norm weights 1. Values depend only on (seed, parameter name, element), not on the mesh.
 * Padding rows of wte are zero. */
st_status gpt_init_params(gpt_model *model, uint64_t seed);

/* Forward over a micro-batch; tokens are host int32 [B * T]. Its per-token losses stay in
 * device memory (acts.losses; gpt_loss_sum adds them up there). In training, dloss_scale > 0,
 * the head's backward runs too, chunk by chunk (gpt_head.c): the gradient of dloss_scale *
 * (sum of the losses) reaches wte's gradient (the embedding unit's backward begins here) and
 * d(lnf), where gpt_backward starts; dloss_scale is the loss scale (1 without fp16:
 * train_step.h) over the tokens of the global batch, so the gradients sum to those of the global
 * mean loss times the scale. In evaluation, dloss_scale = 0: losses only, no gradient is
 * touched. */
st_status gpt_forward(gpt_model *model, const int32_t *inputs, const int32_t *targets,
                      float dloss_scale);

/* Rows of logits the head computes at once for micro-batches of B x T tokens on a rank of a
 * tensor-parallel group of tp: no more elements than the largest per-layer activation (the
 * MLP's B T x 4 n_embd / tp), rounded down to a multiple of 64 rows, at least 64 rows and at
 * most B T. d12 at 16 x 1024 tokens: 960 rows (17 chunks of 960 and one of 64). */
int64_t gpt_head_rows(const gpt_config *cfg, int B, int T, int tp);

/* Lowers the rows per chunk below gpt_head_rows's (the buffer is sized for that many): the
 * tests force uneven chunks with it. rows outside [1, gpt_head_rows] is ST_ERR_INVALID_ARG. */
st_status gpt_set_head_rows(gpt_model *model, int64_t rows);

/* The logits of rows [first, first + rows) of the last forward's micro-batch, computed from the
 * final norm's output it keeps, while the embedding unit is still gathered (after a forward,
 * before a backward): *out describes them, [rows, vocab_padded] in the model's activation
 * dtype, in the chunk buffer, until the next call or forward. At most acts.head_rows rows. */
st_status gpt_head_logits(gpt_model *model, int64_t first, int64_t rows, st_tensor *out);

/* out[0] += the sum of the last forward's per-token losses; out is an fp32 scalar in device
 * memory (kernel_sum), so a step's or an evaluation's loss is read by the host once. */
st_status gpt_loss_sum(gpt_model *model, const st_tensor *out);

/* Step scalar `which` (acts.scalars) as a one-element fp32 tensor in device memory. */
st_tensor gpt_scalar(const gpt_model *model, enum gpt_scalar which);

/* Backward of the last training forward, from the d(lnf) and the wte gradient its head left
 * (its tokens are still on the device); adds into every parameter gradient. On the last micro-batch
 * of a step (`reduce`), each unit's gradient reduction starts as soon as its backward is done;
 * train_step waits for them. */
st_status gpt_backward(gpt_model *model, int reduce);

/* Sets every gradient to zero (start of a step; see unit_grads_zero). */
st_status gpt_zero_grads(gpt_model *model);

/* The host's wait at the end of a step: the watchdog over the collectives still in flight (the
 * units', the tp sums and the step's scalars on the mesh's groups), then every stream of the
 * model finished (unit_streams_step_end). */
st_status gpt_step_end(gpt_model *model);

#endif /* ST_ENGINE_MODEL_GPT_H */
