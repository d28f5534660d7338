// safetensors reading (header JSON checked field by field before any data is read) and
// crash-safe writing (temporary file, fsync, rename, directory fsync).
#include "trident/core/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <set>
#include <thread>

#include "trident/core/env.h"
#include "trident/core/error.h"
#include "trident/core/files.h"
#include "trident/core/json.h"

#ifdef _WIN32
#include <io.h>
#else
#include <fcntl.h>
#include <unistd.h>
#endif

namespace trident {
namespace {

namespace fs = std::filesystem;

bool dtype_from_name(const std::string& name, DType* out) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u8, DType::i64}) {
    if (name == dtype_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

// product(shape) * element_size, or false if it does not fit in uint64 (a zero dim makes it 0).
bool byte_size(const std::vector<int64_t>& shape, size_t element_size, uint64_t* out) {
  uint64_t n = element_size;
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) n = 0;
  for (int64_t d : shape) {
    if (n == 0) break;
    if (d < 0 || static_cast<uint64_t>(d) > std::numeric_limits<uint64_t>::max() / n) return false;
    n *= static_cast<uint64_t>(d);
  }
  *out = n;
  return true;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---- loading ----

struct Entry {
  HostTensor tensor;
  uint64_t begin = 0, end = 0;
};

// Checks one tensor entry of the header and returns it with its offsets (bytes not yet read).
Entry parse_entry(const std::string& path, const std::string& name, const json::Value& v, uint64_t data_size) {
  // Built only for an error: formatting it for each of 10^5 good entries cost a third of a load.
  const auto where = [&] { return path + ": tensor " + json::quote_for_message(name) + ": "; };
  if (v.kind != json::Value::Kind::object)
    throw FormatError(where() + "expected an object, got " + json::kind_name(v.kind));
  for (const auto& member : v.object) {
    if (member.first != "dtype" && member.first != "shape" && member.first != "data_offsets")
      throw FormatError(where() + "unexpected field " + json::quote_for_message(member.first));
  }
  const auto field = [&](const char* key, json::Value::Kind kind) -> const json::Value& {
    const json::Value* f = v.find(key);
    if (f == nullptr) throw FormatError(where() + "missing field \"" + key + "\"");
    if (f->kind != kind)
      throw FormatError(where() + "field \"" + key + "\" must be " + json::kind_name(kind) + ", got " +
                        json::kind_name(f->kind));
    return *f;
  };
  Entry e;
  e.tensor.name = name;
  const std::string& dtype = field("dtype", json::Value::Kind::string).string;
  if (!dtype_from_name(dtype, &e.tensor.dtype))
    throw FormatError(where() + "unsupported dtype " + json::quote_for_message(dtype) + " (Trident reads F32, F16, BF16, I32, I64, U8)");
  for (const json::Value& d : field("shape", json::Value::Kind::array).array) {
    if (d.kind != json::Value::Kind::integer || d.integer < 0)
      throw FormatError(where() + "shape entries must be non-negative integers");
    e.tensor.shape.push_back(d.integer);
  }
  uint64_t bytes = 0;
  if (!byte_size(e.tensor.shape, dtype_size(e.tensor.dtype), &bytes))
    throw FormatError(where() + "shape " + shape_text(e.tensor.shape) + " overflows 64 bits");
  const json::Value& offsets = field("data_offsets", json::Value::Kind::array);
  if (offsets.array.size() != 2) throw FormatError(where() + "data_offsets must have exactly 2 entries");
  for (const json::Value& o : offsets.array) {
    if (o.kind != json::Value::Kind::integer || o.integer < 0)
      throw FormatError(where() + "data_offsets entries must be non-negative integers");
  }
  e.begin = static_cast<uint64_t>(offsets.array[0].integer);
  e.end = static_cast<uint64_t>(offsets.array[1].integer);
  const auto range = [&] { return "[" + std::to_string(e.begin) + "," + std::to_string(e.end) + "]"; };
  if (e.begin > e.end) throw FormatError(where() + "data_offsets " + range() + " are reversed");
  if (e.end > data_size)
    throw FormatError(where() + "data_offsets " + range() + " run past the " + std::to_string(data_size) +
                      "-byte data region");
  if (e.end - e.begin != bytes)
    throw FormatError(where() + "data_offsets " + range() + " hold " + std::to_string(e.end - e.begin) +
                      " bytes but shape " + shape_text(e.tensor.shape) + " of " + dtype + " needs " +
                      std::to_string(bytes));
  return e;
}

void read_exact(std::FILE* f, const std::string& path, void* dst, size_t n, const std::string& what) {
  if (n != 0 && std::fread(dst, 1, n, f) != n)
    throw FormatError(path + ": could not read " + what + (std::ferror(f) ? ": " + std::string(std::strerror(errno)) : ": unexpected end of file"));
}

}  // namespace

TensorFile load_safetensors(const std::string& path) {
  const InputFile input = open_regular_file(path, "safetensors file");
  std::FILE* f = input.get();
  const uint64_t file_size = input.size();
  if (file_size < 8)
    throw FormatError(path + ": " + std::to_string(file_size) + " bytes is too short for a safetensors file (needs an 8-byte header length)");

  uint8_t len_bytes[8];
  read_exact(f, path, len_bytes, 8, "the header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kSafetensorsMaxHeader)
    throw FormatError(path + ": header length " + std::to_string(header_len) + " is absurdly large (limit " +
                      std::to_string(kSafetensorsMaxHeader) + " bytes); not a safetensors file?");
  if (header_len > file_size - 8)
    throw FormatError(path + ": header length " + std::to_string(header_len) + " runs past the end of the " +
                      std::to_string(file_size) + "-byte file");
  std::string header(header_len, '\0');
  read_exact(f, path, &header[0], header_len, "the JSON header");
  json::Value root;
  try {
    root = json::parse(header);
  } catch (const FormatError& e) {
    throw FormatError(path + ": bad header: " + e.what());
  }
  if (root.kind != json::Value::Kind::object)
    throw FormatError(path + ": header must be a JSON object, got " + json::kind_name(root.kind));

  const uint64_t data_size = file_size - 8 - header_len;
  TensorFile out;
  std::vector<Entry> entries;
  for (const auto& member : root.object) {  // the parser already rejected duplicate names
    if (member.first == "__metadata__") {
      if (member.second.kind != json::Value::Kind::object)
        throw FormatError(path + ": __metadata__ must be an object, got " + json::kind_name(member.second.kind));
      for (const auto& kv : member.second.object) {
        if (kv.second.kind != json::Value::Kind::string)
          throw FormatError(path + ": __metadata__ value " + json::quote(kv.first) + " must be a string, got " +
                            json::kind_name(kv.second.kind));
        out.metadata[kv.first] = kv.second.string;
      }
      continue;
    }
    entries.push_back(parse_entry(path, member.first, member.second, data_size));
  }

  // The byte ranges must tile the data region exactly: sorted by offset, each starts where the
  // previous ended and the last ends at the end of the file.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  const std::string* previous = nullptr;
  for (const Entry& e : entries) {
    const auto where = [&] { return path + ": tensor " + json::quote_for_message(e.tensor.name) + ": "; };
    if (e.begin < cursor)
      throw FormatError(where() + "data_offsets start at " + std::to_string(e.begin) + ", overlapping tensor " +
                        json::quote_for_message(*previous) + " which ends at " + std::to_string(cursor));
    if (e.begin > cursor)
      throw FormatError(where() + "data_offsets start at " + std::to_string(e.begin) + ", leaving bytes " +
                        std::to_string(cursor) + ".." + std::to_string(e.begin) + " of the data region unused");
    cursor = e.end;
    previous = &e.tensor.name;
  }
  if (cursor != data_size)
    throw FormatError(path + ": tensors cover " + std::to_string(cursor) + " bytes but the data region has " +
                      std::to_string(data_size) + " (trailing bytes after the last tensor)");

  // The file position is now the start of the data region and the entries are contiguous.
  for (Entry& e : entries) {
    e.tensor.bytes.resize(e.end - e.begin);
    read_exact(f, path, e.tensor.bytes.data(), e.tensor.bytes.size(), "tensor " + json::quote_for_message(e.tensor.name));
    out.tensors.push_back(std::move(e.tensor));
  }
  return out;
}

// ---- saving ----

namespace {

std::string build_header(const TensorFile& file) {
  json::ObjectWriter h(/*compact=*/true);
  if (!file.metadata.empty()) {
    json::ObjectWriter metadata(true);
    for (const auto& kv : file.metadata) metadata.string(kv.first, kv.second);
    h.object("__metadata__", metadata);
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const HostTensor& t : file.tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      throw UsageError("save_safetensors: invalid tensor name " + json::quote_for_message(t.name));
    if (!names.insert(t.name).second)
      throw UsageError("save_safetensors: duplicate tensor name " + json::quote_for_message(t.name));
    uint64_t bytes = 0;
    if (!byte_size(t.shape, dtype_size(t.dtype), &bytes) || bytes != t.bytes.size())
      throw ShapeError("save_safetensors: tensor " + json::quote_for_message(t.name) + " has shape " +
                       shape_text(t.shape) + " of " + dtype_name(t.dtype) + " but " +
                       std::to_string(t.bytes.size()) + " bytes");
    json::ObjectWriter entry(true);
    entry.string("dtype", dtype_name(t.dtype))
        .integers("shape", t.shape)
        .integers("data_offsets", {static_cast<int64_t>(offset), static_cast<int64_t>(offset + bytes)});
    h.object(t.name, entry);
    offset += bytes;
  }
  std::string text = h.str();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts at 8 + size, a multiple of 8
  return text;
}

// Owns the temporary file until it is renamed: any exit before that closes and deletes it.
struct TempFile {
  std::string path;
  std::FILE* f = nullptr;
  bool renamed = false;
  ~TempFile() {
    if (f != nullptr) std::fclose(f);
    if (!renamed && !path.empty()) std::remove(path.c_str());
  }
};

// "." NAME "." 16 lowercase hex digits ".tmp": the temporary save_safetensors writes beside NAME.
std::string temporary_name(const std::string& name, const std::string& suffix) {
  return "." + name + "." + suffix + ".tmp";
}

// Test hook (TRIDENT_TEST_PAUSE_IN_CHECKPOINT_WRITE=SECONDS): sleep with the temporary half
// written and flushed, so a crash test can kill the process inside a checkpoint write.
void pause_in_write_for_tests(std::FILE* f) {
  const auto seconds = env_string("TRIDENT_TEST_PAUSE_IN_CHECKPOINT_WRITE");
  if (!seconds) return;
  std::fflush(f);
  std::this_thread::sleep_for(std::chrono::duration<double>(std::strtod(seconds->c_str(), nullptr)));
}

std::string random_suffix() {
  static std::mt19937_64 rng(std::random_device{}() ^
                             static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace

void save_safetensors(const std::string& path, const TensorFile& file) {
  const std::string header = build_header(file);  // validates everything before touching the disk
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string fail_prefix = "save_safetensors: cannot write " + path + ": ";
  const std::string untouched = "; any previous file there is unchanged";
  // Before the temporary: for "/tmp" it would go to "/" and only the rename would fail.
  std::error_code ignored;  // a path that cannot be inspected fails below, when it is opened
  if (path.empty()) throw Error("save_safetensors: the file name is empty");
  if (fs::is_directory(target, ignored)) throw Error(fail_prefix + "it is a directory");

  TempFile tmp;
  for (int attempt = 0; tmp.f == nullptr; ++attempt) {
    tmp.path = (dir / temporary_name(target.filename().string(), random_suffix())).string();
    tmp.f = std::fopen(tmp.path.c_str(), "wbx");  // "x": fail rather than reuse an existing name
    if (tmp.f == nullptr && (errno != EEXIST || attempt == 3)) {
      const int err = errno;
      tmp.path.clear();  // nothing was created, so nothing to remove
      std::error_code ec;
      const std::string why = fs::is_directory(dir, ec) ? std::strerror(err) : "directory " + dir.string() + " does not exist";
      throw Error(fail_prefix + "cannot create a temporary file: " + why + untouched);
    }
  }

  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  const auto put = [&](const void* p, size_t n) {
    if (n != 0 && std::fwrite(p, 1, n, tmp.f) != n)
      throw Error(fail_prefix + "write failed: " + std::strerror(errno) + untouched);
  };
  put(len_bytes, 8);
  put(header.data(), header.size());
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    if (i == file.tensors.size() / 2) pause_in_write_for_tests(tmp.f);
    put(file.tensors[i].bytes.data(), file.tensors[i].bytes.size());
  }
  if (std::fflush(tmp.f) != 0) throw Error(fail_prefix + "write failed: " + std::strerror(errno) + untouched);
#ifdef _WIN32
  const int sync_rc = _commit(_fileno(tmp.f));
#else
  const int sync_rc = fsync(fileno(tmp.f));
#endif
  if (sync_rc != 0) throw Error(fail_prefix + "fsync failed: " + std::strerror(errno) + untouched);
  const int close_rc = std::fclose(tmp.f);
  tmp.f = nullptr;
  if (close_rc != 0) throw Error(fail_prefix + "close failed: " + std::strerror(errno) + untouched);

  // std::filesystem::rename replaces an existing file atomically on POSIX (rename(2)) and
  // replaces it on Windows (MoveFileEx with MOVEFILE_REPLACE_EXISTING).
  std::error_code ec;
  fs::rename(tmp.path, target, ec);
  if (ec) throw Error(fail_prefix + "rename of " + tmp.path + " failed: " + ec.message() + untouched);
  tmp.renamed = true;

#ifndef _WIN32
  // Make the rename itself durable. Some file systems cannot fsync a directory (EINVAL); the
  // file is already complete and in place then, so that is not an error.
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    const int rc = fsync(dfd);
    const int err = errno;
    close(dfd);
    if (rc != 0 && err != EINVAL && err != ENOTSUP && err != EROFS)
      throw Error("save_safetensors: wrote " + path + " but could not fsync directory " + dir.string() + ": " +
                  std::strerror(err));
  }
#endif
}

int remove_stale_temporaries(const std::string& path) {
  const fs::path target(path);
  const std::string name = target.filename().string();
  if (name.empty()) return 0;
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) return 0;  // nothing to clean in a directory that cannot be listed
  int removed = 0;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string candidate = it->path().filename().string();
    // Exactly "." NAME "." 16 hex ".tmp", compared as text.
    const size_t prefix = name.size() + 2, length = prefix + 16 + 4;
    if (candidate.size() != length || candidate.compare(0, 1, ".") != 0 ||
        candidate.compare(1, name.size(), name) != 0 || candidate[prefix - 1] != '.' ||
        candidate.compare(prefix + 16, 4, ".tmp") != 0)
      continue;
    const std::string hex = candidate.substr(prefix, 16);
    if (hex.find_first_not_of("0123456789abcdef") != std::string::npos) continue;
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec) || it->is_symlink(type_ec)) continue;  // only files we wrote
    if (fs::remove(it->path(), type_ec)) ++removed;
  }
  return removed;
}

}  // namespace trident
