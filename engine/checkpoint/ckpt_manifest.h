/* ckpt_manifest.h - what a checkpoint step directory holds (DESIGN.md, "Files the engine reads
 * and writes"; docs/FORMATS.md has the layout):
 *
 *   step_<N>/manifest.json          this struct as JSON
 *   step_<N>/rank_<f>.safetensors   file f = s * T + t: shard rank s and tp rank t's pieces
 *   step_<N>/DONE                   written last: the checkpoint is complete
 *
 * A piece is a contiguous range [begin, end) of one parameter's TP slice (tp rank t of T, in
 * the slice's row-major order): the elements that fall inside shard s of the parameter's unit.
 * For each piece the file holds three F32 tensors, "master/<name>", "adam_m/<name>" and
 * "adam_v/<name>", and its __metadata__ describes the piece under the key <name>. Replicated
 * parameters are held once, by tp rank 0; replicas (r > 0) write nothing. The piece table is a
 * pure function of (model config, S, T), so every reader can find what it needs from the
 * manifest alone and open only the files that hold it. */
#ifndef ST_ENGINE_CHECKPOINT_CKPT_MANIFEST_H
#define ST_ENGINE_CHECKPOINT_CKPT_MANIFEST_H

#include <stdint.h>

#include "engine/io/safetensors.h"
#include "engine/io/sha256.h"
#include "engine/io/token_data.h"
#include "engine/model/gpt_config.h"
#include "engine/train/train_step.h"
#include "sharding/unit_layout.h"

#define CKPT_FORMAT_VERSION 1
#define CKPT_NAME_MAX (UNIT_NAME_MAX + 16)

typedef enum ckpt_state { CKPT_MASTER = 0, CKPT_ADAM_M, CKPT_ADAM_V, CKPT_STATE_COUNT } ckpt_state;

/* "master", "adam_m", "adam_v". */
const char *ckpt_state_name(ckpt_state state);

/* A logical tensor (Hugging Face name) and how the mesh split it. */
typedef struct ckpt_param {
  char name[CKPT_NAME_MAX];
  int ndim;
  int64_t shape[UNIT_MAX_DIMS];
  tp_split split;
  int blocks;
} ckpt_param;

/* Elements [begin, end) of tp rank t's slice of params[param], held by files[file]. */
typedef struct ckpt_piece {
  int param, file, t;
  int64_t begin, end;
} ckpt_piece;

typedef struct ckpt_file {
  char name[32];
  char sha256[SHA256_HEX_SIZE];
  uint64_t bytes;
} ckpt_file;

typedef struct ckpt_manifest {
  int64_t step;   /* optimizer steps completed */
  int64_t tokens; /* tokens trained on in them (whatever the batch of each run that took them);
                   * read from a checkpoint that predates the count: step x its global batch */
  char model[32];
  gpt_config cfg;
  int R, S, T, zero;
  st_dtype param_dtype, reduce_dtype;
  loss_scaler_state scaler; /* fp16's loss scale (1: no loss scaling), with its counters */
  int micro_batch;
  train_hparams h;
  uint64_t seed;
  int dp_size;
  token_position *data; /* dp_size entries: where each dp rank's next global batch starts */
  int n_params, n_files, n_pieces;
  ckpt_param *params; /* in the model's order */
  ckpt_file *files;   /* S x T */
  ckpt_piece *pieces; /* by param, then t, then begin */
} ckpt_manifest;

/* The elements of parameter k of layout l (shard group S, tp rank t of T) that shard rank s's
 * file holds: those inside shard s of the unit, none for a replicated parameter when t > 0.
 * Returns 0 when there are none. */
int ckpt_piece_range(const unit_layout *l, int k, int s, int64_t *begin, int64_t *end);

/* The largest mesh a checkpoint is planned for: R x S x T ranks, of which S x T write a file
 * each. Far beyond any run, and small enough that the piece table of a mesh that passes is held
 * in memory: a manifest of a few bytes must not make a reader allocate gigabytes. */
#define CKPT_MAX_WORLD (1 << 20)
#define CKPT_MAX_FILES (1 << 17)

/* ST_ERR_INVALID_ARG naming the problem unless `cfg`'s checkpoint can be planned for the mesh
 * R x S x T at ZeRO stage `zero`: extents >= 1 within the limits above, a stage 0..3, and T
 * splitting the model (gpt_config_finish, which it runs on a copy). */
st_status ckpt_mesh_check(const gpt_config *cfg, int R, int S, int T, int zero);

/* Fills params, files (names) and pieces for m->cfg, m->S and m->T; the other fields are the
 * caller's. m->params etc. must be NULL. */
st_status ckpt_manifest_plan(ckpt_manifest *m);

/* Allocates data (dp_size entries, all `position`). */
st_status ckpt_manifest_set_data(ckpt_manifest *m, int dp_size, token_position position);

/* Writes the manifest as JSON (crash-safe) / reads and validates one; every fault is
 * ST_ERR_FORMAT naming the file and the field. */
st_status ckpt_manifest_write(const ckpt_manifest *m, const char *path);
st_status ckpt_manifest_read(ckpt_manifest *m, const char *path);

/* Frees the arrays (not m itself); m may be zero-filled. */
void ckpt_manifest_free(ckpt_manifest *m);

/* The index of the parameter called `name`, or -1. */
int ckpt_manifest_find(const ckpt_manifest *m, const char *name);

/* The piece metadata stored in each file (JSON text of the piece and its parameter). */
void ckpt_piece_describe(const ckpt_manifest *m, const ckpt_piece *piece, char *out, size_t size);

/* File f's contents as the piece table fixes them: its pieces in table order and, for each,
 * three F32 tensors "<state>/<name>" (ckpt_state order) and one metadata entry describing it
 * (ckpt_piece_describe), then the format key. Training saves and reshard both write from it. */
typedef struct ckpt_file_layout {
  int n;                       /* pieces */
  const ckpt_piece **pieces;   /* into the manifest */
  safetensors_tensor *tensors; /* 3 n, data unset */
  safetensors_metadata *meta;  /* n + 1 */
  char (*names)[CKPT_NAME_MAX + 16];
  char (*values)[512];
} ckpt_file_layout;

st_status ckpt_file_layout_make(const ckpt_manifest *m, int f, ckpt_file_layout *out);
void ckpt_file_layout_free(ckpt_file_layout *l);

#endif /* ST_ENGINE_CHECKPOINT_CKPT_MANIFEST_H */
