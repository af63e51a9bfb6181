// skipring_bench: nccl-tests-style all-reduce benchmark of skipring, optionally against MPI.
//
// For every message size, datatype and reduction it times skipring_allreduce out-of-place and
// in-place (a barrier before every iteration; an iteration's time is the slowest rank's), checks
// every output element against an exactly known result, and with --compare mpi times
// PMPI_Allreduce on the same buffers. Rank 0 prints one row per size and can write JSON / CSV.
// The parts: options.cpp (command line), patterns.h (data, straggler), runner.cpp (timing
// loops), report.cpp / report_files.cpp / preamble.cpp (output); this file sets the run up.
#include <fmt/core.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <exception>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "apps/app_version.h"
#include "apps/bench/context.h"
#include "apps/bench/options.h"
#include "apps/bench/patterns.h"
#include "apps/bench/report.h"
#include "apps/bench/runner.h"
#include "apps/bench_util.h"
#include "skipring/skipring.h"

namespace skipring_bench {
namespace {

// Frees the benchmark's communicator when the run ends.
struct CommGuard {
  MPI_Comm* comm;
  ~CommGuard() {
    if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
  }
};

// The benchmark's own communicator: a duplicate of MPI_COMM_WORLD whose errors come back as
// codes, so a failing call is reported instead of aborting the job.
void open_comm(Context& ctx) {
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &ctx.comm), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(ctx.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(ctx.comm, &ctx.rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(ctx.comm, &ctx.nranks), "MPI_Comm_size");
}

// skipring_init on every rank, so configuration errors surface here rather than in the first
// timed call; false on every rank when it failed on any.
bool init_skipring(const Context& ctx) {
  const int init_rc = skipring_init();
  int init_failed = init_rc != MPI_SUCCESS ? 1 : 0;
  if (init_failed) {
    const char* s = skipring_error_string(init_rc);
    fmt::print(stderr, "[rank {}] skipring_init failed: {} (code {})\n", ctx.rank,
               s ? s : "(no description)", init_rc);
  }
  int any_init_failed = 0;
  check_mpi(PMPI_Allreduce(&init_failed, &any_init_failed, 1, MPI_INT, MPI_MAX, ctx.comm),
            "PMPI_Allreduce");
  return any_init_failed == 0;
}

// Where the ranks run, for the header: this rank's host; at rank 0 every rank's host and pid.
struct Places {
  std::string host;
  std::vector<std::string> hosts;
  std::vector<int> pids;
};

// Gathers the places to rank 0 and tells every rank how many distinct hosts there are.
Places gather_places(Context& ctx) {
  Places places;
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  int host_len = 0;
  check_mpi(MPI_Get_processor_name(host, &host_len), "MPI_Get_processor_name");
  places.host = host;
  std::vector<char> all_hosts(static_cast<size_t>(ctx.nranks) * MPI_MAX_PROCESSOR_NAME, 0);
  check_mpi(MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all_hosts.data(),
                       MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, ctx.comm),
            "MPI_Gather");
  const int pid = static_cast<int>(getpid());
  places.pids.assign(static_cast<size_t>(ctx.nranks), 0);
  check_mpi(MPI_Gather(&pid, 1, MPI_INT, places.pids.data(), 1, MPI_INT, 0, ctx.comm),
            "MPI_Gather");
  if (ctx.rank == 0) {
    for (int r = 0; r < ctx.nranks; ++r) {
      places.hosts.emplace_back(&all_hosts[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
    }
    std::vector<std::string> distinct = places.hosts;
    std::sort(distinct.begin(), distinct.end());
    ctx.hosts = static_cast<int>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  }
  check_mpi(MPI_Bcast(&ctx.hosts, 1, MPI_INT, 0, ctx.comm), "MPI_Bcast");
  return places;
}

// The largest message any selected type will use: one set of buffers serves every run.
uint64_t buffer_bytes(const Options& opts, const std::vector<uint64_t>& sizes) {
  uint64_t bytes = 0;
  for (const TypeDesc& t : opts.types) {
    for (const uint64_t size : sizes) {
      const uint64_t elem = skipring::dtype_size(t.id);
      const uint64_t count = size / elem;
      if (count <= static_cast<uint64_t>(INT_MAX)) bytes = std::max(bytes, count * elem);
    }
  }
  return bytes;
}

// MemAvailable from /proc/meminfo in bytes; 0 when unknown.
uint64_t available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string rest;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    std::getline(meminfo, rest);
  }
  return 0;
}

// Whether this host's ranks' buffers fit in its memory; the first rank of the host says why
// not. (Allocation would succeed and the first touch would summon the OOM killer instead.)
bool buffers_fit(const Context& ctx, uint64_t per_rank, const std::string& host) {
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(ctx.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
  int node_rank = 0;
  int node_size = 1;
  check_mpi(MPI_Comm_rank(node, &node_rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(node, &node_size), "MPI_Comm_size");
  check_mpi(MPI_Comm_free(&node), "MPI_Comm_free");
  const uint64_t available = available_memory();
  if (available == 0 || per_rank * static_cast<uint64_t>(node_size) <= available) return true;
  if (node_rank == 0) {
    fmt::print(stderr,
               "skipring_bench: {} ranks on {} need {} bytes of buffers each ({} in all) but "
               "only {} bytes are available; lower --maxbytes\n",
               node_size, host, per_rank, per_rank * static_cast<uint64_t>(node_size), available);
  }
  return false;
}

// Allocates the send, receive and (with --check) expected buffers; false on every rank when
// any rank's do not fit or cannot be allocated.
bool allocate_buffers(Context& ctx, uint64_t bytes, const std::string& host) {
  const uint64_t per_rank = bytes * (ctx.opts.check ? 3 : 2);
  int alloc_failed = buffers_fit(ctx, per_rank, host) ? 0 : 1;
  try {
    if (alloc_failed) throw std::bad_alloc();
    ctx.send = Buffer(bytes);
    ctx.recv = Buffer(bytes);
    if (ctx.opts.check) ctx.expected = Buffer(bytes);
  } catch (const std::bad_alloc&) {
    if (!alloc_failed) {
      fmt::print(stderr, "[rank {}] cannot allocate {} bytes of buffers\n", ctx.rank, per_rank);
    }
    alloc_failed = 1;
  }
  int any_alloc_failed = 0;
  check_mpi(PMPI_Allreduce(&alloc_failed, &any_alloc_failed, 1, MPI_INT, MPI_MAX, ctx.comm),
            "PMPI_Allreduce");
  return any_alloc_failed == 0;
}

// Every datatype/reduction combination; the reason the run failed, or "" when it did not.
std::string run_all(const Context& ctx, Report& report, const std::vector<uint64_t>& sizes) {
  try {
    bool any_combination = false;
    for (const TypeDesc& type : ctx.opts.types) {
      for (const OpDesc& op : ctx.opts.ops) {
        if (!skipring::op_valid(op.id, type.id)) {
          if (ctx.opts.types.size() == 1 && ctx.opts.ops.size() == 1) {
            report.comment(fmt::format("skipping {}/{}: the reduction is defined on integers only",
                                       type.name, op.name));
          }
          continue;
        }
        any_combination = true;
        run_type(ctx, report, sizes, type, op);
      }
    }
    if (!any_combination) return "no valid datatype/reduction combination selected";
    if (report.rows_added() == 0) {
      return "no message size was measured (each is under one element or over INT_MAX elements)";
    }
  } catch (const CollectiveFailure& e) {
    return e.what();
  }
  return std::string();
}

// The exit code: 0 when every value was right, 1 on wrong values or a failed run, 2 on a usage
// error found before measuring.
int run_benchmark(int argc, char** argv) {
  int world_rank = 0;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
  Context ctx;
  if (const auto code = parse_options(argc, argv, world_rank, ctx.opts)) return *code;
  open_comm(ctx);
  const CommGuard guard{&ctx.comm};
  if (!init_skipring(ctx)) return 1;
  StragglerSetup straggler;
  if (const auto code = straggler.install(ctx.opts, ctx.rank, ctx.nranks)) return *code;

  const Places places = gather_places(ctx);
  // The interleaved modes compare stamps across ranks (see common_now in runner.cpp).
  if (ctx.opts.interleaved() && ctx.hosts > 1) {
    ctx.clock_offset_s = estimate_clock_offset(ctx.comm, ctx.rank, ctx.nranks);
  }
  Report report(ctx.opts, ctx.rank, ctx.nranks);
  if (!report.open_files(ctx.comm)) return 2;

  const std::vector<uint64_t> sizes = size_sequence(ctx.opts.min_bytes, ctx.opts.max_bytes,
                                                    ctx.opts.step_factor, ctx.opts.step_bytes);
  if (!allocate_buffers(ctx, buffer_bytes(ctx.opts, sizes), places.host)) return 1;

  report.print_header(preamble(ctx, places.hosts, places.pids));
  const std::string failure = run_all(ctx, report, sizes);
  const int64_t wrong = report.finish(failure);
  return failure.empty() && wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace skipring_bench

int main(int argc, char** argv) {
  if (skipring_apps::print_version_if_asked(argc, argv, "skipring_bench")) return 0;
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    std::fprintf(stderr, "skipring_bench: MPI_Init failed\n");
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = 1;
  try {
    code = skipring_bench::run_benchmark(argc, argv);
  } catch (const std::exception& e) {
    // Only this rank may have failed; the others cannot be waited for safely.
    std::fprintf(stderr, "[rank %d] skipring_bench: fatal error: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  } catch (...) {
    std::fprintf(stderr, "[rank %d] skipring_bench: fatal error (unknown exception)\n", rank);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}
