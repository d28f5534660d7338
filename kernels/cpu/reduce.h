// CPU column sums: the bias gradient of a Linear layer.
#pragma once
#include <cstdint>

namespace trident::cpu {

// db[cols] = beta * db + sum over rows of dy[rows, cols], accumulated in double; beta == 0
// means db is only written.
void sum_rows(const float* dy, int64_t rows, int64_t cols, float* db, float beta);

}  // namespace trident::cpu
