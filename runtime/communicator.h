// A skipring communicator: skipring's state for one application communicator. It owns a
// duplicate of the application's MPI_Comm (internal traffic never meets the application's),
// the ring order, the transport, the clock, a scratch buffer reused across collectives, the
// collective sequence number and the last collective's statistics. Its methods are defined by
// concern (docs/architecture.md has the file map):
//   communicator_setup.cpp        create, the setup agreement, the destructor, errors
//   setup_cache.{h,cpp}           the process-wide caches setup reuses (pool, topology, cost)
//   communicator_cost.cpp         the cost model's parameters (probes) and the tree plans
//   communicator_plan.cpp         algorithm choice and the late path's plan
//   communicator_straggler.cpp    the straggler memory: agreement, lateness, skip threshold
//   communicator.cpp              the all-reduce entry point
//   communicator_collectives.cpp  the other collectives, and what every collective shares
//   communicator_mpi.cpp          the `mpi` row (the MPI library's all-reduce) and its probe
#pragma once

#include <mpi.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/dtype.h"
#include "collectives/late_plan.h"
#include "collectives/ring_allreduce.h"
#include "collectives/select.h"
#include "common/step_stats.h"
#include "runtime/api_front.h"
#include "runtime/clock.h"
#include "runtime/config.h"
#include "runtime/mpi_wait.h"
#include "runtime/progress_engine.h"
#include "runtime/setup_cache.h"
#include "runtime/transport.h"
#include "straggler/injection.h"
#include "straggler/step_timer.h"
#include "topology/discovery.h"
#include "topology/multitree.h"

namespace skipring {

// True when the `mpi` algorithm row hands (dtype, op) to the MPI library
// (runtime/communicator_mpi.cpp); otherwise it runs the direct recursive doubling.
bool mpi_runs(DType dtype, ROp op);
// What the `mpi` row hands to the MPI library for (dtype, op): skipring's own mapping, never the
// caller's handles (MPI_DATATYPE_NULL / MPI_OP_NULL where mpi_runs is false).
MPI_Datatype mpi_datatype(DType dtype);
MPI_Op mpi_op(ROp op);

class LateChainAllreduce;  // collectives/late_chain.h

// Why a communicator is unusable (Communicator::broken()): set once by the first error that
// breaks it (Communicator::keeps_usable), never cleared.
struct BrokenState {
  bool on = false;
  Status status = Status::kOk;
  uint64_t seq = 0;    // the collective that failed
  std::string reason;  // what every later call says
};

// choose_algo's last auto decision: applications repeat sizes, and the model costs ~100 ns.
struct AlgoChoice {
  size_t bytes = SIZE_MAX;  // SIZE_MAX: none
  bool skip = false;
  Algo algo = Algo::kRing;
  bool holds(size_t b, bool s) const { return b == bytes && s == skip; }
  void forget() { bytes = SIZE_MAX; }
};

// What the cost model knows on this communicator (communicator_cost.cpp): its parameters
// (given, reused from the cache at setup, or measured on the first auto all-reduce), the
// topology summary it prices with, and the multi-tree plans made from them.
struct CostModel {
  CostParams cost;
  bool measured = false;    // cost holds the parameters (given, reused or measured)
  bool summarised = false;  // the tree plans' part of topo is done
  std::string key;          // the cost cache's key: this communicator's shape (setup_cache.h)
  TopologySummary topo;     // what the model knows of the topology
  LinkGraph tree_graph;     // SKIPRING_TREE_GRAPH, loaded at creation (0 nodes: none)
  std::map<int, MultiTreePlan> tree_plans;  // by k
};

// The per-communicator straggler memory (communicator_straggler.cpp): what skip-ahead, the late
// chain and straggler-aware auto remember across calls.
struct StragglerMemory {
  // Floor of the skip threshold in seconds: SKIPRING_SKIP_MIN_WAIT_US, raised to the
  // oversubscription floor when this host runs more ranks than it has cores and the variable
  // is not set (a rank off its core for a scheduler time slice is not a straggler).
  double skip_floor_s = 0;
  StepTimer timer;  // normal step time per predecessor (the skip threshold's T)
  // Straggler-aware auto (SKIPRING_AUTO_STRAGGLER): local_late is this rank's observation
  // (a collective that waited far past its modelled time, or skip-ahead skipped); every
  // kStragglerAgreeEvery-th auto all-reduce the ranks agree on it (one 1-int all-reduce) until
  // some rank saw one; seen, identical on every rank, then stays set.
  bool local_late = false;
  bool seen = false;
  uint64_t auto_calls = 0;
  // Late chain: the fastest time of each size with nobody taken out (late_wait_s).
  std::map<size_t, double> fastest_s;
  // Late chain: how late each rank came to the last census (RingParams::late_seen_s): the
  // coordinator's measurements there, elsewhere +inf for the ranks the decision took out and 0
  // for the others (what makes them suspects is the same), so whoever coordinates next has it.
  std::vector<double> late_seen_s;
  // Late chain: the next census's coordinator, from the last decision (identical on every rank;
  // -1: ring position 0).
  int late_coord = -1;
  // Late chain: how many decisions took each rank out (from the decisions: the same on every
  // rank; RingParams::late_excluded_counts).
  std::vector<uint32_t> late_excluded_counts;
  // Late chain: how many decisions in a row took each rank out (suspects_seen in late_plan.h).
  std::vector<uint32_t> late_streak;
  // Late chain: how long this rank waited for the last decision, and whose it was (RingParams::
  // late_my_wait_s, sent only to the same coordinator).
  double late_my_wait_s = -1;
  int late_wait_coord = -1;
  // Late chain: when the next census runs (late_plan.h: the census rests while nobody is taken
  // out; from the decisions, the same on every rank).
  CensusBackoff census;
  // Late chain, a straggler periodic in the calls (CensusBackoff::period): late_seen_s and
  // late_streak as the take-outs on the period left them, so that at the next expected call
  // a rank the period's take-outs took out is a suspect (the quiet censuses in between would
  // otherwise reset its streak and it would get the full wait). Empty while there is no period.
  std::vector<double> period_seen_s;
  std::vector<uint32_t> period_streak;
  // Whom the last take-out took out while no period was known: the take-out a period learnt at
  // the next one starts from, so that its streak counts both (a rank late every K calls is a
  // suspect from its third late call in the period, not its fourth). A take-out the rested
  // calls' agreement counted names the rank that came latest (RestAgreement).
  std::vector<int> period_first;
  // Late chain, what a rested call saw (CensusBackoff::saw_late_rest): after it the ranks agree,
  // in one nonblocking MAXLOC all-reduce, on how late the latest rank came (the longest any rank
  // waited for its ring predecessor's first piece, and that predecessor) and on the census
  // coordinator's wait (only the coordinator gives it): the same answer on every rank.
  // The answer is read at the plan of the kRestAgreementLag-th counted call after it, so that
  // the call in between has progressed it and nobody waits for it; a rank later than the census's
  // wait then counts as a take-out at the rested call. At most kRestAgreementLag pending.
  struct RestAgreement {
    struct Pair {  // MPI_DOUBLE_INT's layout
      double value;
      int rank;
    };
    MPI_Request req = MPI_REQUEST_NULL;
    // {the predecessor's first piece after this rank's start and the predecessor, the
    // coordinator's wait (-inf on every other rank) and the coordinator}; vectors: leak_pending
    // at a timeout.
    std::vector<Pair> mine = std::vector<Pair>(2, Pair{0.0, -1});
    std::vector<Pair> all = std::vector<Pair>(2, Pair{0.0, -1});
    uint64_t call = 0;  // CensusBackoff::calls after the rested call
    uint64_t seq = 0;   // the rested call's sequence number (for the log)
  };
  std::deque<RestAgreement> rest_agreements;  // the buffers are the vectors' (never move)
};

class Communicator {
 public:
  // Collective over `user`: duplicates it. `inject` is the straggler-injection plan. Setup
  // checks first, in one all-reduce, that every rank has the same protocol-relevant SKIPRING_*
  // values (agreed_values in runtime/config.h): on a mismatch every rank logs an error naming
  // the variables and which ranks hold which value, and returns kErrConfig. The topology and
  // the cost model's parameters are reused from an earlier communicator of the same group /
  // shape when every rank has them (decided in the same all-reduce).
  static Status create(MPI_Comm user, const Config& cfg, const InjectPlan& inject,
                       std::unique_ptr<Communicator>* out);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::vector<int>& ring() const { return ring_; }
  // Hosts, per-rank records and the ring order gathered at creation (topology/discovery.h).
  const Topology& topology() const { return topology_; }
  int pos_in_ring() const { return pos_; }

  // sendbuf == recvbuf means in place. Arguments are already validated.
  Status allreduce(const void* sendbuf, void* recvbuf, size_t count, DType dtype, ROp op);

  // Other collectives (communicator_collectives.cpp), MPI semantics, arguments already
  // validated; sendbuf == recvbuf means MPI_IN_PLACE. They run on the same progress engine and
  // sequence numbers as allreduce, without skip-ahead or straggler injection.
  // recvbuf gets this rank's block of recvcount elements; sendbuf holds n blocks (in place:
  // recvbuf holds them, and the result goes to its first block).
  Status reduce_scatter_block(const void* sendbuf, void* recvbuf, size_t recvcount, DType dtype,
                              ROp op);
  // recvbuf gets n blocks of count elements; sendbuf is this rank's block (in place: already at
  // its place in recvbuf).
  Status allgather(const void* sendbuf, void* recvbuf, size_t count, DType dtype);
  Status bcast(void* buf, size_t count, DType dtype, int root);
  // recvbuf is written (and needed) at the root only.
  Status reduce(const void* sendbuf, void* recvbuf, size_t count, DType dtype, ROp op, int root);

  // The last collective's stats; for a call the `mpi` row's front path made, built here from
  // what FrontLine kept (the front path writes one line, not these).
  const CollectiveStats& last_stats() const {
    if (front_.stats_pending) settle_front_stats();
    return last_stats_;
  }
  // skipring's duplicate of the application's communicator: the nonblocking all-reduce's `mpi`
  // row runs PMPI_Iallreduce on it (api_nonblocking.cpp), whichever thread issues it.
  MPI_Comm internal_comm() const { return internal_.comm; }
  // The drop-in's and the C API's fast path for the `mpi` row (issue 40): true when auto's cached
  // choice hands an all-reduce of `bytes` of (dtype, op) to the MPI library, so the caller may
  // call PMPI_Allreduce itself with its own arguments and then count_mpi_call(bytes). The choice
  // is the one allreduce() would make (the same cache, agreed inputs): every rank takes the fast
  // path for the same calls. Never with SKIPRING_CHECK (its agreement runs first), a forced
  // algorithm, or a broken communicator.
  bool mpi_cached(size_t bytes, DType dtype, ROp op) const {
    return mpi_choice_holds(bytes) && mpi_runs(dtype, op);
  }
  // mpi_cached without the (dtype, op) check, for a caller that made it already for these.
  bool mpi_choice_holds(size_t bytes) const {
    return choice_.algo == Algo::kMpi && choice_.holds(bytes, cfg_.skip) &&
           cfg_.algo == Algo::kAuto && !broken_.on && !cfg_.check;
  }
  // The front path's test (runtime/api_front.h): a caller that found mpi_cached true reads
  // front_epoch() first and keeps it with front_line() in its entry; the line's epoch stays the
  // same until something mpi_choice_holds reads may have changed (auto's choice, the
  // configuration's algorithm or skip-ahead, the broken flag: bump_front() at each), in one cache
  // line with the counters, where mpi_choice_holds reads four lines of this object.
  uint64_t front_epoch() const { return front_.epoch.load(std::memory_order_acquire); }
  FrontLine* front_line() { return &front_; }
  // The front path's calls and bytes on this communicator (api_counters.cpp adds them to the
  // process totals; readers load them).
  const FrontLine::Totals& fast_totals() const { return front_.totals; }
  // Records an `mpi` row call made without the skipring path (no time: the two clock reads cost
  // about a third of what the skipring path added to it); skipring_last_stats reports it.
  void count_mpi_call(size_t bytes) { front_.count_call(bytes); }
  // After an error other than a local argument error (keeps_usable) the state is unusable;
  // every later call is refused saying why (refuse_broken).
  bool broken() const { return broken_.on; }
  // The rule: local argument errors (count, buffer, op, type, other argument; found before any
  // message of the collective was sent) leave the communicator usable; every other status
  // (protocol, transport, configuration, internal, and any status added later) breaks it.
  static bool keeps_usable(Status st);
  Status unmatched_message_waiting(bool* waiting) {
    return transport_->unmatched_message_waiting(waiting);
  }
  void set_inject(const InjectPlan& plan) { inject_ = plan; }
  void set_skip(bool on) {
    cfg_.skip = on;
    bump_front();
  }
  void set_algo(Algo a) {
    cfg_.algo = a;
    bump_front();
  }
  // The algorithm an all-reduce of `bytes` runs: SKIPRING_ALGO, or the cost model's choice.
  // With auto, the first call measures the cost model's parameters (collective: every rank
  // reaches it in the same all-reduce). A failed measurement breaks the communicator (the
  // caller checks broken_) and gives the configured algorithm's default, the ring.
  Algo choose_algo(size_t bytes);
  // The cost model's parameters and auto's choice per size up to max_bytes (skipring_info
  // --algo). Collective on first use (measures the parameters).
  std::string describe_selection(size_t max_bytes);

 private:
  friend class CommunicatorSetup;  // the setup agreement's steps (communicator_setup.cpp)
  Communicator() = default;

  // --- Setup (communicator_setup.cpp) ---
  // The agreement all-reduces of setup, the topology and the cost-model decision (create).
  Status setup_shared_state(MPI_Comm user, const Config& cfg);
  // The transport create() asks for on internal_ (*tag_span: the tags it leaves the ring).
  Status make_transport(int* tag_span);
  // Records `st` from collective #seq: breaks the communicator unless keeps_usable(st).
  void note_error(Status st, uint64_t seq, const std::string& reason);

  // --- Cost model (communicator_cost.cpp) ---
  // The cost model's parameters: given (SKIPRING_MODEL_* all set), reused (decided at setup)
  // or measured now (collective; a failure on any rank fails it on every rank and breaks the
  // communicator).
  Status ensure_cost_params();
  // Fills the tree plans' part of the topology summary (once, after the parameters).
  void summarise_trees();
  // sigma (the engine's cost per message); *failed when this rank's probe failed.
  double measure_engine_sigma(bool* failed);
  // The MPI library's all-reduce against the direct recursive doubling at each of
  // kMpiProbeBytes (CostParams::mpi_offset_s), fastest runs summed over the ranks; collective.
  // Leaves mpi_offset_s at +inf (auto never picks `mpi`) when SKIPRING_AUTO_MPI=0; false
  // when this rank's probe failed (the closing all-reduce tells every rank).
  Status measure_mpi_offsets();
  // The multi-tree plan with at most k trees (k = 1: "tree"), planned once per k on
  // SKIPRING_TREE_GRAPH or on a graph derived from the topology and the cost parameters.
  Status tree_plan(int k, const MultiTreePlan** out);

  // --- Planning (communicator_plan.cpp) ---
  // The late path's plan for this call (collectives/late_plan.h).
  LatePlan plan_late(Algo algo, size_t bytes) const;
  // The late chain's reference time for a size (the fastest seen, else the model's).
  double late_usual_time_s(size_t bytes) const;

  // --- Straggler memory (communicator_straggler.cpp) ---
  // The skip threshold of the next ring collective of `bytes` in pieces of `segment_bytes`
  // (seconds). Collective on first use when T is learnt (measures the cost parameters).
  double skip_threshold(size_t segment_bytes, size_t bytes);
  bool straggler_watch() const {
    return cfg_.algo == Algo::kAuto && cfg_.skip && cfg_.auto_straggler >= 1 && !straggler_.seen &&
           size_ > 1;
  }
  Status agree_stragglers();
  void observe_lateness(Algo algo, size_t bytes, bool skipped);
  // After a successful engine all-reduce: the late chain's memory, the lateness observation
  // and the skip threshold's step times (chain: the late chain's core, when it ran; rested: the
  // plan rested the census, LatePlan::rested).
  void remember_allreduce(Algo algo, size_t bytes, size_t seg_bytes,
                          const LateChainAllreduce* chain, const LatePlan& plan);
  // A rested call's agreement (StragglerMemory::RestAgreement): started after the call, read at
  // the plan of the kRestAgreementLag-th counted call after it (`all`: every pending one, at
  // destruction).
  void start_rest_agreement(double wait_s);
  Status read_rest_agreements(bool all);
  // After a census decided (`excluded`: whom it took out): the periodic straggler's memory
  // (StragglerMemory::period_seen_s).
  void remember_period(const std::vector<int>& excluded);

  // --- The all-reduce (communicator.cpp) ---
  // The ring's segments and lead-in for this call (params_); returns the piece size.
  size_t plan_segments(Algo algo, size_t bytes, DType dtype);
  // Recursive doubling straight on MPI (runtime/rd_direct.h), timed like the engine's.
  Status rd_direct(const void* sendbuf, void* recvbuf, size_t count, DType dtype, ROp op,
                   size_t bytes);
  // The engine's all-reduce of `algo` (every row but `mpi` and the direct recursive doubling).
  Status engine_allreduce(Algo algo, size_t bytes, size_t seg_bytes);
  // Skip-ahead, the late plan and straggler injection for this call; *plan: the late path's.
  Status prepare_engine_call(Algo algo, size_t bytes, size_t seg_bytes, LatePlan* plan);
  // The `mpi` row: PMPI_Allreduce on internal_ (runtime/communicator_mpi.cpp), timed and
  // counted like the direct recursive doubling.
  Status mpi_allreduce(const void* sendbuf, void* recvbuf, size_t count, DType dtype, ROp op);

  // --- What every collective shares (communicator_collectives.cpp) ---
  // SKIPRING_CHECK: one all-reduce comparing the collective, count, type, op and root across
  // ranks before `name` runs; on a mismatch every rank logs which ranks differ and returns a
  // local argument error (the communicator stays usable).
  Status agree_call(const char* name, size_t count, DType dtype, int op, int root);
  // Runs one non-allreduce collective core to completion.
  Status run_collective(CollectiveCore* core, const char* name);
  // After a core ran (status st): sequence number, errors, statistics (algo: the Algo that ran,
  // -1 for collectives other than the all-reduce), debug log and the SKIPRING_CHECK leftover
  // check; shared by every collective.
  Status finish_collective(CollectiveCore* core, Status st, const char* name, int algo);
  // SKIPRING_CHECK's leftover check after collective `name` #seq.
  Status check_leftovers(const char* name, uint64_t seq);
  // A collective run outside the engine (direct recursive doubling, the `mpi` row): clears
  // last_stats_ and fills what is known before it runs.
  CollectiveStats& begin_stats(size_t bytes, Algo algo);
  // Collective `name` #seq failed with `st`: logged (timeout: with what the watchdog said;
  // otherwise with `detail` after the status), recorded (note_error); returns st.
  Status collective_failed(const char* name, uint64_t seq, Status st,
                           const std::string& timeout_text, const std::string& detail);
  // A call on a broken communicator: logs why it is broken (when known) and returns the error.
  Status refuse_broken(const char* name) const;

  // Identity and ring.
  int rank_ = 0, size_ = 1;
  std::vector<int> ring_;
  int pos_ = 0;  // this rank's position in ring_
  Topology topology_;
  Config cfg_;
  InternalComm internal_;  // skipring's duplicate of the application's communicator
  // Some rank asks for per-step records (injection, trace, debug log): recursive doubling runs
  // as a core on every rank then, not straight on MPI (agreed at setup).
  bool any_records_ = false;
  CostModel model_;
  AlgoChoice choice_;
  StragglerMemory straggler_;
  // Running collectives.
  std::unique_ptr<Transport> transport_;  // MpiTransport or UcxTransport (SKIPRING_TRANSPORT)
  std::unique_ptr<Clock> clock_;
  WaitPolicy wait_;  // waits outside the engine (setup, rd_direct, SKIPRING_CHECK), watched
  std::vector<uint8_t> scratch_;
  std::unique_ptr<ProgressEngine> engine_;  // reused: keeps its buffers across collectives
  RingParams params_;                       // reused: the ring order is copied once
  AlgoContext algo_ctx_;                    // what the algorithm table's factories build from
  InjectPlan inject_;
  BrokenState broken_;
  // What the `mpi` row's front path reads and writes on every repeat of a call, in one cache
  // line (runtime/api_front.h): the epoch, the counters, the sequence number (front_.seq: every
  // collective's), the last front call's bytes. Mutable: last_stats() settles a pending front
  // call's stats into last_stats_ (the calling thread's; MPI orders a communicator's collectives).
  mutable FrontLine front_;
  mutable CollectiveStats last_stats_;
  void settle_front_stats() const {
    last_stats_ = CollectiveStats{};
    last_stats_.seq = front_.last_seq;
    last_stats_.bytes = front_.last_bytes;
    last_stats_.algo = static_cast<int>(Algo::kMpi);
    front_.stats_pending = false;
  }
  // Stores a collective's stats (every writer of last_stats_ but the front path).
  void set_stats(const CollectiveStats& s) {
    front_.stats_pending = false;
    last_stats_ = s;
  }
  // Something mpi_choice_holds reads changed: every front entry of this communicator is stale.
  void bump_front() { front_.epoch.fetch_add(1, std::memory_order_acq_rel); }
};

}  // namespace skipring
