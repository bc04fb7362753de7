/* gpt_io.h - GPT parameters to and from safetensors files with Hugging Face GPT-2 names and
 * layouts ("wte.weight", "h.0.attn.c_attn.weight" stored [in, out], ...), so a file exported
 * here loads in transformers' GPT2LMHeadModel and GPT-2 checkpoints load here.
 *
 * Import is done by every rank, each keeping what its units own (their TP slice and, at stage 3,
 * their shard). Import accepts F32, BF16 and F16 tensors; wte may have the real vocabulary's rows
 * or the padded count (padding rows are zeroed); wpe may have more positions than the model uses
 * (the first ones are taken). Every parameter must be present; a missing or misshapen tensor is an
 * error naming it and the file. Export writes F32 master weights, wte without its padding rows, and
 * n_head in the metadata. */
#ifndef ST_ENGINE_MODEL_GPT_IO_H
#define ST_ENGINE_MODEL_GPT_IO_H

#include "engine/model/gpt.h"

/* The __metadata__ key under which an export records n_head, the one dimension of the model its
 * tensors do not show. Extra metadata is ignored by transformers. */
#define GPT_META_N_HEAD "shardtrain.n_head"

/* The config of the model a Hugging Face GPT-2 file holds: n_layer counts its "h.<l>." blocks,
 * n_embd and vocab are wte's columns and rows, max_seq is wpe's rows. n_head is `n_head` when
 * it is > 0, else the file's GPT_META_N_HEAD, else that of the named config with this n_layer
 * and n_embd; without any of them it is ST_ERR_INVALID_ARG saying it must be given. The config
 * has passed gpt_config_finish for one tp rank. */
st_status gpt_config_from_file(const char *path, int n_head, gpt_config *out);

/* Loads every parameter from `path`; tensor names are `prefix` + the HF name ("" normally;
 * the golden test reads "init."). */
st_status gpt_import(gpt_model *model, const char *path, const char *prefix);

/* Writes every parameter to `path` (crash-safe: temporary file, fsync, rename): the fp32
 * master weights, whatever the param dtype, gathered unit by unit over the shard group.
 * Collective: every rank calls it (each holds the whole model on the host briefly); only the
 * rank with write_file set writes, under ST_IO_TIMEOUT's limit on a stall (engine/io/job_agree.h):
 * the other ranks wait for its verdict without one. */
st_status gpt_export(gpt_model *model, const char *path, int write_file);

#endif /* ST_ENGINE_MODEL_GPT_IO_H */
