/* unit_layout.h - where each parameter of an FSDP unit lives, as a pure function of
 * (declarations, T, t, S), exactly as DESIGN.md fixes it:
 *   - a parameter's TP slice: replicated (whole), column (its last dimension split in T; a
 *     fused matrix declares `blocks` equal parts of that dimension, each split separately, so
 *     tp rank t gets its heads' q, k and v), or row (its first dimension split in T);
 *   - the slices laid end to end in declaration order, each starting at a multiple of 16
 *     elements; the total padded to a multiple of S x 16;
 *   - shard s owning elements [s * P / S, (s + 1) * P / S).
 * Nothing here allocates data or communicates. */
#ifndef ST_SHARDING_UNIT_LAYOUT_H
#define ST_SHARDING_UNIT_LAYOUT_H

#include <stdint.h>

#include "shardtrain.h"

#define UNIT_ALIGN 16
#define UNIT_MAX_DIMS 4
/* The most elements a parameter, and a unit's whole flat buffer, may hold: 8 bytes each still
 * count in int64_t, so no size computed from them overflows. */
#define UNIT_MAX_NUMEL (INT64_MAX / 8)
#define UNIT_NAME_MAX (ST_PARAM_NAME_MAX + 1) /* with the terminating zero */

typedef enum tp_split { TP_REPLICATED = 0, TP_COLUMN = 1, TP_ROW = 2 } tp_split;

/* "replicated", "column" or "row" (as checkpoints record it); "invalid" for another value. */
const char *tp_split_name(tp_split split);

typedef struct unit_param {
  char name[UNIT_NAME_MAX];
  int ndim;
  int64_t shape[UNIT_MAX_DIMS];       /* logical (full) shape */
  int64_t local_shape[UNIT_MAX_DIMS]; /* this tp rank's slice */
  tp_split split;
  int blocks;     /* column split: equal parts of the last dimension split separately */
  int64_t offset; /* first element in the flat buffer */
  int64_t numel;  /* elements of the local slice */
} unit_param;

typedef struct unit_layout {
  unit_param *params;
  int count;
  int capacity; /* params' entries allocated: unit_layout_table_bytes */
  int S, T, t;
  int64_t numel;       /* padded flat length (a multiple of S x 16) */
  int64_t shard_numel; /* numel / S */
} unit_layout;

/* The host bytes of the layout's parameter table (MEM_WORKSPACE) once it holds what was declared:
 * for the memory planner, which counts what a unit keeps. */
int64_t unit_layout_table_bytes(const unit_layout *layout);

/* Starts an empty layout for tp rank t of T and a shard group of S. */
st_status unit_layout_init(unit_layout *layout, int S, int T, int t);
void unit_layout_free(unit_layout *layout);

/* Declares the next parameter. Refuses a dimension that the TP size does not divide, naming
 * the parameter and the numbers. blocks is used by TP_COLUMN only (1 for a plain matrix). */
st_status unit_layout_add(unit_layout *layout, const char *name, int ndim, const int64_t *shape,
                          tp_split split, int blocks);

/* Index of a parameter by name, or -1. */
int unit_layout_find(const unit_layout *layout, const char *name);

/* Describes a parameter as unit_layout_add would for T tp ranks (name, shapes, split, numel;
 * offset 0): a layout of the same parameter on another mesh, say a checkpoint's. Refuses what
 * unit_layout_add refuses. */
st_status unit_param_init(unit_param *p, const char *name, int ndim, const int64_t *shape,
                          tp_split split, int blocks, int T);

/* Global (logical, row-major) element index of element `local` of the parameter's TP slice. */
int64_t unit_param_global_index(const unit_param *p, int T, int t, int64_t local);

/* Runs: the number of elements, from local element `local` of tp rank t's slice, whose global
 * indices follow each other (at least 1; a replicated or row-split slice is one run, a column
 * split breaks at every block of columns). *global receives the first one's global index. */
int64_t unit_param_global_run(const unit_param *p, int T, int t, int64_t local, int64_t *global);

/* The inverse, for global element `global`: the tp rank holding it, its index in that rank's
 * slice, and the number of following global elements that rank holds consecutively. A
 * replicated parameter is found on tp rank 0. */
int64_t unit_param_local_run(const unit_param *p, int T, int64_t global, int *t, int64_t *local);

#endif /* ST_SHARDING_UNIT_LAYOUT_H */
