// Multi-spanning-tree all-reduce (seed 002) as an I/O-free state machine (collective_core.h).
//
// Geometry: the buffer is split across the plan's trees by its fractions (element boundaries
// from the cumulative fractions, identical on every rank), each tree's part into segments of
// segment_bytes (raised when needed so that every tag fits tag_span). Segments are pipelined
// and the trees run concurrently.
//
// Per tree and segment: reduce toward the root, then broadcast down. A node's partial is its
// own input, then reduced with each child's partial in ascending child rank: acc = acc op
// child (a = acc, b = the child's partial), into recvbuf. So the result is one fixed
// reduction tree per segment, computed once at the root and copied down: bitwise identical on
// every rank. A leaf sends its input straight from sendbuf.
//
// Every message carries a WireHeader: seq, phase (kTreePhaseReduce / kTreePhaseBcast), chunk =
// tree index, segment = segment index within the tree, and the contribution set. A child's
// partial is merged only when disjoint from what the node has accumulated (checked when the
// reduction is issued, in child order); the root completes only on the full set; a broadcast
// must carry the full set. Anything else is a protocol error.
//
// Tags: 2 * (segment index over all trees) + (0 reduce, 1 broadcast). Between two ranks each
// tag carries at most one message per collective, and every receive posted is matched by
// exactly one message of this collective, so MPI's non-overtaking order keeps messages of the
// next collective (same tags) out of this one's receives.
//
// Pipeline windows, per tree: at most `depth` segments in the reduce phase (each owns one
// receive slot per child: header + payload in scratch) and at most `depth` in the broadcast
// phase (each owns a header buffer that is received into and forwarded from). A non-root
// posts a segment's broadcast receive into recvbuf only after its partial's send from recvbuf
// has completed (a leaf not in place sends from sendbuf and posts it at once).
//
// Stats: one StepRecord per tree and phase (kReduceScatter = reduce, kAllgather = broadcast,
// step = tree index).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "collectives/collective_core.h"
#include "collectives/contribution_set.h"
#include "collectives/ring_allreduce.h"
#include "common/phases.h"
#include "common/status.h"
#include "topology/multitree.h"

namespace skipring {

// WireHeader.phase values of tree messages: kTreePhaseReduce / kTreePhaseBcast
// (common/phases.h).

class TreeAllreduce final : public CoreBase {
 public:
  // validate_common, plus: the plan is valid for n = ring.size() ranks (validate_plan), at
  // most 64 trees, depth >= 1, tag_span >= 1024.
  static Status validate(const RingParams& p, const MultiTreePlan& plan, std::string* why);
  // Elements of each tree's part (in tree order; they tile the buffer).
  static std::vector<size_t> split_counts(const MultiTreePlan& plan, size_t count);
  // Elements per segment: segment_bytes / element size (>= 1), doubled until every tag of the
  // collective fits tag_span.
  static size_t segment_elems(const RingParams& p, const std::vector<size_t>& tree_counts);

  // The plan is read here, not kept. `scratch` is reused across collectives; resized as needed,
  // must outlive this object. Ranks are communicator ranks (the plan's node ids); p.ring only gives
  // n.
  TreeAllreduce(const RingParams& p, const MultiTreePlan& plan, std::vector<uint8_t>* scratch);

  Status start(double now, ActionList* out) override;
  Status on_recv(Token t, size_t payload_bytes, double now, ActionList* out) override;
  Status on_send(Token t, double now, ActionList* out) override;
  Status on_reduce(Token t, double now, ActionList* out) override;
  std::string describe() const override;

 private:
  enum class OpKind : uint8_t { kUpRecv, kUpSend, kDownRecv, kDownSend, kReduce };
  struct OpRef {
    OpKind kind;
    int tree;
    int seg;
    int child;  // index into the tree's children (kUpRecv, kDownSend)
    double t_posted;
    bool live;
  };
  struct Seg {
    int next_child = 0;     // next child partial to reduce
    bool reducing = false;  // a reduction is in flight
    bool partial_ready = false;
    bool up_posted = false;
    bool up_done = false;
    bool down_posted = false;  // broadcast receive (non-root) / sends (root) posted
    bool down_arrived = false;
    int down_sends_done = 0;
  };
  struct Tree {
    int parent = -1;
    std::vector<int> children;
    size_t offset = 0;  // elements
    size_t count = 0;
    int nseg = 0;
    int first_gseg = 0;
    int window = 0;  // segments per phase window (<= depth, <= nseg)
    int rlow = 0;    // lowest segment not reduce-retired
    int radmit = 0;  // segments admitted to the reduce phase
    int blow = 0;    // lowest segment not broadcast-retired
    std::vector<Seg> segs;
    // Per window slot w: child receive slots (window * children), up-send header, broadcast
    // header, accumulated set and the children's received sets.
    uint8_t* child_slots = nullptr;
    uint8_t* up_hdrs = nullptr;
    uint8_t* down_hdrs = nullptr;
    std::vector<ContributionSet> acc;
    std::vector<ContributionSet> child_set;
    std::vector<char> child_arrived;
    int rs_step = -1;
    int bc_step = -1;
  };

  size_t seg_count(const Tree& t, int g) const;
  size_t seg_offset(const Tree& t, int g) const { return t.offset + g * seg_elems_; }
  uint8_t* recv_at(const Tree& t, int g) const;
  const uint8_t* send_at(const Tree& t, int g) const;
  uint8_t* child_slot(const Tree& t, int g, int i) const;
  uint8_t* slot_header(uint8_t* s) const { return s + hdr_area_ - hdr_bytes_; }
  uint8_t* slot_payload(uint8_t* s) const { return s + hdr_area_; }
  int tag_of(const Tree& t, int g, bool bcast) const { return 2 * (t.first_gseg + g) + bcast; }
  Token new_op(OpKind kind, int tree, int seg, int child, double now);
  void push(Action::Kind kind, Token tok, int peer, int tag, void* hdr, void* payload, size_t bytes,
            ActionList* out);
  void admit_reduce(int ti, double now, ActionList* out);
  void post_up_send(int ti, int g, double now, ActionList* out);
  void admit_bcast(int ti, double now, ActionList* out);
  void post_down_sends(int ti, int g, double now, ActionList* out);
  Status try_reduce(int ti, int g, double now, ActionList* out);
  void retire(int ti, double now, ActionList* out);
  // Takes the live operation `tok` of kind a or b into *op and frees its slot (one less
  // pending); false when there is none.
  bool take_op(Token tok, OpKind a, OpKind b, OpRef* op);
  void maybe_done(double now, ActionList* out);

  RingParams p_;
  int n_;
  size_t elem_;
  bool in_place_;
  size_t seg_elems_ = 1;
  size_t hdr_bytes_;
  size_t hdr_area_ = 0;
  size_t slot_bytes_ = 0;
  std::vector<uint8_t>* scratch_;
  std::vector<Tree> trees_;
  std::vector<OpRef> ops_;
  std::vector<Token> free_ops_;
  ContributionSet full_set_;
  int pending_ = 0;
};

}  // namespace skipring
