// Trident's log: every message the library writes on its own (warnings about unusable devices,
// fallbacks, profiles) goes through one handler that an embedding application can replace, as
// ggml_log_set does for ggml. The default handler writes to stderr.
#pragma once
#include <functional>
#include <string>

namespace trident {

enum class LogLevel { debug, info, warning, error };

// "debug", "info", "warning", "error".
const char* log_level_name(LogLevel level);

// Receives each message (one or more lines, without a trailing newline) with its level. Called
// from whichever thread logs, possibly several at once: a handler must be thread-safe.
using LogHandler = std::function<void(LogLevel level, const std::string& message)>;

// Installs `handler` for every later message; an empty handler restores the default (stderr:
// "trident: warning: <message>" for warnings and errors, "trident: <message>" for info, debug
// messages dropped). Returns the handler it replaces (empty if it was the default).
LogHandler set_log_handler(LogHandler handler);

// Sends a message to the current handler.
void log_message(LogLevel level, const std::string& message);
inline void log_warning(const std::string& message) { log_message(LogLevel::warning, message); }
inline void log_info(const std::string& message) { log_message(LogLevel::info, message); }

}  // namespace trident
