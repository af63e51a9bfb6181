// skipring_info: prints the version, every SKIPRING_* parameter with its current value, and
// the build's optional features. Exits non-zero (naming the variable) on a bad value.
#include <mpi.h>
#include <skipring/skipring.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>

#include "runtime/config.h"

int main(int argc, char** argv) {
  CLI::App app{"skipring_info: configuration and build information"};
  bool names_only = false;
  app.add_flag("--names", names_only, "print only the parameter names");
  CLI11_PARSE(app, argc, argv);

  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int rc = skipring_init();  // prints the offending variable on error
  skipring::Config cfg = skipring::global_config();
  if (rank == 0) {
    if (names_only) {
      for (const auto& p : skipring::describe_params(cfg, skipring::process_env())) {
        std::printf("%s\n", p.name.c_str());
      }
    } else {
      fmt::print("skipring {}.{}.{}  ranks={}  ucx={}  cuda={}\n", SKIPRING_VERSION_MAJOR,
                 SKIPRING_VERSION_MINOR, SKIPRING_VERSION_PATCH, size,
#ifdef SKIPRING_HAVE_UCX
                 "yes",
#else
                 "no",
#endif
#ifdef SKIPRING_HAVE_CUDA
                 "yes"
#else
                 "no"
#endif
      );
      fmt::print("{:<26} {:<10} {:<6} {:<10} {}\n", "parameter", "value", "type", "default",
                 "accepts / meaning");
      for (const auto& p : skipring::describe_params(cfg, skipring::process_env())) {
        fmt::print("{:<26} {:<10} {:<6} {:<10} {}\n{:<55}{}\n", p.name,
                   p.current_value + (p.set_in_env ? "*" : ""), p.type, p.default_value,
                   p.accepts, "", p.help);
      }
      fmt::print("(* = set in the environment)\n");
    }
  }
  MPI_Finalize();
  return rc == MPI_SUCCESS ? 0 : 1;
}
