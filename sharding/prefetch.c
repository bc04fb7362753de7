/* prefetch.c - bounded look-ahead gathering over a sequence of units. */
#include "sharding/prefetch.h"

#include "core/error.h"

st_status prefetch_acquire(unit *units, int count, int index, int direction, int depth) {
  ST_CHECK(unit_gather_wait(&units[index]));
  for (int k = 1; k <= depth; k++) {
    int next = index + k * direction;
    if (next < 0 || next >= count) break;
    ST_CHECK(unit_gather_start(&units[next]));
  }
  return ST_OK;
}
