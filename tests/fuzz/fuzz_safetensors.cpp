// libFuzzer target: the safetensors loader; whatever it accepts is saved and reloaded, and must
// come back identical (metadata, names, dtypes, shapes, bytes).
#include "trident/core/error.h"
#include "trident/core/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

using namespace trident;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_path("in.safetensors");
  static const std::string again = fuzz::scratch_path("out.safetensors");
  fuzz::write_file(path, data, size);
  TensorFile loaded;
  try {
    loaded = load_safetensors(path);
  } catch (const Error&) {
    return 0;
  }
  save_safetensors(again, loaded);  // anything load accepts must be writable
  const TensorFile reloaded = load_safetensors(again);
  FUZZ_CHECK(reloaded.metadata == loaded.metadata);
  FUZZ_CHECK(reloaded.tensors.size() == loaded.tensors.size());
  // save writes in the given order and load returns data order, so the order is the same.
  for (size_t i = 0; i < loaded.tensors.size(); ++i) {
    const HostTensor &a = loaded.tensors[i], &b = reloaded.tensors[i];
    FUZZ_CHECK(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.bytes == b.bytes);
  }
  return 0;
}
