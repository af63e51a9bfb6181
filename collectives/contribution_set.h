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

  int universe() const { return n_; }
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
  size_t words() const { return bits_.size(); }
  const uint64_t* data() const { return bits_.data(); }
  void write_words(uint64_t* out) const;
  // Reads a set over n ranks; false when bits beyond n are set (corrupt header).
  bool read_words(int n, const uint64_t* in);

  std::string to_string() const;
  bool operator==(const ContributionSet& o) const { return n_ == o.n_ && bits_ == o.bits_; }
  bool operator!=(const ContributionSet& o) const { return !(*this == o); }

 private:
  int n_ = 0;
  std::vector<uint64_t> bits_;
};

}  // namespace skipring
