/* prefetch.h - the order in which a model's units are gathered: before computing unit i, wait
 * for its gather and start the gathers of the next `depth` units in the direction of travel
 * (forward: i+1, i+2, ...; backward: i-1, i-2, ...), so communication overlaps computation
 * while at most depth units are gathered ahead. Gathers are no-ops for units already gathered
 * and for stages other than 3. */
#ifndef ST_SHARDING_PREFETCH_H
#define ST_SHARDING_PREFETCH_H

#include "sharding/unit.h"

/* direction: +1 in the forward pass, -1 in the backward pass. */
st_status prefetch_acquire(unit *units, int count, int index, int direction, int depth);

#endif /* ST_SHARDING_PREFETCH_H */
