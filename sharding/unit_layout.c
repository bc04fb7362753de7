/* unit_layout.c - TP slicing and flat offsets of a unit's parameters. The layout is recomputed
 * after each declaration, so it is always complete and valid for the parameters so far. */
#include "sharding/unit_layout.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

st_status unit_layout_init(unit_layout *layout, int S, int T, int t) {
  memset(layout, 0, sizeof *layout);
  if (S < 1 || T < 1 || t < 0 || t >= T) {
    return st_error(ST_ERR_INVALID_ARG, "unit layout: shard group %d, tp rank %d of %d", S, t, T);
  }
  layout->S = S;
  layout->T = T;
  layout->t = t;
  return ST_OK;
}

void unit_layout_free(unit_layout *layout) {
  mem_free(layout->params);
  memset(layout, 0, sizeof *layout);
}

const char *tp_split_name(tp_split split) {
  static const char *const names[] = {"replicated", "column", "row"};
  return (unsigned)split < sizeof names / sizeof *names ? names[split] : "invalid";
}

int64_t unit_layout_table_bytes(const unit_layout *layout) {
  return (int64_t)layout->capacity * (int64_t)sizeof *layout->params;
}

static st_status grow(unit_layout *layout) {
  if (layout->count < layout->capacity) return ST_OK;
  int capacity = layout->capacity ? layout->capacity * 2 : 16;
  unit_param *fresh = NULL;
  ST_CHECK(
      mem_alloc((void **)&fresh, (size_t)capacity * sizeof *fresh, MEM_HOST, MEM_WORKSPACE, NULL));
  if (layout->count) memcpy(fresh, layout->params, (size_t)layout->count * sizeof *fresh);
  mem_free(layout->params);
  layout->params = fresh;
  layout->capacity = capacity;
  return ST_OK;
}

/* The local slice's shape, or an error naming why the TP size does not divide it. */
static st_status split_shape(unit_param *p, int T) {
  memcpy(p->local_shape, p->shape, sizeof p->shape);
  if (p->split == TP_REPLICATED || T == 1) return ST_OK;
  int dim = p->split == TP_COLUMN ? p->ndim - 1 : 0;
  int64_t parts = p->split == TP_COLUMN ? (int64_t)p->blocks * T : T;
  if (p->shape[dim] % parts != 0) {
    return st_error(ST_ERR_INVALID_ARG,
                    "parameter %s: dimension %d of size %lld cannot be split in %lld "
                    "(tp %d%s)",
                    p->name, dim, (long long)p->shape[dim], (long long)parts, T,
                    p->blocks > 1 ? " x fused blocks" : "");
  }
  p->local_shape[dim] = p->shape[dim] / T;
  return ST_OK;
}

st_status unit_param_init(unit_param *p, const char *name, int ndim, const int64_t *shape,
                          tp_split split, int blocks, int T) {
  if (ndim < 1 || ndim > UNIT_MAX_DIMS) {
    return st_error(ST_ERR_INVALID_ARG, "parameter %s has %d dimensions, supported 1..%d", name,
                    ndim, UNIT_MAX_DIMS);
  }
  if (strlen(name) >= UNIT_NAME_MAX) {
    return st_error(ST_ERR_INVALID_ARG, "parameter name '%.20s...' is longer than %d bytes", name,
                    UNIT_NAME_MAX - 1);
  }
  if ((unsigned)split > TP_ROW) {
    return st_error(ST_ERR_INVALID_ARG,
                    "parameter %s: split %d is not replicated (0), column (1) or row (2)", name,
                    (int)split);
  }
  if (blocks < 1) {
    return st_error(ST_ERR_INVALID_ARG, "parameter %s: %d blocks (at least 1)", name, blocks);
  }
  *p = (unit_param){.ndim = ndim, .split = split, .blocks = split == TP_COLUMN ? blocks : 1};
  snprintf(p->name, sizeof p->name, "%s", name);
  p->numel = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 1) {
      return st_error(ST_ERR_INVALID_ARG,
                      "parameter %s: extent %lld in dimension %d (each must be >= 1)", name,
                      (long long)shape[d], d);
    }
    if (shape[d] > UNIT_MAX_NUMEL / p->numel) {
      return st_error(ST_ERR_INVALID_ARG,
                      "parameter %s: dimensions 0..%d hold more than %lld elements (the most a "
                      "unit holds)",
                      name, d, (long long)UNIT_MAX_NUMEL);
    }
    p->numel *= shape[d];
    p->shape[d] = shape[d];
  }
  p->numel = 1; /* the full extent was only bounded: numel is the local slice's */
  ST_CHECK(split_shape(p, T));
  for (int d = 0; d < ndim; d++) p->numel *= p->local_shape[d];
  return ST_OK;
}

st_status unit_layout_add(unit_layout *layout, const char *name, int ndim, const int64_t *shape,
                          tp_split split, int blocks) {
  if (unit_layout_find(layout, name) >= 0) {
    return st_error(ST_ERR_INVALID_ARG, "parameter %s is declared twice", name);
  }
  unit_param p;
  ST_CHECK(unit_param_init(&p, name, ndim, shape, split, blocks, layout->T));
  ST_CHECK(grow(layout));
  int64_t end = 0;
  if (layout->count) {
    const unit_param *last = &layout->params[layout->count - 1];
    end = last->offset + last->numel;
  }
  /* end <= UNIT_MAX_NUMEL, so the roundings below cannot overflow; the sum must stay in bounds
   * after them. */
  const int64_t padding = UNIT_ALIGN + (int64_t)layout->S * UNIT_ALIGN;
  if (p.numel > UNIT_MAX_NUMEL - padding - end) {
    return st_error(ST_ERR_INVALID_ARG,
                    "parameter %s: its %lld elements after the unit's %lld exceed the %lld a unit "
                    "holds",
                    name, (long long)p.numel, (long long)end, (long long)UNIT_MAX_NUMEL);
  }
  p.offset = round_up(end, UNIT_ALIGN);
  layout->params[layout->count++] = p;
  layout->numel = round_up(p.offset + p.numel, (int64_t)layout->S * UNIT_ALIGN);
  layout->shard_numel = layout->numel / layout->S;
  return ST_OK;
}

int unit_layout_find(const unit_layout *layout, const char *name) {
  for (int i = 0; i < layout->count; i++) {
    if (strcmp(layout->params[i].name, name) == 0) return i;
  }
  return -1;
}

int64_t unit_param_global_index(const unit_param *p, int T, int t, int64_t local) {
  if (p->split == TP_REPLICATED || T == 1) return local;
  int64_t cols = p->local_shape[p->ndim - 1];
  int64_t row = local / cols, col = local % cols;
  if (p->split == TP_ROW) {
    /* Rows are the first dimension: the slice is one contiguous run of the full tensor. */
    return (int64_t)t * p->numel + local;
  }
  int64_t full_cols = p->shape[p->ndim - 1];
  int64_t block_local = cols / p->blocks; /* local columns per fused block */
  int64_t block = col / block_local, within = col % block_local;
  int64_t full_col = block * (full_cols / p->blocks) + (int64_t)t * block_local + within;
  return row * full_cols + full_col;
}

/* Local columns per fused block of a column-split slice. */
static int64_t block_columns(const unit_param *p) {
  return p->local_shape[p->ndim - 1] / p->blocks;
}

static int is_whole(const unit_param *p, int T) { return p->split == TP_REPLICATED || T == 1; }

int64_t unit_param_global_run(const unit_param *p, int T, int t, int64_t local, int64_t *global) {
  *global = unit_param_global_index(p, T, t, local);
  if (is_whole(p, T) || p->split == TP_ROW) return p->numel - local;
  const int64_t width = block_columns(p);
  return width - local % p->local_shape[p->ndim - 1] % width;
}

int64_t unit_param_local_run(const unit_param *p, int T, int64_t global, int *t, int64_t *local) {
  if (is_whole(p, T)) {
    *t = 0;
    *local = global;
    return p->numel - global;
  }
  if (p->split == TP_ROW) {
    *t = (int)(global / p->numel);
    *local = global % p->numel;
    return p->numel - *local;
  }
  const int64_t full_cols = p->shape[p->ndim - 1], cols = p->local_shape[p->ndim - 1];
  const int64_t width = block_columns(p), full_block = full_cols / p->blocks;
  const int64_t row = global / full_cols, col = global % full_cols;
  const int64_t block = col / full_block, in_block = col % full_block;
  *t = (int)(in_block / width);
  const int64_t within = in_block % width;
  *local = row * cols + block * width + within;
  return width - within;
}
