// Communicator setup: create(), the agreement all-reduces that decide what a new communicator
// takes from the process-wide caches (runtime/setup_cache.h) and check that every rank runs
// the same protocol-relevant configuration, the destructor, and the error bookkeeping.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/log.h"
#include "runtime/mpi_transport.h"
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
// SKIPRING_SKIP_MIN_WAIT_US set to a value (empty means the default, as for every variable).
bool min_wait_given() {
  const char* v = std::getenv("SKIPRING_SKIP_MIN_WAIT_US");
  return v != nullptr && *v != '\0';
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
  // Every rank has a value (1) and the same digest at `digest`.
  bool all_same(int have, int digest) const { return min(have) == 1 && same(digest); }

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

// This host (or kernel) runs more of the communicator's ranks than it has cores (logged once,
// on rank 0, when that raises the skip threshold's floor).
bool oversubscribed_host(MPI_Comm comm, const Topology& topology, int rank) {
#ifdef SKIPRING_SIMGRID
  (void)comm;
  (void)topology;
  (void)rank;
  return false;
#else
  MPI_Comm local = MPI_COMM_NULL;
  int local_size = 1;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
    MPI_Comm_size(local, &local_size);
    MPI_Comm_free(&local);
  }
  // Ranks under one kernel share its cores even when MPI sees them on different hosts
  // (containers, network namespaces with their own hostname: scripts/vcluster.sh runs 4 or 8
  // "hosts" on 2 cores).
  local_size = std::max(local_size, ranks_sharing_kernel(topology, rank));
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const bool over = cores > 0 && local_size > cores;
  if (over && !min_wait_given() && rank == 0) {
    SKIPRING_LOG_INFO(
        "{} ranks on a host (or under one kernel) with {} cores: skip threshold floor {} ms "
        "(set SKIPRING_SKIP_MIN_WAIT_US to override)",
        local_size, cores, kOversubscribedFloorS * 1e3);
  }
  return over;
#endif
}

// The smallest L2 cache size this rank knows of (1 MiB when the system does not say).
long l2_cache_bytes() {
  long l2 = -1;
#ifdef _SC_LEVEL2_CACHE_SIZE
  l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  return l2 <= 0 ? 1 << 20 : l2;
}

}  // namespace

// The steps of Communicator::setup_shared_state. One all-reduce (MinMax) on the application's
// communicator, in the collective the application is calling, carries: the digest of every
// value that must match (mismatch: an error on every rank), whether any rank wants per-step
// records, the smallest L2 cache, whether every rank holds the same cached topology (group) and
// cost parameters (shape), and the same pooled internal communicator (then no MPI_Comm_dup: it
// costs as much as the rest). A communicator whose group is new pays a second one after the
// topology gather (the oversubscription flag and the cost decision, which needs the shape).
class CommunicatorSetup {
 public:
  CommunicatorSetup(Communicator* c, MPI_Comm user, const Config& cfg)
      : c_(*c), user_(user), cfg_(cfg), gkey_(group_key(user, c->size_, cfg)) {}
  // The offered pooled communicator goes back to the pool unless taken.
  ~CommunicatorSetup() {
    if (pooled_ != MPI_COMM_NULL) SetupCache::get().put_back(gkey_, pooled_id_, pooled_);
  }
  CommunicatorSetup(const CommunicatorSetup&) = delete;
  CommunicatorSetup& operator=(const CommunicatorSetup&) = delete;

  Status run();

 private:
  void take_offers();
  Status agree();
  Status report_mismatch();
  Status adopt_internal();
  Status learn_group(int* any_over, bool* cost_reused);
  void adopt_cost(double cache_bytes, bool cost_reused);

  Communicator& c_;
  MPI_Comm user_;
  const Config& cfg_;
  const std::string gkey_;
  std::vector<AgreedValue> values_;
  // What this rank offers from the caches.
  int64_t pooled_id_ = -1;
  MPI_Comm pooled_ = MPI_COMM_NULL;
  GroupEntry group_;
  bool have_group_ = false;
  CostEntry cost_;
  bool have_cost_ = false;
  // The agreement all-reduce and the indices of its values.
  MinMax mm_;
  std::vector<int> value_idx_;
  int i_records_ = 0, i_l2_ = 0, i_group_have_ = 0, i_group_ = 0, i_cost_have_ = 0, i_cost_ = 0,
      i_pooled_ = 0, i_fresh_ = 0;
};

void CommunicatorSetup::take_offers() {
  SetupCache& cache = SetupCache::get();
  cache.take_pooled(gkey_, &pooled_id_, &pooled_);
  have_group_ = cache.find_group(gkey_, &group_);
  if (have_group_) {
    c_.model_.key = cost_key(group_.topology, group_.any_over, cfg_);
    have_cost_ = cache.find_cost(c_.model_.key, &cost_);
  }
}

Status CommunicatorSetup::agree() {
  values_ = agreed_values(cfg_);
  const bool records =
      !c_.inject_.empty() || !cfg_.trace_dir.empty() || cfg_.log_level <= LogLevel::kDebug;
  for (const AgreedValue& v : values_) value_idx_.push_back(mm_.add(v.digest));
  i_records_ = mm_.add(records ? 1 : 0);
  i_l2_ = mm_.add(l2_cache_bytes());
  i_group_have_ = mm_.add(have_group_ ? 1 : 0);
  i_group_ = mm_.add(have_group_ ? group_.digest : -1);
  i_cost_have_ = mm_.add(have_cost_ ? 1 : 0);
  i_cost_ = mm_.add(have_cost_ ? cost_.digest : -1);
  i_pooled_ = mm_.add(pooled_id_);
  // A new internal communicator's id: rank 0's draw (the others add 0 to the maximum).
  static std::atomic<uint64_t> draws{0};
  const int64_t fresh =
      c_.rank_ == 0
          ? digest62(fmt::format("{}.{}.{}", getpid(), draws.fetch_add(1),
                                 std::chrono::steady_clock::now().time_since_epoch().count()))
          : 0;
  i_fresh_ = mm_.add(fresh);
  if (Status st = mm_.reduce(user_, c_.wait_, "communicator setup: the agreement all-reduce");
      !ok(st)) {
    SKIPRING_LOG_ERROR("communicator setup: the agreement all-reduce failed ({})",
                       status_string(st));
    return st;
  }
  return Status::kOk;
}

Status CommunicatorSetup::report_mismatch() {
  // Mismatched values: every rank sees the same list (the min/max are the same everywhere),
  // so every rank takes part in the one all-gather that names who holds what.
  std::vector<std::string> mine;
  std::vector<const char*> names;
  for (size_t i = 0; i < values_.size(); ++i) {
    if (mm_.same(value_idx_[i])) continue;
    mine.push_back(values_[i].shown);
    names.push_back(values_[i].name);
  }
  if (mine.empty()) return Status::kOk;
  std::vector<std::vector<std::string>> all;
  if (!ok(gather_texts(user_, c_.size_, mine, c_.wait_, &all))) {
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
      c_.size_, text);
  return Status::kErrConfig;
}

Status CommunicatorSetup::adopt_internal() {
  // internal_: the pooled communicator every rank offered, or a new duplicate.
  InternalComm& internal = c_.internal_;
  internal.pool_key = gkey_;
  if (mm_.min(i_pooled_) >= 0 && mm_.same(i_pooled_)) {
    internal.comm = pooled_;
    internal.id = pooled_id_;
    pooled_ = MPI_COMM_NULL;
    return Status::kOk;
  }
  // The new handle lives on the heap until the duplicate exists: MPI writes it at completion,
  // which a timeout leaves pending (the handle is then leaked with it).
  std::vector<MPI_Comm> dup(1, MPI_COMM_NULL);
  MPI_Request req;
#ifdef SKIPRING_SIMGRID
  // SMPI 3.32 has no MPI_Comm_idup (and SimGrid reports deadlocks itself).
  if (MPI_Comm_dup(user_, dup.data()) != MPI_SUCCESS) return Status::kErrComm;
  req = MPI_REQUEST_NULL;
#else
  if (MPI_Comm_idup(user_, dup.data(), &req) != MPI_SUCCESS) return Status::kErrComm;
#endif
  WaitWhat w;
  w.what = "communicator setup: duplicating the communicator";
  if (Status st = wait_collectives(MPI_SUCCESS, &req, 1, c_.wait_, w, nullptr, &dup); !ok(st)) {
    return st == Status::kErrTimeout ? st : Status::kErrComm;
  }
  internal.comm = dup[0];
  // Errors of skipring's own traffic come back as codes (the application's communicator may
  // have MPI_ERRORS_ARE_FATAL, which a dup inherits): a truncated message from a rank with
  // a different count is then a protocol error on this rank, not the end of the job.
  MPI_Comm_set_errhandler(internal.comm, MPI_ERRORS_RETURN);
  internal.id = mm_.max(i_fresh_);
  return Status::kOk;
}

Status CommunicatorSetup::learn_group(int* any_over, bool* cost_reused) {
  // Node-aware ring order from the gathered topology (one MPI_Allgather; every rank gets the
  // same result, so a bad SKIPRING_HOST_MAP fails on all ranks alike).
  std::string why;
  const MPI_Comm comm = c_.internal_.comm;
  if (Status st = gather_topology(comm, cfg_.host_map, c_.wait_, &c_.topology_, &why); !ok(st)) {
    SKIPRING_LOG_ERROR("communicator setup: {}", why);
    return st;
  }
  const bool oversubscribed = oversubscribed_host(comm, c_.topology_, c_.rank_);
  if (oversubscribed && !min_wait_given()) {
    c_.straggler_.skip_floor_s = std::max(c_.straggler_.skip_floor_s, kOversubscribedFloorS);
  }
  // The cost model's overlap must be the same on every rank (it picks the algorithm): the
  // communicator is oversubscribed when any of its hosts is. Second all-reduce: that flag
  // and the cost cache's decision for this shape. Both possible keys are looked up; the agreed
  // flag picks one.
  MinMax m2;
  const int j_over = m2.add(oversubscribed ? 1 : 0);
  CostEntry c0, c1;
  const bool h0 = SetupCache::get().find_cost(cost_key(c_.topology_, 0, cfg_), &c0);
  const bool h1 = SetupCache::get().find_cost(cost_key(c_.topology_, 1, cfg_), &c1);
  const int j_h0 = m2.add(h0 ? 1 : 0), j_c0 = m2.add(h0 ? c0.digest : -1);
  const int j_h1 = m2.add(h1 ? 1 : 0), j_c1 = m2.add(h1 ? c1.digest : -1);
  if (Status st = m2.reduce(comm, c_.wait_, "communicator setup: the second agreement all-reduce");
      !ok(st)) {
    SKIPRING_LOG_ERROR("communicator setup: the second agreement all-reduce failed ({})",
                       status_string(st));
    return st;
  }
  *any_over = static_cast<int>(m2.max(j_over));
  c_.model_.key = cost_key(c_.topology_, *any_over, cfg_);
  *cost_reused = *any_over ? m2.all_same(j_h1, j_c1) : m2.all_same(j_h0, j_c0);
  if (*cost_reused) cost_ = *any_over ? c1 : c0;
  if (!gkey_.empty()) {
    GroupEntry e;
    e.topology = c_.topology_;
    e.local_over = oversubscribed && !min_wait_given();
    e.any_over = *any_over;
    e.digest = group_digest(gkey_, e);
    SetupCache::get().store_group(gkey_, std::move(e));
  }
  return Status::kOk;
}

void CommunicatorSetup::adopt_cost(double cache_bytes, bool cost_reused) {
  CostModel& m = c_.model_;
  const bool model_given =
      cfg_.model_lat_us > 0 && cfg_.model_gbps > 0 && cfg_.model_reduce_gbps > 0;
  if (model_given) {
    // Nothing left to measure but the engine's per-message cost, the cache size and the
    // out-of-cache slowdown: defaults for the last two and sigma, the smallest L2 over ranks.
    CostParams p;
    p.alpha_s = p.inter_alpha_s = cfg_.model_lat_us * 1e-6;
    p.beta_s = p.inter_beta_s = 1.0 / (cfg_.model_gbps * 1e9);
    p.gamma_s = 1.0 / (cfg_.model_reduce_gbps * 1e9);
    p.cache_bytes = cache_bytes;
    m.cost = p;
    m.measured = true;
    if (c_.rank_ == 0) {
      SKIPRING_LOG_DEBUG("cost model (given by SKIPRING_MODEL_*): {}", m.cost.to_string());
    }
  } else if (cost_reused) {
    m.cost = cost_.cost;
    m.measured = true;
    if (c_.rank_ == 0) {
      SKIPRING_LOG_DEBUG("cost model (reused for this shape): {}", m.cost.to_string());
    }
  }
}

Status CommunicatorSetup::run() {
  SetupCache::get().watch_finalize();
  take_offers();
  SKIPRING_RETURN_IF_ERROR(agree());
  SKIPRING_RETURN_IF_ERROR(report_mismatch());
  SKIPRING_RETURN_IF_ERROR(adopt_internal());
  const bool group_reused = mm_.all_same(i_group_have_, i_group_);
  bool cost_reused = group_reused && mm_.all_same(i_cost_have_, i_cost_);
  SKIPRING_LOG_DEBUG("communicator setup: internal communicator {}, topology {}, cost model {}",
                     c_.internal_.id == pooled_id_ ? "reused" : "new",
                     group_reused ? "reused" : "gathered",
                     mm_.all_same(i_cost_have_, i_cost_) ? "reused" : "not cached");
  c_.any_records_ = mm_.max(i_records_) != 0;
  int any_over = 0;
  if (group_reused) {
    c_.topology_ = group_.topology;
    any_over = group_.any_over;
    if (group_.local_over) {
      c_.straggler_.skip_floor_s = std::max(c_.straggler_.skip_floor_s, kOversubscribedFloorS);
    }
  } else {
    SKIPRING_RETURN_IF_ERROR(learn_group(&any_over, &cost_reused));
  }
  c_.model_.topo.overlap = any_over == 0;
  adopt_cost(static_cast<double>(mm_.min(i_l2_)), cost_reused);
  return Status::kOk;
}

Status Communicator::setup_shared_state(MPI_Comm user, const Config& cfg) {
  CommunicatorSetup setup(this, user, cfg);
  return setup.run();
}

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
  if (keeps_usable(st) || broken_.on) return;
  broken_.on = true;
  bump_front();
  broken_.status = st;
  broken_.seq = seq;
  broken_.reason = reason.empty() ? status_string(st) : reason;
}

Status Communicator::make_transport(int* tag_span) {
  if (cfg_.transport == TransportKind::kUcx) {
    std::unique_ptr<UcxTransport> ucx;
    SKIPRING_RETURN_IF_ERROR(UcxTransport::create(
        internal_.comm, wait_, preferred_ucx_net_device(topology_, rank_), &ucx));
    *tag_span = ucx->tag_span();
    transport_ = std::move(ucx);
  } else {
    auto mpi = std::make_unique<MpiTransport>(internal_.comm);
    *tag_span = mpi->tag_span();
    transport_ = std::move(mpi);
  }
  return Status::kOk;
}

Status Communicator::create(MPI_Comm user, const Config& cfg, const InjectPlan& inject,
                            std::unique_ptr<Communicator>* out) {
  std::unique_ptr<Communicator> c(new Communicator());
  if (MPI_Comm_rank(user, &c->rank_) != MPI_SUCCESS ||
      MPI_Comm_size(user, &c->size_) != MPI_SUCCESS) {
    return Status::kErrComm;
  }
  c->cfg_ = cfg;
  c->straggler_.skip_floor_s = cfg.skip_min_wait_us * 1e-6;
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
  SKIPRING_RETURN_IF_ERROR(c->make_transport(&tag_span));
  TopologySummary& topo = c->model_.topo;
  topo.n = c->size_;
  topo.hosts = c->topology_.num_hosts();
  for (const auto& h : c->topology_.host_ranks) {
    topo.ranks_per_host.push_back(static_cast<int>(h.size()));
    topo.max_local = std::max<int>(topo.max_local, static_cast<int>(h.size()));
  }
#ifndef SKIPRING_SIMGRID
  // Over skipring's UCX transport the rendezvous is UCX's (RDMA or its own TCP protocol); under
  // SimGrid the platform's links are a model, and its records list no devices.
  topo.socket_links = cfg.transport == TransportKind::kMpi && hosts_joined_by_sockets(c->topology_);
#endif
  if (!cfg.tree_graph.empty()) {
    LinkGraph& g = c->model_.tree_graph;
    if (Status st = LinkGraph::load(cfg.tree_graph, &g, &why); !ok(st)) {
      SKIPRING_LOG_ERROR("SKIPRING_TREE_GRAPH={}: {}", cfg.tree_graph, why);
      return Status::kErrConfig;
    }
    if (g.nodes() != c->size_ || !g.connected()) {
      SKIPRING_LOG_ERROR("SKIPRING_TREE_GRAPH={}: {} nodes{} for a communicator of {} ranks",
                         cfg.tree_graph, g.nodes(), g.connected() ? "" : " (not connected)",
                         c->size_);
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

Communicator::~Communicator() {
  // Every rank has the same rested calls' agreements pending (from the agreed plans): complete
  // them, unless the communicator is broken (its peers may be gone): then leave their buffers.
  if (!broken_.on) {
    (void)read_rest_agreements(true);
  }
  for (auto& a : straggler_.rest_agreements) {
    leak_pending(&a.mine);  // MPI may still write them
    leak_pending(&a.all);
  }
  transport_.reset();
  // Broken communicators may have messages in flight: never pooled.
  SetupCache::get().release(&internal_, !broken_.on);
}

}  // namespace skipring
