// Encoding and checking of the wire header.
#include "collectives/wire_header.h"

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <cstring>

namespace skipring {
namespace {

// Byte-at-a-time table of the reflected CRC32C polynomial (0x82F63B78), built at compile time.
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Checksum of an encoded header of `bytes` bytes (fixed part + set): everything after the
// check word, seeded with kWireMagic.
uint32_t header_checksum(const uint8_t* hdr, size_t bytes) {
  constexpr size_t kSkip = sizeof(WireHeader::check);
  return crc32c(hdr + kSkip, bytes - kSkip, kWireMagic);
}

// The checks every header gets before any field is trusted: the set's size for n ranks (so
// the checksum reads only wire_header_bytes(n) bytes), then the checksum.
std::string check_integrity(const uint8_t* hdr, int n, WireHeader* h) {
  std::memcpy(h, hdr, sizeof(*h));
  if (n <= 0 || h->set_words != ContributionSet::words_for(n)) {
    return fmt::format("corrupt header: contribution set of {} words, expected {}", h->set_words,
                       n > 0 ? ContributionSet::words_for(n) : 0);
  }
  const uint32_t want = header_checksum(hdr, wire_header_bytes(n));
  if (h->check != want) {
    return fmt::format("corrupt header: checksum {:#010x}, computed {:#010x} (seq {} phase {})",
                       h->check, want, h->seq, h->phase);
  }
  return "";
}

}  // namespace

uint32_t crc32c(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < bytes; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

void encode_wire_header(uint8_t* hdr, const WireExpect& id, const ContributionSet& set,
                        uint8_t flags, uint32_t route) {
  WireHeader h{};
  h.flags = flags;
  h.route = route;
  h.seq = id.seq;
  h.phase = id.phase;
  h.set_words = static_cast<uint16_t>(set.words());
  h.chunk = id.chunk;
  h.segment = id.segment;
  std::memcpy(hdr, &h, sizeof(h));
  set.write_words(reinterpret_cast<uint64_t*>(hdr + sizeof(h)));
  seal_wire_header(hdr, sizeof(h) + 8 * set.words());
}

void seal_wire_header(uint8_t* hdr, size_t bytes) {
  const uint32_t check = header_checksum(hdr, bytes);
  std::memcpy(hdr + offsetof(WireHeader, check), &check, sizeof(check));
}

std::string decode_wire_header(const uint8_t* hdr, int n, const WireExpect& want,
                               ContributionSet* set) {
  WireHeader h;
  std::string why = check_integrity(hdr, n, &h);
  if (!why.empty()) return why;
  if (h.seq != want.seq) {
    return fmt::format("message of collective {} arrived during collective {}", h.seq, want.seq);
  }
  if (h.phase != want.phase || h.chunk != want.chunk || h.segment != want.segment) {
    return fmt::format("expected phase {} chunk {} segment {}, got phase {} chunk {} segment {}",
                       want.phase, want.chunk, want.segment, h.phase, h.chunk, h.segment);
  }
  if (!set->read_words(n, reinterpret_cast<const uint64_t*>(hdr + sizeof(h)))) {
    return "corrupt contribution set";
  }
  return "";
}

uint32_t wire_route(const uint8_t* hdr) {
  WireHeader h;
  std::memcpy(&h, hdr, sizeof(h));
  return h.route;
}

std::string decode_wire_control(const uint8_t* hdr, int n, uint32_t seq, WireHeader* out) {
  std::string why = check_integrity(hdr, n, out);
  if (!why.empty()) return why;
  if (out->seq != seq) {
    return fmt::format("control message of collective {} arrived during collective {}", out->seq,
                       seq);
  }
  return "";
}

}  // namespace skipring
