// What the SimGrid SMPI apps (skipring_sim, skipring_sim_train) share: the simulated sleep, the
// command-line parse and the start of main. Built only with SKIPRING_SIMGRID (smpicxx's mpi.h
// declares smpi_nanosleep).
#pragma once

#include <mpi.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <optional>

namespace skipring_sim {

// Sleeps `seconds` of simulated time (smpi_nanosleep: simulated, never the host's clock).
inline void sim_sleep(double seconds) {
  if (seconds <= 0) return;
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(seconds);
  ts.tv_nsec = static_cast<long>((seconds - static_cast<double>(ts.tv_sec)) * 1e9);
  smpi_nanosleep(&ts, nullptr);
}

// app.parse, CLI11's help or error printed by rank 0: 0 parsed, -1 help printed (exit 0),
// 1 a parse error.
inline int parse_cli(CLI::App& app, int argc, char** argv, int rank) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (rank == 0) (app.exit)(e);  // parenthesised: not the exit(x) macro
    return e.get_exit_code() == 0 ? -1 : 1;
  }
  return 0;
}

// MPI_Init, this rank and the job size, then parse(argc, argv, o, rank) (0: go on, < 0: exit 0,
// > 0: that exit code). Returns nothing to go on, else main's exit code (MPI finalized).
template <typename Options, typename Parse>
std::optional<int> start(int* argc, char*** argv, Options* o, int* rank, int* n, Parse&& parse) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, n);
  const int prc = parse(*argc, *argv, o, *rank);
  if (prc == 0) return std::nullopt;
  MPI_Finalize();
  return prc < 0 ? 0 : prc;
}

}  // namespace skipring_sim
