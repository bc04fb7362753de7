/* unit_layout_test.c - the flat layout of DESIGN.md on a GPT block's parameters: offsets
 * aligned to 16, total padded to S x 16, shard ranges contiguous and covering the buffer once,
 * and TP slices (column, fused-qkv column, row, replicated) mapped to the right elements of
 * the full tensor. The expected slices are built here by explicit loops over the full shape,
 * not with the layout's own index function. The run functions that checkpoints read and write
 * through are then checked against that index function. */
#include "sharding/unit_layout.h"

#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "tests/testing.h"

enum { C = 12 };

static void declare_block(unit_layout *l) {
  const int64_t vec[1] = {C}, qkv_w[2] = {C, 3 * C}, qkv_b[1] = {3 * C}, proj[2] = {C, C},
                fc_w[2] = {C, 4 * C}, fc_b[1] = {4 * C}, fc_proj[2] = {4 * C, C};
  CHECK_OK(unit_layout_add(l, "ln_1.weight", 1, vec, TP_REPLICATED, 1));
  CHECK_OK(unit_layout_add(l, "attn.c_attn.weight", 2, qkv_w, TP_COLUMN, 3));
  CHECK_OK(unit_layout_add(l, "attn.c_attn.bias", 1, qkv_b, TP_COLUMN, 3));
  CHECK_OK(unit_layout_add(l, "attn.c_proj.weight", 2, proj, TP_ROW, 1));
  CHECK_OK(unit_layout_add(l, "attn.c_proj.bias", 1, vec, TP_REPLICATED, 1));
  CHECK_OK(unit_layout_add(l, "mlp.c_fc.weight", 2, fc_w, TP_COLUMN, 1));
  CHECK_OK(unit_layout_add(l, "mlp.c_fc.bias", 1, fc_b, TP_COLUMN, 1));
  CHECK_OK(unit_layout_add(l, "mlp.c_proj.weight", 2, fc_proj, TP_ROW, 1));
}

/* Full-tensor indices of tp rank t's slice, enumerated from the definition of each split. */
static int64_t expected_slice(const unit_param *p, int T, int t, int64_t *out) {
  int64_t n = 0;
  int64_t rows = p->ndim == 2 ? p->shape[0] : 1, cols = p->shape[p->ndim - 1];
  if (p->split == TP_REPLICATED) {
    for (int64_t i = 0; i < rows * cols; i++) out[n++] = i;
  } else if (p->split == TP_ROW) {
    for (int64_t r = t * rows / T; r < (t + 1) * rows / T; r++) {
      for (int64_t c = 0; c < cols; c++) out[n++] = r * cols + c;
    }
  } else {
    int64_t block = cols / p->blocks, piece = block / T;
    for (int64_t r = 0; r < rows; r++) {
      for (int b = 0; b < p->blocks; b++) {
        for (int64_t c = 0; c < piece; c++) out[n++] = r * cols + b * block + t * piece + c;
      }
    }
  }
  return n;
}

static void test_offsets_and_shards(int S, int T) {
  for (int t = 0; t < T; t++) {
    unit_layout l;
    CHECK_OK(unit_layout_init(&l, S, T, t));
    declare_block(&l);
    int64_t end = 0;
    for (int i = 0; i < l.count; i++) {
      const unit_param *p = &l.params[i];
      CHECK_MSG(p->offset % 16 == 0 && p->offset >= end, "%s at %lld after %lld", p->name,
                (long long)p->offset, (long long)end);
      CHECK_MSG(p->offset - end < 16, "%s: gap of %lld", p->name, (long long)(p->offset - end));
      end = p->offset + p->numel;
    }
    CHECK_MSG(l.numel % (S * 16) == 0 && l.numel >= end && l.numel - end < S * 16,
              "S=%d T=%d: padded length %lld for %lld elements", S, T, (long long)l.numel,
              (long long)end);
    CHECK_EQ_INT(l.shard_numel * S, l.numel);
    unit_layout_free(&l);
  }
}

static void test_tp_slices(int T) {
  int64_t expected[4 * C * C];
  for (int t = 0; t < T; t++) {
    unit_layout l;
    CHECK_OK(unit_layout_init(&l, 1, T, t));
    declare_block(&l);
    for (int i = 0; i < l.count; i++) {
      const unit_param *p = &l.params[i];
      int64_t n = expected_slice(p, T, t, expected);
      CHECK_MSG(n == p->numel, "%s tp %d/%d: %lld elements, expected %lld", p->name, t, T,
                (long long)p->numel, (long long)n);
      int bad = 0;
      for (int64_t k = 0; k < n && k < p->numel; k++) {
        bad += unit_param_global_index(p, T, t, k) != expected[k];
      }
      CHECK_MSG(!bad, "%s tp %d/%d: %d elements map to the wrong full index", p->name, t, T, bad);
    }
    unit_layout_free(&l);
  }
}

/* unit_param_global_run / unit_param_local_run, which checkpoints read and write through,
 * against unit_param_global_index (itself checked above against explicit loops):
 *   - from every local element of every tp rank, global_run's run maps local + j to global + j
 *     and is maximal (the next local element, if any, is not the next global one); walking a
 *     slice run by run covers each global element exactly once over the tp ranks (a replicated
 *     parameter on tp rank 0 alone; the others hold the same identity map);
 *   - for every global element, local_run names a tp rank and local index that global_index
 *     maps back to it (a replicated parameter on tp rank 0), and its run stays inside that
 *     rank's slice, consecutive in both numberings, and is maximal. */
static int64_t logical_numel(const unit_param *p) {
  int64_t n = 1;
  for (int d = 0; d < p->ndim; d++) n *= p->shape[d];
  return n;
}

static void check_global_runs(const unit_param *p, int T, int *covered) {
  const int64_t total = logical_numel(p);
  memset(covered, 0, (size_t)total * sizeof *covered);
  int bad = 0;
  for (int t = 0; t < T; t++) {
    for (int64_t local = 0; local < p->numel; local++) {
      int64_t global = -1;
      const int64_t n = unit_param_global_run(p, T, t, local, &global);
      int ok = n >= 1 && local + n <= p->numel;
      for (int64_t j = 0; ok && j < n; j++) {
        ok = unit_param_global_index(p, T, t, local + j) == global + j;
      }
      if (ok && local + n < p->numel) {
        ok = unit_param_global_index(p, T, t, local + n) != global + n;
      }
      if (!ok && bad++ < 3) {
        CHECK_MSG(0, "%s tp %d/%d: global_run from local %lld gives %lld elements at %lld", p->name,
                  t, T, (long long)local, (long long)n, (long long)global);
      }
    }
    if (p->split == TP_REPLICATED && t > 0) continue;
    for (int64_t local = 0; local < p->numel;) {
      int64_t global;
      const int64_t n = unit_param_global_run(p, T, t, local, &global);
      if (n < 1) break;
      for (int64_t j = 0; j < n && global + j < total; j++) covered[global + j]++;
      local += n;
    }
  }
  int wrong = 0;
  for (int64_t g = 0; g < total; g++) wrong += covered[g] != 1;
  CHECK_MSG(bad == 0 && wrong == 0,
            "%s tp %d: %d local starts give a wrong run, %d global elements not covered once",
            p->name, T, bad, wrong);
}

static void check_local_runs(const unit_param *p, int T) {
  const int64_t total = logical_numel(p);
  int bad = 0;
  for (int64_t g = 0; g < total; g++) {
    int t = -1;
    int64_t local = -1;
    const int64_t n = unit_param_local_run(p, T, g, &t, &local);
    int ok = t >= 0 && t < T && (p->split != TP_REPLICATED || t == 0) && local >= 0 && n >= 1 &&
             local + n <= p->numel && g + n <= total;
    for (int64_t j = 0; ok && j < n; j++) {
      ok = unit_param_global_index(p, T, t, local + j) == g + j;
    }
    if (ok && g + n < total) { /* maximal: the next global element is not next on this rank */
      int t2;
      int64_t local2;
      unit_param_local_run(p, T, g + n, &t2, &local2);
      ok = t2 != t || local2 != local + n;
    }
    if (!ok && bad++ < 3) {
      CHECK_MSG(0, "%s tp %d: local_run of global %lld gives tp rank %d, local %lld, %lld elements",
                p->name, T, (long long)g, t, (long long)local, (long long)n);
    }
  }
  CHECK_MSG(bad == 0, "%s tp %d: %d global elements with a wrong local run", p->name, T, bad);
}

static void test_runs(int T) {
  unit_layout l;
  CHECK_OK(unit_layout_init(&l, 1, T, 0));
  declare_block(&l);
  const int64_t row_vec[2] = {5, C}; /* a replicated matrix, like wte */
  CHECK_OK(unit_layout_add(&l, "wte", 2, row_vec, TP_REPLICATED, 1));
  int covered[4 * C * C];
  int kinds[4] = {0}; /* replicated, column, column x 3 blocks, row: each seen */
  for (int i = 0; i < l.count; i++) {
    const unit_param *p = &l.params[i];
    kinds[p->split == TP_REPLICATED ? 0 : p->split == TP_ROW ? 3 : p->blocks == 3 ? 2 : 1]++;
    check_global_runs(p, T, covered);
    check_local_runs(p, T);
    /* unit_param_init describes the parameter as the layout does, at offset 0. */
    unit_param q;
    CHECK_OK(unit_param_init(&q, p->name, p->ndim, p->shape, p->split, p->blocks, T));
    int same = strcmp(q.name, p->name) == 0 && q.ndim == p->ndim && q.split == p->split &&
               q.blocks == p->blocks && q.numel == p->numel && q.offset == 0;
    for (int d = 0; d < p->ndim; d++) {
      same &= q.shape[d] == p->shape[d] && q.local_shape[d] == p->local_shape[d];
    }
    CHECK_MSG(same, "%s tp %d: unit_param_init describes it otherwise than the layout", p->name, T);
  }
  CHECK(kinds[0] && kinds[1] && kinds[2] && kinds[3]);
  unit_layout_free(&l);
}

static void test_errors(void) {
  unit_layout l;
  CHECK_OK(unit_layout_init(&l, 2, 5, 0));
  const int64_t qkv[2] = {C, 3 * C};
  CHECK_STATUS(unit_layout_add(&l, "attn.c_attn.weight", 2, qkv, TP_COLUMN, 3), ST_ERR_INVALID_ARG);
  CHECK(strstr(st_last_error(), "attn.c_attn.weight") && strstr(st_last_error(), "size 36"));
  const int64_t v[1] = {10};
  CHECK_OK(unit_layout_add(&l, "b", 1, v, TP_ROW, 1));
  CHECK_STATUS(unit_layout_add(&l, "b", 1, v, TP_REPLICATED, 1), ST_ERR_INVALID_ARG);
  const int64_t zero[1] = {0};
  CHECK_STATUS(unit_layout_add(&l, "z", 1, zero, TP_REPLICATED, 1), ST_ERR_INVALID_ARG);
  CHECK_EQ_INT(unit_layout_find(&l, "b"), 0);
  CHECK_EQ_INT(unit_layout_find(&l, "nope"), -1);
  unit_layout_free(&l);
  CHECK_STATUS(unit_layout_init(&l, 1, 2, 2), ST_ERR_INVALID_ARG);
}

int main(void) {
  const int sizes[] = {1, 2, 3, 4};
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 4; j++) {
      if (C % sizes[j] == 0) test_offsets_and_shards(sizes[i], sizes[j]);
    }
  }
  test_tp_slices(1);
  test_tp_slices(2);
  test_tp_slices(4);
  test_runs(1);
  test_runs(2);
  test_runs(4);
  test_errors();
  mem_stats stats;
  mem_stats_get(&stats);
  CHECK_EQ_INT(stats.live_blocks, 0);
  return test_finish("unit_layout_test");
}
