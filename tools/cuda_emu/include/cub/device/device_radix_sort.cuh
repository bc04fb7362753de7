// cub/device/device_radix_sort.cuh (CUDA emulation) - cub::DeviceRadixSort::SortPairs, the
// pointer form shardtrain's embedding backward uses: a stable ascending sort of (key, value)
// pairs by the key bits [begin_bit, end_bit), run on its stream (cuda_emu_on_stream: at once on
// the calling thread, or later under CUDA_EMU_ASYNC=1).
//
// The usual two calls: with d_temp_storage NULL only temp_storage_bytes is set (a size that
// grows with num_items); otherwise temp storage smaller than that is refused with
// cudaErrorInvalidValue, as CUB refuses it. The emulation really uses the temp storage (the
// pairs are copied through it), so scratch that overlaps the inputs or outputs shows. It also
// refuses with cudaErrorInvalidValue what CUB leaves undefined: a bit range outside the key,
// NULL buffers for a non-empty sort, and overlapping input / output / temp ranges.
//
// Not emulated: SortKeys, the descending sorts, DoubleBuffer forms, floating-point keys,
// the deprecated debug_synchronous argument.
#ifndef CUDA_EMU_CUB_DEVICE_RADIX_SORT_CUH
#define CUDA_EMU_CUB_DEVICE_RADIX_SORT_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace cub {

struct DeviceRadixSort {
  template <typename KeyT, typename ValueT, typename NumItemsT>
  static cudaError_t SortPairs(void *d_temp_storage, size_t &temp_storage_bytes,
                               const KeyT *d_keys_in, KeyT *d_keys_out, const ValueT *d_values_in,
                               ValueT *d_values_out, NumItemsT num_items, int begin_bit = 0,
                               int end_bit = sizeof(KeyT) * 8, cudaStream_t stream = 0) {
    static_assert(std::is_integral<KeyT>::value && !std::is_same<KeyT, bool>::value,
                  "the CUDA emulation's radix sort takes integer keys only");
    static_assert(std::is_trivially_copyable<ValueT>::value, "radix sort values are copied");
    static_assert(std::is_integral<NumItemsT>::value, "num_items is an integer");
    const size_t n = num_items > 0 ? (size_t)num_items : 0;
    const size_t keys_bytes = n * sizeof(KeyT), values_bytes = n * sizeof(ValueT);
    const size_t needed = keys_bytes + values_bytes + 256;
    if (d_temp_storage == NULL) {
      temp_storage_bytes = needed;
      return cudaSuccess;
    }
    if (temp_storage_bytes < needed) return cudaErrorInvalidValue;
    if (begin_bit < 0 || end_bit > (int)(sizeof(KeyT) * 8) || begin_bit > end_bit) {
      return cudaErrorInvalidValue;
    }
    if (n == 0) return cudaSuccess;
    if (!d_keys_in || !d_keys_out || !d_values_in || !d_values_out) return cudaErrorInvalidValue;
    const char *ranges[5][2] = {
        {(const char *)d_keys_in, (const char *)d_keys_in + keys_bytes},
        {(const char *)d_keys_out, (const char *)d_keys_out + keys_bytes},
        {(const char *)d_values_in, (const char *)d_values_in + values_bytes},
        {(const char *)d_values_out, (const char *)d_values_out + values_bytes},
        {(const char *)d_temp_storage, (const char *)d_temp_storage + needed}};
    for (int i = 0; i < 5; i++) {
      for (int j = i + 1; j < 5; j++) {
        if (i == 0 && j == 2) continue;  // the two inputs may share memory: both only read
        if (ranges[i][0] < ranges[j][1] && ranges[j][0] < ranges[i][1]) {
          return cudaErrorInvalidValue;
        }
      }
    }

    cuda_emu_on_stream(stream, "cub::DeviceRadixSort::SortPairs", [=] {
      // The pairs through the temp storage (unaligned there: copied with memcpy).
      char *temp_keys = static_cast<char *>(d_temp_storage);
      char *temp_values = temp_keys + keys_bytes;
      memcpy(temp_keys, d_keys_in, keys_bytes);
      memcpy(temp_values, d_values_in, values_bytes);

      // The ordering bits of each key: signed keys with the sign bit flipped (so that they order
      // as unsigned), then bits [begin_bit, end_bit).
      using UKey = typename std::make_unsigned<KeyT>::type;
      const int bits = end_bit - begin_bit;
      const UKey mask = bits == 0                         ? UKey(0)
                        : bits >= (int)(sizeof(UKey) * 8) ? (UKey)~UKey(0)
                                                          : (UKey)(((UKey)1 << bits) - 1);
      std::vector<UKey> order(n);
      for (size_t i = 0; i < n; i++) {
        KeyT k;
        memcpy(&k, temp_keys + i * sizeof(KeyT), sizeof k);
        UKey u = (UKey)k;
        if (std::is_signed<KeyT>::value) u ^= (UKey)((UKey)1 << (sizeof(UKey) * 8 - 1));
        order[i] = begin_bit >= (int)(sizeof(UKey) * 8) ? UKey(0) : (UKey)((u >> begin_bit) & mask);
      }
      std::vector<size_t> index(n);
      for (size_t i = 0; i < n; i++) index[i] = i;
      std::stable_sort(index.begin(), index.end(),
                       [&](size_t a, size_t b) { return order[a] < order[b]; });
      for (size_t i = 0; i < n; i++) {
        memcpy(&d_keys_out[i], temp_keys + index[i] * sizeof(KeyT), sizeof(KeyT));
        memcpy(&d_values_out[i], temp_values + index[i] * sizeof(ValueT), sizeof(ValueT));
      }
    });
    return cudaSuccess;
  }
};

}  // namespace cub

#endif  // CUDA_EMU_CUB_DEVICE_RADIX_SORT_CUH
