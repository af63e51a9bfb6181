// What the ring all-reduce's source files (collectives/ring/*.cpp) share and nothing else
// includes: the token encoding, the message tag kinds and the protocol's constants.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/ring_allreduce.h"
#include "common/align.h"
#include "common/token.h"

namespace skipring {
namespace ring {

// Token = kind in the top three bits, index below (common/token.h).
enum TokenKind : uint32_t {
  kTokRecv = 0,
  kTokSend = 1,
  kTokReduce = 2,       // ring piece reduction (index: receive)
  kTokAux = 3,          // skip-ahead protocol message (index: aux op)
  kTokOwnerReduce = 4,  // owner merge (index: owner segment)
};
// Tag = kTagKinds * (2 * segment id + parity of the collective) + kind (tag_for); the control
// tags are tag_span - 1 .. tag_span - 3.
// Segments are made large enough that every tag of a collective is distinct
// (effective_segment_bytes), so tags never wrap.
constexpr int kTagRs = 0, kTagAg = 1, kTagToOwner = 2, kTagAck = 3;
constexpr int kTagKinds = 4;
// A skipped piece still missing this many thresholds after it was due triggers the bypass.
constexpr double kBypassFactor = 4.0;
// Skip cascade suppression: a ring piece of reduce-scatter step s depends on s upstream ranks,
// and the rank next to a straggler skips it only after its own threshold, so the piece reaches
// us up to (threshold + one hop) late although our predecessor is fine. All timers of a
// window start at about the same time (receives are posted ahead), so without a margin every
// rank downstream of a straggler would skip its healthy predecessor too (measured: with one
// late rank of 4, all four ranks skipped each other). Step s therefore waits
// threshold * (1 + s * kStepGrace).
constexpr double kStepGrace = 0.5;
// The late rank's pieces to the owners in flight at once (RingAllreduce::send_paced).
constexpr int kPacedInFlight = 8;
// Allgather sends in flight per peer once a straggler is around (RingAllreduce::send_ag).
constexpr int kAgInFlight = 2;
// A skipped piece that still came on the ring within this many thresholds is a normal wait
// for the threshold's learning (RingAllreduce::record_piece_waits).
constexpr double kLearnSkipped = 2.0;

inline Token make_token(TokenKind k, size_t idx) { return pack_token(k, idx); }
inline TokenKind token_kind(Token t) { return static_cast<TokenKind>(token_kind_of(t)); }
inline size_t token_index(Token t) { return token_index_of(t); }

}  // namespace ring
}  // namespace skipring
