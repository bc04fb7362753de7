/* nccl_place_test.c - proves the pure decisions behind the job's placement
 * (sharding/nccl_place.h) on tables of rank reports, no GPU needed.
 *
 * NCCL: ranks on distinct GPUs are accepted (one GPU each, also the same bus id on two nodes,
 * and on two machines that share a hostname but not a boot id, as NCCL tells hosts apart);
 * ranks sharing a GPU are accepted, and flagged as sharing, only when each sets an NCCL_HOSTID
 * distinct from the others on that GPU; equal or missing ids, a repeated id across nodes on GPUs
 * with one bus id, a CPU rank and a rank without NCCL are refused with a message naming the
 * lowest offending ranks, whatever the order of the table's other entries, and how many ranks
 * lack a GPU or NCCL ("every rank" when all do). The boot id is read as NCCL reads it.
 *
 * The job: a mix of CPU and GPU ranks that `auto` made is refused, naming the first CPU ranks
 * and their nodes; `auto`'s fall back to MPI is flagged, with NCCL's reason, when every rank has
 * a GPU and not on the CPU; the fewest ranks of a tp group on one node is found for block,
 * round-robin and uneven placements; and the GPUs of one node that NCCL_HOSTIDs split into
 * hosts (NCCL then joins them over its network transport), which the mesh warns about. */
#include "sharding/nccl_place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "tests/testing.h"

#define MAX_RANKS 8

/* One rank's report: node name, bus id (NULL: CPU), NCCL_HOSTID (NULL: unset) and boot id
 * (NULL: unreadable). */
typedef struct rank_spec {
  const char *node, *bus, *host_id, *boot;
} rank_spec;

typedef struct place_case {
  const char *what;
  int n;
  rank_spec ranks[MAX_RANKS];
  int accepted, shares_gpu;
  const char *message; /* a part of the refusal's message */
} place_case;

static const place_case cases[] = {
    {"one rank on one GPU", 1, {{"n0", "0000:01:00.0", NULL, NULL}}, 1, 0, NULL},
    {"distinct GPUs of one node",
     4,
     {{"n0", "0000:01:00.0", NULL, NULL},
      {"n0", "0000:02:00.0", NULL, NULL},
      {"n0", "0000:03:00.0", NULL, NULL},
      {"n0", "0000:04:00.0", NULL, NULL}},
     1,
     0,
     NULL},
    {"the same bus id on two nodes is two GPUs",
     2,
     {{"n0", "0000:01:00.0", NULL, NULL}, {"n1", "0000:01:00.0", NULL, NULL}},
     1,
     0,
     NULL},
    {"a shared GPU with distinct ids",
     2,
     {{"n0", "0000:01:00.0", "rank-0", NULL}, {"n0", "0000:01:00.0", "rank-1", NULL}},
     1,
     1,
     NULL},
    {"four ranks on one GPU, one id each",
     4,
     {{"n0", "0000:01:00.0", "a", NULL},
      {"n0", "0000:01:00.0", "b", NULL},
      {"n0", "0000:01:00.0", "c", NULL},
      {"n0", "0000:01:00.0", "d", NULL}},
     1,
     1,
     NULL},
    {"two nodes, two ranks per GPU, ids reused across nodes on other bus ids",
     4,
     {{"n0", "0000:01:00.0", "x", NULL},
      {"n0", "0000:01:00.0", "y", NULL},
      {"n1", "0000:02:00.0", "x", NULL},
      {"n1", "0000:02:00.0", "y", NULL}},
     1,
     1,
     NULL},
    {"one hostname and bus id on two machines (boot ids differ) is two GPUs",
     2,
     {{"gpu-pod", "0000:01:00.0", NULL, "boot-a"}, {"gpu-pod", "0000:01:00.0", NULL, "boot-b"}},
     1,
     0,
     NULL},
    {"one hostname and boot id is one machine: a shared GPU",
     2,
     {{"gpu-pod", "0000:01:00.0", NULL, "boot-a"}, {"gpu-pod", "0000:01:00.0", NULL, "boot-a"}},
     0,
     0,
     "ranks 0 and 1 share the GPU 0000:01:00.0 and rank 0 sets no NCCL_HOSTID"},
    {"distinct ids on two machines with one hostname: no GPU is shared",
     2,
     {{"gpu-pod", "0000:01:00.0", "x", "boot-a"}, {"gpu-pod", "0000:01:00.0", "y", "boot-b"}},
     1,
     0,
     NULL},
    {"one id on two machines with one hostname: NCCL names both by the id",
     2,
     {{"gpu-pod", "0000:01:00.0", "x", "boot-a"}, {"gpu-pod", "0000:01:00.0", "x", "boot-b"}},
     0,
     0,
     "ranks 0 and 1 set the same NCCL_HOSTID and have GPUs with the bus id 0000:01:00.0"},
    {"a shared GPU without ids",
     2,
     {{"n0", "0000:01:00.0", NULL, NULL}, {"n0", "0000:01:00.0", NULL, NULL}},
     0,
     0,
     "ranks 0 and 1 share the GPU 0000:01:00.0 and rank 0 sets no NCCL_HOSTID"},
    {"a shared GPU, one id missing",
     3,
     {{"n0", "0000:02:00.0", NULL, NULL},
      {"n0", "0000:01:00.0", "a", NULL},
      {"n0", "0000:01:00.0", NULL, NULL}},
     0,
     0,
     "ranks 1 and 2 share the GPU 0000:01:00.0 and rank 2 sets no NCCL_HOSTID"},
    {"a shared GPU with equal ids",
     3,
     {{"n0", "0000:01:00.0", "a", NULL},
      {"n0", "0000:02:00.0", NULL, NULL},
      {"n0", "0000:01:00.0", "a", NULL}},
     0,
     0,
     "ranks 0 and 2 set the same NCCL_HOSTID and share the GPU 0000:01:00.0"},
    {"one id on two nodes whose GPUs have one bus id",
     2,
     {{"n0", "0000:01:00.0", "same", NULL}, {"n1", "0000:01:00.0", "same", NULL}},
     0,
     0,
     "ranks 0 and 1 set the same NCCL_HOSTID and have GPUs with the bus id 0000:01:00.0"},
    {"a rank on the CPU",
     2,
     {{"n0", "0000:01:00.0", NULL, NULL}, {"n0", NULL, NULL, NULL}},
     0,
     0,
     "rank 1 computes on the CPU"},
    {"every rank on the CPU",
     3,
     {{"n0", NULL, NULL, NULL}, {"n0", NULL, NULL, NULL}, {"n1", NULL, NULL, NULL}},
     0,
     0,
     "every rank (all 3) computes on the CPU, not a GPU"},
    {"some ranks on the CPU",
     4,
     {{"n0", "0000:01:00.0", NULL, NULL},
      {"n0", NULL, NULL, NULL},
      {"n0", "0000:02:00.0", NULL, NULL},
      {"n0", NULL, NULL, NULL}},
     0,
     0,
     "2 of the 4 ranks (the first: rank 1) compute on the CPU, not a GPU"},
};

static void make_rank(nccl_place_rank *out, const rank_spec *r, int has_nccl, int device_auto) {
  const nccl_place_parts parts = {.node = r->node,
                                  .boot_id = r->boot,
                                  .bus_id = r->bus,
                                  .host_id = r->host_id,
                                  .has_nccl = has_nccl,
                                  .device_auto = device_auto};
  nccl_place_rank_make(out, &parts);
}

static void run_case(const place_case *c, int has_nccl) {
  nccl_place_rank ranks[MAX_RANKS];
  nccl_place_name scratch[MAX_RANKS];
  for (int i = 0; i < c->n; i++) make_rank(&ranks[i], &c->ranks[i], has_nccl, 1);
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

/* The report keeps what NCCL compares: equal names give equal reports, different ones differ
 * (the boot id included), and an unset id is not the empty or any other id. */
static void test_reports(void) {
  nccl_place_rank a, b;
  const rank_spec base = {"node", "0000:01:00.0", "id", "boot"};
  rank_spec other = base;
  make_rank(&a, &base, 1, 0);
  make_rank(&b, &base, 1, 0);
  CHECK(memcmp(&a, &b, sizeof a) == 0);
  CHECK(a.on_gpu && a.has_nccl && a.has_host_id && !a.device_auto &&
        strcmp(a.bus_id, "0000:01:00.0") == 0 && strcmp(a.node_name, "node") == 0);
  other.host_id = "ie";
  make_rank(&b, &other, 1, 0);
  CHECK(a.host_id != b.host_id);
  other = base;
  other.node = "nodf";
  make_rank(&b, &other, 1, 0);
  CHECK(a.node != b.node);
  other = base;
  other.boot = "booT";
  make_rank(&b, &other, 1, 0);
  CHECK(a.node != b.node);
  other.boot = NULL;
  make_rank(&b, &other, 1, 0);
  CHECK(a.node != b.node);
  const rank_spec cpu = {"node", NULL, NULL, NULL};
  make_rank(&b, &cpu, 1, 1);
  CHECK(!b.on_gpu && !b.has_host_id && b.bus_id[0] == '\0' && b.device_auto);
  /* A name longer than the report holds is cut for messages, hashed whole. */
  char long_name[2 * NCCL_PLACE_NODE_NAME_SIZE];
  memset(long_name, 'n', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  other = base;
  other.node = long_name;
  make_rank(&a, &other, 1, 0);
  long_name[sizeof long_name - 2] = 'm';
  make_rank(&b, &other, 1, 0);
  CHECK(a.node != b.node);
  CHECK_EQ_INT((int)strlen(a.node_name), NCCL_PLACE_NODE_NAME_SIZE - 1);
}

/* The boot id is the file's first word, as NCCL's fscanf("%ms") reads it; a file that cannot be
 * read, or holds none, gives none. */
static void test_read_boot_id(void) {
  char path[] = "/tmp/nccl_place_test_XXXXXX";
  const int fd = mkstemp(path);
  if (!CHECK(fd >= 0)) return;
  static const char text[] = "  4f1b2c3d-0000-4a5b-8c9d-0123456789ab\nrest\n";
  CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
  close(fd);
  char id[NCCL_PLACE_BOOT_ID_SIZE] = "stale";
  CHECK(nccl_place_read_boot_id(path, id, sizeof id) == 1);
  CHECK_MSG(strcmp(id, "4f1b2c3d-0000-4a5b-8c9d-0123456789ab") == 0, "boot id '%s'", id);
  FILE *f = fopen(path, "w");
  if (CHECK(f != NULL)) fclose(f);
  CHECK(nccl_place_read_boot_id(path, id, sizeof id) == 0 && id[0] == '\0');
  unlink(path);
  CHECK(nccl_place_read_boot_id(path, id, sizeof id) == 0 && id[0] == '\0');
  /* This machine's, where Linux has one: the word NCCL will read. */
  if (access(NCCL_PLACE_BOOT_ID_PATH, R_OK) == 0) {
    CHECK(nccl_place_read_boot_id(NCCL_PLACE_BOOT_ID_PATH, id, sizeof id) == 1);
    CHECK_EQ_INT((int)strlen(id), 36);
  }
}

/* A table of n ranks, two on each node (rank i on node-(i / 2)), each on a GPU of its own
 * unless cpu[i], the device chosen by auto or by name. */
static void make_job(nccl_place_rank *out, int n, const int *cpu, int device_auto) {
  for (int i = 0; i < n; i++) {
    char node[32], bus[DEVICE_BUS_ID_SIZE];
    snprintf(node, sizeof node, "node-%d", i / 2);
    snprintf(bus, sizeof bus, "0000:%02x:00.0", i % 2 + 1);
    const rank_spec r = {node, cpu && cpu[i] ? NULL : bus, NULL, "boot"};
    make_rank(&out[i], &r, 1, device_auto);
  }
}

/* A job that auto put partly on the CPU is refused on every rank alike, naming the first four
 * CPU ranks and their nodes, counting the rest, and saying how to run it all on the CPU. */
static void test_device_mix(void) {
  enum { N = 16 };
  nccl_place_rank ranks[N];
  int cpu[N] = {0};
  make_job(ranks, N, cpu, 1);
  CHECK_OK(nccl_place_check_devices(ranks, N));
  for (int i = 0; i < N; i++) cpu[i] = 1;
  make_job(ranks, N, cpu, 1);
  CHECK_OK(nccl_place_check_devices(ranks, N));

  memset(cpu, 0, sizeof cpu);
  cpu[5] = 1;
  make_job(ranks, N, cpu, 1);
  CHECK_STATUS(nccl_place_check_devices(ranks, N), ST_ERR_UNSUPPORTED);
  CHECK_MSG(strstr(st_last_error(), "1 of the 16 ranks found no usable GPU under device auto") &&
                strstr(st_last_error(), "(world rank 5 (on node-2))") &&
                strstr(st_last_error(), "--device cpu") && !strchr(st_last_error(), '\n'),
            "one CPU rank: '%s'", st_last_error());

  for (int i = 8; i < N; i++) cpu[i] = 1; /* a node-4..7 without a working driver */
  make_job(ranks, N, cpu, 1);
  CHECK_STATUS(nccl_place_check_devices(ranks, N), ST_ERR_UNSUPPORTED);
  CHECK_MSG(strstr(st_last_error(), "9 of the 16 ranks") &&
                strstr(st_last_error(),
                       "world ranks 5 (on node-2), 8 (on node-4), 9 (on node-4), 10 (on node-5) "
                       "and 5 more"),
            "nine CPU ranks: '%s'", st_last_error());

  /* cpu and cuda asked for by name: the caller's mix, accepted. */
  make_job(ranks, N, cpu, 0);
  CHECK_OK(nccl_place_check_devices(ranks, N));
  /* One CPU rank's auto is enough: it put that rank where it is, and it alone is named. */
  ranks[N - 1].device_auto = 1;
  CHECK_STATUS(nccl_place_check_devices(ranks, N), ST_ERR_UNSUPPORTED);
  CHECK_MSG(strstr(st_last_error(), "1 of the 16 ranks") &&
                strstr(st_last_error(), "(world rank 15 (on node-7))"),
            "one CPU rank by auto: '%s'", st_last_error());
  /* A GPU rank's auto beside CPU ranks asked for by name: auto put no rank on the CPU. */
  ranks[N - 1].device_auto = 0;
  ranks[0].device_auto = 1;
  CHECK_OK(nccl_place_check_devices(ranks, N));
}

/* The backend for each request, and auto's fall back to MPI flagged, with NCCL's reason, only
 * when every rank computes on a GPU; the program's last error stays as it was. */
static void test_choose(void) {
  enum { N = 4 };
  nccl_place_rank ranks[N];
  nccl_place_name scratch[N];
  nccl_place_choice choice;
  make_job(ranks, N, NULL, 1);
  CHECK_OK(nccl_place_choose(ranks, N, ST_COMM_AUTO, scratch, &choice));
  CHECK(choice.backend == ST_COMM_NCCL && !choice.shares_gpu && !choice.gpu_fallback);
  CHECK_OK(nccl_place_choose(ranks, N, ST_COMM_MPI, scratch, &choice));
  CHECK(choice.backend == ST_COMM_MPI && !choice.gpu_fallback);

  /* Ranks 2 and 3 on rank 0 and 1's GPUs, without NCCL_HOSTID. */
  memcpy(&ranks[2], &ranks[0], 2 * sizeof *ranks);
  st_error(ST_ERR_IO, "the program's last error");
  CHECK_OK(nccl_place_choose(ranks, N, ST_COMM_AUTO, scratch, &choice));
  CHECK(choice.backend == ST_COMM_MPI && choice.gpu_fallback && !choice.shares_gpu);
  CHECK_MSG(strstr(choice.reason, "ranks 0 and 2 share the GPU 0000:01:00.0") != NULL,
            "reason '%s'", choice.reason);
  CHECK_MSG(strcmp(st_last_error(), "the program's last error") == 0, "last error '%s'",
            st_last_error());
  CHECK_STATUS(nccl_place_choose(ranks, N, ST_COMM_NCCL, scratch, &choice), ST_ERR_UNSUPPORTED);
  CHECK(strstr(st_last_error(), "ranks 0 and 2 share the GPU") != NULL);

  const int cpu[N] = {1, 1, 1, 1};
  make_job(ranks, N, cpu, 1);
  CHECK_OK(nccl_place_choose(ranks, N, ST_COMM_AUTO, scratch, &choice));
  CHECK(choice.backend == ST_COMM_MPI && !choice.gpu_fallback && choice.reason[0] == '\0');
  CHECK_STATUS(nccl_place_choose(ranks, N, (st_comm_backend)7, scratch, &choice),
               ST_ERR_INVALID_ARG);
}

/* The fewest ranks of a tp group (blocks of tp consecutive world ranks) on one node. */
typedef struct share_case {
  const char *what;
  int n, tp;
  int node[8]; /* each rank's node */
  int share, first_rank;
} share_case;

static const share_case share_cases[] = {
    {"block placement, 4 per node", 8, 4, {0, 0, 0, 0, 1, 1, 1, 1}, 4, -1},
    {"block placement, tp 2", 8, 2, {0, 0, 0, 0, 1, 1, 1, 1}, 2, -1},
    {"round-robin over 2 nodes (--map-by node)", 8, 2, {0, 1, 0, 1, 0, 1, 0, 1}, 1, 0},
    {"round-robin, tp 4", 8, 4, {0, 1, 0, 1, 0, 1, 0, 1}, 2, 0},
    {"uneven nodes of 3, 3 and 2", 8, 2, {0, 0, 0, 1, 1, 1, 2, 2}, 1, 2},
    {"tp 1 always sits on a node", 4, 1, {0, 1, 2, 3}, 1, -1},
    {"tp over the whole world of one node", 4, 4, {0, 0, 0, 0}, 4, -1},
};

static void test_tp_node_share(void) {
  for (size_t k = 0; k < sizeof share_cases / sizeof share_cases[0]; k++) {
    const share_case *c = &share_cases[k];
    nccl_place_rank ranks[8];
    for (int i = 0; i < c->n; i++) {
      char node[32];
      snprintf(node, sizeof node, "node-%d", c->node[i]);
      const rank_spec r = {node, NULL, NULL, "boot"};
      make_rank(&ranks[i], &r, 1, 1);
    }
    int first = -2;
    const int share = nccl_place_tp_node_share(ranks, c->n, c->tp, &first);
    CHECK_MSG(share == c->share && first == c->first_rank, "%s: share %d at rank %d, want %d at %d",
              c->what, share, first, c->share, c->first_rank);
  }
  /* One hostname on two machines is two nodes. */
  nccl_place_rank two[2];
  const rank_spec a = {"pod", NULL, NULL, "boot-a"}, b = {"pod", NULL, NULL, "boot-b"};
  make_rank(&two[0], &a, 1, 1);
  make_rank(&two[1], &b, 1, 1);
  int first = -2;
  CHECK_EQ_INT(nccl_place_tp_node_share(two, 2, 2, &first), 1);
}

/* A node's GPUs that NCCL_HOSTIDs split into hosts: found (the lower rank first, whatever the
 * table's order), and not where the ids agree, where no id is set, where the ranks share one GPU
 * or sit on different nodes; nccl_place_choose reports the pair with NCCL and none with MPI. */
typedef struct split_case {
  const char *what;
  int n;
  rank_spec ranks[4];
  int a, b; /* the pair, -1 for none */
} split_case;

static void test_split_node(void) {
  static const split_case split_cases[] = {
      {"two GPUs, no ids",
       2,
       {{"n0", "0000:01:00.0", NULL, NULL}, {"n0", "0000:02:00.0", NULL, NULL}},
       -1,
       -1},
      {"two GPUs, one id each",
       2,
       {{"n0", "0000:01:00.0", "a", NULL}, {"n0", "0000:02:00.0", "b", NULL}},
       0,
       1},
      {"two GPUs, one id set",
       2,
       {{"n0", "0000:01:00.0", "a", NULL}, {"n0", "0000:02:00.0", NULL, NULL}},
       0,
       1},
      {"two GPUs, one id for both",
       2,
       {{"n0", "0000:01:00.0", "a", NULL}, {"n0", "0000:02:00.0", "a", NULL}},
       -1,
       -1},
      {"one GPU shared, an id each",
       2,
       {{"n0", "0000:01:00.0", "a", NULL}, {"n0", "0000:01:00.0", "b", NULL}},
       -1,
       -1},
      {"two nodes, an id each",
       2,
       {{"n0", "0000:01:00.0", "a", NULL}, {"n1", "0000:02:00.0", "b", NULL}},
       -1,
       -1},
      {"the pair apart in the table",
       4,
       {{"n0", "0000:02:00.0", "a", NULL},
        {"n1", "0000:01:00.0", NULL, NULL},
        {"n1", "0000:02:00.0", NULL, NULL},
        {"n0", "0000:01:00.0", NULL, NULL}},
       0,
       3},
  };
  for (size_t c = 0; c < sizeof split_cases / sizeof *split_cases; c++) {
    const split_case *sc = &split_cases[c];
    nccl_place_rank ranks[4];
    nccl_place_name scratch[4];
    for (int i = 0; i < sc->n; i++) make_rank(&ranks[i], &sc->ranks[i], 1, 0);
    int a = 7, b = 7;
    const int found = nccl_place_split_node(ranks, sc->n, scratch, &a, &b);
    CHECK_MSG(found == (sc->a >= 0) && a == sc->a && b == sc->b,
              "%s: found %d, pair %d %d, want %d %d", sc->what, found, a, b, sc->a, sc->b);
    nccl_place_choice choice;
    CHECK_OK(nccl_place_choose(ranks, sc->n, ST_COMM_AUTO, scratch, &choice));
    CHECK_MSG(choice.backend == ST_COMM_NCCL && choice.split_a == sc->a && choice.split_b == sc->b,
              "%s: nccl_place_choose's pair %d %d", sc->what, choice.split_a, choice.split_b);
    CHECK_OK(nccl_place_choose(ranks, sc->n, ST_COMM_MPI, scratch, &choice));
    CHECK(choice.split_a == -1 && choice.split_b == -1);
  }
}

int main(void) {
  test_reports();
  test_read_boot_id();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_case(&cases[i], 1);
    run_case(&cases[i], 0);
  }
  test_device_mix();
  test_choose();
  test_tp_node_share();
  test_split_node();
  return test_finish("nccl_place_test");
}
