// The header every data message carries (DESIGN.md 2.1): collective sequence number, phase,
// chunk and segment, and the contribution set (which ranks' inputs the payload sums). Shared by
// every collective core so that pieces are encoded and checked the same way everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/contribution_set.h"

namespace skipring {

constexpr uint32_t kWireMagic = 0x534b5247;  // "SKRG"

struct WireHeader {
  uint32_t magic;
  uint32_t seq;
  uint8_t phase;  // Phase for the ring; other cores use their own values (>= 2)
  uint8_t flags;
  uint16_t set_words;
  uint32_t chunk;
  uint32_t segment;
  uint32_t reserved;
  // followed by set_words 64-bit words of the contribution set
};
static_assert(sizeof(WireHeader) == 24, "wire header layout");

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

void encode_wire_header(uint8_t* hdr, const WireExpect& id, const ContributionSet& set);

// Checks magic, sequence number, phase/chunk/segment and the set's encoding for n ranks, and
// reads the set. Returns an empty string when the header is as expected, else the reason.
std::string decode_wire_header(const uint8_t* hdr, int n, const WireExpect& want,
                               ContributionSet* set);

}  // namespace skipring
