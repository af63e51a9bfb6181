// Force-included (SimGrid SMPI build only) into runtime/mpi_transport.cpp, after mpi.h: its
// poll's MPI_Testsome goes to skipring_smpi_testsome, which is MPI_Testsome unless the
// progress engine armed a blocking wait (sim/smpi_wait.h). The transport itself is unchanged.
#pragma once

#include <mpi.h>

#include "sim/smpi_wait.h"

#define MPI_Testsome skipring_smpi_testsome
