// Communicator implementation: runs one collective through the progress engine.
#include "runtime/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>

#include "collectives/algorithms.h"
#include "collectives/late_chain.h"
#include "collectives/late_plan.h"
#include "collectives/recursive_doubling.h"
#include "collectives/ring_allreduce.h"
#include "collectives/select.h"
#include "common/hash.h"
#include "runtime/cost_probe.h"
#include "runtime/log.h"
#include "runtime/mpi_transport.h"
#include "runtime/progress_engine.h"
#include "runtime/rd_direct.h"
#include "runtime/topology_gather.h"
#include "runtime/ucx_transport.h"
#include "topology/affinity.h"
#include "topology/ring_order.h"

namespace skipring {
namespace {
// A CFS time slice is a few ms: with more busy ranks than cores a healthy rank is regularly
// off its core that long (measured on 4 ranks / 2 cores: the learnt threshold of 1.6-2 ms
// skipped healthy ranks tens of times per 8 MiB all-reduce, costing 8-19 %).
constexpr double kOversubscribedFloorS = 5e-3;
// Auto all-reduces between two straggler agreements (SKIPRING_AUTO_STRAGGLER): one 1-int
// all-reduce per this many calls while no late arrival has been agreed on.
constexpr uint64_t kStragglerAgreeEvery = 8;
// SKIPRING_SKIP_MIN_WAIT_US set to a value (empty means the default, as for every variable).
bool min_wait_given() {
  const char* v = std::getenv("SKIPRING_SKIP_MIN_WAIT_US");
  return v != nullptr && *v != '\0';
}

// Process-wide caches of what setup learns collectively, so that dup'd and split
// communicators skip it (issue 13: a communicator used to cost ~10 ms to set up). Entries are
// only used when every rank of the new communicator holds an identical one (the setup
// all-reduce compares their digests), so each rank's cache may differ.
struct GroupEntry {  // by the group's MPI_COMM_WORLD ranks and SKIPRING_HOST_MAP
  Topology topology;
  bool local_over = false;  // this rank's host runs more of the group's ranks than cores
  int any_over = 0;         // any host of the group does
  int64_t digest = 0;
};
struct CostEntry {  // by the communicator's shape (cost_key)
  CostParams cost;
  int64_t digest = 0;
};
constexpr size_t kCacheEntries = 256;  // a bound: the caches are cleared when they exceed it
std::mutex g_cache_mutex;
std::map<std::string, GroupEntry> g_groups;
std::map<std::string, CostEntry> g_costs;
// Internal communicators of freed communicators, by group key, with their ids (agreed when
// they were made): a new communicator of the same group takes one that every rank offers.
// Every collective on one finishes with all its messages received (SKIPRING_CHECK checks it),
// so nothing of the previous user can meet the next one.
constexpr size_t kPoolPerGroup = 4;
std::map<std::string, std::vector<std::pair<int64_t, MPI_Comm>>> g_pool;
bool g_finalizing = false;  // MPI_Finalize has begun: internal communicators are freed

// Attributes on MPI_COMM_SELF are deleted at the start of MPI_Finalize, the last set first:
// this one (set after the C API's) empties the pool before the C API frees the remaining
// communicators, which then free their internal ones.
int free_pool_at_finalize(MPI_Comm, int, void*, void*) {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  g_finalizing = true;
  for (auto& [key, list] : g_pool) {
    for (auto& [id, comm] : list) MPI_Comm_free(&comm);
  }
  g_pool.clear();
  return MPI_SUCCESS;
}

void watch_finalize() {
  static std::once_flag once;
  std::call_once(once, [] {
    int keyval = MPI_KEYVAL_INVALID;
    if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_pool_at_finalize, &keyval, nullptr) ==
        MPI_SUCCESS) {
      MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr);
    }
  });
}

int64_t digest62(const std::string& bytes) { return static_cast<int64_t>(fnv1a64(bytes) >> 2); }

template <typename T>
void append_bytes(std::string* s, const T& v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// The group's ranks in MPI_COMM_WORLD and the host map; empty when a rank is not in
// MPI_COMM_WORLD (spawned or connected processes): such groups are not cached.
std::string group_key(MPI_Comm comm, int size, const Config& cfg) {
  // MPI_COMM_WORLD's group, made once (MPI frees it at MPI_Finalize).
  static const MPI_Group world = [] {
    MPI_Group g = MPI_GROUP_NULL;
    if (MPI_Comm_group(MPI_COMM_WORLD, &g) != MPI_SUCCESS) g = MPI_GROUP_NULL;
    return g;
  }();
  MPI_Group group = MPI_GROUP_NULL;
  std::vector<int> in(static_cast<size_t>(size)), out(static_cast<size_t>(size), MPI_UNDEFINED);
  for (int i = 0; i < size; ++i) in[i] = i;
  bool ok_ = world != MPI_GROUP_NULL && MPI_Comm_group(comm, &group) == MPI_SUCCESS &&
             MPI_Group_translate_ranks(group, size, in.data(), world, out.data()) == MPI_SUCCESS;
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  for (int r : out) ok_ = ok_ && r != MPI_UNDEFINED;
  if (!ok_) return std::string();
  std::string key = cfg.host_map;
  key.push_back('\0');
  key.append(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(int));
  return key;
}

int64_t group_digest(const std::string& key, const GroupEntry& e) {
  std::string b = key;
  for (int r : e.topology.ring) append_bytes(&b, r);
  for (int h : e.topology.host_of_rank) append_bytes(&b, h);
  append_bytes(&b, e.any_over);
  return digest62(b);
}

// What the measured parameters depend on: the size, the ranks per host along the ring, whether
// a host is oversubscribed, and the configuration the probe and the engine run with.
std::string cost_key(const Topology& t, int any_over, const Config& cfg) {
  std::string key;
  append_bytes(&key, t.size());
  append_bytes(&key, any_over);
  append_bytes(&key, cfg.clock);
  append_bytes(&key, cfg.poll_spins);
  append_bytes(&key, cfg.idle_sleep_us);
  append_bytes(&key, cfg.model_lat_us);
  append_bytes(&key, cfg.model_gbps);
  append_bytes(&key, cfg.model_reduce_gbps);
  append_bytes(&key, cfg.sim_reduce_gbps);
  append_bytes(&key, cfg.auto_mpi);
  const auto& host = t.host_of_rank;
  int run = 0, last = -1;
  for (int r : t.ring) {
    const int h = host.empty() ? 0 : host[r];
    if (h != last && run > 0) append_bytes(&key, run);
    run = h == last ? run + 1 : 1;
    last = h;
  }
  append_bytes(&key, run);
  return key;
}

int64_t cost_digest(const CostParams& c) {
  std::string b;
  for (double v : {c.alpha_s, c.beta_s, c.gamma_s, c.inter_alpha_s, c.inter_beta_s, c.sigma_s,
                   c.cache_bytes, c.mem_slowdown}) {
    append_bytes(&b, v);
  }
  for (double v : c.mpi_offset_s) append_bytes(&b, v);
  return digest62(b);
}

template <typename Map>
void bounded_insert(Map* m, const std::string& key, typename Map::mapped_type v) {
  if (m->size() >= kCacheEntries && m->find(key) == m->end()) m->clear();
  (*m)[key] = std::move(v);
}

// A MAX all-reduce of int64 values that also gives minima: each value goes in as v and -v.
class MinMax {
 public:
  // Adds v (|v| < 2^62); returns its index.
  int add(int64_t v) {
    vals_.push_back(v);
    vals_.push_back(-v);
    return static_cast<int>(vals_.size() / 2 - 1);
  }
  // Non-blocking and watched: a rank that never joins gives kErrTimeout, not a hang.
  Status reduce(MPI_Comm comm, const WaitPolicy& wait, const char* what) {
    res_.assign(vals_.size(), 0);
    MPI_Request req;
    WaitWhat w;
    w.what = what;
    return wait_collectives(
        PMPI_Iallreduce(vals_.data(), res_.data(), static_cast<int>(vals_.size()), MPI_INT64_T,
                        MPI_MAX, comm, &req),
        &req, 1, wait, w, nullptr, &vals_, &res_);
  }
  int64_t max(int i) const { return res_[2 * i]; }
  int64_t min(int i) const { return -res_[2 * i + 1]; }
  bool same(int i) const { return max(i) == min(i); }

 private:
  std::vector<int64_t> vals_, res_;
};

// "a on ranks 0,2; b on rank 1": each rank's text (fixed-width fields, one per rank) grouped
// by value.
std::string ranks_by_value(const std::vector<std::string>& per_rank) {
  std::vector<std::pair<std::string, std::string>> groups;  // value, ranks
  for (size_t r = 0; r < per_rank.size(); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == per_rank[r]; });
    if (it == groups.end()) {
      groups.emplace_back(per_rank[r], std::to_string(r));
    } else {
      it->second += "," + std::to_string(r);
    }
  }
  std::string out;
  for (const auto& [value, ranks] : groups) {
    if (!out.empty()) out += "; ";
    out += fmt::format("'{}' on rank{} {}", value, ranks.find(',') == std::string::npos ? "" : "s",
                       ranks);
  }
  return out;
}

// Every rank's text for each of `mine` (each cut to kField - 1 characters), by rank.
constexpr size_t kField = 96;
Status gather_texts(MPI_Comm comm, int size, const std::vector<std::string>& mine,
                    const WaitPolicy& wait, std::vector<std::vector<std::string>>* out) {
  const size_t k = mine.size();
  std::vector<char> send(k * kField, '\0'), all(k * kField * static_cast<size_t>(size));
  for (size_t i = 0; i < k; ++i) std::snprintf(&send[i * kField], kField, "%s", mine[i].c_str());
  MPI_Request req;
  WaitWhat w;
  w.what = "communicator setup: gathering the differing SKIPRING_* values";
  SKIPRING_RETURN_IF_ERROR(wait_collectives(
      PMPI_Iallgather(send.data(), static_cast<int>(send.size()), MPI_CHAR, all.data(),
                      static_cast<int>(send.size()), MPI_CHAR, comm, &req),
      &req, 1, wait, w, nullptr, &send, &all));
  out->assign(k, std::vector<std::string>(static_cast<size_t>(size)));
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < k; ++i) {
      const char* f = &all[(static_cast<size_t>(r) * k + i) * kField];
      (*out)[i][r] = std::string(f, strnlen(f, kField));
    }
  }
  return Status::kOk;
}

}  // namespace

bool Communicator::keeps_usable(Status st) {
  switch (st) {
    case Status::kOk:
    case Status::kErrCount:
    case Status::kErrBuffer:
    case Status::kErrOp:
    case Status::kErrType:
    case Status::kErrArg:
      return true;
    default:
      return false;  // protocol, transport, config, internal, and any status added later
  }
}

void Communicator::note_error(Status st, uint64_t seq, const std::string& reason) {
  if (keeps_usable(st) || broken_) return;
  broken_ = true;
  broken_status_ = st;
  broken_seq_ = seq;
  broken_reason_ = reason.empty() ? status_string(st) : reason;
}

Status Communicator::create(MPI_Comm user, const Config& cfg, const InjectPlan& inject,
                            std::unique_ptr<Communicator>* out) {
  std::unique_ptr<Communicator> c(new Communicator());
  if (MPI_Comm_rank(user, &c->rank_) != MPI_SUCCESS ||
      MPI_Comm_size(user, &c->size_) != MPI_SUCCESS) {
    return Status::kErrComm;
  }
  c->cfg_ = cfg;
  c->skip_floor_s_ = cfg.skip_min_wait_us * 1e-6;
  c->inject_ = inject;
  c->clock_ = make_clock(cfg.clock);
  c->wait_ = wait_policy(cfg, c->clock_.get());
  // The agreement all-reduce (on `user`), then internal_ (a pooled or a new duplicate of it).
  SKIPRING_RETURN_IF_ERROR(c->setup_shared_state(user, cfg));
  std::string why;
  c->ring_ = c->topology_.ring;
  if (!ring_is_valid(c->ring_, c->size_, &why)) {
    SKIPRING_LOG_ERROR("ring order: {}", why);
    return Status::kErrInternal;
  }
  c->pos_ =
      static_cast<int>(std::find(c->ring_.begin(), c->ring_.end(), c->rank_) - c->ring_.begin());
  int tag_span = 0;
  if (cfg.transport == TransportKind::kUcx) {
    std::unique_ptr<UcxTransport> ucx;
    SKIPRING_RETURN_IF_ERROR(UcxTransport::create(
        c->internal_, c->wait_, preferred_ucx_net_device(c->topology_, c->rank_), &ucx));
    tag_span = ucx->tag_span();
    c->transport_ = std::move(ucx);
  } else {
    auto mpi = std::make_unique<MpiTransport>(c->internal_);
    tag_span = mpi->tag_span();
    c->transport_ = std::move(mpi);
  }
  c->topo_summary_.n = c->size_;
  c->topo_summary_.hosts = c->topology_.num_hosts();
  for (const auto& h : c->topology_.host_ranks) {
    c->topo_summary_.ranks_per_host.push_back(static_cast<int>(h.size()));
    c->topo_summary_.max_local =
        std::max<int>(c->topo_summary_.max_local, static_cast<int>(h.size()));
  }

  if (!cfg.tree_graph.empty()) {
    if (Status st = LinkGraph::load(cfg.tree_graph, &c->tree_graph_, &why); !ok(st)) {
      SKIPRING_LOG_ERROR("SKIPRING_TREE_GRAPH={}: {}", cfg.tree_graph, why);
      return Status::kErrConfig;
    }
    if (c->tree_graph_.nodes() != c->size_ || !c->tree_graph_.connected()) {
      SKIPRING_LOG_ERROR("SKIPRING_TREE_GRAPH={}: {} nodes{} for a communicator of {} ranks",
                         cfg.tree_graph, c->tree_graph_.nodes(),
                         c->tree_graph_.connected() ? "" : " (not connected)", c->size_);
      return Status::kErrConfig;
    }
  }
  c->engine_ =
      std::make_unique<ProgressEngine>(c->transport_.get(), c->clock_.get(), engine_options(cfg));
  c->params_.rank = c->rank_;
  c->params_.ring = c->ring_;
  c->params_.segment_bytes = cfg.segment_bytes;
  c->params_.depth = cfg.pipeline_depth;
  c->params_.tag_span = tag_span;
  Communicator* self = c.get();
  c->algo_ctx_.params = &c->params_;
  c->algo_ctx_.scratch = &c->scratch_;
  c->algo_ctx_.host_of_rank = &c->topology_.host_of_rank;
  c->algo_ctx_.host_groups = &c->topology_.hier_groups;  // GPU-NIC leaders first (affinity.h)
  c->algo_ctx_.tree_plan = [self](int k, const MultiTreePlan** plan) {
    return self->tree_plan(k, plan);
  };
  c->algo_ctx_.multitree_k = cfg.multitree_k;
  *out = std::move(c);
  return Status::kOk;
}

Status Communicator::setup_shared_state(MPI_Comm user, const Config& cfg) {
  // One all-reduce (MinMax) on the application's communicator, in the collective the
  // application is calling, carries: the digest of every value that must match (mismatch: an
  // error on every rank), whether any rank wants per-step records, the smallest L2 cache,
  // whether every rank holds the same cached topology (group) and cost parameters (shape),
  // and the same pooled internal communicator (then no MPI_Comm_dup: it costs as much as the
  // rest). A communicator whose group is new pays a second one after the topology gather
  // (the oversubscription flag and the cost decision, which needs the shape).
  watch_finalize();
  const std::vector<AgreedValue> values = agreed_values(cfg);
  const std::string gkey = group_key(user, size_, cfg);
  int64_t pooled_id = -1;
  MPI_Comm pooled = MPI_COMM_NULL;
  // Back to the pool unless taken (any return below).
  struct PoolReturn {
    const std::string& key;
    const int64_t& id;
    MPI_Comm& comm;
    ~PoolReturn() {
      if (comm == MPI_COMM_NULL) return;
      std::lock_guard<std::mutex> lock(g_cache_mutex);
      g_pool[key].emplace_back(id, comm);
    }
  } pool_return{gkey, pooled_id, pooled};
  GroupEntry group;
  bool have_group = false;
  CostEntry cost;
  bool have_cost = false;
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    // The offered communicator leaves the pool now (a concurrent setup on another thread
    // cannot offer it too); it goes back if the ranks do not all offer it.
    if (auto pt = gkey.empty() ? g_pool.end() : g_pool.find(gkey); pt != g_pool.end()) {
      auto& list = pt->second;
      auto best = list.end();
      for (auto it = list.begin(); it != list.end(); ++it) {
        if (best == list.end() || it->first < best->first) best = it;
      }
      if (best != list.end()) {
        pooled_id = best->first;
        pooled = best->second;
        list.erase(best);
      }
    }
    if (auto it = gkey.empty() ? g_groups.end() : g_groups.find(gkey); it != g_groups.end()) {
      group = it->second;
      have_group = true;
      cost_key_ = cost_key(group.topology, group.any_over, cfg);
      if (auto jt = g_costs.find(cost_key_); jt != g_costs.end()) {
        cost = jt->second;
        have_cost = true;
      }
    }
  }
  long l2 = -1;
#ifdef _SC_LEVEL2_CACHE_SIZE
  l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  if (l2 <= 0) l2 = 1 << 20;
  const bool records =
      !inject_.empty() || !cfg.trace_dir.empty() || cfg.log_level <= LogLevel::kDebug;
  MinMax mm;
  std::vector<int> value_idx;
  for (const AgreedValue& v : values) value_idx.push_back(mm.add(v.digest));
  const int i_records = mm.add(records ? 1 : 0);
  const int i_l2 = mm.add(l2);
  const int i_group_have = mm.add(have_group ? 1 : 0);
  const int i_group = mm.add(have_group ? group.digest : -1);
  const int i_cost_have = mm.add(have_cost ? 1 : 0);
  const int i_cost = mm.add(have_cost ? cost.digest : -1);
  const int i_pooled = mm.add(pooled_id);
  // A new internal communicator's id: rank 0's draw (the others add 0 to the maximum).
  static std::atomic<uint64_t> draws{0};
  const int64_t fresh =
      rank_ == 0
          ? digest62(fmt::format("{}.{}.{}", getpid(), draws.fetch_add(1),
                                 std::chrono::steady_clock::now().time_since_epoch().count()))
          : 0;
  const int i_fresh = mm.add(fresh);
  if (Status st = mm.reduce(user, wait_, "communicator setup: the agreement all-reduce"); !ok(st)) {
    SKIPRING_LOG_ERROR("communicator setup: the agreement all-reduce failed ({})",
                       status_string(st));
    return st;
  }
  // Mismatched values: every rank sees the same list (the min/max are the same everywhere),
  // so every rank takes part in the one all-gather that names who holds what.
  std::vector<std::string> mine;
  std::vector<const char*> names;
  for (size_t i = 0; i < values.size(); ++i) {
    if (mm.same(value_idx[i])) continue;
    mine.push_back(values[i].shown);
    names.push_back(values[i].name);
  }
  if (!mine.empty()) {
    std::vector<std::vector<std::string>> all;
    if (!ok(gather_texts(user, size_, mine, wait_, &all))) {
      SKIPRING_LOG_ERROR("communicator setup: SKIPRING_* values differ across ranks ({}...)",
                         names[0]);
      return Status::kErrConfig;
    }
    std::string text;
    for (size_t i = 0; i < names.size(); ++i) {
      text += fmt::format("{}{} differs: {}", i ? "; " : "", names[i], ranks_by_value(all[i]));
    }
    SKIPRING_LOG_ERROR(
        "communicator setup: SKIPRING_* values that must be the same on every rank differ "
        "across the {} ranks: {}",
        size_, text);
    return Status::kErrConfig;
  }
  // internal_: the pooled communicator every rank offered, or a new duplicate.
  pool_key_ = gkey;
  if (mm.min(i_pooled) >= 0 && mm.same(i_pooled)) {
    internal_ = pooled;
    internal_id_ = pooled_id;
    pooled = MPI_COMM_NULL;
  }
  if (internal_ == MPI_COMM_NULL) {
    // The new handle lives on the heap until the duplicate exists: MPI writes it at completion,
    // which a timeout leaves pending (the handle is then leaked with it).
    std::vector<MPI_Comm> dup(1, MPI_COMM_NULL);
    MPI_Request req;
#ifdef SKIPRING_SIMGRID
    // SMPI 3.32 has no MPI_Comm_idup (and SimGrid reports deadlocks itself).
    if (MPI_Comm_dup(user, dup.data()) != MPI_SUCCESS) return Status::kErrComm;
    req = MPI_REQUEST_NULL;
#else
    if (MPI_Comm_idup(user, dup.data(), &req) != MPI_SUCCESS) return Status::kErrComm;
#endif
    WaitWhat w;
    w.what = "communicator setup: duplicating the communicator";
    if (Status st = wait_collectives(MPI_SUCCESS, &req, 1, wait_, w, nullptr, &dup); !ok(st)) {
      return st == Status::kErrTimeout ? st : Status::kErrComm;
    }
    internal_ = dup[0];
    // Errors of skipring's own traffic come back as codes (the application's communicator may
    // have MPI_ERRORS_ARE_FATAL, which a dup inherits): a truncated message from a rank with
    // a different count is then a protocol error on this rank, not the end of the job.
    MPI_Comm_set_errhandler(internal_, MPI_ERRORS_RETURN);
    internal_id_ = mm.max(i_fresh);
  }
  SKIPRING_LOG_DEBUG("communicator setup: internal communicator {}, topology {}, cost model {}",
                     internal_id_ == pooled_id ? "reused" : "new",
                     mm.min(i_group_have) == 1 && mm.same(i_group) ? "reused" : "gathered",
                     mm.min(i_cost_have) == 1 && mm.same(i_cost) ? "reused" : "not cached");
  any_records_ = mm.max(i_records) != 0;
  const double cache_bytes = static_cast<double>(mm.min(i_l2));
  const bool group_reused = mm.min(i_group_have) == 1 && mm.same(i_group);
  bool cost_reused = group_reused && mm.min(i_cost_have) == 1 && mm.same(i_cost);
  int any_over = 0;
  if (group_reused) {
    topology_ = group.topology;
    any_over = group.any_over;
    if (group.local_over) skip_floor_s_ = std::max(skip_floor_s_, kOversubscribedFloorS);
  } else {
    // Node-aware ring order from the gathered topology (one MPI_Allgather; every rank gets the
    // same result, so a bad SKIPRING_HOST_MAP fails on all ranks alike).
    std::string why;
    if (Status st = gather_topology(internal_, cfg.host_map, wait_, &topology_, &why); !ok(st)) {
      SKIPRING_LOG_ERROR("communicator setup: {}", why);
      return st;
    }
    bool oversubscribed = false;
#ifndef SKIPRING_SIMGRID
    {
      MPI_Comm local = MPI_COMM_NULL;
      int local_size = 1;
      if (MPI_Comm_split_type(internal_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) ==
          MPI_SUCCESS) {
        MPI_Comm_size(local, &local_size);
        MPI_Comm_free(&local);
      }
      // Ranks under one kernel share its cores even when MPI sees them on different hosts
      // (containers, network namespaces with their own hostname: scripts/vcluster.sh runs 4 or 8
      // "hosts" on 2 cores).
      local_size = std::max(local_size, ranks_sharing_kernel(topology_, rank_));
      const long cores = sysconf(_SC_NPROCESSORS_ONLN);
      oversubscribed = cores > 0 && local_size > cores;
      if (oversubscribed && !min_wait_given()) {
        if (rank_ == 0) {
          SKIPRING_LOG_INFO(
              "{} ranks on a host (or under one kernel) with {} cores: skip threshold floor {} ms "
              "(set SKIPRING_SKIP_MIN_WAIT_US to override)",
              local_size, cores, kOversubscribedFloorS * 1e3);
        }
      }
    }
#endif
    if (oversubscribed && !min_wait_given()) {
      skip_floor_s_ = std::max(skip_floor_s_, kOversubscribedFloorS);
    }
    // The cost model's overlap must be the same on every rank (it picks the algorithm): the
    // communicator is oversubscribed when any of its hosts is. Second all-reduce: that flag
    // and the cost cache's decision for this shape.
    MinMax m2;
    const int j_over = m2.add(oversubscribed ? 1 : 0);
    // Both possible keys are looked up; the agreed flag picks one.
    CostEntry c0, c1;
    bool h0 = false, h1 = false;
    {
      std::lock_guard<std::mutex> lock(g_cache_mutex);
      if (auto it = g_costs.find(cost_key(topology_, 0, cfg)); it != g_costs.end()) {
        c0 = it->second;
        h0 = true;
      }
      if (auto it = g_costs.find(cost_key(topology_, 1, cfg)); it != g_costs.end()) {
        c1 = it->second;
        h1 = true;
      }
    }
    const int j_h0 = m2.add(h0 ? 1 : 0), j_c0 = m2.add(h0 ? c0.digest : -1);
    const int j_h1 = m2.add(h1 ? 1 : 0), j_c1 = m2.add(h1 ? c1.digest : -1);
    if (Status st =
            m2.reduce(internal_, wait_, "communicator setup: the second agreement all-reduce");
        !ok(st)) {
      SKIPRING_LOG_ERROR("communicator setup: the second agreement all-reduce failed ({})",
                         status_string(st));
      return st;
    }
    any_over = static_cast<int>(m2.max(j_over));
    cost_key_ = cost_key(topology_, any_over, cfg);
    const int jh = any_over ? j_h1 : j_h0, jc = any_over ? j_c1 : j_c0;
    cost_reused = m2.min(jh) == 1 && m2.same(jc);
    if (cost_reused) cost = any_over ? c1 : c0;
    if (!gkey.empty()) {
      GroupEntry e;
      e.topology = topology_;
      e.local_over = oversubscribed && !min_wait_given();
      e.any_over = any_over;
      e.digest = group_digest(gkey, e);
      std::lock_guard<std::mutex> lock(g_cache_mutex);
      bounded_insert(&g_groups, gkey, std::move(e));
    }
  }
  topo_summary_.overlap = any_over == 0;
  const bool model_given = cfg.model_lat_us > 0 && cfg.model_gbps > 0 && cfg.model_reduce_gbps > 0;
  if (model_given) {
    // Nothing left to measure but the engine's per-message cost, the cache size and the
    // out-of-cache slowdown: defaults for the last two and sigma, the smallest L2 over ranks.
    CostParams p;
    p.alpha_s = p.inter_alpha_s = cfg.model_lat_us * 1e-6;
    p.beta_s = p.inter_beta_s = 1.0 / (cfg.model_gbps * 1e9);
    p.gamma_s = 1.0 / (cfg.model_reduce_gbps * 1e9);
    p.cache_bytes = cache_bytes;
    cost_ = p;
    cost_measured_ = true;
    if (rank_ == 0)
      SKIPRING_LOG_DEBUG("cost model (given by SKIPRING_MODEL_*): {}", cost_.to_string());
  } else if (cost_reused) {
    cost_ = cost.cost;
    cost_measured_ = true;
    if (rank_ == 0) SKIPRING_LOG_DEBUG("cost model (reused for this shape): {}", cost_.to_string());
  }
  return Status::kOk;
}

Communicator::~Communicator() {
  transport_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && internal_ != MPI_COMM_NULL) {
    // Broken communicators may have messages in flight: never pooled.
    if (!pool_key_.empty() && !broken_) {
      std::lock_guard<std::mutex> lock(g_cache_mutex);
      auto& list = g_pool[pool_key_];
      if (!g_finalizing && list.size() < kPoolPerGroup && g_pool.size() <= kCacheEntries) {
        list.emplace_back(internal_id_, internal_);
        internal_ = MPI_COMM_NULL;
      }
    }
    if (internal_ != MPI_COMM_NULL) MPI_Comm_free(&internal_);
  }
}

double Communicator::skip_threshold(size_t segment_bytes, size_t bytes) {
  // alpha * T + T_trans with T the normal time a ring piece takes to arrive, counted from when
  // the receiver's timer starts (RingAllreduce::skip_deadline): the longest wait of the pieces
  // not skipped, median over recent collectives (StepTimer). T is never below what the
  // measured link makes of the pieces in flight: the ring keeps depth/2 pieces in flight per
  // link, which share its bandwidth, so the first of a block arrives after
  // latency + depth/2 * segment * beta. Without that floor the first collectives (T = 1 ms
  // before any history) skipped every healthy predecessor across 1 Gbit/s hosts (a 256 KiB
  // piece alone takes 2.1 ms there, four in flight 8.4 ms), and T, learnt only from pieces
  // not skipped, stayed below the real piece time (measured: 24-32 skips per rank and
  // 16 MiB all-reduce, skip-ahead 1.5x the plain ring, on 4 emulated hosts).
  // Before 3 collectives of history T is the longest wait seen, at most the prior; with no
  // history it is the prior. From a predecessor on another host the prior is the modelled time
  // of one whole ring step of this collective on that link (latency + bytes/n * beta), or 1 ms
  // if more: with the link floor as the prior (until 3 observations) the first three
  // skip-ahead collectives across hosts skipped healthy predecessors (4 emulated hosts at
  // 1 Gbit/s, no straggler, 11 ms threshold against the 31-65 ms learnt later: 21-29, 0-3 and
  // 0-7 skips per rank at 16 MiB; 128/32/17 at 64 MiB, 1.60/1.26/1.19 s against 0.86 s);
  // with it, none. The cost: a straggler in the very first collective across hosts is skipped
  // only when later than about alpha whole steps. On one host, and for a predecessor seen
  // behind in a collective (RingAllreduce::record_piece_waits learns nothing then) and never
  // observed, the prior is the link floor or 1 ms (the oversubscription floor covers a
  // descheduled rank): a straggler's normal time cannot be learnt while it straggles, and the
  // step prior follows the cost probe's bandwidth, which on 4 ranks / 2 cores measured
  // 1.4-6.3 GB/s between runs (at 1.5 GB/s a 22 ms threshold: a 50 ms late rank's successor
  // skipped 8-12 pieces per call instead of 128, 1.05-1.19x the plain ring, in 3 of 10 runs
  // and 4 of 6 with the model's bandwidth set to 1.5 GB/s). The formula itself is
  // StepTimer::threshold's.
  const int pred = ring_[(pos_in_ring() - 1 + size_) % size_];
  ThresholdParams tp;
  tp.alpha = cfg_.alpha;
  tp.min_wait_s = skip_floor_s_;
  tp.fixed_T_s = cfg_.skip_t_us > 0 ? cfg_.skip_t_us * 1e-6 : 0;
  tp.fixed_trans_s = cfg_.skip_ttrans_us > 0 ? cfg_.skip_ttrans_us * 1e-6 : 0;
  if (cfg_.skip_t_us <= 0) {
    // Collective: every rank gets here at the same call (SKIPRING_SKIP_T_US given or not is
    // agreed at setup). On failure the communicator is broken; the caller checks.
    if (!ok(ensure_cost_params())) return tp.min_wait_s;
    const auto& host = topology_.host_of_rank;
    const bool same_host = host.empty() || host[pred] == host[rank_];
    const double lat = same_host ? cost_.alpha_s : cost_.inter_alpha_s;
    const double beta = same_host ? cost_.beta_s : cost_.inter_beta_s;
    const double in_flight = std::max(1, cfg_.pipeline_depth / 2);
    tp.link_s = lat + in_flight * static_cast<double>(segment_bytes) * beta;
    if (!same_host) {
      const double chunk = std::ceil(static_cast<double>(bytes) / std::max(1, size_));
      tp.fallback_T_s = std::max(tp.behind_T_s, lat + chunk * beta);
    }
  }
  return timer_.threshold(pred, segment_bytes, tp);
}

Status Communicator::ensure_cost_params() {
  if (broken_) return broken_status_;
  if (!cost_measured_) {
    // The cost model's parameters, identical on every rank (one all-reduce inside, which also
    // tells every rank whether any failed).
    const Status st =
        measure_cost_params(internal_, ring_, topology_.host_of_rank, cfg_, *clock_, &cost_);
    bool sigma_failed = false;
    if (ok(st)) cost_.sigma_s = measure_engine_sigma(&sigma_failed);
    Status mpi_st = Status::kOk;
    if (ok(st) && !sigma_failed) mpi_st = measure_mpi_offsets();
    if (!ok(st) || sigma_failed || !ok(mpi_st)) {
      const Status bad = !ok(st) ? st : !ok(mpi_st) ? mpi_st : Status::kErrTransport;
      note_error(bad, seq_,
                 fmt::format("the cost model's measurement failed ({}{})", status_string(bad),
                             sigma_failed ? ", engine probe" : ""));
      SKIPRING_LOG_ERROR("cost model: measurement failed on some rank: {}", status_string(bad));
      return bad;
    }
    if (rank_ == 0) SKIPRING_LOG_INFO("cost model (measured): {}", cost_.to_string());
    cost_measured_ = true;
    CostEntry e;
    e.cost = cost_;
    e.digest = cost_digest(cost_);
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    bounded_insert(&g_costs, cost_key_, std::move(e));
  }
  if (!cost_summarised_) {
    cost_summarised_ = true;
    // Trees enter auto's choice when there is something to plan on: a link graph, or links of
    // two kinds (several hosts). On one host every link is alike and a tree moves twice the
    // ring's bytes through its inner nodes.
    if (tree_graph_.nodes() > 0 || topo_summary_.hosts > 1) {
      const MultiTreePlan* one = nullptr;
      const MultiTreePlan* many = nullptr;
      if (ok(tree_plan(1, &one)) && ok(tree_plan(cfg_.multitree_k, &many))) {
        // A given graph is the network as the user describes it; a derived one only knows the
        // measured per-rank and per-host bandwidths, which all trees share.
        const bool derived = tree_graph_.nodes() == 0;
        const double rank_Bps = derived ? 1.0 / cost_.beta_s : 0;
        const double host_Bps = derived && topo_summary_.hosts > 1 ? 1.0 / cost_.inter_beta_s : 0;
        const auto& host = topology_.host_of_rank;
        topo_summary_.tree1_height = tree_depth(one->trees[0]);
        topo_summary_.tree1_rate_Bps = effective_tree_rate(*one, host, rank_Bps, host_Bps);
        topo_summary_.trees = static_cast<int>(many->trees.size());
        int h = 0;
        for (const auto& t : many->trees) h = std::max(h, tree_depth(t));
        topo_summary_.tree_height = h;
        topo_summary_.tree_rate_Bps = effective_tree_rate(*many, host, rank_Bps, host_Bps);
      }
    }
  }
  return Status::kOk;
}

Status Communicator::tree_plan(int k, const MultiTreePlan** out) {
  auto it = tree_plans_.find(k);
  if (it == tree_plans_.end()) {
    std::string why;
    LinkGraph derived;
    const LinkGraph* g = &tree_graph_;
    if (tree_graph_.nodes() == 0) {
      // Every pair of ranks linked: same host at the measured same-host latency and
      // bandwidth, across hosts at the inter-host ones (the planner's model: independent links).
      SKIPRING_RETURN_IF_ERROR(ensure_cost_params());
      derived = LinkGraph(size_);
      const auto& host = topology_.host_of_rank;
      for (int u = 0; u < size_; ++u) {
        for (int v = u + 1; v < size_; ++v) {
          const bool same = host.empty() || host[u] == host[v];
          SKIPRING_RETURN_IF_ERROR(
              derived.add_link(u, v, same ? cost_.alpha_s : cost_.inter_alpha_s,
                               1.0 / (same ? cost_.beta_s : cost_.inter_beta_s), &why));
        }
      }
      g = &derived;
    }
    PlannerParams pp;
    pp.max_trees = k;
    MultiTreePlan plan;
    if (Status st = plan_multitree(*g, pp, &plan, &why); !ok(st)) {
      SKIPRING_LOG_ERROR("multi-tree plan (k = {}): {}", k, why);
      return st;
    }
    if (rank_ == 0) SKIPRING_LOG_DEBUG("multi-tree plan (k = {}):\n{}", k, plan_to_string(plan));
    it = tree_plans_.emplace(k, std::move(plan)).first;
  }
  *out = &it->second;
  return Status::kOk;
}

double Communicator::measure_engine_sigma(bool* failed) {
  // sigma, the progress engine's cost per message: the same 8-byte recursive doubling run as a
  // core through the engine and straight on MPI (runtime/rd_direct.h); the difference per
  // message this rank sends. The probe collectives use sequence numbers no real collective has
  // and end with a barrier, so none of their messages can meet a real one. A failure on any
  // rank stops this rank's loop and reaches every rank through the closing all-reduce (a rank
  // whose peer failed mid-exchange can still wait for it: only the watchdog ends that).
  *failed = false;
  if (size_ < 2) return cost_.sigma_s;
  constexpr int kIters = 20;
  constexpr uint32_t kProbeSeq = 0xfffff000u;
  uint64_t in = 1, out = 0;
  RingParams p = params_;
  p.count = 1;
  p.dtype = DType::kUint64;
  p.op = ROp::kSum;
  p.sendbuf = &in;
  p.recvbuf = &out;
  p.skip = false;
  engine_->set_step_delay(nullptr);
  // The fastest run of each (below).
  double core_min = std::numeric_limits<double>::infinity(), direct_min = core_min;
  uint32_t messages = 0;
  bool mine_failed = false;
  for (int i = 0; i < kIters && !mine_failed; ++i) {
    p.seq = kProbeSeq + static_cast<uint32_t>(i);
    RecursiveDoublingAllreduce core(p, &scratch_);
    const double t0 = clock_->now();
    if (!ok(engine_->run(&core))) {
      mine_failed = true;
      break;
    }
    const double t1 = clock_->now();
    if (!ok(rd_direct_allreduce(internal_, ring_, pos_, &in, &out, 1, DType::kUint64, ROp::kSum,
                                &scratch_, wait_, kProbeSeq + i, nullptr, &messages))) {
      mine_failed = true;
      break;
    }
    const double t2 = clock_->now();
    core_min = std::min(core_min, t1 - t0);
    direct_min = std::min(direct_min, t2 - t1);
  }
  // Each rank's fastest run of each (what the machine adds, another process on the core or the
  // network stack's work, only ever lengthens a run), summed over the ranks before the
  // difference. Per rank the two runs are not comparable: the ranks leave one collective at
  // different moments, so one whose partner is behind waits in its core run and another in its
  // direct run, and that skew persists over the iterations (4 emulated hosts, 2 cores: fastest
  // core run 680 us against 29 us direct on two ranks, 31 against 660 on the other two). It
  // moves waiting from one rank's run to its partner's, so it cancels in the sums. Per rank
  // (the median's difference, the most over the ranks) it gave 350-860 us a message in such
  // periods against 15-90 in quiet ones, and turned the late chain off for the whole job
  // (late_chain_pays prices the census with sigma).
  std::vector<double> mine = {0, 0, 0, mine_failed ? 1.0 : 0.0}, all = {0, 0, 0, 0};
  if (!mine_failed) {
    mine[0] = core_min;
    mine[1] = direct_min;
    mine[2] = messages;
  }
  MPI_Request reqs[2];
  WaitWhat w;
  w.what = "communicator setup: the engine probe's closing all-reduce";
  Status st = wait_collectives(
      PMPI_Iallreduce(mine.data(), all.data(), 4, MPI_DOUBLE, MPI_SUM, internal_, &reqs[0]),
      &reqs[0], 1, wait_, w, nullptr, &mine, &all);
  if (ok(st)) {
    st = wait_collectives(PMPI_Ibarrier(internal_, &reqs[1]), &reqs[1], 1, wait_, w, nullptr);
  }
  if (!ok(st)) {
    *failed = true;
    return cost_.sigma_s;
  }
  *failed = all[3] != 0;
  SKIPRING_LOG_DEBUG(
      "engine probe: fastest runs summed over the ranks: core {:.1f} us, direct "
      "{:.1f} us, {} messages",
      all[0] * 1e6, all[1] * 1e6, all[2]);
  return all[2] > 0 ? std::max(0.0, all[0] - all[1]) / all[2] : 0.0;
}

std::string Communicator::describe_selection(size_t max_bytes) {
  if (Status st = ensure_cost_params(); !ok(st)) {
    return fmt::format("cost model: measurement failed ({})\n", status_string(st));
  }
  const TopologySummary& t = topo_summary_;
  std::string out =
      fmt::format("cost model ({} ranks, {} hosts, at most {} per host{}): {}\n", t.n, t.hosts,
                  t.max_local, t.overlap ? "" : ", more ranks than cores", cost_.to_string());
  out +=
      fmt::format("SKIPRING_ALGO={}{}\n", algo_name(cfg_.algo),
                  cfg_.algo == Algo::kAuto ? "" : " (forced: the table shows what auto would do)");
  out += decision_table(t, cost_, cfg_.segment_bytes, cfg_.skip, max_bytes);
  return out;
}

Algo Communicator::choose_algo(size_t bytes) {
  if (cfg_.algo != Algo::kAuto) return cfg_.algo;
  // Applications repeat sizes: the last decision is kept (the model costs ~100 ns per call,
  // as much as a third of an 8-byte all-reduce on shared memory).
  const auto decide = [&]() {
    if (bytes == last_choice_bytes_ && cfg_.skip == last_choice_skip_) return true;
    if (!ok(ensure_cost_params())) return false;  // broken: the caller checks
    last_choice_ = select_algo_stragglers(bytes, topo_summary_, cost_, cfg_.segment_bytes,
                                          cfg_.skip, stragglers_seen_, cfg_.auto_straggler);
    last_choice_bytes_ = bytes;
    last_choice_skip_ = cfg_.skip;
    return true;
  };
  if (!decide()) return Algo::kRing;
  // The straggler agreement is collective: every rank made the same choice for this call, so
  // every rank counts the same engine all-reduces. Recursive doubling (the small sizes' direct
  // path) is neither watched nor counted: an agreement every few calls there would add a small
  // all-reduce's latency to them. An agreement that turns the preference on drops the cached
  // choice (agree_stragglers), so decide() runs again. Broken on failure.
  if (last_choice_ != Algo::kRd && last_choice_ != Algo::kMpi && straggler_watch()) {
    if (!ok(agree_stragglers()) || !decide()) return Algo::kRing;
  }
  return last_choice_;
}

Status Communicator::agree_stragglers() {
  if (++auto_calls_ % kStragglerAgreeEvery != 0) return Status::kOk;
  // One int under MAX: did any rank see a late arrival since the last agreement? Every rank
  // gets here at the same auto all-reduce, and all get the same answer.
  std::vector<int> mine(1, late_local_ ? 1 : 0), all(1, 0);
  WaitWhat w;
  w.what = "the straggler agreement of SKIPRING_AUTO_STRAGGLER before the all-reduce";
  w.seq = static_cast<int64_t>(seq_);
  MPI_Request req;
  const Status st = wait_collectives(
      PMPI_Iallreduce(mine.data(), all.data(), 1, MPI_INT, MPI_MAX, internal_, &req), &req, 1,
      wait_, w, nullptr, &mine, &all);
  if (!ok(st)) {
    note_error(st, seq_, "the straggler agreement (SKIPRING_AUTO_STRAGGLER) failed");
    return st;
  }
  if (all[0] != 0) {
    stragglers_seen_ = true;
    last_choice_bytes_ = SIZE_MAX;  // decide again with the skip-ahead preference
    if (rank_ == 0) {
      SKIPRING_LOG_INFO(
          "auto: late arrivals seen on this communicator (before all-reduce #{}): skip-ahead "
          "preferred where it costs at most {}x the cheapest (SKIPRING_AUTO_STRAGGLER)",
          seq_, cfg_.auto_straggler);
    }
  }
  return Status::kOk;
}

void Communicator::observe_lateness(Algo algo, size_t bytes, bool skipped) {
  if (late_local_) return;
  if (skipped) {
    // Skip-ahead met a late predecessor (the threshold already separates it from noise).
    late_local_ = last_stats_.skips > 0 || last_stats_.late_pieces > 0;
    return;
  }
  // Any other algorithm: this rank waited for someone when the collective took longer than
  // SKIPRING_ALPHA times its modelled time plus the skip threshold's floor (the same margin
  // skip-ahead uses before it calls a predecessor late).
  const double model = algo_cost(algo, bytes, topo_summary_, cost_, cfg_.segment_bytes);
  if (std::isfinite(model) && last_stats_.time_s() > cfg_.alpha * model + skip_floor_s_) {
    late_local_ = true;
  }
}

// The late chain's reference time for a size: the fastest call of this size seen here with
// nobody taken out, the cost model's time before any (0 where it has none).
double Communicator::late_usual_time_s(size_t bytes) const {
  const auto it = fastest_s_.find(bytes);
  const double t = it != fastest_s_.end() ? it->second
                                          : algo_cost(Algo::kSkipRing, bytes, topo_summary_, cost_,
                                                      cfg_.segment_bytes);
  return std::isfinite(t) ? t : 0;
}

// The late path's plan for this call (collectives/late_plan.h) from the agreed configuration,
// size, topology and cost model and this communicator's memory.
LatePlan Communicator::plan_late(Algo algo, size_t bytes) const {
  LatePlanInput li;
  li.skip = true;
  li.skipring = true;
  li.bytes = bytes;
  li.n = size_;
  li.hosts = topo_summary_.hosts;
  li.late_chain = cfg_.late_chain;
  li.late_wait_us = cfg_.late_wait_us;
  li.late_wait_suspect_us = cfg_.late_wait_suspect_us;
  li.late_segment_bytes = cfg_.late_segment_bytes;
  li.late_inflight = cfg_.late_inflight;
  li.segment_bytes = cfg_.segment_bytes;
  li.census_s = 2 * cost_.inter_alpha_s + 2.0 * size_ * cost_.sigma_s;
  li.skip_floor_s = skip_floor_s_;
  if (cfg_.late_chain != 0) {  // the models only where they are read
    li.ring_model_s = algo_cost(algo, bytes, topo_summary_, cost_, cfg_.segment_bytes);
    li.usual_s = late_usual_time_s(bytes);
  }
  return plan_late_path(li);
}

Status Communicator::allreduce(const void* sendbuf, void* recvbuf, size_t count, DType dtype,
                               ROp op) {
  if (broken_) return refuse_broken("allreduce");
  // The ring order and sizes were checked at creation; the C API checked op, type and buffers.
  if (!op_valid(op, dtype)) return Status::kErrOp;
  if (cfg_.check) {
    SKIPRING_RETURN_IF_ERROR(agree_call("allreduce", count, dtype, static_cast<int>(op), -1));
  }
  RingParams& p = params_;
  p.count = count;
  p.dtype = dtype;
  p.op = op;
  p.sendbuf = sendbuf;
  p.recvbuf = recvbuf;
  p.seq = static_cast<uint32_t>(seq_);
  const size_t bytes = count * dtype_size(dtype);
  // The `mpi` row runs the direct recursive doubling for what MPI cannot reduce right
  // (mpi_runs): every rank decides alike (agreed type and op).
  const Algo chosen = choose_algo(bytes);
  const Algo algo = chosen == Algo::kMpi && !mpi_runs(dtype, op) ? Algo::kRd : chosen;
  const size_t chunk_bytes = bytes / std::max(1, size_) + dtype_size(dtype);
  // The ring's segments (skip-ahead or not) across hosts: at least 8 per chunk where that keeps
  // them at 128 KiB or more (cross_host_segment_bytes), and the lead-in (RingLayout). Every rank
  // derives them from the agreed count and topology.
  const bool ring = algo == Algo::kRing || algo == Algo::kSkipRing;
  p.segment_bytes = ring ? cross_host_segment_bytes(cfg_.segment_bytes, chunk_bytes,
                                                    static_cast<size_t>(topo_summary_.hosts))
                         : cfg_.segment_bytes;
  p.lead_in = ring && topo_summary_.hosts > 1;
  const size_t seg_bytes = std::min(chunk_bytes, p.segment_bytes);
  if (broken_) return refuse_broken("allreduce");  // the cost model's measurement failed
  if (algo == Algo::kRd && bytes > static_cast<size_t>(INT32_MAX)) {
    // Recursive doubling sends the whole vector in one MPI message, whose count is an int.
    // Local: every rank with this count stops here before sending anything.
    SKIPRING_LOG_ERROR(
        "allreduce #{}: {} elements of {} bytes ({} bytes) exceed what recursive doubling can "
        "send in one MPI message ({} bytes); use another SKIPRING_ALGO for this size",
        seq_, count, dtype_size(dtype), bytes, INT32_MAX);
    return Status::kErrCount;
  }
  // The MPI library's own all-reduce (runtime/communicator_mpi.cpp): auto picks it at small
  // sizes where the measured cost model finds it faster.
  if (algo == Algo::kMpi) return mpi_allreduce(sendbuf, recvbuf, count, dtype, op);
  // Recursive doubling with nothing asking for per-step records on any rank (agreed at setup):
  // straight on MPI (runtime/rd_direct.h), without the core's per-message headers and action
  // lists.
  if (algo == Algo::kRd && !any_records_ && inject_.empty() && !cfg_.check) {
    // Timed like the engine's collectives (two clock reads, tens of ns), so that time_s in
    // skipring_last_stats, the totals and the PMPI report line cover this path too.
    last_stats_ = CollectiveStats{};
    CollectiveStats& s = last_stats_;
    s.seq = seq_;
    s.bytes = bytes;
    s.algo = static_cast<int>(algo);
    std::string timeout;
    s.start = clock_->now();
    const Status st =
        rd_direct_allreduce(internal_, ring_, pos_, sendbuf, recvbuf, count, dtype, op, &scratch_,
                            wait_, s.seq, &timeout, &s.messages_sent, &s.messages_received);
    s.end = clock_->now();
    ++seq_;
    if (!ok(st)) {
      // The same words as the engine's collectives (finish_collective).
      const std::string why =
          st == Status::kErrTimeout
              ? fmt::format("allreduce seq {} timed out (SKIPRING_TIMEOUT={} s)", s.seq,
                            cfg_.timeout_s)
              : fmt::format("allreduce seq {} failed: {} (recursive doubling)", s.seq,
                            status_string(st));
      SKIPRING_LOG_ERROR("allreduce seq {} failed: {}{}", s.seq,
                         st == Status::kErrTimeout ? timeout : status_string(st),
                         keeps_usable(st) ? "" : "; this communicator is unusable from now on");
      note_error(st, s.seq, why);
    }
    return st;
  }
  // Skip-ahead runs in the rows that have it (the ring, also inside hier); "ring" is the ring
  // with skipping off.
  p.skip = cfg_.skip && algo_row(algo).skip_ahead;
  if (p.skip) {
    p.skip_threshold_s = skip_threshold(seg_bytes, bytes);
    if (broken_) return refuse_broken("allreduce");
  }
  const bool one_host = topo_summary_.hosts == 1;
  p.direct_allgather = cfg_.direct_allgather < 0 ? one_host : cfg_.direct_allgather == 1;
  p.quiet_polls = one_host ? 4 : 1;
  // The late path (collectives/late_chain.h), planned by a pure function of agreed values
  // (collectives/late_plan.h) and the coordinator's memory: every rank decides alike.
  // Only skip-ahead's ring can take the late path: other calls fill no plan input.
  const LatePlan plan = p.skip && algo == Algo::kSkipRing ? plan_late(algo, bytes) : LatePlan{};
  const bool late_chain = plan.late_path;
  if (late_chain) {
    p.late_segment_bytes = plan.segment_bytes;
    p.late_inflight = plan.inflight;
    p.late_wait_s = plan.wait_s;
    p.late_seen_s = late_seen_s_;
    p.late_wait_suspect_s = plan.wait_suspect_s;
    SKIPRING_LOG_DEBUG("allreduce seq {}: {}", seq_, plan.to_string());
  }
  SKIPRING_LOG_TRACE("allreduce seq {} bytes {} skip {} threshold {:.6f}s", seq_, bytes, p.skip,
                     p.skip_threshold_s);
  // Straggler injection: late arrival here, slow steps through the engine.
  if (!inject_.empty()) {
    const double arrive = inject_.delay(rank_, seq_, InjectPoint::kArrive, 0);
    if (arrive > 0) std::this_thread::sleep_for(std::chrono::duration<double>(arrive));
    const uint64_t seq = seq_;
    engine_->set_step_delay([this, seq](Phase ph, int step) {
      return inject_.delay(
          rank_, seq,
          ph == Phase::kReduceScatter ? InjectPoint::kReduceScatter : InjectPoint::kAllgather,
          step);
    });
  } else {
    engine_->set_step_delay(nullptr);
  }
  // The algorithm table's factory (collectives/algorithms.h); choose_algo never returns auto.
  const AlgoFactory make = algo_row(algo).make;
  std::unique_ptr<CollectiveCore> core;
  Status st = Status::kOk;
  const LateChainAllreduce* chain_core = nullptr;
  if (late_chain) {
    auto c = std::make_unique<LateChainAllreduce>(p, &scratch_);
    chain_core = c.get();
    core = std::move(c);
  } else {
    st = make != nullptr ? make(algo_ctx_, &core) : Status::kErrInternal;
  }
  if (!ok(st)) {
    const std::string why = fmt::format("allreduce #{}: building {} failed: {}", seq_,
                                        algo_name(algo), status_string(st));
    SKIPRING_LOG_ERROR("{}", why);
    note_error(st, seq_, why);
    ++seq_;
    return st;
  }
  st = finish_collective(core.get(), engine_->run(core.get()), "allreduce", static_cast<int>(algo));
  if (!ok(st)) return st;
  if (late_chain) {
    // The coordinator's memory for the next census (empty on the other ranks).
    late_seen_s_ = chain_core->lateness();
    if (last_stats_.late_excluded == 0) {
      // The coordinator (the only rank whose waits count) times from the last arrival: a rank
      // kept in and late must not make the usual time look longer (a first call slowed by
      // connection setup neither: the minimum forgets it).
      double t = last_stats_.time_s();
      if (!late_seen_s_.empty()) {
        t -= std::max(0.0, *std::max_element(late_seen_s_.begin(), late_seen_s_.end()));
      }
      auto it = fastest_s_.try_emplace(bytes, t).first;
      it->second = std::min(it->second, t);
    }
  }
  if (straggler_watch()) observe_lateness(algo, bytes, p.skip);
  if (p.skip) {
    const int pred = ring_[(pos_in_ring() - 1 + size_) % size_];
    if (last_stats_.rs_piece_wait_max > 0) {
      timer_.observe(pred, last_stats_.rs_piece_wait_max, seg_bytes);
    } else if (last_stats_.pred_behind) {
      timer_.observe_behind(pred);
    }
  }
  return Status::kOk;
}

}  // namespace skipring
