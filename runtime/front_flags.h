// Process-wide flags that the `mpi` row's front path (runtime/api_allreduce.cpp) reads on every
// repeat of a call, kept in one cache line: defined apart (two in .data, two in .bss, in three
// files) they took four, and each is a miss after the MPI library's own call has run in
// between (perf annotate of 8-byte calls at 2 ranks: the front path's samples sat on these
// loads and on the communicator's).
#pragma once

#include <atomic>
#include <cstdint>

namespace skipring {

struct alignas(64) FrontFlags {
  // Bumped whenever a communicator's skipring state is deleted (api_state.cpp): a front entry
  // naming a communicator state made before it is stale.
  std::atomic<uint64_t> comm_generation{1};
  // Nonblocking all-reduces in flight in this process (api_nonblocking.cpp).
  std::atomic<int> nb_pending{0};
  // skipring_finalize has run (api_state.cpp).
  std::atomic<bool> finalized{false};
  // classify_memory can only answer kHost: the CUDA driver was looked up and is absent, and no
  // test hook is set (memtype.cpp; false before the lookup).
  std::atomic<bool> memory_host_only{false};
};
// Exported (runtime/libskipring.map): the drop-in's inline front path reads it too.
extern __attribute__((visibility("default"))) FrontFlags g_front;

}  // namespace skipring
