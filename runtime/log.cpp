// The library logger: spdlog to stderr, every line prefixed with the rank.
#include "runtime/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <memory>
#include <string>

namespace skipring {
namespace {

std::shared_ptr<spdlog::logger> make_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto log = std::make_shared<spdlog::logger>("skipring", sink);
  log->set_pattern("[skipring r?] %^%l%$: %v");
  log->set_level(spdlog::level::warn);
  return log;
}

spdlog::level::level_enum to_spdlog(LogLevel l) {
  switch (l) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::warn;
}

}  // namespace

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = make_logger();
  return *instance;
}

void configure_logging(int rank, LogLevel level) {
  std::string who = rank < 0 ? std::string("?") : std::to_string(rank);
  logger().set_pattern("[skipring r" + who + "] %^%l%$: %v");
  logger().set_level(to_spdlog(level));
  logger().flush_on(spdlog::level::warn);
}

}  // namespace skipring
