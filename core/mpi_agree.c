/* mpi_agree.c - see mpi_agree.h: one all-reduce finds the lowest failing rank and its status;
 * the error text, where it is shared, follows in one broadcast from that rank. */
#include "core/mpi_agree.h"

#include <stdio.h>
#include <string.h>

#include "core/check_mpi.h"
#include "core/error.h"

typedef struct failure {
  int rank; /* the lowest rank of `comm` that failed; -1 when none did */
  int status;
} failure;

/* MPI_MINLOC over (rank, status) pairs keeps the smallest first member and its second: a rank
 * that failed offers (its rank, its status), the others (size, ST_OK), which lose to any
 * failure. The ranks are distinct, so the pair found is one rank's own. */
static st_status lowest_failure(MPI_Comm comm, st_status mine, int *rank, failure *out) {
  int size = 0;
  MPI_CHECK(MPI_Comm_rank(comm, rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  out->rank = mine != ST_OK ? *rank : size;
  out->status = (int)mine;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, out, 1, MPI_2INT, MPI_MINLOC, comm));
  if (out->rank == size) out->rank = -1;
  return ST_OK;
}

/* A rank of `comm` as the job numbers it: the world rank users see in every log line. */
static st_status world_rank_of(MPI_Comm comm, int rank, int *world_rank) {
  MPI_Group group, world;
  MPI_CHECK(MPI_Comm_group(comm, &group));
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  const int rc = MPI_Group_translate_ranks(group, 1, &rank, world, world_rank);
  MPI_Group_free(&world);
  MPI_Group_free(&group);
  MPI_CHECK(rc);
  return ST_OK;
}

st_status mpi_agree_share(MPI_Comm comm, st_status mine) {
  int rank = 0;
  failure first;
  ST_CHECK(lowest_failure(comm, mine, &rank, &first));
  if (first.rank < 0) return ST_OK;
  char text[ST_ERROR_DETAIL_BYTES] = {0};
  if (rank == first.rank) strncpy(text, st_last_error(), sizeof text - 1);
  MPI_CHECK(MPI_Bcast(text, (int)sizeof text, MPI_CHAR, first.rank, comm));
  if (rank == first.rank) return mine;
  /* A rank that failed alike (a bad flag fails them all) reports the text as its own; any
   * other says whose failure it reports, lest "x: cannot open" read as its own, unless the
   * text names that rank already ("world rank N (host H) ..."). */
  if (mine != ST_OK && strcmp(st_last_error(), text) == 0) return (st_status)first.status;
  int world_rank = -1;
  ST_CHECK(world_rank_of(comm, first.rank, &world_rank));
  char named[40];
  snprintf(named, sizeof named, "world rank %d ", world_rank);
  if (strstr(text, named)) return st_error((st_status)first.status, "%s", text);
  return st_error((st_status)first.status, "on world rank %d: %s", world_rank, text);
}

st_status mpi_agree_naming(MPI_Comm comm, st_status mine, const char *abandoned) {
  int rank = 0;
  failure first;
  ST_CHECK(lowest_failure(comm, mine, &rank, &first));
  if (first.rank < 0) return ST_OK;
  if (mine != ST_OK) return mine;
  int world_rank = -1;
  ST_CHECK(world_rank_of(comm, first.rank, &world_rank));
  return st_error((st_status)first.status,
                  "%s abandoned: world rank %d failed (its own error says why)", abandoned,
                  world_rank);
}
