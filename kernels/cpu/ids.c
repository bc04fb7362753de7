/* ids.c - range checks of token ids and targets before the CPU ops index memory with them. */
#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"

st_status kernel_cpu_check_ids(const char *what, const int32_t *ids, int64_t count, int64_t limit) {
  for (int64_t i = 0; i < count; i++) {
    if (ids[i] < 0 || ids[i] >= limit) {
      return st_error(ST_ERR_INVALID_ARG, "%s %lld is %d, outside [0, %lld)", what, (long long)i,
                      ids[i], (long long)limit);
    }
  }
  return ST_OK;
}
