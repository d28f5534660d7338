// Environment parsing shared by the registry, the backends and the CLI.
#include "trident/core/env.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "trident/core/error.h"

namespace trident {

std::optional<std::string> env_string(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  return std::string(value);
}

long env_int(const char* name, long fallback, long min_value, long max_value) {
  auto text = env_string(name);
  if (!text) return fallback;
  char* end = nullptr;
  const long value = std::strtol(text->c_str(), &end, 10);
  if (end == text->c_str() || *end != '\0' || value < min_value || value > max_value)
    throw UsageError(std::string(name) + "='" + *text + "' is not an integer in [" +
                     std::to_string(min_value) + ", " + std::to_string(max_value) + "]");
  return value;
}

bool env_flag(const char* name, bool fallback) {
  auto text = env_string(name);
  if (!text) return fallback;
  std::string v = *text;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw UsageError(std::string(name) + "='" + *text + "': use 1/true/on or 0/false/off");
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(separator, start);
    std::string item = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const auto first = item.find_first_not_of(" \t");
    const auto last = item.find_last_not_of(" \t");
    items.push_back(first == std::string::npos ? "" : item.substr(first, last - first + 1));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return items;
}

}  // namespace trident
