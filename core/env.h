// Reading TRIDENT_* environment variables with errors that name the variable and what it accepts.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace trident {

// The value if set and non-empty.
std::optional<std::string> env_string(const char* name);
// An integer in [min_value, max_value], or fallback when unset; anything else is a UsageError.
long env_int(const char* name, long fallback, long min_value, long max_value);
// "1/true/yes/on" or "0/false/no/off" (any case), or fallback when unset.
bool env_flag(const char* name, bool fallback);
// Splits on a separator, trimming blanks; empty items are kept so callers can reject them.
std::vector<std::string> split(const std::string& text, char separator);

}  // namespace trident
