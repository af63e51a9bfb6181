// The process-wide caches of communicator setup (runtime/setup_cache.h).
#include "runtime/setup_cache.h"

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/hash.h"

namespace skipring {
namespace {

constexpr size_t kCacheEntries = 256;  // a bound: the caches are cleared when they exceed it
constexpr size_t kPoolPerGroup = 4;

template <typename T>
void append_bytes(std::string* s, const T& v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename Map>
void bounded_insert(Map* m, const std::string& key, typename Map::mapped_type v) {
  if (m->size() >= kCacheEntries && m->find(key) == m->end()) m->clear();
  (*m)[key] = std::move(v);
}

}  // namespace

SetupCache& SetupCache::get() {
  static SetupCache cache;
  return cache;
}

// Attributes on MPI_COMM_SELF are deleted at the start of MPI_Finalize, the last set first:
// this one (set after the C API's) empties the pool before the C API frees the remaining
// communicators, which then free their internal ones.
int SetupCache::free_pool_at_finalize(MPI_Comm, int, void*, void*) {
  SetupCache& c = get();
  std::lock_guard<std::mutex> lock(c.mutex_);
  c.finalizing_ = true;
  for (auto& [key, list] : c.pool_) {
    for (auto& [id, comm] : list) MPI_Comm_free(&comm);
  }
  c.pool_.clear();
  return MPI_SUCCESS;
}

void SetupCache::watch_finalize() {
  static std::once_flag once;
  std::call_once(once, [] {
    int keyval = MPI_KEYVAL_INVALID;
    if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_pool_at_finalize, &keyval, nullptr) ==
        MPI_SUCCESS) {
      MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr);
    }
  });
}

bool SetupCache::take_pooled(const std::string& key, int64_t* id, MPI_Comm* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  // The offered communicator leaves the pool now (a concurrent setup on another thread cannot
  // offer it too); it goes back if the ranks do not all offer it (put_back).
  auto pt = key.empty() ? pool_.end() : pool_.find(key);
  if (pt == pool_.end()) return false;
  auto& list = pt->second;
  auto best = list.end();
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (best == list.end() || it->first < best->first) best = it;
  }
  if (best == list.end()) return false;
  *id = best->first;
  *comm = best->second;
  list.erase(best);
  return true;
}

void SetupCache::put_back(const std::string& key, int64_t id, MPI_Comm comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  pool_[key].emplace_back(id, comm);
}

void SetupCache::release(InternalComm* c, bool usable) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || c->comm == MPI_COMM_NULL) return;
  // Broken communicators may have messages in flight: never pooled.
  if (!c->pool_key.empty() && usable) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& list = pool_[c->pool_key];
    if (!finalizing_ && list.size() < kPoolPerGroup && pool_.size() <= kCacheEntries) {
      list.emplace_back(c->id, c->comm);
      c->comm = MPI_COMM_NULL;
    }
  }
  if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
}

bool SetupCache::find_group(const std::string& key, GroupEntry* out) {
  if (key.empty()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = groups_.find(key);
  if (it == groups_.end()) return false;
  *out = it->second;
  return true;
}

bool SetupCache::find_cost(const std::string& key, CostEntry* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = costs_.find(key);
  if (it == costs_.end()) return false;
  *out = it->second;
  return true;
}

void SetupCache::store_group(const std::string& key, GroupEntry e) {
  std::lock_guard<std::mutex> lock(mutex_);
  bounded_insert(&groups_, key, std::move(e));
}

void SetupCache::store_cost(const std::string& key, CostEntry e) {
  std::lock_guard<std::mutex> lock(mutex_);
  bounded_insert(&costs_, key, std::move(e));
}

int64_t digest62(const std::string& bytes) { return static_cast<int64_t>(fnv1a64(bytes) >> 2); }

std::string group_key(MPI_Comm comm, int size, const Config& cfg) {
  // MPI_COMM_WORLD's group, made once (MPI frees it at MPI_Finalize).
  static const MPI_Group world = [] {
    MPI_Group g = MPI_GROUP_NULL;
    if (MPI_Comm_group(MPI_COMM_WORLD, &g) != MPI_SUCCESS) g = MPI_GROUP_NULL;
    return g;
  }();
  MPI_Group group = MPI_GROUP_NULL;
  std::vector<int> in(static_cast<size_t>(size)), out(static_cast<size_t>(size), MPI_UNDEFINED);
  for (int i = 0; i < size; ++i) in[i] = i;
  bool ok_ = world != MPI_GROUP_NULL && MPI_Comm_group(comm, &group) == MPI_SUCCESS &&
             MPI_Group_translate_ranks(group, size, in.data(), world, out.data()) == MPI_SUCCESS;
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  for (int r : out) ok_ = ok_ && r != MPI_UNDEFINED;
  if (!ok_) return std::string();
  std::string key = cfg.host_map;
  key.push_back('\0');
  key.append(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(int));
  return key;
}

int64_t group_digest(const std::string& key, const GroupEntry& e) {
  std::string b = key;
  for (int r : e.topology.ring) append_bytes(&b, r);
  for (int h : e.topology.host_of_rank) append_bytes(&b, h);
  append_bytes(&b, e.any_over);
  return digest62(b);
}

std::string cost_key(const Topology& t, int any_over, const Config& cfg) {
  std::string key;
  append_bytes(&key, t.size());
  append_bytes(&key, any_over);
  append_bytes(&key, cfg.clock);
  append_bytes(&key, cfg.poll_spins);
  append_bytes(&key, cfg.idle_sleep_us);
  append_bytes(&key, cfg.model_lat_us);
  append_bytes(&key, cfg.model_gbps);
  append_bytes(&key, cfg.model_reduce_gbps);
  append_bytes(&key, cfg.sim_reduce_gbps);
  append_bytes(&key, cfg.auto_mpi);
  const auto& host = t.host_of_rank;
  int run = 0, last = -1;
  for (int r : t.ring) {
    const int h = host.empty() ? 0 : host[r];
    if (h != last && run > 0) append_bytes(&key, run);
    run = h == last ? run + 1 : 1;
    last = h;
  }
  append_bytes(&key, run);
  return key;
}

int64_t cost_digest(const CostParams& c) {
  std::string b;
  for (double v : {c.alpha_s, c.beta_s, c.gamma_s, c.inter_alpha_s, c.inter_beta_s, c.sigma_s,
                   c.cache_bytes, c.mem_slowdown}) {
    append_bytes(&b, v);
  }
  for (double v : c.mpi_offset_s) append_bytes(&b, v);
  return digest62(b);
}

}  // namespace skipring
