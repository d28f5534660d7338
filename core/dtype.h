// Element types a Tensor can hold. float32 is what every op computes in today; the others are
// there so that storage, checkpoints and the device interface need no change when they arrive.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace trident {

// i64 is for host-side state (PyTorch's num_batches_tracked counters in state dicts).
enum class DType : uint8_t { f32, f16, bf16, i32, u8, i64 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::u8: return 1;
    case DType::i64: return 8;
  }
  return 0;
}

// Names as safetensors writes them ("F32", "I32", ...).
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
    case DType::i64: return "I64";
  }
  return "?";
}

}  // namespace trident
