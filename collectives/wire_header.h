// The header every data message carries (DESIGN.md 2.1): collective sequence number, phase,
// chunk and segment, and the contribution set (which ranks' inputs the payload sums). Shared by
// every collective core so that pieces are encoded and checked the same way everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/contribution_set.h"

namespace skipring {

// Seed of the header checksum ("SKRG"): the checksum also does what a magic word did (bytes
// that are not a skipring header fail it).
constexpr uint32_t kWireMagic = 0x534b5247;

// WireHeader.flags
constexpr uint8_t kFlagToOwner = 1;  // a piece going straight to the chunk's owner (not the ring)
constexpr uint8_t kFlagAck = 2;      // "my piece went straight to the owner" (skip redirect)
constexpr uint8_t kFlagNotice = 4;   // control: "send this piece straight to the owner"
constexpr uint8_t kFlagRsDone = 8;   // control: "no more notices from me in this collective"
constexpr uint8_t kFlagBypassReq = 16;  // control, to the predecessor's predecessor: "your
                                        // successor is late: send its pieces to the owners"
constexpr uint8_t kFlagBypassed = 32;   // control, to the successor: "my piece for (c, g) went
                                        // straight to the owner: send only your own"
constexpr uint8_t kFlagFwdDone = 64;    // control: "no more bypass messages from me"
constexpr uint8_t kFlagFarDone = 128;   // control: "no more bypass requests from me"

// WireHeader.route carries routes. On a reduce-scatter piece sent straight to the owner by a
// rank that bypassed its late successor: low 24 bits = 1 + that late rank (the owner then routes
// its allgather around it). On an allgather segment with kRouteAround: the owner chose to route
// it around the rank in the low 24 bits (1 + rank), which got the segment from the owner
// directly and passes nothing on; every other rank forwards to the next ring position after it
// that is not that rank, up to the owner.
constexpr uint32_t kRouteLateMask = 0x00ffffff;
constexpr uint32_t kRouteAround = 1u << 31;
// On an allgather segment: "the chunk's owner sent this to every rank itself: do not pass it on"
// (skip-ahead's direct allgather, RingParams::direct_allgather).
constexpr uint32_t kRouteDirect = 1u << 30;

struct WireHeader {
  // CRC32C (Castagnoli) of the rest of the header (the fixed part after this word, then the
  // contribution set's words), seeded with kWireMagic: one flipped bit anywhere in the header,
  // the contribution set included, is a protocol error rather than a wrong sum (a CRC detects
  // every single-bit error, and CRC32C every 2- and 3-bit error and every burst up to 32 bits
  // at these lengths). It replaced the magic word, so the header did not grow.
  uint32_t check;
  uint32_t seq;
  uint8_t phase;  // wire phase id: common/phases.h lists every core's values
  uint8_t flags;
  uint16_t set_words;
  uint32_t chunk;
  uint32_t segment;
  uint32_t route;
  // followed by set_words 64-bit words of the contribution set
};
static_assert(sizeof(WireHeader) == 24, "wire header layout");

// CRC32C (the iSCSI polynomial 0x1EDC6F41, reflected), continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

// Bytes of a header (fixed part + contribution set) for n ranks, a multiple of 8.
inline size_t wire_header_bytes(int n) {
  return sizeof(WireHeader) + 8 * ContributionSet::words_for(n);
}

// What a receiver expects of a header.
struct WireExpect {
  uint32_t seq;
  uint8_t phase;
  uint32_t chunk;
  uint32_t segment;
};

void encode_wire_header(uint8_t* hdr, const WireExpect& id, const ContributionSet& set,
                        uint8_t flags = 0, uint32_t route = 0);
// Recomputes and stores the checksum of the `bytes`-byte header at hdr (fixed part + set), for
// headers written field by field (tests forging messages) or changed after encoding.
void seal_wire_header(uint8_t* hdr, size_t bytes);
// The route word of an encoded header.
uint32_t wire_route(const uint8_t* hdr);

// Checks the set's size for n ranks, the checksum, sequence number, phase/chunk/segment
// and the set's encoding, and reads the set. Returns an empty string when the header is as
// expected, else the reason. Reads wire_header_bytes(n) bytes of hdr and no more.
std::string decode_wire_header(const uint8_t* hdr, int n, const WireExpect& want,
                               ContributionSet* set);

// For control messages, whose chunk/segment are not known in advance: checks the set's
// size for n ranks, the checksum and the sequence number, and returns the fixed part in *out.
// Reads wire_header_bytes(n) bytes of hdr and no more.
std::string decode_wire_control(const uint8_t* hdr, int n, uint32_t seq, WireHeader* out);

}  // namespace skipring
