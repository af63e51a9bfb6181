// The cost model on a communicator (collectives/select.h): its parameters (given, reused from
// the setup cache, or measured on the first auto all-reduce: the ping-pong and kernel probes of
// runtime/cost_probe.h, the engine's cost per message here, the MPI library's all-reduce in
// communicator_mpi.cpp), the multi-tree plans made from them, and skipring_info's table.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "collectives/recursive_doubling.h"
#include "runtime/communicator.h"
#include "runtime/cost_probe.h"
#include "runtime/log.h"
#include "runtime/rd_direct.h"

namespace skipring {

Status Communicator::ensure_cost_params() {
  if (broken_.on) return broken_.status;
  if (!model_.measured) {
    // The cost model's parameters, identical on every rank (one all-reduce inside, which also
    // tells every rank whether any failed).
    const Status st = measure_cost_params(internal_.comm, ring_, topology_.host_of_rank, cfg_,
                                          *clock_, &model_.cost);
    bool sigma_failed = false;
    if (ok(st)) model_.cost.sigma_s = measure_engine_sigma(&sigma_failed);
    Status mpi_st = Status::kOk;
    if (ok(st) && !sigma_failed) mpi_st = measure_mpi_offsets();
    if (!ok(st) || sigma_failed || !ok(mpi_st)) {
      const Status bad = !ok(st) ? st : !ok(mpi_st) ? mpi_st : Status::kErrTransport;
      note_error(bad, front_.seq,
                 fmt::format("the cost model's measurement failed ({}{})", status_string(bad),
                             sigma_failed ? ", engine probe" : ""));
      SKIPRING_LOG_ERROR("cost model: measurement failed on some rank: {}", status_string(bad));
      return bad;
    }
    if (rank_ == 0) SKIPRING_LOG_INFO("cost model (measured): {}", model_.cost.to_string());
    model_.measured = true;
    CostEntry e;
    e.cost = model_.cost;
    e.digest = cost_digest(model_.cost);
    SetupCache::get().store_cost(model_.key, std::move(e));
  }
  if (!model_.summarised) summarise_trees();
  return Status::kOk;
}

void Communicator::summarise_trees() {
  model_.summarised = true;
  // Trees enter auto's choice when there is something to plan on: a link graph, or links of
  // two kinds (several hosts). On one host every link is alike and a tree moves twice the
  // ring's bytes through its inner nodes.
  if (model_.tree_graph.nodes() > 0 || model_.topo.hosts > 1) {
    const MultiTreePlan* one = nullptr;
    const MultiTreePlan* many = nullptr;
    if (ok(tree_plan(1, &one)) && ok(tree_plan(cfg_.multitree_k, &many))) {
      // A given graph is the network as the user describes it; a derived one only knows the
      // measured per-rank and per-host bandwidths, which all trees share.
      const bool derived = model_.tree_graph.nodes() == 0;
      const double rank_Bps = derived ? 1.0 / model_.cost.beta_s : 0;
      const double host_Bps = derived && model_.topo.hosts > 1 ? 1.0 / model_.cost.inter_beta_s : 0;
      const auto& host = topology_.host_of_rank;
      model_.topo.tree1_height = tree_depth(one->trees[0]);
      model_.topo.tree1_rate_Bps = effective_tree_rate(*one, host, rank_Bps, host_Bps);
      model_.topo.trees = static_cast<int>(many->trees.size());
      int h = 0;
      for (const auto& t : many->trees) h = std::max(h, tree_depth(t));
      model_.topo.tree_height = h;
      model_.topo.tree_rate_Bps = effective_tree_rate(*many, host, rank_Bps, host_Bps);
    }
  }
}

Status Communicator::tree_plan(int k, const MultiTreePlan** out) {
  auto it = model_.tree_plans.find(k);
  if (it == model_.tree_plans.end()) {
    std::string why;
    LinkGraph derived;
    const LinkGraph* g = &model_.tree_graph;
    if (model_.tree_graph.nodes() == 0) {
      // Every pair of ranks linked: same host at the measured same-host latency and
      // bandwidth, across hosts at the inter-host ones (the planner's model: independent links).
      SKIPRING_RETURN_IF_ERROR(ensure_cost_params());
      derived = LinkGraph(size_);
      const auto& host = topology_.host_of_rank;
      for (int u = 0; u < size_; ++u) {
        for (int v = u + 1; v < size_; ++v) {
          const bool same = host.empty() || host[u] == host[v];
          SKIPRING_RETURN_IF_ERROR(
              derived.add_link(u, v, same ? model_.cost.alpha_s : model_.cost.inter_alpha_s,
                               1.0 / (same ? model_.cost.beta_s : model_.cost.inter_beta_s), &why));
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
    it = model_.tree_plans.emplace(k, std::move(plan)).first;
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
  if (size_ < 2) return model_.cost.sigma_s;
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
    if (!ok(rd_direct_allreduce(internal_.comm, ring_, pos_, &in, &out, 1, DType::kUint64,
                                ROp::kSum, &scratch_, wait_, kProbeSeq + i, nullptr, &messages))) {
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
      PMPI_Iallreduce(mine.data(), all.data(), 4, MPI_DOUBLE, MPI_SUM, internal_.comm, &reqs[0]),
      &reqs[0], 1, wait_, w, nullptr, &mine, &all);
  if (ok(st)) {
    st = wait_collectives(PMPI_Ibarrier(internal_.comm, &reqs[1]), &reqs[1], 1, wait_, w, nullptr);
  }
  if (!ok(st)) {
    *failed = true;
    return model_.cost.sigma_s;
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
  const TopologySummary& t = model_.topo;
  std::string out =
      fmt::format("cost model ({} ranks, {} hosts, at most {} per host{}{}): {}\n", t.n, t.hosts,
                  t.max_local, t.overlap ? "" : ", more ranks than cores",
                  t.socket_links ? ", hosts joined by TCP sockets" : "", model_.cost.to_string());
  out +=
      fmt::format("SKIPRING_ALGO={}{}\n", algo_name(cfg_.algo),
                  cfg_.algo == Algo::kAuto ? "" : " (forced: the table shows what auto would do)");
  out += decision_table(t, model_.cost, cfg_.segment_bytes, cfg_.skip, max_bytes);
  return out;
}

}  // namespace skipring
