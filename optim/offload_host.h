/* offload_host.h - AdamW on the host for a unit whose optimizer state is offloaded (unit.h,
 * "Optimizer offload"): master, m and v in host memory, updated through the CPU backend's
 * kernel_adamw.
 *
 * Where device memory is host RAM (the CPU) the update reads the owned gradients and writes the
 * owned parameters in place. Elsewhere (a GPU) it goes through the model's pinned staging
 * (sharding/host_staging.h), chunk by chunk, on the unit's stream:
 *   - the step's factors and the first HOST_STAGING_RING chunks' gradients are copied down, an
 *     event recorded after each chunk;
 *   - per chunk, the host waits for its event, updates it, and queues the copy up of the
 *     parameters it wrote (segment by segment: the padding between parameters, which AdamW does
 *     not write, is never copied over) and the copy down of the gradients RING chunks ahead;
 *   - the host waits for the stream once at the end, before the next unit reuses the staging.
 * So the copies of the other chunks overlap the host's update, which is most of the time (28
 * bytes an element at the host's memory bandwidth against 2-4 over the host link each way). A
 * step the factors skip copies nothing back: the staging may hold another unit's parameters. */
#ifndef ST_OPTIM_OFFLOAD_HOST_H
#define ST_OPTIM_OFFLOAD_HOST_H

#include "kernels/kernels.h"
#include "sharding/unit.h"

/* The update above over u's owned range; `step` and `segments` as unit_optim_adamw builds them
 * (segments relative to the owned range). */
st_status offload_host_adamw(unit *u, const kernel_adamw_step *step,
                             const kernel_adamw_segment *segments, int count);

#endif /* ST_OPTIM_OFFLOAD_HOST_H */
