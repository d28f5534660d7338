// libFuzzer target: the .npy reader from a plain file (bit 0 of the mode byte clear) or through raw
// deflate as an .npz entry would be (bit 0 set), reading all rows or a limit (bits 1-3), and the
// Dataset built from it as samples.
#include "trident/core/byte_source.h"
#include "trident/core/dataset.h"
#include "trident/core/error.h"
#include "trident/core/files.h"
#include "trident/core/npy.h"
#include "tests/fuzz/fuzz_common.h"

using namespace trident;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const uint64_t limit = (mode >> 1) & 7;
  static const std::string path = fuzz::scratch_path("x.npy");
  static const std::string labels = fuzz::scratch_path("y.npy");
  try {
    NpyArray a;
    if (mode & 1) {
      const std::vector<uint8_t> packed = fuzz::compress(data + 1, size - 1, -15);
      fuzz::write_file(path, packed.data(), packed.size());
      const InputFile in = open_regular_file(path, "fuzz input");
      ByteSource src(in.get(), path, ByteSource::Encoding::deflate, in.size());
      a = read_npy(src, limit ? limit : kNpyAllRows);
    } else {
      fuzz::write_file(path, data + 1, size - 1);
      a = load_npy(path, limit ? limit : kNpyAllRows);
      if (!a.header.shape.empty() && a.header.shape[0] > 0 && a.header.shape[0] < 1000) {
        // Labels 0..N-1 for the same N, so the samples' own checks decide.
        std::vector<uint8_t> y = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0};
        std::string dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (" +
                           std::to_string(a.header.shape[0]) + ",), }";
        dict.resize(117, ' ');
        dict += '\n';
        y.insert(y.end(), dict.begin(), dict.end());
        for (int32_t i = 0; i < a.header.shape[0]; ++i)
          for (int b = 0; b < 4; ++b) y.push_back(static_cast<uint8_t>(i >> (8 * b)));
        fuzz::write_file(labels, y.data(), y.size());
        const Dataset d = load_npy_dataset(path, labels, static_cast<int64_t>(limit));
        FUZZ_CHECK(d.size() <= a.header.shape[0]);
        FUZZ_CHECK(d.size() == 0 || d.normalized(0, 1).size() == static_cast<size_t>(d.sample_numel()));
      }
    }
    uint64_t bytes = static_cast<uint64_t>(a.header.item_size);
    for (int64_t d : a.shape) bytes *= static_cast<uint64_t>(d);
    FUZZ_CHECK(a.bytes.size() == bytes);
  } catch (const Error&) {
  }
  return 0;
}
