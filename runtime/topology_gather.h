// The topology's MPI part: one MPI_Iallgather of the rank records (topology/discovery.h, which
// has no MPI), then build_topology.
#pragma once

#include <mpi.h>

#include <string>

#include "common/status.h"
#include "runtime/mpi_wait.h"
#include "topology/discovery.h"

namespace skipring {

// Collective over `comm`: one MPI_Iallgather of the records (waited for under the watchdog:
// kErrTimeout with the reason in *error), then build_topology.
Status gather_topology(MPI_Comm comm, const std::string& host_map, const WaitPolicy& wait,
                       Topology* out, std::string* error);

}  // namespace skipring
