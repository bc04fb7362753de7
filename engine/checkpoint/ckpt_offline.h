/* ckpt_offline.h - what one process does with a checkpoint, without a mesh or a model:
 * resharding it for another mesh and stage, exporting it as a Hugging Face GPT-2 file, and
 * describing it. Each verifies every file's checksum before it reads, and holds at most one
 * chunk of one tensor in memory (CKPT_CHUNK_ELEMENTS floats, 1 MiB), so it runs where the whole
 * model would not fit. */
#ifndef ST_ENGINE_CHECKPOINT_CKPT_OFFLINE_H
#define ST_ENGINE_CHECKPOINT_CKPT_OFFLINE_H

#include <stdio.h>

#include "engine/checkpoint/ckpt_source.h"

/* Verifies every file of src, stopping at the first that fails. */
st_status ckpt_verify_all(const ckpt_source *src);

/* ST_ERR_INVALID_ARG naming the problem unless src can be resharded into dst for the mesh
 * R x S x T at ZeRO stage `zero` (ckpt_mesh_check), where dst, if named step_<N>, names src's
 * step. Reads nothing but the manifest already read. */
st_status ckpt_reshard_check(const ckpt_source *src, const char *dst, int R, int S, int T,
                             int zero);

/* Writes src as a checkpoint for the mesh R x S x T at ZeRO stage `zero` into the step
 * directory dst (which must not exist), crash-safely (a temporary name, then rename), after
 * ckpt_reshard_check. */
st_status ckpt_reshard(ckpt_source *src, const char *dst, int R, int S, int T, int zero);

/* Writes src's fp32 master weights as one safetensors file with Hugging Face GPT-2 names and
 * shapes and the head count in its metadata (byte for byte what `shardtrain train --export`
 * writes). */
st_status ckpt_export_hf(ckpt_source *src, const char *out);

/* Prints the manifest's contents and each file's size and checksum verdict to `out`; returns
 * the first verification failure (every file is checked and listed). */
st_status ckpt_describe(const ckpt_source *src, FILE *out);

#endif /* ST_ENGINE_CHECKPOINT_CKPT_OFFLINE_H */
