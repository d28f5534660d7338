// A small, strict JSON reader and writer: just enough for safetensors headers (objects, arrays,
// strings with escapes, integers; true/false/null are read so that schema errors can name them).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trident {
namespace json {

struct Value {
  enum class Kind { null, boolean, integer, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  int64_t integer = 0;
  std::string string;
  std::vector<Value> array;
  // Members in document order; the parser rejects duplicate keys, so keys are unique.
  std::vector<std::pair<std::string, Value>> object;

  // The member called key, or nullptr (objects only; nullptr for any other kind).
  const Value* find(const std::string& key) const;
};

// "object", "integer", ... for error messages.
const char* kind_name(Value::Kind kind);

// Parses exactly one value with optional surrounding whitespace. Rejects anything else, and also
// fractions/exponents, integers outside int64, invalid UTF-8, raw control characters in strings,
// duplicate object keys and nesting deeper than 64. Throws FormatError("JSON: <problem> at byte N");
// callers prefix the file name.
Value parse(const std::string& text);

// True if s is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(const std::string& s);

// s as a JSON string literal with quotes; escapes '"', '\\' and control characters.
// Throws UsageError if s is not valid UTF-8 (readers of the output would reject it).
std::string quote(const std::string& s);

}  // namespace json
}  // namespace trident
