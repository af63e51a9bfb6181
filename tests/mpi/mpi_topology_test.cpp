// Topology-aware ring order under mpirun, through skipring's C++ internals: a Communicator on
// MPI_COMM_WORLD must hold the ring given by --expect-ring (e.g. 0,2,1,3 for
// SKIPRING_HOST_MAP=a,b,a,b), a topology identical on every rank with --expect-hosts hosts and
// the minimal number of inter-host hops; all-reduces on that ring (Communicator::allreduce and
// the C API) must equal PMPI_Allreduce for sizes that take recursive doubling and the ring.
// --expect-host-map-error: Communicator creation must fail with kErrConfig (the message naming
// SKIPRING_HOST_MAP goes to stderr, checked by ctest) and skipring_allreduce with MPI_ERR_ARG.
// Prints "N passed, M failed".
#include <mpi.h>
#include <skipring/skipring.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/config.h"
#include "straggler/injection.h"
#include "tests/mpi/mpi_test_util.h"
#include "topology/discovery.h"
#include "topology/ring_order.h"

namespace {
using mpitest::check;
using mpitest::g_rank;
using mpitest::g_size;

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    out.push_back(std::atoi(text.substr(start, comma - start).c_str()));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// Every rank holds the same vector (compared against rank 0's).
bool same_everywhere(const std::vector<int>& v) {
  int n = static_cast<int>(v.size());
  int n0 = n;
  PMPI_Bcast(&n0, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> root = v;
  root.resize(n0);
  PMPI_Bcast(root.data(), n0, MPI_INT, 0, MPI_COMM_WORLD);
  int same = (n0 == n && root == v) ? 1 : 0, all = 0;
  PMPI_Allreduce(&same, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all == 1;
}

void check_allreduces(skipring::Communicator* comm) {
  // Rank- and index-dependent values: a chunk reduced or copied in the wrong ring position
  // shows. Counts: small (recursive doubling), < n, uneven, several segments (the ring).
  for (size_t count : {size_t{1}, size_t{3}, size_t{1001}, size_t{40000}, size_t{300007}}) {
    std::vector<int64_t> in(count), ref(count), out(count), capi(count);
    for (size_t i = 0; i < count; ++i) {
      in[i] = static_cast<int64_t>(g_rank + 1) * 1000003 + static_cast<int64_t>(i) * (g_rank + 7);
    }
    PMPI_Allreduce(in.data(), ref.data(), static_cast<int>(count), MPI_INT64_T, MPI_SUM,
                   MPI_COMM_WORLD);
    const skipring::Status st =
        comm->allreduce(in.data(), out.data(), count, skipring::DType::kInt64, skipring::ROp::kSum);
    check(skipring::ok(st), "Communicator::allreduce count " + std::to_string(count) + ": " +
                                skipring::status_string(st));
    check(out == ref,
          "Communicator::allreduce count " + std::to_string(count) + " equals PMPI_Allreduce");
    const int rc = skipring_allreduce(in.data(), capi.data(), static_cast<int>(count), MPI_INT64_T,
                                      MPI_SUM, MPI_COMM_WORLD);
    check(rc == MPI_SUCCESS && capi == ref,
          "skipring_allreduce count " + std::to_string(count) + " equals PMPI_Allreduce");
    std::vector<double> fin(count), fref(count), fout(count);
    for (size_t i = 0; i < count; ++i) fin[i] = static_cast<double>((g_rank * 31 + i) % 1000);
    PMPI_Allreduce(fin.data(), fref.data(), static_cast<int>(count), MPI_DOUBLE, MPI_MAX,
                   MPI_COMM_WORLD);
    check(skipring::ok(comm->allreduce(fin.data(), fout.data(), count, skipring::DType::kDouble,
                                       skipring::ROp::kMax)) &&
              fout == fref,
          "Communicator::allreduce double max count " + std::to_string(count));
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  std::vector<int> expect_ring;
  int expect_hosts = -1;
  bool expect_map_error = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--expect-ring" && i + 1 < argc) expect_ring = parse_list(argv[++i]);
    if (a == "--expect-hosts" && i + 1 < argc) expect_hosts = std::atoi(argv[++i]);
    expect_map_error = expect_map_error || a == "--expect-host-map-error";
  }
  const int init_rc = skipring_init();
  check(init_rc == MPI_SUCCESS, "skipring_init");
  std::unique_ptr<skipring::Communicator> comm;
  const skipring::Status st = skipring::Communicator::create(
      MPI_COMM_WORLD, skipring::global_config(), skipring::InjectPlan(), &comm);
  if (expect_map_error) {
    check(st == skipring::Status::kErrConfig,
          std::string("a bad SKIPRING_HOST_MAP fails communicator creation with kErrConfig, got ") +
              skipring::status_string(st));
    int x = 1, y = 0;
    const int rc = skipring_allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check(rc == MPI_ERR_ARG, "and skipring_allreduce returns MPI_ERR_ARG");
  } else {
    check(skipring::ok(st), std::string("Communicator::create: ") + skipring::status_string(st));
    if (comm) {
      const skipring::Topology& topo = comm->topology();
      std::string why;
      check(skipring::ring_is_valid(comm->ring(), g_size, &why), "ring valid: " + why);
      check(comm->ring() == topo.ring, "communicator ring is the topology's ring");
      if (!expect_ring.empty()) {
        check(comm->ring() == expect_ring,
              "ring " + join(comm->ring()) + " expected " + join(expect_ring));
      }
      check(topo.size() == g_size && static_cast<int>(topo.host_of_rank.size()) == g_size,
            "one record and one host id per rank");
      const int hosts = topo.num_hosts();
      if (expect_hosts > 0) {
        check(hosts == expect_hosts,
              std::to_string(hosts) + " hosts, expected " + std::to_string(expect_hosts));
      }
      check(topo.inter_host_hops == (hosts > 1 ? hosts : 0),
            "inter-host hops " + std::to_string(topo.inter_host_hops));
      check(skipring::inter_host_hops(comm->ring(), topo.host_of_rank) == topo.inter_host_hops,
            "hop count matches the ring");
      for (int h = 0; h < hosts; ++h) {
        for (int r : topo.host_ranks[h]) check(topo.host_of(r) == h, "host_ranks / host_of agree");
      }
      check(comm->ring()[comm->pos_in_ring()] == g_rank, "pos_in_ring");
      check(same_everywhere(topo.ring), "every rank computed the same ring");
      check(same_everywhere(topo.host_of_rank), "every rank computed the same hosts");
      check_allreduces(comm.get());
    }
  }
  comm.reset();
  const int rc = mpitest::finish();
  MPI_Finalize();
  return rc;
}
