/* mpi_p2p.c - point-to-point latency and bandwidth between two MPI ranks (ping-pong): the
 * `intra_latency` and `intra_bw` of a `--hardware` file (ranks on one node) or, with the two
 * ranks placed on two nodes, `inter_latency` and `inter_bw`. One message takes half a round
 * trip; latency is the best half round trip of an 8-byte message, bandwidth the largest
 * bytes / half round trip of the sizes tried. Usage: mpirun -np 2 mpi_p2p [max MiB, default 64] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* Best one-way time of `bytes` over `reps` round trips. */
static double one_way(char *buf, size_t bytes, int reps, int rank) {
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(buf, (int)bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(buf, (int)bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, (int)bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    }
    double t = (MPI_Wtime() - t0) / 2;
    if (t < best) best = t;
  }
  return best;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "mpi_p2p: run on exactly 2 ranks (got %d)\n", size);
    MPI_Finalize();
    return 2;
  }
  size_t max = (size_t)(argc > 1 ? atol(argv[1]) : 64) * 1024 * 1024;
  char *buf = calloc(max, 1);
  double latency = one_way(buf, 8, 2000, rank), bw = 0;
  if (rank == 0) printf("%12s %12s %10s\n", "bytes", "one-way us", "GB/s");
  if (rank == 0) printf("%12d %12.2f %10s\n", 8, latency * 1e6, "-");
  for (size_t bytes = 4096; bytes <= max; bytes *= 4) {
    int reps = bytes < (1u << 20) ? 200 : 20;
    double t = one_way(buf, bytes, reps, rank), rate = (double)bytes / t;
    if (rate > bw) bw = rate;
    if (rank == 0) printf("%12zu %12.2f %10.3f\n", bytes, t * 1e6, rate / 1e9);
  }
  if (rank == 0) printf("latency = %.4g\nbw = %.4g\n", latency, bw);
  free(buf);
  MPI_Finalize();
  return 0;
}
