// Process-wide caches of what communicator setup learns collectively, so that dup'd and split
// communicators skip it (issue 13: a communicator used to cost ~10 ms to set up): the topology
// of a group, the cost model's parameters of a shape, and a pool of internal communicators of
// freed communicators. Entries are only used when every rank of the new communicator holds an
// identical one (the setup all-reduce compares their digests), so each rank's cache may differ.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "collectives/select.h"
#include "runtime/config.h"
#include "topology/discovery.h"

namespace skipring {

// skipring's duplicate of an application communicator (a pooled or a new one), with the id the
// ranks agreed on for it and its group's pool key (empty: the group is not cached).
struct InternalComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int64_t id = 0;
  std::string pool_key;
};

struct GroupEntry {  // by the group's MPI_COMM_WORLD ranks and SKIPRING_HOST_MAP (group_key)
  Topology topology;
  bool local_over = false;  // this rank's host runs more of the group's ranks than cores
  int any_over = 0;         // any host of the group does
  int64_t digest = 0;
};
struct CostEntry {  // by the communicator's shape (cost_key)
  CostParams cost;
  int64_t digest = 0;
};

// The caches and the pool, one per process, guarded by one mutex. Internal communicators of
// freed communicators wait in the pool by group key, with their ids (agreed when they were
// made): a new communicator of the same group takes one that every rank offers. Every
// collective on one finishes with all its messages received (SKIPRING_CHECK checks it), so
// nothing of the previous user can meet the next one.
class SetupCache {
 public:
  static SetupCache& get();
  // Registers (once) the MPI_Finalize hook that empties the pool before the C API frees the
  // remaining communicators.
  void watch_finalize();
  // Takes the pooled communicator of `key` with the smallest id out of the pool (false: none).
  bool take_pooled(const std::string& key, int64_t* id, MPI_Comm* comm);
  // Puts an offered communicator back (the ranks did not all offer it).
  void put_back(const std::string& key, int64_t id, MPI_Comm comm);
  // A communicator's end: its internal communicator goes to the pool when `usable`, its group
  // is cached and there is room, and is freed otherwise (none once MPI is finalized).
  void release(InternalComm* c, bool usable);
  bool find_group(const std::string& key, GroupEntry* out);
  bool find_cost(const std::string& key, CostEntry* out);
  void store_group(const std::string& key, GroupEntry e);
  void store_cost(const std::string& key, CostEntry e);

 private:
  SetupCache() = default;
  static int free_pool_at_finalize(MPI_Comm, int, void*, void*);

  std::mutex mutex_;
  std::map<std::string, GroupEntry> groups_;
  std::map<std::string, CostEntry> costs_;
  std::map<std::string, std::vector<std::pair<int64_t, MPI_Comm>>> pool_;
  bool finalizing_ = false;  // MPI_Finalize has begun: internal communicators are freed
};

// A 62-bit digest of `bytes` (fits the setup all-reduce's v / -v encoding).
int64_t digest62(const std::string& bytes);
// The group's ranks in MPI_COMM_WORLD and the host map; empty when a rank is not in
// MPI_COMM_WORLD (spawned or connected processes): such groups are not cached.
std::string group_key(MPI_Comm comm, int size, const Config& cfg);
int64_t group_digest(const std::string& key, const GroupEntry& e);
// What the measured parameters depend on: the size, the ranks per host along the ring, whether
// a host is oversubscribed, and the configuration the probe and the engine run with.
std::string cost_key(const Topology& t, int any_over, const Config& cfg);
int64_t cost_digest(const CostParams& c);

}  // namespace skipring
