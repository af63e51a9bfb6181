// Hierarchical all-reduce (issue 5) as an I/O-free state machine driven like the ring
// (collective_core.h): intra-host reduce-scatter, inter-host all-reduce of each block by the
// skip-ahead ring (RingAllreduce, embedded unmodified), intra-host allgather.
//
// Hosts: host_of_rank[r] is a dense host id (0..H-1) for every communicator rank r. The local
// group of a host is its ranks (m_h of them) in rank order, or in the order `local_order`
// gives (Topology::hier_groups: the ranks whose GPU shares a PCI switch with their NIC first,
// so that they carry the inter-host traffic); a rank's local index is its place in that group.
// Every rank must be given the same order (it is a pure function of the gathered topology). The
// inter-host ring visits the hosts in the order in which they first appear in RingParams::ring.
//
// Blocks: the buffer is split into B = min_h m_h blocks (uneven split, like the ring's chunks;
// empty blocks send nothing), each block into segments of at most segment_bytes. On every
// host, local index j < B owns block j; ranks with a local index >= B (hosts larger than the
// smallest one) own nothing: they contribute in phase 1 and receive in phase 3 only.
//
//  1. Local reduce-scatter (WireHeader phase 13): every rank sends its input segments of block j
//     straight to local owner j. The owner folds the m_h inputs in local-index order,
//     ((x_0 op x_1) op x_2) ..., into its recvbuf block (canonical order, whatever the arrival
//     order), checking that every piece's contribution set is disjoint from what it already
//     sums and that the block ends with exactly its host's ranks.
//  2. Inter-host all-reduce: once all of block j is reduced locally, the owners of block j on
//     all hosts run an embedded RingAllreduce on it in place (virtual ranks = host ids, its
//     own contribution sets over host positions, skip / skip_threshold_s passed through),
//     composed as a black box through a NestedCore (nested_core.h): its tokens are mapped into
//     one kind of ours through a table, its actions forwarded with peers mapped to communicator
//     ranks, and its end is its done(). Its tags keep the lower half of tag_span. Skipped when
//     H == 1.
//  3. Local allgather (WireHeader phase 14): the owner sends every segment of block j to every
//     other rank of its host as soon as it is final: with H == 1 when it is folded, else when
//     the ring has made all its bytes final (a ring receive into the block completed, or a
//     ring allgather send from the block was posted), at the latest when the ring is done.
//     The header carries the full contribution set (all n ranks), checked on receipt.
//
// Every rank ends with the same bits: each block is reduced in a fixed order (local fold, then
// the ring, whose owner reduces and whose allgather copies) and copied everywhere else.
// Tags: phase 1 uses tag_span/2 + segment, phase 3 tag_span*3/4 + segment; segments grow so
// that they fit. Each receive matches exactly one message of this collective from its peer on
// its tag, so with MPI's non-overtaking rule a following collective never matches it.
//
// Stats (StepRecords): local reduce-scatter (kReduceScatter step 0: one record per local peer
// received from / sent to), the ring's records (peers mapped to communicator ranks, its
// reduce-scatter steps renumbered 1..H-1), local allgather (kAllgather step H-1). The same
// (phase, step) numbers are put on the send actions, so a driver's straggler injection
// addresses the ring's steps as ring step + 1 (reduce-scatter) and the local phases as
// (kReduceScatter, 0) and (kAllgather, H-1). Skips, late pieces and bypass requests are the
// ring's. Scratch: (m_h - 1) blocks of payload at a block owner for phase 1 (plus one in
// place), then handed to the ring once phase 1 of the block is over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collectives/collective_core.h"
#include "collectives/contribution_set.h"
#include "collectives/nested_core.h"
#include "collectives/ring_allreduce.h"
#include "common/phases.h"
#include "common/status.h"
#include "common/step_stats.h"

namespace skipring {

// WireHeader.phase values of the hierarchical all-reduce's own messages: kHierPhaseLocalRs /
// kHierPhaseLocalAg (common/phases.h).

// alpha-beta(-gamma) parameters of the hierarchical cost model (docs/hierarchical.md).
struct HierCostParams {
  double alpha_intra = 1e-6;  // s per message between ranks of one host
  double beta_intra = 1e-10;  // s per byte sent (or received) by one rank within a host
  double alpha_inter = 5e-6;  // s per message between hosts
  double beta_inter = 1e-10;  // s per byte through one host's network link (shared by its ranks)
  double gamma = 0;           // s per byte reduced by one rank
};

// Modelled time of the hierarchical all-reduce of `bytes` bytes on hosts of the given sizes
// (ranks_per_host[h] = m_h >= 1). 0 for bytes == 0 or a single rank.
double hier_cost(double bytes, const std::vector<int>& ranks_per_host, const HierCostParams& c);

class HierAllreduce final : public CoreBase {
 public:
  // Checks the common parameters, host_of_rank (one dense host id per rank, no empty host),
  // local_order (empty, or per host a permutation of its ranks) and that tag_span leaves the
  // embedded ring its 1024 tags.
  static Status validate(const RingParams& p, const std::vector<int>& host_of_rank,
                         std::string* why, const std::vector<std::vector<int>>& local_order = {});

  // `scratch` is reused across collectives; resized as needed, must outlive this object.
  // `local_order`: per host its ranks in local-index order; empty: rank order.
  HierAllreduce(const RingParams& p, std::vector<int> host_of_rank, std::vector<uint8_t>* scratch,
                std::vector<std::vector<int>> local_order = {});

  Status start(double now, ActionList* out) override;
  Status on_recv(Token t, size_t payload_bytes, double now, ActionList* out) override;
  Status on_send(Token t, double now, ActionList* out) override;
  Status on_reduce(Token t, double now, ActionList* out) override;
  Status on_time(double now, ActionList* out) override;
  double next_deadline() const override;
  std::string describe() const override;
  // The watchdog's text: the local senders not heard from, then the inter-host ring's.
  std::string describe_wait(double now) const override;

  int hosts() const { return hosts_; }
  int blocks() const { return blocks_; }
  int local_index() const { return local_; }
  // Segment size actually used for the local phases (raised so that the tags fit).
  size_t segment_bytes() const { return layout_.segment_elems() * elem_; }
  const RingLayout& layout() const { return layout_; }

 private:
  struct RecvOp {
    uint8_t phase;  // kHierPhaseLocalRs / kHierPhaseLocalAg
    int src_local;  // local index of the sender
    int block, seg;
    uint8_t* hdr = nullptr;
    void* payload = nullptr;
    size_t bytes = 0;
    bool posted = false;
    bool arrived = false;
    double t_posted = 0;
    int record = -1;  // index into local_steps_
    ContributionSet set;
  };
  struct SendOp {
    int record = -1;
    bool done = false;
    double t_posted = 0;
    int block = -1, seg = -1;  // phase 1: the input segment it reads
    bool phase1 = false;
  };
  // Owner's fold of one segment of its block: step s reduces piece s into recvbuf.
  struct Fold {
    int next = 1;  // next local index to fold (1..m)
    bool reducing = false;
    double t_reduce = 0;
    ContributionSet acc;
    std::vector<int> piece;  // per local index: receive index, or -1 for our own input
  };

  uint8_t* recv_ptr(int k, int g) const;
  const uint8_t* input_ptr(int k, int g) const;
  int local_rank(int host, int local) const { return groups_[host][local]; }
  int add_record(bool rs, int from, int to, int chunk);
  void post_recv(size_t idx, double now, ActionList* out);
  void post_send(int peer, int tag, uint8_t* hdr, const void* payload, size_t bytes, int record,
                 bool rs, int block, int seg, double now, ActionList* out);
  const void* piece_ptr(int g, int i) const;
  Status advance_fold(int g, double now, ActionList* out);
  Status segment_reduced(int g, double now, ActionList* out);
  Status start_ring(double now, ActionList* out);
  Status forward_ring(Status st, const ActionList& ring_out, double now, ActionList* out);
  Status ring_finished(double now, ActionList* out);
  void send_block_segment(int g, double now, ActionList* out);
  // [p, p + bytes) lies in our block of recvbuf.
  bool in_block(const void* p, size_t bytes) const;
  // The ring made [p, p + bytes) of our block final: send on the segments now complete.
  void mark_final(const void* p, size_t bytes, double now, ActionList* out);
  void maybe_done(double now, ActionList* out);

  RingParams p_;
  std::vector<int> host_of_;
  std::vector<std::vector<int>> local_order_;  // as given (empty: rank order)
  int n_;
  int hosts_ = 1;
  std::vector<std::vector<int>> groups_;  // per host: its ranks in local-index order
  std::vector<int> host_order_;           // inter-host ring order (host ids)
  int host_ = 0, local_ = 0, m_ = 1;      // our host, local index, host size
  int blocks_ = 1;
  bool owner_ = false;  // local_ < blocks_
  size_t elem_;
  bool in_place_;
  RingLayout layout_;  // blocks (as chunks) and their segments
  int tag_rs_, tag_ag_, ring_span_;

  std::vector<uint8_t>* scratch_;
  std::vector<uint8_t> hdrs_;  // every header of our own messages
  size_t hdr_bytes_, hdr_area_;
  uint8_t* own_copy_ = nullptr;  // in place, local index > 0: our input for our block

  std::vector<RecvOp> recvs_;
  std::vector<SendOp> sends_;
  std::vector<Fold> folds_;         // per segment of our block
  std::vector<size_t> ag_recv_of_;  // per layout segment id: phase-3 receive index (in place)
  std::vector<int> p1_sends_left_;  // per layout segment id: phase-1 sends still reading it
  int segs_reduced_ = 0;
  bool block_reduced_ = false;  // phase 1 of our block done (or nothing to do)
  bool ring_done_ = false;      // the ring's done() was seen (and phase 3 sent the block on)
  NestedCore ring_;             // the inter-host ring, its tokens one kind of ours
  // Phase 3 during the ring's allgather: its receives into our block (our token -> region), the
  // block regions known final (by offset), final bytes and sent flag per segment of our block.
  std::unordered_map<Token, std::pair<void*, size_t>> ring_ag_recvs_;
  std::set<size_t> final_regions_;
  std::vector<size_t> final_bytes_;
  std::vector<uint8_t> ag_seg_sent_;
  ContributionSet host_set_;  // our host's ranks
  ContributionSet full_set_;  // every rank

  std::vector<StepRecord> local_rs_steps_, local_ag_steps_;  // stats_.steps is built at the end
  std::vector<int> rs_record_of_local_;                      // owner: record of each local source
  std::vector<int> ag_records_;     // owner: record of each local destination
  uint8_t* ag_hdr_base_ = nullptr;  // headers of our block's allgather segments

  int pending_ = 0;  // our own receives + sends + reductions not finished
  double t_start_ = 0;
};

}  // namespace skipring
