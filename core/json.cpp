// The strict JSON reader and the JSON writer (see json.h).
#include "trident/core/json.h"

#include <clocale>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_set>

#include "trident/core/error.h"

namespace trident {
namespace json {

const Value* Value::find(const std::string& key) const {
  if (kind != Kind::object) return nullptr;
  for (const auto& member : object)
    if (member.first == key) return &member.second;
  return nullptr;
}

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::null: return "null";
    case Value::Kind::boolean: return "boolean";
    case Value::Kind::integer: return "integer";
    case Value::Kind::number: return "number";
    case Value::Kind::string: return "string";
    case Value::Kind::array: return "array";
    case Value::Kind::object: return "object";
  }
  return "?";
}

namespace {

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 if it is malformed.
size_t utf8_sequence(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; }
  else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;  // overlong
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Recursive-descent parser over the whole text; pos is the next unread byte.
class Parser {
 public:
  Parser(const std::string& text, bool allow_fractions) : text_(text), allow_fractions_(allow_fractions) {}

  Value document() {
    skip_space();
    Value v = value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected data after the top-level value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError("JSON: " + what + " at byte " + std::to_string(pos_));
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++pos_;
  }
  void expect(char c) {
    if (at_end()) fail(std::string("unexpected end of text, expected '") + c + "'");
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  Value value(int depth) {
    if (depth >= kMaxDepth) fail("nesting deeper than 64");
    if (at_end()) fail("unexpected end of text, expected a value");
    Value v;
    const char c = peek();
    if (c == '{') {
      v.kind = Value::Kind::object;
      ++pos_;
      skip_space();
      if (peek() == '}') { ++pos_; return v; }
      std::unordered_set<std::string> keys;  // a linear find per key made 10^5 keys take a minute
      for (;;) {
        skip_space();
        if (peek() != '"') fail("expected a string key");
        const size_t key_pos = pos_;
        std::string key = string();
        if (!keys.insert(key).second) {
          pos_ = key_pos;
          fail("duplicate key " + quote_for_message(key));
        }
        skip_space();
        expect(':');
        skip_space();
        Value member = value(depth + 1);
        v.object.emplace_back(std::move(key), std::move(member));
        skip_space();
        if (peek() == ',') { ++pos_; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Value::Kind::array;
      ++pos_;
      skip_space();
      if (peek() == ']') { ++pos_; return v; }
      for (;;) {
        skip_space();
        v.array.push_back(value(depth + 1));
        skip_space();
        if (peek() == ',') { ++pos_; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Value::Kind::string;
      v.string = string();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t start = pos_;
      v.kind = Value::Kind::integer;
      v.integer = integer(start);
      if (pos_ == start) {  // a fraction or exponent follows: integer() left it to fraction()
        v.kind = Value::Kind::number;
        v.number = fraction();
      }
      return v;
    }
    for (const char* word : {"true", "false", "null"}) {
      if (text_.compare(pos_, std::char_traits<char>::length(word), word) == 0) {
        pos_ += std::char_traits<char>::length(word);
        v.kind = word[0] == 'n' ? Value::Kind::null : Value::Kind::boolean;
        v.boolean = word[0] == 't';
        return v;
      }
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  // Checks the JSON number grammar from pos_ and returns it as a finite double.
  double fraction() {
    const size_t start = pos_;
    if (peek() == '-') ++pos_;
    const auto digits = [&] {
      const size_t from = pos_;
      while (!at_end() && peek() >= '0' && peek() <= '9') ++pos_;
      if (pos_ == from) fail("expected a digit");
    };
    digits();
    if (peek() == '.') { ++pos_; digits(); }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      digits();
    }
    // strtod follows the C locale's decimal point; JSON's is always '.', so parse a copy in
    // which '.' is replaced by the current locale's.
    std::string literal = text_.substr(start, pos_ - start);
    const char point = *std::localeconv()->decimal_point;
    for (char& ch : literal)
      if (ch == '.') ch = point;
    const double value = std::strtod(literal.c_str(), nullptr);
    if (!std::isfinite(value)) { pos_ = start; fail("number outside the double range"); }
    return value;
  }

  // An integer from pos_; when a fraction or exponent follows and allow_fractions_, rewinds to
  // `start` (the caller then reads it as a double).
  int64_t integer(size_t start) {
    const bool negative = peek() == '-';
    if (negative) ++pos_;
    if (at_end() || peek() < '0' || peek() > '9') fail("expected a digit");
    if (peek() == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' && text_[pos_ + 1] <= '9')
      fail("leading zero in a number");
    // Accumulate as a negative value so that INT64_MIN is representable.
    int64_t value = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      const int digit = peek() - '0';
      if (value < (INT64_MIN + digit) / 10) {
        if (allow_fractions_) {  // a large integer is still a number
          pos_ = start;
          return 0;
        }
        fail("integer outside the 64-bit range");
      }
      value = value * 10 - digit;
      ++pos_;
    }
    if (peek() == '.' || peek() == 'e' || peek() == 'E') {
      if (!allow_fractions_) fail("numbers with fractions or exponents are not supported");
      pos_ = start;
      return 0;
    }
    if (!negative) {
      if (value == INT64_MIN) {
        if (allow_fractions_) {
          pos_ = start;
          return 0;
        }
        fail("integer outside the 64-bit range");
      }
      value = -value;
    }
    return value;
  }

  uint32_t hex4() {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    uint32_t cp = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = text_[pos_++];
      cp <<= 4;
      if (h >= '0' && h <= '9') cp |= h - '0';
      else if (h >= 'a' && h <= 'f') cp |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') cp |= h - 'A' + 10;
      else { --pos_; fail("bad hex digit in \\u escape"); }
    }
    return cp;
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') { ++pos_; return out; }
      if (c < 0x20) fail("raw control character in a string");
      if (c != '\\') {
        const size_t n = utf8_sequence(text_, pos_);
        if (n == 0) fail("invalid UTF-8 in a string");
        out.append(text_, pos_, n);
        pos_ += n;
        continue;
      }
      ++pos_;
      if (at_end()) fail("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("unpaired low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate must be followed by \uDC00..DFFF
            if (text_.compare(pos_, 2, "\\u") != 0) fail("unpaired high surrogate in \\u escape");
            pos_ += 2;
            const uint32_t low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("unpaired high surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: --pos_; fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  const std::string& text_;
  bool allow_fractions_;
  size_t pos_ = 0;
};

}  // namespace

Value parse(const std::string& text, bool allow_fractions) { return Parser(text, allow_fractions).document(); }

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

namespace {

// s with JSON escapes (no quotes); bytes where no valid UTF-8 sequence starts become \xNN
// (only the message escapers let such bytes through). Past max_chars of input the rest is elided.
std::string escape(const std::string& s, size_t max_chars = std::string::npos) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i >= max_chars) return out + "...(" + std::to_string(s.size()) + " bytes in all)";
    const char ch = s[i];
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x80) {
      const size_t n = utf8_sequence(s, i);
      if (n == 0) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      } else {
        out.append(s, i, n);
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out;
}

}  // namespace

std::string quote(const std::string& s) {
  if (!valid_utf8(s)) throw UsageError("JSON: a string to write is not valid UTF-8 (" + std::to_string(s.size()) + " bytes)");
  return "\"" + escape(s) + "\"";
}

std::string escape_for_message(const std::string& s) { return escape(s, 256); }

std::string quote_for_message(const std::string& s) { return "\"" + escape_for_message(s) + "\""; }

std::string number(double value) {
  if (!std::isfinite(value)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", value);
  // %g follows the locale's decimal point; JSON's is '.'.
  const char point = *std::localeconv()->decimal_point;
  for (char* p = buf; *p != '\0'; ++p)
    if (*p == point) *p = '.';
  return buf;
}

ObjectWriter& ObjectWriter::member(const std::string& key, const std::string& json_value) {
  if (members_++ > 0) text_ += compact_ ? "," : ", ";
  text_ += quote(key);
  text_ += compact_ ? ":" : ": ";
  text_ += json_value;
  return *this;
}

ObjectWriter& ObjectWriter::string(const std::string& key, const std::string& value) {
  return member(key, quote(value));
}

ObjectWriter& ObjectWriter::integer(const std::string& key, int64_t value) {
  return member(key, std::to_string(value));
}

ObjectWriter& ObjectWriter::number(const std::string& key, double value) {
  return member(key, json::number(value));
}

ObjectWriter& ObjectWriter::boolean(const std::string& key, bool value) {
  return member(key, value ? "true" : "false");
}

ObjectWriter& ObjectWriter::integers(const std::string& key, const std::vector<int64_t>& values) {
  std::string list = "[";
  for (size_t i = 0; i < values.size(); ++i) list += (i ? (compact_ ? "," : ", ") : "") + std::to_string(values[i]);
  return member(key, list + "]");
}

ObjectWriter& ObjectWriter::numbers(const std::string& key, const std::vector<double>& values) {
  std::string list = "[";
  for (size_t i = 0; i < values.size(); ++i) list += (i ? (compact_ ? "," : ", ") : "") + json::number(values[i]);
  return member(key, list + "]");
}

ObjectWriter& ObjectWriter::strings(const std::string& key, const std::vector<std::string>& values) {
  std::string list = "[";
  for (size_t i = 0; i < values.size(); ++i) list += (i ? (compact_ ? "," : ", ") : "") + quote(values[i]);
  return member(key, list + "]");
}

ObjectWriter& ObjectWriter::object(const std::string& key, const ObjectWriter& value) {
  return member(key, value.str());
}

}  // namespace json
}  // namespace trident
