// A small, strict JSON reader and the one JSON writer of Trident (safetensors headers, the CLI's
// --json lines): objects, arrays, strings with escapes, integers, and (when asked) fractions.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trident {
namespace json {

struct Value {
  enum class Kind { null, boolean, integer, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0.0;  // Kind::number: a value with a fraction or an exponent
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
// integers outside int64, invalid UTF-8, raw control characters in strings, duplicate object keys
// (found in O(1) each, so a header of 10^5 keys parses in linear time), nesting deeper than 64,
// and fractions/exponents unless allow_fractions (then a finite double, Kind::number; NaN and
// Infinity are not JSON and are rejected). Throws FormatError("JSON: <problem> at byte N");
// callers prefix the file name.
Value parse(const std::string& text, bool allow_fractions = false);

// True if s is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(const std::string& s);

// s as a JSON string literal with quotes; escapes '"', '\\' and control characters.
// Throws UsageError if s is not valid UTF-8 (readers of the output would reject it).
std::string quote(const std::string& s);

// s escaped for an error message: like quote() without the quotes, but never throws; bytes that
// are not UTF-8 become \xNN and NUL becomes \u0000, so a name from a file cannot cut a message
// short; past 256 bytes the rest is elided (the message says how long the string was).
std::string escape_for_message(const std::string& s);
// The same between double quotes.
std::string quote_for_message(const std::string& s);

// A number as JSON: 9 significant digits (round-trips a float), integers without a fraction;
// NaN and +-Inf, which JSON cannot represent, as null.
std::string number(double value);

// Builds one JSON object, member by member in call order. Every piece of JSON Trident writes goes
// through it, so strings are always escaped and numbers always valid. compact: {"a":1,"b":2};
// otherwise {"a": 1, "b": 2} (the CLI's one-line-per-record style).
class ObjectWriter {
 public:
  explicit ObjectWriter(bool compact = false) : compact_(compact) {}
  ObjectWriter& string(const std::string& key, const std::string& value);
  ObjectWriter& integer(const std::string& key, int64_t value);
  ObjectWriter& number(const std::string& key, double value);  // non-finite: null
  ObjectWriter& boolean(const std::string& key, bool value);
  ObjectWriter& integers(const std::string& key, const std::vector<int64_t>& values);
  ObjectWriter& numbers(const std::string& key, const std::vector<double>& values);  // as number()
  ObjectWriter& strings(const std::string& key, const std::vector<std::string>& values);
  ObjectWriter& object(const std::string& key, const ObjectWriter& value);
  bool empty() const { return members_ == 0; }
  std::string str() const { return text_ + "}"; }

 private:
  ObjectWriter& member(const std::string& key, const std::string& json_value);
  bool compact_;
  size_t members_ = 0;
  std::string text_ = "{";
};

}  // namespace json
}  // namespace trident
