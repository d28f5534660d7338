// Checkpoint files in the safetensors format: a strict validating loader and an atomic writer.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trident/core/dtype.h"

namespace trident {

// One named tensor in host memory: bytes are the raw little-endian elements, row-major,
// bytes.size() == product(shape) * dtype_size(dtype); an empty shape is a 0-d scalar.
struct HostTensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// A whole checkpoint. Metadata values are strings (a safetensors rule). load_safetensors returns
// tensors in file data order, which for files written by save_safetensors is the order given.
struct TensorFile {
  std::map<std::string, std::string> metadata;
  std::vector<HostTensor> tensors;
};

// Largest JSON header accepted by load_safetensors (the reference implementation's limit).
constexpr uint64_t kSafetensorsMaxHeader = 100000000;

// Writes the safetensors layout: 8-byte little-endian header length N, N bytes of JSON
// {"__metadata__":{...}, name:{"dtype":"F32","shape":[...],"data_offsets":[b,e]}, ...}
// padded with spaces so that the data starts 8-byte aligned, then each tensor's bytes in order.
// Atomic: writes a hidden ".<name>.<random>.tmp" in the same directory, flushes and fsyncs it,
// renames it over path and fsyncs the directory. Throws UsageError/ShapeError for bad input
// (duplicate, empty or "__metadata__" names, non-UTF-8 strings, negative dims, bytes that do not
// match the shape) and Error for I/O failures (missing or unwritable directory, disk full); in
// every failure case the previous file at path is untouched and no temporary file remains.
void save_safetensors(const std::string& path, const TensorFile& file);

// Removes the temporaries ".NAME.<16 hex digits>.tmp" that save_safetensors(path) leaves beside
// NAME when the process dies mid-write; files of any other name, symbolic links and non-regular
// files are left alone. Call it when no other process is writing path. Returns how many it removed.
int remove_stale_temporaries(const std::string& path);

// Reads and fully validates a safetensors file. Throws FormatError naming the file (and the
// tensor) on: a file shorter than 8 bytes, a header length past the end of the file or above
// kSafetensorsMaxHeader, a header that is not a JSON object, missing, unexpected or mistyped
// fields, a dtype other than F32/F16/BF16/I32/I64/U8, negative or overflowing shapes, data_offsets
// that are reversed, out of range, overlapping, leave gaps or do not end at the end of the file,
// a byte range whose length is not product(shape) * dtype size, and duplicate names.
TensorFile load_safetensors(const std::string& path);

}  // namespace trident
