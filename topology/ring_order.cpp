// Ring order construction and checking, host-map parsing and host grouping (pure logic).
#include "topology/ring_order.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <tuple>
#include <unordered_map>

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

std::vector<int> dense_ids(const std::vector<std::string>& keys, std::vector<std::string>* names) {
  std::unordered_map<std::string, int> id_of;
  std::vector<int> ids(keys.size());
  if (names) names->clear();
  for (size_t r = 0; r < keys.size(); ++r) {
    auto [it, inserted] = id_of.emplace(keys[r], static_cast<int>(id_of.size()));
    if (inserted && names) names->push_back(keys[r]);
    ids[r] = it->second;
  }
  return ids;
}

namespace {

bool parse_block_size(const std::string& text, long* k) {
  if (text.empty() || text.size() > 9) return false;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return false;
  }
  *k = std::strtol(text.c_str(), nullptr, 10);
  return *k >= 1;
}

}  // namespace

bool parse_host_map(const std::string& map, int nranks, std::vector<int>* host_of_rank,
                    std::vector<std::string>* host_names, std::string* error) {
  const std::string prefix = "SKIPRING_HOST_MAP='" + map + "': ";
  if (nranks < 1) {
    *error = prefix + "no ranks";
    return false;
  }
  if (map.empty()) {
    *error = prefix + "empty (expected block:K or one host label per rank, ',' separated)";
    return false;
  }
  if (map.rfind("block:", 0) == 0) {
    long k = 0;
    if (!parse_block_size(map.substr(6), &k)) {
      *error = prefix + "block:K needs an integer K >= 1";
      return false;
    }
    host_of_rank->resize(nranks);
    for (int r = 0; r < nranks; ++r) (*host_of_rank)[r] = static_cast<int>(r / k);
    if (host_names) {
      host_names->clear();
      const int hosts = (*host_of_rank)[nranks - 1] + 1;
      for (int h = 0; h < hosts; ++h) host_names->push_back("block" + std::to_string(h));
    }
    return true;
  }
  std::vector<std::string> labels;
  size_t start = 0;
  while (true) {
    const size_t comma = map.find(',', start);
    const size_t len = comma == std::string::npos ? std::string::npos : comma - start;
    labels.push_back(map.substr(start, len));
    if (labels.back().empty()) {
      *error = prefix + "host label " + std::to_string(labels.size() - 1) + " is empty";
      return false;
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (static_cast<int>(labels.size()) != nranks) {
    *error = prefix + "lists " + std::to_string(labels.size()) +
             " host labels for a communicator of " + std::to_string(nranks) +
             " ranks (one label per rank, or block:K)";
    return false;
  }
  *host_of_rank = dense_ids(labels, host_names);
  return true;
}

std::vector<std::vector<int>> ranks_per_host(const std::vector<int>& host_of_rank) {
  int hosts = 0;
  for (int h : host_of_rank) hosts = std::max(hosts, h + 1);
  std::vector<std::vector<int>> out(hosts);
  for (size_t r = 0; r < host_of_rank.size(); ++r)
    out[host_of_rank[r]].push_back(static_cast<int>(r));
  return out;
}

std::vector<int> node_aware_ring(const std::vector<RankPlace>& places) {
  // Each rank's sort key is the lowest rank sharing its host, then the lowest rank sharing its
  // (host, package), then its (host, package, numa), then itself: every group is contiguous and
  // groups follow in order of their lowest rank, so already-grouped rank orders stay the
  // identity.
  const int n = static_cast<int>(places.size());
  std::map<int, int> first_host;
  std::map<std::pair<int, int>, int> first_package;
  std::map<std::tuple<int, int, int>, int> first_numa;
  for (int r = 0; r < n; ++r) {
    const RankPlace& p = places[r];
    first_host.emplace(p.host, r);
    first_package.emplace(std::make_pair(p.host, p.package), r);
    first_numa.emplace(std::make_tuple(p.host, p.package, p.numa), r);
  }
  std::vector<std::tuple<int, int, int, int>> keys(n);
  for (int r = 0; r < n; ++r) {
    const RankPlace& p = places[r];
    keys[r] = {first_host[p.host], first_package[{p.host, p.package}],
               first_numa[{p.host, p.package, p.numa}], r};
  }
  std::sort(keys.begin(), keys.end());
  std::vector<int> ring(n);
  for (int i = 0; i < n; ++i) ring[i] = std::get<3>(keys[i]);
  return ring;
}

std::vector<int> node_aware_ring(const std::vector<int>& host_of_rank) {
  std::vector<RankPlace> places(host_of_rank.size());
  for (size_t r = 0; r < host_of_rank.size(); ++r) places[r].host = host_of_rank[r];
  return node_aware_ring(places);
}

int inter_host_hops(const std::vector<int>& ring, const std::vector<int>& host_of_rank) {
  const size_t n = ring.size();
  int hops = 0;
  for (size_t i = 0; i < n; ++i) {
    if (host_of_rank[ring[i]] != host_of_rank[ring[(i + 1) % n]]) ++hops;
  }
  return hops;
}

}  // namespace skipring
