// Chunk and segment geometry (RingLayout) and parameter checks.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "collectives/ring/internal.h"

namespace skipring {
using namespace ring;

RingLayout::RingLayout(int n, size_t count, size_t elem_size, size_t segment_bytes, bool lead_in)
    : n_(n), count_(count), elem_(elem_size), lead_in_(lead_in) {
  seg_elems_ = std::max<size_t>(1, segment_bytes / std::max<size_t>(1, elem_size));
  first_seg_.resize(n + 1);
  int acc = 0;
  for (int c = 0; c < n; ++c) {
    first_seg_[c] = acc;
    acc += segments(c);
  }
  first_seg_[n] = acc;
}

size_t RingLayout::chunk_offset(int c) const {
  const size_t base = count_ / n_, extra = count_ % n_;
  return c * base + std::min<size_t>(c, extra);
}

size_t RingLayout::chunk_count(int c) const {
  return count_ / n_ + (static_cast<size_t>(c) < count_ % n_ ? 1 : 0);
}

size_t RingLayout::lead_elems(int c) const {
  if (!lead_in_ || seg_elems_ < 2) return 0;
  if (chunk_count(c) < static_cast<size_t>(kLeadInMinSegments) * seg_elems_) return 0;
  return seg_elems_ / 2;
}

int RingLayout::segments(int c) const {
  const size_t lead = lead_elems(c);
  const size_t rest = chunk_count(c) - lead;
  return (lead > 0 ? 1 : 0) + static_cast<int>((rest + seg_elems_ - 1) / seg_elems_);
}

namespace {
// Segment g's first element within a chunk whose lead-in is `lead` elements (0: none).
size_t start_in_chunk(size_t g, size_t lead, size_t seg_elems) {
  return lead == 0 || g == 0 ? g * seg_elems : lead + (g - 1) * seg_elems;
}
}  // namespace

size_t RingLayout::segment_offset(int c, int g) const {
  return chunk_offset(c) + start_in_chunk(g, lead_elems(c), seg_elems_);
}

size_t RingLayout::segment_count(int c, int g) const {
  const size_t lead = lead_elems(c);
  if (lead > 0 && g == 0) return lead;
  return std::min(seg_elems_, chunk_count(c) - start_in_chunk(g, lead, seg_elems_));
}

Status validate_common(const RingParams& p, std::string* why) {
  const int n = static_cast<int>(p.ring.size());
  if (n < 1) return *why = "empty ring", Status::kErrArg;
  std::vector<char> seen(n, 0);
  for (int r : p.ring) {
    if (r < 0 || r >= n || seen[r])
      return *why = "ring order is not a permutation", Status::kErrArg;
    seen[r] = 1;
  }
  if (p.rank < 0 || p.rank >= n) return *why = "rank outside the ring", Status::kErrArg;
  if (!op_valid(p.op, p.dtype)) {
    *why = fmt::format("{} is not defined on {}", rop_name(p.op), dtype_name(p.dtype));
    return Status::kErrOp;
  }
  if (p.count > 0 && (p.recvbuf == nullptr || p.sendbuf == nullptr)) {
    return *why = "null buffer", Status::kErrBuffer;
  }
  return Status::kOk;
}

Status RingAllreduce::validate(const RingParams& p, std::string* why) {
  SKIPRING_RETURN_IF_ERROR(validate_common(p, why));
  if (p.depth < 1) return *why = "pipeline depth < 1", Status::kErrArg;
  if (p.tag_span < 1024) return *why = "tag space too small", Status::kErrArg;
  if (p.segment_bytes < dtype_size(p.dtype)) return *why = "segment too small", Status::kErrArg;
  return Status::kOk;
}

size_t cross_host_segment_bytes(size_t max_bytes, size_t chunk_bytes, size_t hosts,
                                bool socket_links) {
  if (hosts <= 1) return max_bytes;
  const size_t want = (chunk_bytes + kCrossHostMinSegments - 1) / kCrossHostMinSegments;
  const size_t seg = std::min(max_bytes, std::max(kCrossHostSegmentFloor, want));
  if (socket_links && chunk_bytes < kSocketCutMaxSettings * max_bytes) {
    return std::min(max_bytes, kSocketSegmentBytes);
  }
  return seg;
}

size_t RingAllreduce::effective_segment_bytes(const RingParams& p) {
  // At most (tag_span - 4) / (2 * kTagKinds) segments in all (tag_for), each chunk rounding up
  // by one.
  const size_t n = std::max<size_t>(1, p.ring.size());
  // (the top 3 tags are the control channels)
  const size_t max_segments =
      static_cast<size_t>(std::max(1, (p.tag_span - 4) / (2 * ring::kTagKinds)));
  const size_t elem = dtype_size(p.dtype);
  size_t seg = std::max(p.segment_bytes, elem);
  if (max_segments > n) {
    // Whole elements per segment, rounded up, so that no chunk needs more segments than its
    // share of the tag space.
    const size_t per_chunk_elems = p.count / n + 1;
    // A lead-in (RingLayout) adds one segment to a chunk.
    const size_t segs_per_chunk = std::max<size_t>(1, max_segments / n - (p.lead_in ? 1 : 0));
    const size_t seg_elems = (per_chunk_elems + segs_per_chunk - 1) / segs_per_chunk;
    seg = std::max(seg, seg_elems * elem);
  }
  return seg;
}

}  // namespace skipring
