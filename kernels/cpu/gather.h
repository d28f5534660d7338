// CPU batch gather by index table, and the per-step counters it reads.
#pragma once
#include <cstddef>
#include <cstdint>

namespace trident::cpu {

// dst[i, :] = src[table[position * rows + i], :] for i < rows, rows of row_bytes bytes.
// Throws ShapeError for a negative table entry.
void gather_rows(const void* src, size_t row_bytes, const int32_t* table, int64_t rows,
                 uint32_t position, void* dst);
// step_state[0] += 1, step_state[1] += 1.
void advance_step(uint32_t* step_state);

}  // namespace trident::cpu
