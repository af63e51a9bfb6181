// Aggregation and printing of per-step records.
#include "common/step_stats.h"

#include <fmt/format.h>

namespace skipring {

void CollectiveStats::summarise() {
  wait_s = reduce_s = transfer_s = 0;
  neighbours.clear();
  for (const auto& s : steps) {
    wait_s += s.wait_s;
    reduce_s += s.reduce_s;
    transfer_s += s.transfer_s;
    if (s.from < 0) continue;
    NeighbourStats* row = nullptr;
    for (auto& nb : neighbours) {
      if (nb.rank == s.from) row = &nb;
    }
    if (row == nullptr) {
      neighbours.push_back(NeighbourStats{s.from, 0, 0});
      row = &neighbours.back();
    }
    row->wait_s += s.wait_s;
    row->steps += 1;
  }
  slowest_neighbour = -1;
  double worst = 0;
  for (const auto& nb : neighbours) {
    if (nb.wait_s > worst) {
      worst = nb.wait_s;
      slowest_neighbour = nb.rank;
    }
  }
}

std::string CollectiveStats::to_string() const {
  std::string out = fmt::format(
      "seq={} bytes={} time={:.6f}s wait={:.6f}s reduce={:.6f}s transfer={:.6f}s sent={} "
      "received={} skips={} late={} direct={} excluded={} threshold={:.6f}s slowest={}",
      seq, bytes, time_s(), wait_s, reduce_s, transfer_s, messages_sent, messages_received, skips,
      late_pieces, direct_segments, late_excluded, skip_threshold_s, slowest_neighbour);
  for (const auto& s : steps) {
    out += fmt::format(
        "\n  {} step {} chunk {} from {} to {} segs {} wait={:.6f} reduce={:.6f} "
        "transfer={:.6f}",
        s.phase == Phase::kReduceScatter ? "RS" : "AG", s.step, s.chunk, s.from, s.to, s.segments,
        s.wait_s, s.reduce_s, s.transfer_s);
  }
  return out;
}

}  // namespace skipring
