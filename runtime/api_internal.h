// C++ entry points of the API layer for skipring's own tools (skipring_info); not part of the
// public C API.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>

namespace skipring {

// The cost model and auto's algorithm per size on `comm` (creates skipring's state on it;
// collective). Returns an MPI error code; the text goes to *out.
int describe_selection(MPI_Comm comm, size_t max_bytes, std::string* out);

}  // namespace skipring
