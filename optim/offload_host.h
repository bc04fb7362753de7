/* offload_host.h - AdamW on the host for units whose optimizer state is offloaded (unit.h,
 * "Optimizer offload"): master, m and v in host memory, updated through the CPU backend's
 * kernel_adamw.
 *
 * Where device memory is host RAM (the CPU) the update reads a unit's owned gradients and writes
 * its owned parameters in place. Elsewhere (a GPU) the units of a step go through the model's
 * pinned ring of chunk slots (sharding/host_staging.h) as one sequence of chunks, each unit's
 * copies on its own stream:
 *   - the step's factors come down, then the first HOST_STAGING_RING chunks' gradients go down,
 *     an event recorded after each;
 *   - per chunk, the host waits for its gradients and for the slot's last parameters to have
 *     gone out, updates it, queues the copy up of the parameters it wrote (segment by segment:
 *     the padding between parameters, which AdamW does not write, is never copied over) and the
 *     copy down of the gradients RING chunks ahead, which may be the next unit's;
 *   - after a unit's last chunk it is published (unit_publish), units in order on every rank.
 * So the copies overlap the host's update, which is most of the time (28 bytes an element at
 * the host's memory bandwidth against 2-4 over the host link each way), across units too: the
 * host never waits for a whole stream. A step the factors skip copies nothing in either
 * direction. */
#ifndef ST_OPTIM_OFFLOAD_HOST_H
#define ST_OPTIM_OFFLOAD_HOST_H

#include "kernels/kernels.h"
#include "sharding/unit.h"

/* One unit's share of an update: its owned range cut into AdamW's segments (relative to it). */
typedef struct offload_job {
  unit *u;
  const kernel_adamw_segment *segments;
  int count;
} offload_job;

/* The in-place update of one unit whose device memory is host memory (its optimizer is not
 * begun or published here). */
st_status offload_host_adamw_in_place(const offload_job *job, const kernel_adamw_step *step);

/* The staged update above for the jobs' units, in order: begins each unit's optimizer
 * (unit_optimizer_begin), updates and publishes it. The units share one staging and precision
 * (one model's). */
st_status offload_host_adamw_staged(const offload_job *jobs, int n, const kernel_adamw_step *step);

#endif /* ST_OPTIM_OFFLOAD_HOST_H */
