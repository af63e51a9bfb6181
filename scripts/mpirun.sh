#!/usr/bin/env bash
# Runs mpirun with the environment skipring's scripts need; arguments go to mpirun unchanged.
set -euo pipefail

# Open MPI refuses to start as root (CI containers run as root) unless both are set.
export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}"
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
# Demos and tests start more ranks than a small machine has cores.
export OMPI_MCA_rmaps_base_oversubscribe="${OMPI_MCA_rmaps_base_oversubscribe:-1}"
# Containers usually forbid the cross-process memory copy (CMA) the shared-memory transport
# uses for large messages; same setting as the MPI tests in tests/CMakeLists.txt.
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"

exec mpirun "$@"
