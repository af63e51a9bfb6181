// ContributionSet implementation (a small dynamic bitset, inline up to 128 ranks).
#include "collectives/contribution_set.h"

#include <cstring>

namespace skipring {

ContributionSet::ContributionSet(int n) { reset(n); }

void ContributionSet::reset(int n) {
  n_ = n;
  words_ = words_for(n);
  inline_[0] = inline_[1] = 0;
  if (words_ > kInline) {
    heap_.assign(words_, 0);
  } else {
    heap_.clear();
  }
}

void ContributionSet::add(int rank) { bits()[rank / 64] |= uint64_t{1} << (rank % 64); }

bool ContributionSet::contains(int rank) const {
  return rank >= 0 && rank < n_ && (bits()[rank / 64] >> (rank % 64)) & 1u;
}

bool ContributionSet::overlaps(const ContributionSet& other) const {
  const size_t w = words_ < other.words_ ? words_ : other.words_;
  const uint64_t* a = bits();
  const uint64_t* b = other.bits();
  for (size_t i = 0; i < w; ++i) {
    if (a[i] & b[i]) return true;
  }
  return false;
}

void ContributionSet::merge(const ContributionSet& other) {
  uint64_t* a = bits();
  const uint64_t* b = other.bits();
  for (size_t i = 0; i < words_ && i < other.words_; ++i) a[i] |= b[i];
}

int ContributionSet::count() const {
  int c = 0;
  const uint64_t* a = bits();
  for (size_t i = 0; i < words_; ++i) c += __builtin_popcountll(a[i]);
  return c;
}

void ContributionSet::clear() { std::memset(bits(), 0, words_ * sizeof(uint64_t)); }

void ContributionSet::write_words(uint64_t* out) const {
  std::memcpy(out, bits(), words_ * sizeof(uint64_t));
}

bool ContributionSet::read_words(int n, const uint64_t* in) {
  if (n != n_) reset(n);
  std::memcpy(bits(), in, words_ * sizeof(uint64_t));
  if (n % 64 != 0 && words_ > 0 && (bits()[words_ - 1] >> (n % 64)) != 0) return false;
  return true;
}

bool ContributionSet::operator==(const ContributionSet& o) const {
  return n_ == o.n_ && words_ == o.words_ &&
         std::memcmp(bits(), o.bits(), words_ * sizeof(uint64_t)) == 0;
}

std::string ContributionSet::to_string() const {
  std::string s = "{";
  bool first = true;
  for (int r = 0; r < n_; ++r) {
    if (!contains(r)) continue;
    if (!first) s += ",";
    s += std::to_string(r);
    first = false;
  }
  return s + "}";
}

}  // namespace skipring
