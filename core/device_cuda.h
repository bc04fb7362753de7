/* device_cuda.h - the CUDA device backend's table, for the registry (device_registry.c) and
 * nothing else: everyone else reaches it through device_select and the table's members.
 * Exists only in CUDA builds. */
#ifndef ST_CORE_DEVICE_CUDA_H
#define ST_CORE_DEVICE_CUDA_H

#include "core/device.h"

extern const device_backend device_backend_cuda;

#endif /* ST_CORE_DEVICE_CUDA_H */
