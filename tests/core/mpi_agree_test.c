/* mpi_agree_test.c - the verdict of core/mpi_agree.h, on every rank, with failures injected on
 * chosen ranks. Every rank must return: ST_OK when nobody failed; otherwise the status of the
 * lowest failing rank, with that rank's text (mpi_agree_share: after "on world rank N: " on the
 * other ranks, whose own texts differ here; one that names its rank is left as it is, checked
 * on two ranks) or, on the ranks that did not fail, a line naming its world rank
 * (mpi_agree_naming). Each case is followed by an
 * all-reduce that every rank must reach, so a rank left behind would hang the test (and fail
 * it by Bazel's timeout) instead of passing. Run at 1, 2 and 4 ranks. */
#include "core/mpi_agree.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "tests/testing_mpi.h"

/* The status a failing rank reports: odd and even ranks differ, so that the test sees whose
 * status came back. */
static st_status status_of(int world_rank) { return world_rank % 2 ? ST_ERR_IO : ST_ERR_OOM; }

/* Each rank's outcome of a step it did alone: the injected failure, with a text that names the
 * rank, or ST_OK. */
static st_status outcome(int world_rank, int fails) {
  if (!fails) return ST_OK;
  return st_error(status_of(world_rank), "rank %d ran out of luck", world_rank);
}

/* Every rank reaches the next collective: the agreement left nobody inside one. */
static void check_all_arrive(MPI_Comm comm) {
  int size = 0, arrived = 1;
  MPI_Comm_size(comm, &size);
  MPI_Allreduce(MPI_IN_PLACE, &arrived, 1, MPI_INT, MPI_SUM, comm);
  CHECK_EQ_INT(arrived, size);
}

/* `failing` is a bit mask of world ranks; `lowest` the lowest world rank in it (-1: none). */
static void check_share(MPI_Comm comm, int me, unsigned failing, int lowest) {
  const st_status got = mpi_agree_share(comm, outcome(me, (failing >> me) & 1));
  if (lowest < 0) {
    CHECK_OK(got);
  } else {
    char want[96];
    if (me == lowest) {
      snprintf(want, sizeof want, "rank %d ran out of luck", lowest);
    } else { /* another rank, failed otherwise or not at all, says whose failure it reports */
      snprintf(want, sizeof want, "on world rank %d: rank %d ran out of luck", lowest, lowest);
    }
    CHECK_MSG(got == status_of(lowest) && strcmp(st_last_error(), want) == 0,
              "rank %d, failing 0x%x: got %s '%s', want %s '%s'", me, failing,
              st_status_string(got), st_last_error(), st_status_string(status_of(lowest)), want);
  }
  check_all_arrive(comm);
}

static void check_naming(MPI_Comm comm, int me, unsigned failing, int lowest) {
  const int i_fail = (failing >> me) & 1;
  const st_status got = mpi_agree_naming(comm, outcome(me, i_fail), "set-up of the test");
  char want[96];
  if (lowest < 0) {
    CHECK_OK(got);
  } else if (i_fail) {
    snprintf(want, sizeof want, "rank %d ran out of luck", me);
    CHECK_MSG(got == status_of(me) && strcmp(st_last_error(), want) == 0,
              "failing rank %d: got %s '%s', want its own error", me, st_status_string(got),
              st_last_error());
  } else {
    snprintf(want, sizeof want,
             "set-up of the test abandoned: world rank %d failed (its own error says why)", lowest);
    CHECK_MSG(got == status_of(lowest) && strcmp(st_last_error(), want) == 0,
              "rank %d: got %s '%s', want %s '%s'", me, st_status_string(got), st_last_error(),
              st_status_string(status_of(lowest)), want);
  }
  check_all_arrive(comm);
}

static int lowest_of(unsigned failing, int world) {
  for (int r = 0; r < world; r++) {
    if ((failing >> r) & 1) return r;
  }
  return -1;
}

/* Over the world: nobody fails, then each rank alone, then every pair, then all ranks. */
static void test_world(int world, int me) {
  const unsigned all = (1u << world) - 1;
  for (unsigned failing = 0; failing <= all; failing++) {
    if (__builtin_popcount(failing) > 2 && failing != all) continue;
    check_share(MPI_COMM_WORLD, me, failing, lowest_of(failing, world));
    check_naming(MPI_COMM_WORLD, me, failing, lowest_of(failing, world));
  }
}

/* On a sub-communicator (odd and even world ranks) the verdict stays inside it, and the rank it
 * names is the world rank: the odd group's failing rank is its rank 0, world rank 1. */
static void test_subgroup(int world, int me) {
  if (world < 2) return;
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, me % 2, me, &half);
  const unsigned failing = 1u << 1;
  const int lowest = me % 2 ? 1 : -1;
  check_share(half, me, failing, lowest);
  check_naming(half, me, failing, lowest);
  MPI_Comm_free(&half);
}

/* A text that names its rank ("world rank 1 ...") reaches the others as it is; ranks that all
 * failed alike (the same text) report it as their own. */
static void test_texts_left_alone(int world, int me) {
  if (world < 2) return;
  st_status mine = me == 1 ? st_error(ST_ERR_INVALID_ARG, "world rank 1 (host h) differs") : ST_OK;
  CHECK_STATUS(mpi_agree_share(MPI_COMM_WORLD, mine), ST_ERR_INVALID_ARG);
  CHECK_MSG(strcmp(st_last_error(), "world rank 1 (host h) differs") == 0, "rank %d: '%s'", me,
            st_last_error());
  mine = st_error(ST_ERR_INVALID_ARG, "--steps is bad");
  CHECK_STATUS(mpi_agree_share(MPI_COMM_WORLD, mine), ST_ERR_INVALID_ARG);
  CHECK_MSG(strcmp(st_last_error(), "--steps is bad") == 0, "rank %d: '%s'", me, st_last_error());
  check_all_arrive(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int world = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  test_world(world, me);
  test_subgroup(world, me);
  test_texts_left_alone(world, me);
  const int rc = test_finish_mpi("mpi_agree_test");
  MPI_Finalize();
  return rc;
}
