/* nccl_place.c - the job's placement as NCCL sees it (see nccl_place.h). Two sorts replace a
 * comparison of every pair: of the GPUs' physical names (node, bus id), where equal neighbours
 * share a GPU; and of the names NCCL gives them (host, bus id), where equal neighbours are a
 * duplicate NCCL would refuse. Ties are broken by rank, so the order, and with it the pair a
 * message names, is the same on every rank. Nothing here communicates; the one file it reads is
 * the boot id, for the report. */
#include "sharding/nccl_place.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fnv.h"

/* A name's hash continued over `s` (its characters, run together), so a report has a fixed
 * size. */
static uint64_t hash_more(uint64_t h, const char *s) { return fnv1a(h, s, strlen(s)); }

static uint64_t name_hash(const char *s) { return hash_more(FNV_OFFSET_BASIS, s); }

void nccl_place_rank_make(nccl_place_rank *out, const nccl_place_parts *parts) {
  memset(out, 0, sizeof *out);
  /* NCCL's host name is the hostname and the boot id run together (getHostHash). */
  out->node = name_hash(parts->node);
  if (parts->boot_id) out->node = hash_more(out->node, parts->boot_id);
  snprintf(out->node_name, sizeof out->node_name, "%s", parts->node);
  out->has_nccl = parts->has_nccl != 0;
  out->device_auto = parts->device_auto != 0;
  out->on_gpu = parts->bus_id != NULL;
  if (parts->bus_id) snprintf(out->bus_id, sizeof out->bus_id, "%s", parts->bus_id);
  out->has_host_id = parts->host_id != NULL;
  if (parts->host_id) out->host_id = name_hash(parts->host_id);
}

int nccl_place_read_boot_id(const char *path, char *out, size_t size) {
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char text[128];
  const size_t got = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[got] = '\0';
  const char *word = text;
  while (*word && isspace((unsigned char)*word)) word++;
  size_t len = 0;
  while (word[len] && !isspace((unsigned char)word[len])) len++;
  if (len == 0 || size == 0) return 0;
  if (len >= size) len = size - 1;
  memcpy(out, word, len);
  out[len] = '\0';
  return 1;
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

/* How many CPU ranks a refusal of a mixed job names before it counts the rest. */
#define PLACE_NAMED_RANKS 4

/* A rank that `auto` put on the CPU. */
static int cpu_by_auto(const nccl_place_rank *r) { return !r->on_gpu && r->device_auto; }

st_status nccl_place_check_devices(const nccl_place_rank *ranks, int n) {
  int on_cpu = 0, by_auto = 0;
  for (int i = 0; i < n; i++) {
    on_cpu += !ranks[i].on_gpu;
    by_auto += cpu_by_auto(&ranks[i]);
  }
  /* A mix asked for by name (cpu on some ranks) is the program's to want. */
  if (on_cpu == n || by_auto == 0) return ST_OK;
  char named[PLACE_NAMED_RANKS * (NCCL_PLACE_NODE_NAME_SIZE + 24) + 32] = "";
  size_t used = 0;
  int listed = 0;
  for (int i = 0; i < n && listed < PLACE_NAMED_RANKS; i++) {
    if (!cpu_by_auto(&ranks[i])) continue;
    used += (size_t)snprintf(named + used, sizeof named - used, "%s%d (on %s)", listed ? ", " : "",
                             i, ranks[i].node_name);
    listed++;
  }
  if (by_auto > listed) {
    snprintf(named + used, sizeof named - used, " and %d more", by_auto - listed);
  }
  return st_error(ST_ERR_UNSUPPORTED,
                  "%d of the %d ranks found no usable GPU under device auto and would compute on "
                  "the CPU while the others use a GPU (world rank%s %s); a job computes on one "
                  "kind of device: check the GPUs and driver of those nodes, or run every rank on "
                  "the CPU with --device cpu",
                  by_auto, n, by_auto == 1 ? "" : "s", named);
}

/* Whether NCCL names ranks x and y's hosts differently: by their NCCL_HOSTIDs where set, else by
 * their nodes. */
static int nccl_hosts_differ(const nccl_place_rank *x, const nccl_place_rank *y) {
  if (x->has_host_id != y->has_host_id) return 1;
  return x->has_host_id ? x->host_id != y->host_id : x->node != y->node;
}

int nccl_place_split_node(const nccl_place_rank *ranks, int n, nccl_place_name *scratch, int *a,
                          int *b) {
  *a = *b = -1;
  sort_names(ranks, n, 0, scratch); /* by node, then bus id: a node's ranks sit together */
  for (int start = 0, end; start < n; start = end) {
    for (end = start + 1; end < n && scratch[end].host == scratch[start].host; end++) {
    }
    /* A node's ranks are a handful (its GPUs, or a few sharing one): its pairs are cheap. */
    for (int i = start; i < end; i++) {
      for (int j = i + 1; j < end; j++) {
        const nccl_place_rank *x = &ranks[scratch[i].rank], *y = &ranks[scratch[j].rank];
        if (strcmp(x->bus_id, y->bus_id) == 0 || !nccl_hosts_differ(x, y)) continue;
        *a = scratch[i].rank < scratch[j].rank ? scratch[i].rank : scratch[j].rank;
        *b = scratch[i].rank < scratch[j].rank ? scratch[j].rank : scratch[i].rank;
        return 1;
      }
    }
  }
  return 0;
}

st_status nccl_place_choose(const nccl_place_rank *ranks, int n, st_comm_backend request,
                            nccl_place_name *scratch, nccl_place_choice *out) {
  memset(out, 0, sizeof *out);
  out->backend = ST_COMM_MPI;
  out->split_a = out->split_b = -1;
  if (request != ST_COMM_AUTO && request != ST_COMM_MPI && request != ST_COMM_NCCL) {
    return st_error(ST_ERR_INVALID_ARG, "collective backend %d is not one of auto, mpi, nccl",
                    (int)request);
  }
  if (request == ST_COMM_MPI) return ST_OK;
  st_error_saved before;
  st_error_save(&before);
  const st_status verdict = nccl_place_check(ranks, n, scratch, &out->shares_gpu);
  if (verdict == ST_OK) {
    out->backend = ST_COMM_NCCL;
    nccl_place_split_node(ranks, n, scratch, &out->split_a, &out->split_b);
    return ST_OK;
  }
  out->shares_gpu = 0;
  if (request == ST_COMM_NCCL) return verdict;
  /* auto falls back to MPI: nothing failed. A job on the CPU expects MPI; one on GPUs is told
   * why it does not get NCCL. */
  int every_gpu = 1;
  for (int i = 0; i < n; i++) every_gpu &= ranks[i].on_gpu != 0;
  if (every_gpu) {
    out->gpu_fallback = 1;
    snprintf(out->reason, sizeof out->reason, "%s", st_last_error());
  }
  st_error_restore(&before);
  return ST_OK;
}

int nccl_place_tp_node_share(const nccl_place_rank *ranks, int n, int tp, int *first_rank) {
  int least = tp;
  *first_rank = -1;
  if (tp < 1 || n % tp != 0) return least;
  /* tp is a few ranks in practice; counting every pair of a group costs n * tp comparisons. */
  for (int i = 0; i < n; i++) {
    const int group = i - i % tp;
    int here = 0;
    for (int j = group; j < group + tp; j++) here += ranks[j].node == ranks[i].node;
    if (here < least) {
      least = here;
      *first_rank = i;
    }
  }
  return least;
}
