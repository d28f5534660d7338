// Shared by the libFuzzer targets: the input written to a per-process scratch file (the loaders
// read files, and must refuse anything but regular files), and a check that aborts on a broken
// invariant so that libFuzzer reports it as a crash.
#pragma once
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace trident::fuzz {

// A file under /dev/shm (memory) when it exists, else the temp directory; unique per process and tag.
inline std::string scratch_path(const std::string& tag) {
  const std::filesystem::path dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
  return (dir / ("trident-fuzz-" + std::to_string(::getpid()) + "-" + tag)).string();
}

inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size != 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

// zlib compression of data (window_bits 15 + 16: gzip; -15: raw deflate), for targets that feed
// the fuzzer's bytes through a decompressor so that mutations reach the parser behind it.
inline std::vector<uint8_t> compress(const uint8_t* data, size_t size, int window_bits) {
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::vector<uint8_t> out(deflateBound(&z, size) + 64);
  z.next_in = const_cast<uint8_t*>(data);
  z.avail_in = static_cast<uInt>(size);
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

#define FUZZ_CHECK(condition)                                                          \
  do {                                                                                 \
    if (!(condition)) {                                                                \
      std::fprintf(stderr, "invariant failed: %s (%s:%d)\n", #condition, __FILE__, __LINE__); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

}  // namespace trident::fuzz
