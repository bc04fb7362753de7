/* host_threads.c - the node's OpenMP threads against its CPUs (host_threads.h). */
#include "engine/train/host_threads.h"

#include <mpi.h>
#include <omp.h>
#include <sched.h> /* sched_getaffinity, CPU_COUNT: _GNU_SOURCE is the build's */
#include <unistd.h>

#include "core/log.h"

/* The OMP_NUM_THREADS that keeps `ranks` ranks of `threads` threads each within `cpus` (at least
 * 1: more ranks than CPUs is the launch's choice, which no thread count changes), or 0 when
 * `threads` is no more than that already. */
static int fitting_threads(int ranks, int threads, long cpus) {
  if (ranks < 1 || threads < 1 || cpus < 1) return 0;
  const long fitting = cpus / ranks > 1 ? cpus / ranks : 1;
  return threads > fitting ? (int)fitting : 0;
}

void host_threads_check(void) {
  MPI_Comm node;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
      MPI_SUCCESS) {
    return;
  }
  int ranks = 1, local = 0, threads = omp_get_max_threads();
  MPI_Comm_size(node, &ranks);
  MPI_Comm_rank(node, &local);
  /* The largest count: the node is as slow as its most oversubscribed rank. The CPUs: those
   * any of the node's ranks may run on (a Slurm cpuset or taskset allows fewer than online). */
  MPI_Allreduce(MPI_IN_PLACE, &threads, 1, MPI_INT, MPI_MAX, node);
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  long cpus = 0;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 &&
      MPI_Allreduce(MPI_IN_PLACE, &allowed, (int)sizeof allowed, MPI_BYTE, MPI_BOR, node) ==
          MPI_SUCCESS) {
    cpus = CPU_COUNT(&allowed);
  }
  MPI_Comm_free(&node);
  if (cpus < 1) cpus = sysconf(_SC_NPROCESSORS_ONLN);
  const int fitting = fitting_threads(ranks, threads, cpus);
  if (local == 0 && fitting > 0) {
    st_log(ST_LOG_WARN,
           "%d ranks on this node each run up to %d OpenMP threads on the %ld CPUs they may use: "
           "their CPU "
           "work is oversubscribed; set OMP_NUM_THREADS=%d (or bind each rank to its own cores)",
           ranks, threads, cpus, fitting);
  }
}
