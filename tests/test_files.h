// Helpers for tests that write files: a scratch directory, IDX and gzip encoders, a synthetic
// MNIST-format directory, the CLI run in-process, and the CLI binary run as a child process.
#pragma once
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <spawn.h>
#include <zlib.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "trident/models/cli.h"

extern char** environ;

namespace trident::testing {

using Bytes = std::vector<uint8_t>;

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& tag = "files") {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("trident-" + tag + "-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

inline void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f.good()) throw std::runtime_error("cannot write " + path);
}

inline Bytes read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// An unsigned-byte IDX file: 00 00 08 ndims, big-endian dims, then data.
inline Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes out = {0, 0, 8, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// zlib-compressed in: window_bits 15 + 16 gives a gzip member, -15 raw deflate (zip's method 8).
inline Bytes deflate_bytes(const Bytes& in, int window_bits = 15 + 16, int level = 6) {
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw std::runtime_error("deflateInit2");
  Bytes out(deflateBound(&z, in.size()) + 64);
  z.next_in = const_cast<Bytes::value_type*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// An MNIST-format directory: n_train / n_test images of height x width with labels i % 10 and
// pixels from a fixed generator (raw files; gzip = true writes .gz files).
inline void write_mnist_directory(const std::string& dir, uint32_t n_train, uint32_t n_test, uint32_t height = 28,
                                  uint32_t width = 28, bool gzip = false) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(11);
  for (const auto& [prefix, n] : {std::pair<std::string, uint32_t>{"train", n_train}, {"t10k", n_test}}) {
    Bytes pixels(static_cast<size_t>(n) * height * width), labels(n);
    for (auto& p : pixels) p = static_cast<uint8_t>(rng() >> 24);
    for (uint32_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(i % 10);
    Bytes images = idx_bytes({n, height, width}, pixels), label_file = idx_bytes({n}, labels);
    const std::string suffix = gzip ? ".gz" : "";
    write_bytes(dir + "/" + prefix + "-images-idx3-ubyte" + suffix, gzip ? deflate_bytes(images) : images);
    write_bytes(dir + "/" + prefix + "-labels-idx1-ubyte" + suffix, gzip ? deflate_bytes(label_file) : label_file);
  }
}

// A .npy file: magic, version, little-endian header length, the dict padded to 64 bytes, data.
inline Bytes npy_bytes(const std::string& descr, const std::string& shape, const Bytes& data, int major = 1,
                       const std::string& fortran = "False") {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  const size_t prefix = major == 1 ? 10 : 12;
  dict.append(63 - (prefix + dict.size()) % 64, ' ');
  dict += '\n';
  Bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  for (size_t i = 0; i < prefix - 8; ++i) out.push_back(static_cast<uint8_t>(dict.size() >> (8 * i)));
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// Little-endian bytes of values (float, int64_t, ...).
template <typename T>
Bytes le_bytes(const std::vector<T>& values) {
  Bytes out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A zip archive of (name, data) entries, each stored or raw-deflated, with a central directory.
struct ZipMember {
  std::string name;
  Bytes data;
  bool deflate = false;
  uint64_t declared_size = 0;  // the size the directory claims (0: the real one)
};
inline Bytes zip_bytes(const std::vector<ZipMember>& members) {
  Bytes out, directory;
  const auto put = [](Bytes& b, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  for (const ZipMember& m : members) {
    const Bytes body = m.deflate ? deflate_bytes(m.data, -15) : m.data;
    const uint32_t crc = static_cast<uint32_t>(crc32(0, m.data.data(), static_cast<uInt>(m.data.size())));
    const uint64_t offset = out.size();
    for (Bytes* b : {&out, &directory}) {
      const bool central = b == &directory;
      put(*b, central ? 0x02014b50 : 0x04034b50, 4);
      if (central) put(*b, 20, 2);           // version made by
      put(*b, 20, 2);                        // version needed
      put(*b, 0, 2);                         // flags
      put(*b, m.deflate ? 8 : 0, 2);         // method
      put(*b, 0, 4);                         // time, date
      put(*b, crc, 4);
      put(*b, body.size(), 4);
      put(*b, m.declared_size ? m.declared_size : m.data.size(), 4);
      put(*b, m.name.size(), 2);
      put(*b, 0, 2);                         // extra length
      if (central) {
        put(*b, 0, 2);                       // comment length
        put(*b, 0, 2);                       // disk
        put(*b, 0, 2);                       // internal attributes
        put(*b, 0, 4);                       // external attributes
        put(*b, offset, 4);
      }
      b->insert(b->end(), m.name.begin(), m.name.end());
    }
    out.insert(out.end(), body.begin(), body.end());
  }
  const uint64_t directory_offset = out.size();
  out.insert(out.end(), directory.begin(), directory.end());
  put(out, 0x06054b50, 4);
  put(out, 0, 4);
  put(out, members.size(), 2);
  put(out, members.size(), 2);
  put(out, directory.size(), 4);
  put(out, directory_offset, 4);
  put(out, 0, 2);
  return out;
}

struct CliResult {
  int status = 0;
  std::string out, err;
};

inline CliResult cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  CliResult r;
  r.status = run_cli(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// Runs program with args as a child process (output discarded, environment inherited plus
// extra_env "NAME=VALUE" entries); returns its exit status and peak resident memory in KiB.
struct ChildResult {
  int status = -1;
  long max_rss_kib = 0;
};

// VmHWM (the resident high-water mark of the process's current image) from /proc, or 0. Unlike
// wait4's ru_maxrss, it does not include the parent's memory that a spawned child starts from.
inline long resident_high_water_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

inline ChildResult run_child(const std::string& program, const std::vector<std::string>& args,
                             const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> argv_text = {program};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text(extra_env);
  for (char** e = environ; *e != nullptr; ++e) env_text.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  ChildResult r;
  const int spawned = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return r;
  // The high-water mark only grows: sampling it until the process exits catches its peak.
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    r.max_rss_kib = std::max(r.max_rss_kib, resident_high_water_kib(pid));
    usleep(2000);
  }
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace trident::testing
