// libFuzzer target: the IDX reader on raw bytes and, through gzip, on the same bytes compressed.
// Input: one mode byte (bit 0: gzip the rest; bits 1-3: item limit 0 = all, else 1..7), then the file.
#include <algorithm>

#include "trident/core/error.h"
#include "trident/core/idx.h"
#include "tests/fuzz/fuzz_common.h"

using namespace trident;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  static const std::string path = fuzz::scratch_path("idx");
  if (mode & 1) {
    const std::vector<uint8_t> gz = fuzz::compress(data + 1, size - 1, 15 + 16);
    fuzz::write_file(path, gz.data(), gz.size());
  } else {
    fuzz::write_file(path, data + 1, size - 1);
  }
  const uint64_t limit = (mode >> 1) & 7;
  try {
    const IdxArray a = limit ? read_idx(path, limit) : read_idx(path);
    uint64_t count = 1;
    for (int64_t d : a.dims) count *= static_cast<uint64_t>(d);
    FUZZ_CHECK(a.data.size() == count);  // exactly the items read, nothing more
    FUZZ_CHECK(limit == 0 || a.dims[0] <= static_cast<int64_t>(limit));
    FUZZ_CHECK(a.dims[0] <= a.declared_items);
  } catch (const Error&) {
  }
  return 0;
}
