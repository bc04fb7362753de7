/* nccl_place.c - NCCL's view of the ranks' GPUs (see nccl_place.h). Two sorts replace a
 * comparison of every pair: of the GPUs' physical names (node, bus id), where equal neighbours
 * share a GPU; and of the names NCCL gives them (host, bus id), where equal neighbours are a
 * duplicate NCCL would refuse. Ties are broken by rank, so the order, and with it the pair a
 * message names, is the same on every rank. */
#include "sharding/nccl_place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* FNV-1a: a stable 64-bit hash of a name, so a report has a fixed size. */
static uint64_t name_hash(const char *s) {
  uint64_t h = 14695981039346656037ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

void nccl_place_rank_make(nccl_place_rank *out, const char *node, int has_nccl, const char *bus_id,
                          const char *host_id) {
  memset(out, 0, sizeof *out);
  out->node = name_hash(node);
  out->has_nccl = has_nccl != 0;
  out->on_gpu = bus_id != NULL;
  if (bus_id) snprintf(out->bus_id, sizeof out->bus_id, "%s", bus_id);
  out->has_host_id = host_id != NULL;
  if (host_id) out->host_id = name_hash(host_id);
}

static int cmp_int(int64_t a, int64_t b) { return (a > b) - (a < b); }

static int cmp_name(const nccl_place_name *x, const nccl_place_name *y) {
  int c = cmp_int(x->named_by_id, y->named_by_id);
  if (!c) c = x->host != y->host ? (x->host > y->host ? 1 : -1) : 0;
  return c ? c : strcmp(x->bus_id, y->bus_id);
}

/* Equal names sort together, in rank order. */
static int by_name_then_rank(const void *pa, const void *pb) {
  const nccl_place_name *x = pa, *y = pb;
  const int c = cmp_name(x, y);
  return c ? c : cmp_int(x->rank, y->rank);
}

/* Fills names[] with each rank's GPU as the machine knows it (by_nccl 0: node and bus id) or
 * as NCCL names it (1: the NCCL_HOSTID instead of the node where one is set), sorted. */
static void sort_names(const nccl_place_rank *r, int n, int by_nccl, nccl_place_name *names) {
  for (int i = 0; i < n; i++) {
    const int by_id = by_nccl && r[i].has_host_id;
    names[i] = (nccl_place_name){.named_by_id = by_id,
                                 .rank = i,
                                 .host = by_id ? r[i].host_id : r[i].node,
                                 .bus_id = r[i].bus_id};
  }
  qsort(names, (size_t)n, sizeof *names, by_name_then_rank);
}

/* The first pair that shares a GPU with one of them lacking a host id, then the first pair
 * NCCL would take for one GPU (n >= 1; names is scratch for n entries). */
static st_status check_pairs(const nccl_place_rank *r, int n, nccl_place_name *names,
                             int *shares_gpu) {
  sort_names(r, n, 0, names);
  for (int i = 1; i < n; i++) {
    const int a = names[i - 1].rank, b = names[i].rank; /* a < b */
    if (cmp_name(&names[i - 1], &names[i]) != 0) continue;
    *shares_gpu = 1;
    if (!r[a].has_host_id || !r[b].has_host_id) {
      return st_error(ST_ERR_UNSUPPORTED,
                      "NCCL cannot join the ranks: ranks %d and %d share the GPU %s and rank %d "
                      "sets no NCCL_HOSTID (ranks on one GPU need a distinct NCCL_HOSTID each)",
                      a, b, r[a].bus_id, r[a].has_host_id ? b : a);
    }
  }
  sort_names(r, n, 1, names);
  for (int i = 1; i < n; i++) {
    if (cmp_name(&names[i - 1], &names[i]) != 0) continue;
    const int a = names[i - 1].rank, b = names[i].rank;
    return st_error(ST_ERR_UNSUPPORTED,
                    "NCCL cannot join the ranks: ranks %d and %d set the same NCCL_HOSTID and %s "
                    "%s, so NCCL would take them for one GPU (give each rank its own NCCL_HOSTID)",
                    a, b, r[a].node == r[b].node ? "share the GPU" : "have GPUs with the bus id",
                    r[a].bus_id);
  }
  return ST_OK;
}

static int lacks_nccl(const nccl_place_rank *r) { return !r->has_nccl; }
static int lacks_gpu(const nccl_place_rank *r) { return !r->on_gpu; }

/* ST_OK when no rank lacks what `lacks` tests; otherwise a refusal that says how many ranks
 * lack it, so that a job where every rank does (a CPU-only machine, a build without NCCL) is
 * not reported as if rank 0 alone were at fault. `one` and `many` end the sentence for one
 * rank and for several. */
static st_status check_every_rank(const nccl_place_rank *r, int n,
                                  int (*lacks)(const nccl_place_rank *), const char *one,
                                  const char *many) {
  int count = 0, first = -1;
  for (int i = 0; i < n; i++) {
    if (!lacks(&r[i])) continue;
    if (count++ == 0) first = i;
  }
  if (count == 0) return ST_OK;
  if (count == 1) {
    return st_error(ST_ERR_UNSUPPORTED, "NCCL cannot join the ranks: rank %d %s", first, one);
  }
  if (count == n) {
    return st_error(ST_ERR_UNSUPPORTED, "NCCL cannot join the ranks: every rank (all %d) %s", n,
                    one);
  }
  return st_error(ST_ERR_UNSUPPORTED,
                  "NCCL cannot join the ranks: %d of the %d ranks (the first: rank %d) %s", count,
                  n, first, many);
}

st_status nccl_place_check(const nccl_place_rank *ranks, int n, nccl_place_name *scratch,
                           int *shares_gpu) {
  *shares_gpu = 0;
  ST_CHECK(check_every_rank(ranks, n, lacks_nccl, "has no NCCL", "have no NCCL"));
  ST_CHECK(check_every_rank(ranks, n, lacks_gpu, "computes on the CPU, not a GPU",
                            "compute on the CPU, not a GPU"));
  return check_pairs(ranks, n, scratch, shares_gpu);
}
