// Hashing and mixing: 64-bit FNV-1a (host names, result checksums) and splitmix64's output
// function (deterministic randomness). Base layer: no MPI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace skipring {

// The offset basis skipring has always used: the standard FNV-1a 64 basis
// (14695981039346656037) without its last digit. Kept as it is: the hashes are only compared
// between ranks of one build (host names, SKIPRING_HOST_MAP, skipring_sim's result checks), so
// the standard basis would do as well; changing it is left out of a structure-only change.
constexpr uint64_t kFnv1a64Offset = 1469598103934665603ull;
constexpr uint64_t kFnv1a64Prime = 1099511628211ull;

inline uint64_t fnv1a64(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = kFnv1a64Offset;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * kFnv1a64Prime;
  return h;
}
inline uint64_t fnv1a64(std::string_view text) { return fnv1a64(text.data(), text.size()); }

// splitmix64's golden-ratio increment.
constexpr uint64_t kSplitMix64Gamma = 0x9e3779b97f4a7c15ULL;

// splitmix64's output function (a 64-bit bijective mixer). The splitmix64 generator's draw i
// from state s is splitmix64_mix(s + (i + 1) * kSplitMix64Gamma).
constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace skipring
