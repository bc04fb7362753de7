/* stop_request.h - a training run stopped between steps by a signal: SIGTERM (what Slurm sends
 * every task at its time limit or on preemption, KillWait seconds before SIGKILL) or SIGUSR1
 * (what `mpirun` forwards to every rank, and `sbatch --signal=USR1@SECONDS` sends ahead of the
 * limit). The handler only notes the signal; the trainer asks between steps, every rank agrees
 * on the answer (ranks get a signal at different steps, or one rank alone), and the run then
 * checkpoints and exits. A second signal of the same kind takes its default action, so a stop
 * that hangs can still be ended. */
#ifndef ST_ENGINE_TRAIN_STOP_REQUEST_H
#define ST_ENGINE_TRAIN_STOP_REQUEST_H

#include "shardtrain.h"

/* Catches SIGTERM and SIGUSR1 until stop_request_restore, which puts the earlier handlers back
 * and forgets a signal not yet acted on. */
void stop_request_install(void);
void stop_request_restore(void);

/* Collective over MPI_COMM_WORLD: *signo is the largest signal number any rank has caught since
 * stop_request_install (a rank that caught two, the larger), or 0 when none has. */
st_status stop_request_agree(int *signo);

/* "SIGTERM" or "SIGUSR1" (the signals caught). */
const char *stop_request_signal_name(int signo);

#endif /* ST_ENGINE_TRAIN_STOP_REQUEST_H */
