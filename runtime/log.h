// spdlog-based logging. Every line carries the MPI rank ("[skipring r3] ...").
#pragma once

#include <spdlog/spdlog.h>

#include "runtime/config.h"

namespace skipring {

// The library's logger (created on first use, stderr, pattern with the rank).
spdlog::logger& logger();
// Sets the rank shown in the prefix (-1 before MPI_Init) and the level.
void configure_logging(int rank, LogLevel level);

}  // namespace skipring

#define SKIPRING_LOG_TRACE(...) ::skipring::logger().trace(__VA_ARGS__)
#define SKIPRING_LOG_DEBUG(...) ::skipring::logger().debug(__VA_ARGS__)
#define SKIPRING_LOG_INFO(...) ::skipring::logger().info(__VA_ARGS__)
#define SKIPRING_LOG_WARN(...) ::skipring::logger().warn(__VA_ARGS__)
#define SKIPRING_LOG_ERROR(...) ::skipring::logger().error(__VA_ARGS__)
