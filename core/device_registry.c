/* device_registry.c - the accelerator backends compiled into this build, the one place that
 * names them: device.c selects and dispatches through this list, so no backend and device.c
 * depend on each other. A CPU-only build has none, and every request falls back to the CPU. */
#include "core/device.h"

#ifdef ST_HAVE_CUDA
#include "core/device_cuda.h"
#endif

const device_backend *const device_accelerators[] = {
#ifdef ST_HAVE_CUDA
    &device_backend_cuda,
#endif
    NULL,
};
