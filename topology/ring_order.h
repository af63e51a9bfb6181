// Pure rank arithmetic of the topology (no MPI, no hwloc): SKIPRING_HOST_MAP parsing, grouping
// of ranks into hosts, the node-aware ring order and its checks. topology/discovery.h feeds it
// the gathered per-rank records; the unit tests drive it directly.
#pragma once

#include <string>
#include <vector>

namespace skipring {

std::vector<int> identity_ring(int n);
// True when `ring` holds every rank 0..n-1 exactly once (the ring then closes).
bool ring_is_valid(const std::vector<int>& ring, int n, std::string* why);

// Dense ids for `keys` (one per rank): equal keys get the same id, ids are numbered 0..H-1 in
// order of each key's lowest rank (rank 0 is always on host 0). `names`, if given, receives
// the key of each id.
std::vector<int> dense_ids(const std::vector<std::string>& keys,
                           std::vector<std::string>* names = nullptr);

// SKIPRING_HOST_MAP for a communicator of `nranks` ranks:
//   "block:K"     rank r is on host r / K (K >= 1; the last host may hold fewer ranks);
//   "l0,l1,..."   rank r is on the host labelled l_r; exactly `nranks` non-empty labels.
// On success fills the dense host id of each rank (see dense_ids) and, if given, the host
// names ("block0", "block1", ... or the labels). On failure returns false with a message
// naming SKIPRING_HOST_MAP in *error.
bool parse_host_map(const std::string& map, int nranks, std::vector<int>* host_of_rank,
                    std::vector<std::string>* host_names, std::string* error);

// Ranks of each host in ascending rank order, from dense host ids.
std::vector<std::vector<int>> ranks_per_host(const std::vector<int>& host_of_rank);

// Where a rank runs, as the ring order uses it. package / numa are any ids that compare equal
// for the same socket / NUMA node of one host (negative values: unknown or several, they
// compare like any other value).
struct RankPlace {
  int host = 0;
  int package = -1;
  int numa = -1;
};

// Node-aware ring: the ranks of a host are adjacent, hosts follow in order of their lowest
// rank; inside a host ranks of one package are adjacent (packages in order of their lowest
// rank), inside a package those of one NUMA node, then rank order. With H > 1 hosts the ring
// crosses between hosts exactly H times (the minimum); with one host and no package/NUMA
// information it is the identity.
std::vector<int> node_aware_ring(const std::vector<RankPlace>& places);
std::vector<int> node_aware_ring(const std::vector<int>& host_of_rank);

// Ring edges (ring[i] -> ring[i+1], ring[n-1] -> ring[0]) whose ends are on different hosts.
int inter_host_hops(const std::vector<int>& ring, const std::vector<int>& host_of_rank);

}  // namespace skipring
