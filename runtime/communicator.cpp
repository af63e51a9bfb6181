// Communicator implementation: runs one collective through the progress engine.
#include "runtime/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "collectives/algorithms.h"
#include "collectives/recursive_doubling.h"
#include "collectives/ring_allreduce.h"
#include "collectives/select.h"
#include "runtime/cost_probe.h"
#include "runtime/log.h"
#include "runtime/progress_engine.h"
#include "runtime/rd_direct.h"
#include "runtime/topology_gather.h"
#include "topology/ring_order.h"

namespace skipring {
namespace {
// A CFS time slice is a few ms: with more busy ranks than cores a healthy rank is regularly
// off its core that long (measured on 4 ranks / 2 cores: the learnt threshold of 1.6-2 ms
// skipped healthy ranks tens of times per 8 MiB all-reduce, costing 8-19 %).
constexpr double kOversubscribedFloorS = 5e-3;
}  // namespace

Status Communicator::create(MPI_Comm user, const Config& cfg, const InjectPlan& inject,
                            std::unique_ptr<Communicator>* out) {
  std::unique_ptr<Communicator> c(new Communicator());
  if (MPI_Comm_dup(user, &c->internal_) != MPI_SUCCESS) return Status::kErrComm;
  MPI_Comm_rank(c->internal_, &c->rank_);
  MPI_Comm_size(c->internal_, &c->size_);
  c->cfg_ = cfg;
  c->skip_floor_s_ = cfg.skip_min_wait_us * 1e-6;
#ifndef SKIPRING_SIMGRID
  {
    MPI_Comm local = MPI_COMM_NULL;
    int local_size = 1;
    if (MPI_Comm_split_type(c->internal_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) ==
        MPI_SUCCESS) {
      MPI_Comm_size(local, &local_size);
      MPI_Comm_free(&local);
    }
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const bool oversubscribed = cores > 0 && local_size > cores;
    // The cost model's overlap must be the same on every rank (it picks the algorithm): the
    // communicator is oversubscribed when any of its hosts is.
    int over = oversubscribed ? 1 : 0, any_over = over;
    PMPI_Allreduce(&over, &any_over, 1, MPI_INT, MPI_MAX, c->internal_);
    c->topo_summary_.overlap = any_over == 0;
    if (oversubscribed && std::getenv("SKIPRING_SKIP_MIN_WAIT_US") == nullptr) {
      c->skip_floor_s_ = std::max(c->skip_floor_s_, kOversubscribedFloorS);
      if (c->rank_ == 0) {
        SKIPRING_LOG_INFO(
            "{} ranks on a host with {} cores: skip threshold floor {} ms "
            "(set SKIPRING_SKIP_MIN_WAIT_US to override)",
            local_size, cores, kOversubscribedFloorS * 1e3);
      }
    }
  }
#endif
  // Node-aware ring order from the gathered topology (one MPI_Allgather; every rank gets the
  // same result, so a bad SKIPRING_HOST_MAP fails on all ranks alike).
  std::string why;
  if (Status st = gather_topology(c->internal_, cfg.host_map, &c->topology_, &why); !ok(st)) {
    SKIPRING_LOG_ERROR("communicator setup: {}", why);
    return st;
  }
  c->ring_ = c->topology_.ring;
  if (!ring_is_valid(c->ring_, c->size_, &why)) {
    SKIPRING_LOG_ERROR("ring order: {}", why);
    return Status::kErrInternal;
  }
  c->pos_ =
      static_cast<int>(std::find(c->ring_.begin(), c->ring_.end(), c->rank_) - c->ring_.begin());
  c->transport_ = std::make_unique<MpiTransport>(c->internal_);
  c->clock_ = make_clock(cfg.clock);
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
  c->params_.tag_span = c->transport_->tag_span();
  Communicator* self = c.get();
  c->algo_ctx_.params = &c->params_;
  c->algo_ctx_.scratch = &c->scratch_;
  c->algo_ctx_.host_of_rank = &c->topology_.host_of_rank;
  c->algo_ctx_.tree_plan = [self](int k, const MultiTreePlan** plan) {
    return self->tree_plan(k, plan);
  };
  c->algo_ctx_.multitree_k = cfg.multitree_k;
  c->inject_ = inject;
  *out = std::move(c);
  return Status::kOk;
}

Communicator::~Communicator() {
  transport_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && internal_ != MPI_COMM_NULL) MPI_Comm_free(&internal_);
}

double Communicator::skip_threshold(size_t segment_bytes) {
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
  // The formula itself is StepTimer::threshold's.
  const int pred = ring_[(pos_in_ring() - 1 + size_) % size_];
  ThresholdParams tp;
  tp.alpha = cfg_.alpha;
  tp.min_wait_s = skip_floor_s_;
  tp.fixed_T_s = cfg_.skip_t_us > 0 ? cfg_.skip_t_us * 1e-6 : 0;
  tp.fixed_trans_s = cfg_.skip_ttrans_us > 0 ? cfg_.skip_ttrans_us * 1e-6 : 0;
  if (cfg_.skip_t_us <= 0) {
    ensure_cost_params();  // collective: every rank gets here at the same call (same config)
    const auto& host = topology_.host_of_rank;
    const bool same_host = host.empty() || host[pred] == host[rank_];
    const double lat = same_host ? cost_.alpha_s : cost_.inter_alpha_s;
    const double beta = same_host ? cost_.beta_s : cost_.inter_beta_s;
    const double in_flight = std::max(1, cfg_.pipeline_depth / 2);
    tp.link_s = lat + in_flight * static_cast<double>(segment_bytes) * beta;
  }
  return timer_.threshold(pred, segment_bytes, tp);
}

void Communicator::ensure_cost_params() {
  if (!cost_measured_) {
    // The cost model's parameters, identical on every rank (one all-reduce inside).
    if (ok(measure_cost_params(internal_, ring_, topology_.host_of_rank, cfg_, *clock_, &cost_))) {
      measure_engine_sigma();
      if (rank_ == 0) SKIPRING_LOG_INFO("cost model: {}", cost_.to_string());
    } else {
      SKIPRING_LOG_WARN("cost model: measurement failed, using defaults {}", cost_.to_string());
    }
    cost_measured_ = true;
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
      ensure_cost_params();
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

void Communicator::measure_engine_sigma() {
  // sigma, the progress engine's cost per message: the same 8-byte recursive doubling run as a
  // core through the engine and straight on MPI (runtime/rd_direct.h); the difference per
  // message this rank sends. The probe collectives use sequence numbers no real collective has
  // and end with a barrier, so none of their messages can meet a real one.
  if (size_ < 2) return;
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
  std::vector<double> core_t, direct_t;
  uint32_t messages = 0;
  for (int i = 0; i < kIters; ++i) {
    p.seq = kProbeSeq + static_cast<uint32_t>(i);
    RecursiveDoublingAllreduce core(p, &scratch_);
    const double t0 = clock_->now();
    if (!ok(engine_->run(&core))) return;
    const double t1 = clock_->now();
    if (!ok(rd_direct_allreduce(internal_, ring_, pos_, &in, &out, 1, DType::kUint64, ROp::kSum,
                                &scratch_, &messages))) {
      return;
    }
    const double t2 = clock_->now();
    core_t.push_back(t1 - t0);
    direct_t.push_back(t2 - t1);
  }
  std::sort(core_t.begin(), core_t.end());
  std::sort(direct_t.begin(), direct_t.end());
  double sigma =
      messages > 0 ? std::max(0.0, core_t[kIters / 2] - direct_t[kIters / 2]) / messages : 0.0;
  double all = sigma;
  PMPI_Allreduce(&sigma, &all, 1, MPI_DOUBLE, MPI_MAX, internal_);
  PMPI_Barrier(internal_);
  cost_.sigma_s = all;
}

std::string Communicator::describe_selection(size_t max_bytes) {
  ensure_cost_params();
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
  if (bytes == last_choice_bytes_ && cfg_.skip == last_choice_skip_) return last_choice_;
  ensure_cost_params();
  last_choice_ = select_algo(bytes, topo_summary_, cost_, cfg_.segment_bytes, cfg_.skip);
  last_choice_bytes_ = bytes;
  last_choice_skip_ = cfg_.skip;
  return last_choice_;
}

Status Communicator::allreduce(const void* sendbuf, void* recvbuf, size_t count, DType dtype,
                               ROp op) {
  if (broken_) return refuse_broken("allreduce");
  // The ring order and sizes were checked at creation; the C API checked op, type and buffers.
  RingParams& p = params_;
  p.count = count;
  p.dtype = dtype;
  p.op = op;
  p.sendbuf = sendbuf;
  p.recvbuf = recvbuf;
  p.seq = static_cast<uint32_t>(seq_);
  if (!op_valid(op, dtype)) return Status::kErrOp;
  const size_t bytes = count * dtype_size(dtype);
  const size_t seg_bytes =
      std::min(bytes / std::max(1, size_) + dtype_size(dtype), cfg_.segment_bytes);
  const Algo algo = choose_algo(bytes);
  // Recursive doubling with nothing asking for per-step records: straight on MPI
  // (runtime/rd_direct.h), without the core's per-message headers and action lists.
  if (algo == Algo::kRd && inject_.empty() && cfg_.trace_dir.empty() &&
      cfg_.log_level > LogLevel::kDebug && !cfg_.check) {
    // Not timed: two clock reads cost ~40 ns, a tenth of an 8-byte all-reduce on shared
    // memory (start = end = 0: time_s reads 0 for this path).
    last_stats_ = CollectiveStats{};
    CollectiveStats& s = last_stats_;
    s.seq = seq_;
    s.bytes = bytes;
    s.algo = static_cast<int>(algo);
    const Status st = rd_direct_allreduce(internal_, ring_, pos_, sendbuf, recvbuf, count, dtype,
                                          op, &scratch_, &s.messages_sent, &s.messages_received);
    ++seq_;
    if (!ok(st)) {
      broken_ = true;
      SKIPRING_LOG_ERROR("allreduce seq {} (recursive doubling) failed: {}", s.seq,
                         status_string(st));
    }
    return st;
  }
  // Skip-ahead runs in the rows that have it (the ring, also inside hier); "ring" is the ring
  // with skipping off.
  p.skip = cfg_.skip && algo_row(algo).skip_ahead;
  if (p.skip) p.skip_threshold_s = skip_threshold(seg_bytes);
  const bool one_host = topo_summary_.hosts == 1;
  p.direct_allgather = cfg_.direct_allgather < 0 ? one_host : cfg_.direct_allgather == 1;
  p.quiet_polls = one_host ? 4 : 1;
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
  Status st = make != nullptr ? make(algo_ctx_, &core) : Status::kErrInternal;
  if (!ok(st)) {
    ++seq_;
    broken_ = true;
    return st;
  }
  st = finish_collective(core.get(), engine_->run(core.get()), "allreduce", static_cast<int>(algo));
  if (!ok(st)) return st;
  if (p.skip && last_stats_.rs_piece_wait_max > 0) {
    timer_.observe(ring_[(pos_in_ring() - 1 + size_) % size_], last_stats_.rs_piece_wait_max,
                   seg_bytes);
  }
  return Status::kOk;
}

}  // namespace skipring
