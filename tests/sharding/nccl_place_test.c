/* nccl_place_test.c - proves the pure decision behind the NCCL backend (sharding/nccl_place.h)
 * on tables of rank reports, no GPU needed: ranks on distinct GPUs are accepted (one GPU each,
 * also the same bus id on two nodes); ranks sharing a GPU are accepted, and flagged as sharing,
 * only when each sets an NCCL_HOSTID distinct from the others on that GPU; equal or missing
 * ids, a repeated id across nodes on GPUs with one bus id, a CPU rank and a rank without NCCL
 * are refused with a message naming the lowest offending ranks, whatever the order of the
 * table's other entries, and how many ranks lack a GPU or NCCL ("every rank" when all do). */
#include "sharding/nccl_place.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "tests/testing.h"

#define MAX_RANKS 8

/* One rank's report: node name, bus id (NULL: CPU) and NCCL_HOSTID (NULL: unset). */
typedef struct rank_spec {
  const char *node, *bus, *host_id;
} rank_spec;

typedef struct place_case {
  const char *what;
  int n;
  rank_spec ranks[MAX_RANKS];
  int accepted, shares_gpu;
  const char *message; /* a part of the refusal's message */
} place_case;

static const place_case cases[] = {
    {"one rank on one GPU", 1, {{"n0", "0000:01:00.0", NULL}}, 1, 0, NULL},
    {"distinct GPUs of one node",
     4,
     {{"n0", "0000:01:00.0", NULL},
      {"n0", "0000:02:00.0", NULL},
      {"n0", "0000:03:00.0", NULL},
      {"n0", "0000:04:00.0", NULL}},
     1,
     0,
     NULL},
    {"the same bus id on two nodes is two GPUs",
     2,
     {{"n0", "0000:01:00.0", NULL}, {"n1", "0000:01:00.0", NULL}},
     1,
     0,
     NULL},
    {"a shared GPU with distinct ids",
     2,
     {{"n0", "0000:01:00.0", "rank-0"}, {"n0", "0000:01:00.0", "rank-1"}},
     1,
     1,
     NULL},
    {"four ranks on one GPU, one id each",
     4,
     {{"n0", "0000:01:00.0", "a"},
      {"n0", "0000:01:00.0", "b"},
      {"n0", "0000:01:00.0", "c"},
      {"n0", "0000:01:00.0", "d"}},
     1,
     1,
     NULL},
    {"two nodes, two ranks per GPU, ids reused across nodes on other bus ids",
     4,
     {{"n0", "0000:01:00.0", "x"},
      {"n0", "0000:01:00.0", "y"},
      {"n1", "0000:02:00.0", "x"},
      {"n1", "0000:02:00.0", "y"}},
     1,
     1,
     NULL},
    {"a shared GPU without ids",
     2,
     {{"n0", "0000:01:00.0", NULL}, {"n0", "0000:01:00.0", NULL}},
     0,
     0,
     "ranks 0 and 1 share the GPU 0000:01:00.0 and rank 0 sets no NCCL_HOSTID"},
    {"a shared GPU, one id missing",
     3,
     {{"n0", "0000:02:00.0", NULL}, {"n0", "0000:01:00.0", "a"}, {"n0", "0000:01:00.0", NULL}},
     0,
     0,
     "ranks 1 and 2 share the GPU 0000:01:00.0 and rank 2 sets no NCCL_HOSTID"},
    {"a shared GPU with equal ids",
     3,
     {{"n0", "0000:01:00.0", "a"}, {"n0", "0000:02:00.0", NULL}, {"n0", "0000:01:00.0", "a"}},
     0,
     0,
     "ranks 0 and 2 set the same NCCL_HOSTID and share the GPU 0000:01:00.0"},
    {"one id on two nodes whose GPUs have one bus id",
     2,
     {{"n0", "0000:01:00.0", "same"}, {"n1", "0000:01:00.0", "same"}},
     0,
     0,
     "ranks 0 and 1 set the same NCCL_HOSTID and have GPUs with the bus id 0000:01:00.0"},
    {"a rank on the CPU",
     2,
     {{"n0", "0000:01:00.0", NULL}, {"n0", NULL, NULL}},
     0,
     0,
     "rank 1 computes on the CPU"},
    {"every rank on the CPU",
     3,
     {{"n0", NULL, NULL}, {"n0", NULL, NULL}, {"n1", NULL, NULL}},
     0,
     0,
     "every rank (all 3) computes on the CPU, not a GPU"},
    {"some ranks on the CPU",
     4,
     {{"n0", "0000:01:00.0", NULL},
      {"n0", NULL, NULL},
      {"n0", "0000:02:00.0", NULL},
      {"n0", NULL, NULL}},
     0,
     0,
     "2 of the 4 ranks (the first: rank 1) compute on the CPU, not a GPU"},
};

static void run_case(const place_case *c, int has_nccl) {
  nccl_place_rank ranks[MAX_RANKS];
  nccl_place_name scratch[MAX_RANKS];
  for (int i = 0; i < c->n; i++) {
    const rank_spec *r = &c->ranks[i];
    nccl_place_rank_make(&ranks[i], r->node, has_nccl, r->bus, r->host_id);
  }
  int shares = -1;
  st_error_clear();
  const st_status s = nccl_place_check(ranks, c->n, scratch, &shares);
  if (!has_nccl) {
    /* A build without NCCL: every rank lacks it, and the message says so. */
    char want[64] = "rank 0 has no NCCL";
    if (c->n > 1) snprintf(want, sizeof want, "every rank (all %d) has no NCCL", c->n);
    CHECK_MSG(s == ST_ERR_UNSUPPORTED && strstr(st_last_error(), want),
              "%s without NCCL: status %d, '%s', want '%s'", c->what, (int)s, st_last_error(),
              want);
    return;
  }
  if (c->accepted) {
    CHECK_MSG(s == ST_OK, "%s: refused: %s", c->what, st_last_error());
    CHECK_MSG(shares == c->shares_gpu, "%s: shares_gpu %d, want %d", c->what, shares,
              c->shares_gpu);
  } else {
    CHECK_MSG(s == ST_ERR_UNSUPPORTED, "%s: status %d, want ST_ERR_UNSUPPORTED", c->what, (int)s);
    CHECK_MSG(strstr(st_last_error(), "NCCL cannot join the ranks") &&
                  strstr(st_last_error(), c->message),
              "%s: message '%s' lacks '%s'", c->what, st_last_error(), c->message);
  }
}

/* The report keeps what NCCL compares: equal names give equal reports, different ones differ,
 * and an unset id is not the empty or any other id. */
static void test_reports(void) {
  nccl_place_rank a, b;
  nccl_place_rank_make(&a, "node", 1, "0000:01:00.0", "id");
  nccl_place_rank_make(&b, "node", 1, "0000:01:00.0", "id");
  CHECK(memcmp(&a, &b, sizeof a) == 0);
  CHECK(a.on_gpu && a.has_nccl && a.has_host_id && strcmp(a.bus_id, "0000:01:00.0") == 0);
  nccl_place_rank_make(&b, "node", 1, "0000:01:00.0", "ie");
  CHECK(a.host_id != b.host_id);
  nccl_place_rank_make(&b, "nodf", 1, "0000:01:00.0", "id");
  CHECK(a.node != b.node);
  nccl_place_rank_make(&b, "node", 1, NULL, NULL);
  CHECK(!b.on_gpu && !b.has_host_id && b.bus_id[0] == '\0');
}

int main(void) {
  test_reports();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_case(&cases[i], 1);
    run_case(&cases[i], 0);
  }
  return test_finish("nccl_place_test");
}
