// Ring order construction and checking.
#include "topology/ring_order.h"

namespace skipring {

std::vector<int> identity_ring(int n) {
  std::vector<int> ring(n);
  for (int i = 0; i < n; ++i) ring[i] = i;
  return ring;
}

bool ring_is_valid(const std::vector<int>& ring, int n, std::string* why) {
  if (static_cast<int>(ring.size()) != n) {
    *why = "ring has " + std::to_string(ring.size()) + " positions for " + std::to_string(n) +
           " ranks";
    return false;
  }
  std::vector<char> seen(n, 0);
  for (int r : ring) {
    if (r < 0 || r >= n || seen[r]) {
      *why = "rank " + std::to_string(r) + " missing, repeated or out of range in the ring";
      return false;
    }
    seen[r] = 1;
  }
  return true;
}

}  // namespace skipring
