// ContributionSet: which ranks' inputs a payload already sums. Carried in every data
// message header; the protocol's exactness rests on it (DESIGN.md 2.1): pieces are merged
// only when their sets are disjoint, and a chunk's owner completes only on the full set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace skipring {

class ContributionSet {
 public:
  ContributionSet() = default;
  // The empty set over ranks 0..n-1.
  explicit ContributionSet(int n);
  static size_t words_for(int n) { return (static_cast<size_t>(n) + 63) / 64; }

  void add(int rank);
  bool contains(int rank) const;
  bool overlaps(const ContributionSet& other) const;
  // Adds every member of `other` (the universes must match).
  void merge(const ContributionSet& other);
  int count() const;
  bool empty() const { return count() == 0; }
  bool full() const { return count() == n_; }
  void clear();

  // Wire form: words_for(n) little-endian 64-bit words.
  size_t words() const { return words_; }
  const uint64_t* data() const { return words_ <= kInline ? inline_ : heap_.data(); }
  void write_words(uint64_t* out) const;
  // Reads a set over n ranks; false when bits beyond n are set (corrupt header).
  bool read_words(int n, const uint64_t* in);

  std::string to_string() const;
  bool operator==(const ContributionSet& o) const;
  bool operator!=(const ContributionSet& o) const { return !(*this == o); }

 private:
  // Up to 128 ranks the bits live inline: no allocation on the per-message path.
  static constexpr size_t kInline = 2;
  uint64_t* bits() { return words_ <= kInline ? inline_ : heap_.data(); }
  const uint64_t* bits() const { return data(); }
  void reset(int n);

  int n_ = 0;
  size_t words_ = 0;
  uint64_t inline_[kInline] = {0, 0};
  std::vector<uint64_t> heap_;
};

}  // namespace skipring
