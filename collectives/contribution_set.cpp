// ContributionSet implementation (a small dynamic bitset).
#include "collectives/contribution_set.h"

#include <cstring>

namespace skipring {

ContributionSet::ContributionSet(int n) : n_(n), bits_(words_for(n), 0) {}

void ContributionSet::add(int rank) { bits_[rank / 64] |= uint64_t{1} << (rank % 64); }

bool ContributionSet::contains(int rank) const {
  return rank >= 0 && rank < n_ && (bits_[rank / 64] >> (rank % 64)) & 1u;
}

bool ContributionSet::overlaps(const ContributionSet& other) const {
  const size_t w = bits_.size() < other.bits_.size() ? bits_.size() : other.bits_.size();
  for (size_t i = 0; i < w; ++i) {
    if (bits_[i] & other.bits_[i]) return true;
  }
  return false;
}

void ContributionSet::merge(const ContributionSet& other) {
  for (size_t i = 0; i < bits_.size() && i < other.bits_.size(); ++i) bits_[i] |= other.bits_[i];
}

int ContributionSet::count() const {
  int c = 0;
  for (uint64_t w : bits_) c += __builtin_popcountll(w);
  return c;
}

void ContributionSet::clear() {
  for (auto& w : bits_) w = 0;
}

void ContributionSet::write_words(uint64_t* out) const {
  std::memcpy(out, bits_.data(), bits_.size() * sizeof(uint64_t));
}

bool ContributionSet::read_words(int n, const uint64_t* in) {
  n_ = n;
  bits_.assign(words_for(n), 0);
  std::memcpy(bits_.data(), in, bits_.size() * sizeof(uint64_t));
  if (n % 64 != 0 && !bits_.empty() && (bits_.back() >> (n % 64)) != 0) return false;
  return true;
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
