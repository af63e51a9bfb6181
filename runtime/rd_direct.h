// Recursive doubling straight on MPI point-to-point, for latency-bound all-reduces. It calls
// MPI itself, so it lives in runtime/ (the cores in collectives/ never do).
//
// The same algorithm and the same reduction tree as RecursiveDoublingAllreduce (fold-in of the
// n - p extra ring positions, log2(p) exchange rounds, result back to the extras; canonical
// operand order a = the lower virtual rank's partial), so its results are bitwise identical to
// the core's. What it drops is the core's per-call machinery: no WireHeader or contribution
// set per message, no action lists, no progress engine, no step records. That machinery costs
// about 0.4 us per call, more than Open MPI's whole all-reduce of 8 bytes on shared memory.
//
// Exactness without headers: every message is matched by (source, tag) on skipring's private
// communicator; each (source, tag) pair carries exactly one message per collective, posted in
// collective order, and MPI does not let messages between one pair of ranks on one tag
// overtake each other, so a receive can only match the message of its own round of its own
// collective. The tags (kRdDirectTagBase + ...) are disjoint from every core's data tags.
//
// Used by Communicator::allreduce when the recursive doubling is selected and neither
// injection nor tracing asks for per-step records; the in-process harness and SimGrid run the
// core, whose tests (test_recursive_doubling.cpp) prove the reduction tree.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/dtype.h"
#include "common/status.h"
#include "runtime/mpi_wait.h"

namespace skipring {

constexpr int kRdDirectTagBase = 0x5000;  // fold-in; + 1 + k round k; + 63 result

// ring[pos] == this rank. sendbuf == recvbuf: in place. scratch grows to one payload.
// Every wait is watched (runtime/mpi_wait.h): a partner silent for wait.timeout_s gives
// kErrTimeout with the reason in *timeout_message (all-reduce #seq, the round, the rank).
// Counts messages into *sent / *received when given.
Status rd_direct_allreduce(MPI_Comm comm, const std::vector<int>& ring, int pos,
                           const void* sendbuf, void* recvbuf, size_t count, DType dtype, ROp op,
                           std::vector<uint8_t>* scratch, const WaitPolicy& wait, uint64_t seq,
                           std::string* timeout_message, uint32_t* sent = nullptr,
                           uint32_t* received = nullptr);

}  // namespace skipring
