// The topology's MPI part: one MPI_Allgather of the rank records (topology/discovery.h, which
// has no MPI), then build_topology.
#pragma once

#include <mpi.h>

#include <string>

#include "common/status.h"
#include "topology/discovery.h"

namespace skipring {

// Collective over `comm`: one MPI_Allgather of the records, then build_topology.
Status gather_topology(MPI_Comm comm, const std::string& host_map, Topology* out,
                       std::string* error);

}  // namespace skipring
