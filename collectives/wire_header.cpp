// Encoding and checking of the wire header.
#include "collectives/wire_header.h"

#include <fmt/format.h>

#include <cstring>

namespace skipring {

void encode_wire_header(uint8_t* hdr, const WireExpect& id, const ContributionSet& set,
                        uint8_t flags, uint32_t route) {
  WireHeader h{};
  h.flags = flags;
  h.route = route;
  h.magic = kWireMagic;
  h.seq = id.seq;
  h.phase = id.phase;
  h.set_words = static_cast<uint16_t>(set.words());
  h.chunk = id.chunk;
  h.segment = id.segment;
  std::memcpy(hdr, &h, sizeof(h));
  set.write_words(reinterpret_cast<uint64_t*>(hdr + sizeof(h)));
}

std::string decode_wire_header(const uint8_t* hdr, int n, const WireExpect& want,
                               ContributionSet* set) {
  WireHeader h;
  std::memcpy(&h, hdr, sizeof(h));
  if (h.magic != kWireMagic) return "bad header magic";
  if (h.seq != want.seq) {
    return fmt::format("message of collective {} arrived during collective {}", h.seq, want.seq);
  }
  if (h.phase != want.phase || h.chunk != want.chunk || h.segment != want.segment) {
    return fmt::format("expected phase {} chunk {} segment {}, got phase {} chunk {} segment {}",
                       want.phase, want.chunk, want.segment, h.phase, h.chunk, h.segment);
  }
  if (h.set_words != ContributionSet::words_for(n) ||
      !set->read_words(n, reinterpret_cast<const uint64_t*>(hdr + sizeof(h)))) {
    return "corrupt contribution set";
  }
  return "";
}

uint32_t wire_route(const uint8_t* hdr) {
  WireHeader h;
  std::memcpy(&h, hdr, sizeof(h));
  return h.route;
}

std::string decode_wire_control(const uint8_t* hdr, uint32_t seq, WireHeader* out) {
  std::memcpy(out, hdr, sizeof(*out));
  if (out->magic != kWireMagic) return "bad header magic";
  if (out->seq != seq) {
    return fmt::format("control message of collective {} arrived during collective {}", out->seq,
                       seq);
  }
  return "";
}

}  // namespace skipring
