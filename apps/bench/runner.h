// skipring_bench runner: the timing loops (per size: every mode and implementation, or the
// interleaved variants) that hand each measured row to the report.
#ifndef SKIPRING_APPS_BENCH_RUNNER_H_
#define SKIPRING_APPS_BENCH_RUNNER_H_

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "apps/bench/context.h"
#include "apps/bench/datatypes.h"
#include "apps/bench/report.h"

namespace skipring_bench {

// Measures every size of `sizes` for one datatype and reduction and adds the rows to the
// report. Collective over ctx.comm; throws CollectiveFailure when a call failed on any rank.
void run_type(const Context& ctx, Report& report, const std::vector<uint64_t>& sizes,
              const TypeDesc& type, const OpDesc& op);

// This rank's steady_clock minus rank 0's, estimated from ping-pongs with rank 0 (collective
// over comm), for the interleaved modes on several hosts.
double estimate_clock_offset(MPI_Comm comm, int rank, int nranks);

}  // namespace skipring_bench

#endif  // SKIPRING_APPS_BENCH_RUNNER_H_
