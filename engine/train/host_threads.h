/* host_threads.h - the start-up warning for a node whose ranks together run more OpenMP threads
 * than it has CPUs. Each rank's CPU work (the whole step on the CPU device, the offloaded AdamW
 * on a GPU) runs on omp_get_max_threads() threads, by default one per CPU the rank may run on;
 * with several ranks on a node not bound to their own cores (mpirun binds to a socket above
 * two ranks), every rank starts one thread per core and the node runs ranks x cores threads,
 * each step waiting on the slowest of them. */
#ifndef ST_ENGINE_TRAIN_HOST_THREADS_H
#define ST_ENGINE_TRAIN_HOST_THREADS_H

#include "shardtrain.h"

/* The warning, from the node's first rank, when the node's ranks' threads add up to more than
 * the CPUs they may run on (the union of their affinity masks) and fewer threads would help: how
 * many of each, and the OMP_NUM_THREADS that fits. For runs whose step does CPU work (the CPU
 * device, or an offloaded optimizer): a GPU's ranks otherwise leave OpenMP idle. Collective over
 * MPI_COMM_WORLD; never fails the run (an MPI failure only skips the check). */
void host_threads_check(void);

#endif /* ST_ENGINE_TRAIN_HOST_THREADS_H */
