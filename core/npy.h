// NumPy .npy arrays: the header (a Python dict literal) parsed strictly, and the leading rows of
// the data read from a file or a zip entry without allocating more than what is read.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trident {

class ByteSource;

struct NpyHeader {
  std::string descr;           // as written, e.g. "|u1", "<f4"
  char kind = 0;               // 'u' unsigned, 'i' signed, 'f' float, 'b' bool
  int item_size = 0;           // bytes per element
  std::vector<int64_t> shape;  // () is a 0-d scalar
  uint64_t header_bytes = 0;   // magic, version, length and dict: where the data starts
  uint64_t data_bytes = 0;     // product(shape) * item_size
};

struct NpyArray {
  NpyHeader header;
  std::vector<int64_t> shape;  // as read: shape[0] is the rows read (<= header.shape[0])
  std::vector<uint8_t> bytes;  // little-endian elements, C order
};

constexpr uint64_t kNpyAllRows = ~uint64_t{0};
// Largest array accepted (a header declaring more is refused before anything is allocated).
constexpr uint64_t kNpyMaxBytes = uint64_t{64} << 30;

// Reads the header at the start of src. Throws FormatError naming src on: a bad magic or
// version, a header longer than 64 KiB or not a dict of exactly 'descr', 'fortran_order' and
// 'shape', fortran_order True, a structured, big-endian or unknown descr, negative dims, and a
// size past kNpyMaxBytes.
NpyHeader read_npy_header(ByteSource& src);

// Reads the header and the first min(max_rows, shape[0]) rows (all of a 0-d array). When
// stored_size is known (a plain file or a stored zip entry), it must equal header + data exactly
// and is checked before allocating; otherwise the data may not end early, and when every row is
// read nothing may follow it.
NpyArray read_npy(ByteSource& src, uint64_t max_rows = kNpyAllRows, uint64_t stored_size = ~uint64_t{0});

// read_npy of a plain .npy file (opened as a regular file only).
NpyArray load_npy(const std::string& path, uint64_t max_rows = kNpyAllRows);

// Writes a version 1.0 .npy file of little-endian elements in C order (descr e.g. "<f4", "|u1";
// bytes.size() must be product(shape) times the item size), atomically: a temporary beside
// path, flushed and fsynced, then renamed over it. Error naming the path on failure, with any
// previous file left as it was and no temporary behind.
void save_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
              const std::vector<uint8_t>& bytes);

}  // namespace trident
