// Ring order of a communicator: which rank sits at which ring position. For now the identity
// (rank order); topology-aware orders (same-host ranks adjacent) plug in here.
#pragma once

#include <string>
#include <vector>

namespace skipring {

std::vector<int> identity_ring(int n);
// True when `ring` holds every rank 0..n-1 exactly once (the ring then closes).
bool ring_is_valid(const std::vector<int>& ring, int n, std::string* why);

}  // namespace skipring
