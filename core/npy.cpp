// The .npy header parser (a strict reader of the dict literal numpy writes) and data reader.
#include "trident/core/npy.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "trident/core/byte_source.h"
#include "trident/core/error.h"
#include "trident/core/files.h"

namespace trident {
namespace {

constexpr uint64_t kMaxHeaderBytes = 65536;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// The dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class DictParser {
 public:
  DictParser(const std::string& text, const std::string& name) : text_(text), name_(name) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    for (;;) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        skip_space();
        if (peek() == '[') fail("structured arrays (a list descr) are not supported; save a plain array");
        h.descr = string_literal();
        have_descr = !repeat(have_descr, key);
      } else if (key == "fortran_order") {
        if (boolean())
          fail("fortran_order is True (column-major data); save it in C order, e.g. "
               "np.save(path, np.ascontiguousarray(a))");
        have_order = !repeat(have_order, key);
      } else if (key == "shape") {
        h.shape = tuple();
        have_shape = !repeat(have_shape, key);
      } else {
        fail("unexpected header key '" + key + "' (a .npy header holds descr, fortran_order and shape)");
      }
      skip_space();
      if (peek() == ',') { ++pos_; continue; }
      skip_space();
      if (peek() != '}') fail("expected ',' or '}' in the header dict");
    }
    ++pos_;
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\0')) ++pos_;
    if (pos_ != text_.size()) fail("unexpected characters after the header dict");
    if (!have_descr || !have_order || !have_shape)
      fail(std::string("the header dict lacks '") + (!have_descr ? "descr" : !have_order ? "fortran_order" : "shape") + "'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw FormatError(name_ + ": .npy header: " + what); }
  bool repeat(bool seen, const std::string& key) const {
    if (seen) fail("key '" + key + "' appears twice");
    return false;
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n')) ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string string_literal() {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a quoted string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string::npos || end - pos_ > 64) fail("unterminated or overlong string");
    std::string s = text_.substr(pos_ + 1, end - pos_ - 1);
    if (s.find('\\') != std::string::npos) fail("escapes in header strings are not supported");
    pos_ = end + 1;
    return s;
  }
  bool boolean() {
    skip_space();
    for (const char* word : {"True", "False"}) {
      if (text_.compare(pos_, std::strlen(word), word) == 0) {
        pos_ += std::strlen(word);
        return word[0] == 'T';
      }
    }
    fail("fortran_order must be True or False");
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> dims;
    for (;;) {
      skip_space();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') fail("shape entries must be non-negative integers");
      uint64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        v = v * 10 + static_cast<uint64_t>(peek() - '0');
        if (v > (uint64_t{1} << 40)) fail("a shape entry is larger than 2^40");
        ++pos_;
      }
      if (peek() == 'L') ++pos_;  // Python 2 longs, as old numpy wrote them
      dims.push_back(static_cast<int64_t>(v));
      if (dims.size() > 32) fail("more than 32 dimensions");
      skip_space();
      if (peek() == ',') { ++pos_; continue; }
      skip_space();
      if (peek() != ')') fail("expected ',' or ')' in the shape");
    }
    ++pos_;
    return dims;
  }

  const std::string& text_;
  const std::string& name_;
  size_t pos_ = 0;
};

// Fills kind and item_size from descr, or explains why it is not supported.
void decode_descr(NpyHeader& h, const std::string& name) {
  const std::string& d = h.descr;
  const auto bad = [&](const std::string& why) { throw FormatError(name + ": .npy dtype '" + d + "' " + why); };
  if (d.size() < 3) bad("is not a supported dtype");
  const char order = d[0], kind = d[1];
  const std::string size_text = d.substr(2);
  if (size_text.find_first_not_of("0123456789") != std::string::npos || size_text.size() > 2)
    bad("is not a supported dtype (plain numeric dtypes only)");
  const int size = std::stoi(size_text);
  if (order == '>' && size > 1) bad("is big-endian; save it little-endian, e.g. a.astype(a.dtype.newbyteorder('<'))");
  if (order != '<' && order != '|' && order != '>' && order != '=') bad("has an unknown byte order");
  const bool ok = (kind == 'u' || kind == 'i') ? (size == 1 || size == 2 || size == 4 || size == 8)
                  : kind == 'f'                ? (size == 2 || size == 4 || size == 8)
                  : kind == 'b'                ? size == 1
                                               : false;
  if (!ok) bad("is not supported (integers, bool and float16/32/64 are)");
  h.kind = kind;
  h.item_size = size;
}

}  // namespace

NpyHeader read_npy_header(ByteSource& src) {
  const std::string& name = src.name();
  uint8_t magic[12];  // "\x93NUMPY", major, minor, then a 2-byte (v1) or 4-byte (v2, v3) length
  const size_t got = src.read(magic, 8);
  if (got < 8 || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw FormatError(name + ": not a .npy array (it does not start with \\x93NUMPY)");
  const unsigned major = magic[6];
  if (major < 1 || major > 3)
    throw FormatError(name + ": unsupported .npy format version " + std::to_string(major) + "." +
                      std::to_string(magic[7]) + " (1.0 to 3.0 are read)");
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (src.read(magic + 8, len_bytes) != len_bytes) throw FormatError(name + ": .npy header is truncated");
  uint64_t header_len = 0;
  for (size_t i = len_bytes; i-- > 0;) header_len = (header_len << 8) | magic[8 + i];
  if (header_len > kMaxHeaderBytes)
    throw FormatError(name + ": .npy header length " + std::to_string(header_len) + " is over the " +
                      std::to_string(kMaxHeaderBytes) + "-byte limit");
  std::string text(header_len, '\0');
  if (src.read(reinterpret_cast<uint8_t*>(&text[0]), header_len) != header_len)
    throw FormatError(name + ": .npy header is truncated (" + std::to_string(header_len) + " bytes declared)");
  NpyHeader h = DictParser(text, name).parse();
  decode_descr(h, name);
  h.header_bytes = 8 + len_bytes + header_len;
  uint64_t bytes = static_cast<uint64_t>(h.item_size);
  for (int64_t d : h.shape) {
    if (d == 0) { bytes = 0; break; }
    // Saturate just past the cap instead of multiplying into an overflow.
    const uint64_t dim = static_cast<uint64_t>(d);
    bytes = bytes > kNpyMaxBytes / dim ? kNpyMaxBytes + 1 : bytes * dim;
  }
  if (bytes > kNpyMaxBytes)
    throw FormatError(name + ": .npy shape " + shape_text(h.shape) + " of '" + h.descr + "' declares more than " +
                      std::to_string(kNpyMaxBytes >> 30) + " GiB");
  h.data_bytes = bytes;
  return h;
}

NpyArray read_npy(ByteSource& src, uint64_t max_rows, uint64_t stored_size) {
  const std::string& name = src.name();
  NpyArray a;
  a.header = read_npy_header(src);
  const NpyHeader& h = a.header;
  if (stored_size != ~uint64_t{0} && stored_size != h.header_bytes + h.data_bytes)
    throw FormatError(name + ": holds " + std::to_string(stored_size) + " bytes but its .npy header (shape " +
                      shape_text(h.shape) + " of '" + h.descr + "') implies " +
                      std::to_string(h.header_bytes + h.data_bytes) +
                      (stored_size < h.header_bytes + h.data_bytes ? ": the data is truncated"
                                                                   : ": trailing bytes after the data"));
  a.shape = h.shape;
  uint64_t wanted = h.data_bytes;
  bool whole = true;
  if (!h.shape.empty() && h.shape[0] > 0) {
    const uint64_t rows = std::min<uint64_t>(static_cast<uint64_t>(h.shape[0]), max_rows);
    wanted = h.data_bytes / static_cast<uint64_t>(h.shape[0]) * rows;
    whole = rows == static_cast<uint64_t>(h.shape[0]);
    a.shape[0] = static_cast<int64_t>(rows);
  }
  const uint64_t got = src.read_into(a.bytes, wanted);
  if (got < wanted)
    throw FormatError(name + ": .npy data ends after " + std::to_string(got) + " of the " +
                      std::to_string(h.data_bytes) + " bytes its header (shape " + shape_text(h.shape) +
                      " of '" + h.descr + "') declares: truncated");
  if (whole && src.has_more())
    throw FormatError(name + ": data continues after the " + std::to_string(h.data_bytes) +
                      " bytes its .npy header (shape " + shape_text(h.shape) + ") declares");
  return a;
}

NpyArray load_npy(const std::string& path, uint64_t max_rows) {
  const InputFile input = open_regular_file(path, ".npy file");
  ByteSource src(input.get(), path, ByteSource::Encoding::stored);
  return read_npy(src, max_rows, input.size());
}

void save_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
              const std::vector<uint8_t>& bytes) {
  const bool known = descr == "|u1" || descr == "<f4" || descr == "<i4" || descr == "<i8";
  if (!known) throw UsageError("save_npy " + path + ": unsupported descr '" + descr + "'");
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) throw UsageError("save_npy " + path + ": negative dimension in " + shape_text(shape));
    count *= static_cast<uint64_t>(d);
  }
  const uint64_t item = descr == "|u1" ? 1 : descr == "<i8" ? 8 : 4;
  if (count * item != bytes.size())
    throw ShapeError("save_npy " + path + ": shape " + shape_text(shape) + " of " + descr +
                     " needs " + std::to_string(count * item) + " bytes, got " +
                     std::to_string(bytes.size()));
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " +
                       shape_text(shape) + ", }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');  // data 64-byte aligned
  header += '\n';
  std::string head = "\x93NUMPY";
  head += '\x01';
  head += '\x00';
  head += static_cast<char>(header.size() & 0xff);
  head += static_cast<char>(header.size() >> 8);
  head += header;

  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string temp =
      (dir / ("." + target.filename().string() + "." + std::to_string(::getpid()) + ".tmp")).string();
  const std::string fail = "cannot write " + path + ": ";
  std::FILE* f = std::fopen(temp.c_str(), "wb");
  if (!f) throw Error(fail + std::strerror(errno));
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size() &&
            (bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size()) &&
            std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  std::error_code ec;
  if (ok) fs::rename(temp, target, ec);
  if (!ok || ec) {
    std::remove(temp.c_str());
    throw Error(fail + (ec ? ec.message() : std::string(std::strerror(err))) +
                "; any previous file there is unchanged");
  }
}

}  // namespace trident
