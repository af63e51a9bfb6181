// Tokens: the caller-chosen id of one posted operation (send, receive, reduction), unique
// among the outstanding ones of a collective. The cores pack a kind (the top kTokenKindBits
// bits) and an index (the rest) into one; pack_token / token_kind_of / token_index_of are
// the one packing every core uses. Base layer: no MPI.
#pragma once

#include <cstddef>
#include <cstdint>

namespace skipring {

using Token = uint32_t;

constexpr uint32_t kTokenKindBits = 3;                     // kinds 0..7
constexpr uint32_t kTokenKindShift = 32 - kTokenKindBits;  // 29
constexpr uint32_t kTokenIndexMask = (1u << kTokenKindShift) - 1;
constexpr uint32_t kTokenKinds = 1u << kTokenKindBits;

// `kind` < kTokenKinds; `index` <= kTokenIndexMask (not checked: the cores' indices are
// bounded by the number of operations of one collective).
constexpr Token pack_token(uint32_t kind, size_t index) {
  return (kind << kTokenKindShift) | static_cast<uint32_t>(index);
}
constexpr uint32_t token_kind_of(Token t) { return t >> kTokenKindShift; }
constexpr size_t token_index_of(Token t) { return t & kTokenIndexMask; }

}  // namespace skipring
