// CPU batch gather: one memcpy per row, rows split over the arena when the batch is large.
#include "trident/kernels/cpu/gather.h"

#include <cstring>
#include <string>

#include "trident/core/error.h"
#include "trident/kernels/cpu/parallel.h"

namespace trident::cpu {

void gather_rows(const void* src, size_t row_bytes, const int32_t* table, int64_t rows,
                 uint32_t position, void* dst) {
  const int32_t* indices = table + int64_t(position) * rows;
  for (int64_t i = 0; i < rows; ++i)
    if (indices[i] < 0)
      throw ShapeError("gather_rows: index table entry " + std::to_string(indices[i]) +
                       " at batch position " + std::to_string(position) + " is negative");
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / int64_t(row_bytes + 1));
  parallel_ranges(rows, grain, [=](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i)
      std::memcpy(static_cast<char*>(dst) + size_t(i) * row_bytes,
                  static_cast<const char*>(src) + size_t(indices[i]) * row_bytes, row_bytes);
  });
}

void advance_step(uint32_t* step_state) {
  step_state[0] += 1;
  step_state[1] += 1;
}

}  // namespace trident::cpu
