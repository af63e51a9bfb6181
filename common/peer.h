// Peer values of a receive besides a rank (Action::peer, Transport::post_recv).
#pragma once

namespace skipring {

// post_recv's peer for a message from any rank.
constexpr int kAnySource = -1;
// From any rank, and the caller guarantees that at most one message with this tag reaches this
// rank until the receive completes (the ring's allgather segments: the owner routes each
// segment so that exactly one copy reaches every rank). A transport that sends large messages
// in two parts may then match both parts at once instead of waiting for the first to learn the
// sender (MpiTransport; under SimGrid that wait cost 52 us per 256 KiB segment against 21 us of
// wire time).
constexpr int kAnySourceOneSender = -2;

}  // namespace skipring
