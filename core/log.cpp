// The log handler: a process-wide slot guarded by a mutex, read on every message.
#include "trident/core/log.h"

#include <cstdio>
#include <memory>
#include <mutex>

namespace trident {
namespace {

void write_to_stderr(LogLevel level, const std::string& message) {
  if (level == LogLevel::debug) return;
  const std::string prefix = level == LogLevel::info
                                 ? "trident: "
                                 : "trident: " + std::string(log_level_name(level)) + ": ";
  std::fprintf(stderr, "%s%s\n", prefix.c_str(), message.c_str());
}

struct LogState {
  std::mutex mutex;
  std::shared_ptr<const LogHandler> handler;  // null: the default
};

LogState& state() {
  // Never destroyed: messages may come from static destructors and atexit handlers (the OpenCL
  // profile is printed at exit).
  static LogState* s = new LogState();
  return *s;
}

}  // namespace

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warning: return "warning";
    case LogLevel::error: return "error";
  }
  return "unknown";
}

LogHandler set_log_handler(LogHandler handler) {
  auto next = handler ? std::make_shared<const LogHandler>(std::move(handler)) : nullptr;
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::shared_ptr<const LogHandler> previous = std::move(s.handler);
  s.handler = std::move(next);
  return previous ? *previous : LogHandler();
}

void log_message(LogLevel level, const std::string& message) {
  std::shared_ptr<const LogHandler> handler;
  {
    LogState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    handler = s.handler;
  }
  // Called outside the lock: a handler may log or install another handler itself.
  if (handler)
    (*handler)(level, message);
  else
    write_to_stderr(level, message);
}

}  // namespace trident
