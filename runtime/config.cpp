// The SKIPRING_* configuration: the environment parsed and validated through the parameter
// table (runtime/params.h), the process-wide Config.
#include "runtime/config.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>

#include "common/hash.h"
#include "runtime/params.h"

extern char** environ;

namespace skipring {
namespace {

std::mutex g_mutex;
Config g_config;

}  // namespace

EnvLookup process_env() {
  return [](const char* name, std::string* value) {
    const char* v = std::getenv(name);
    if (v == nullptr) return false;
    *value = v;
    return true;
  };
}

Status load_config(const EnvLookup& env, Config* out, std::string* error,
                   const std::vector<std::string>* env_names) {
  Config cfg;
  for (const ParamDef& p : param_table()) {
    std::string value;
    // Set but empty (`SKIPRING_X=`) means the default, as if unset (README.md).
    if (!env(p.name, &value) || value.empty()) continue;
    if (!parse_param(p, value, &cfg)) {
      *error = std::string("invalid value '") + value + "' for " + p.name + ": accepts " +
               param_accepts(p);
      return Status::kErrConfig;
    }
  }
  if (env_names != nullptr) {
    for (const auto& n : *env_names) {
      if (n.rfind("SKIPRING_", 0) != 0) continue;
      bool known = false;
      for (const ParamDef& p : param_table()) known = known || n == p.name;
      if (!known) {
        *error = "unknown variable " + n + " (skipring_info lists every SKIPRING_* parameter)";
        return Status::kErrConfig;
      }
    }
  }
  *out = cfg;
  return Status::kOk;
}

std::vector<ParamInfo> describe_params(const Config& cfg, const EnvLookup& env) {
  const Config defaults;
  std::vector<ParamInfo> rows;
  for (const ParamDef& p : param_table()) {
    ParamInfo info;
    info.name = p.name;
    info.type = param_type(p);
    info.accepts = param_accepts(p);
    info.default_value = show_param(p, defaults);
    info.current_value = show_param(p, cfg);
    std::string value;
    info.set_in_env = env(p.name, &value) && !value.empty();
    info.help = p.meaning;
    rows.push_back(std::move(info));
  }
  return rows;
}

std::vector<AgreedValue> agreed_values(const Config& cfg) {
  // Must match across ranks:
  //   SKIPRING_ENABLE            the PMPI library runs skipring or PMPI_Allreduce (always 1 here:
  //                              a rank with 0 never creates a communicator)
  //   SKIPRING_SEGMENT_BYTES     pieces and message sizes
  //   SKIPRING_PIPELINE_DEPTH    slots and messages in flight
  //   SKIPRING_CHECK             barriers after each collective, the per-call agreement
  //   SKIPRING_TRANSPORT         MPI or UCX messages (a message sent on one is never received
  //                              on the other)
  //   SKIPRING_SKIP              skip-ahead's control messages
  //   SKIPRING_DIRECT_ALLGATHER  who sends the final segments to whom
  //   SKIPRING_LATE_CHAIN        the algorithm (the census and the late path, or the ring alone)
  //   SKIPRING_LATE_SEGMENT_BYTES  the late path's segments (both ends cut the blocks alike)
  //   SKIPRING_LATE_INFLIGHT     kept agreed (a late rank's window; harmless to agree on)
  //   SKIPRING_ALGO              the algorithm
  //   SKIPRING_HOST_MAP          hosts and ring order (gather_topology checks it too)
  //   SKIPRING_TREE_GRAPH        the trees (the file's contents are compared, not its path)
  //   SKIPRING_MULTITREE_K       the trees
  //   SKIPRING_AUTO_STRAGGLER    auto's choice once late arrivals were seen, and whether the
  //                              ranks take part in the agreement on them
  //   SKIPRING_MODEL_*           auto's choice
  //   SKIPRING_SKIP_T_US         given or learnt (0): learning it measures the cost model, a
  //                              collective step; the value itself is local
  //   SKIPRING_GPU_STAGING       device-buffer calls run in skipring (staged) or in PMPI
  //   SKIPRING_SIM_REDUCE_GBPS   auto's choice under SimGrid (the SimGrid build only)
  static const char* const kNames[] = {
      "SKIPRING_ENABLE",
      "SKIPRING_SEGMENT_BYTES",
      "SKIPRING_PIPELINE_DEPTH",
      "SKIPRING_CHECK",
      "SKIPRING_TRANSPORT",
      "SKIPRING_SKIP",
      "SKIPRING_DIRECT_ALLGATHER",
      "SKIPRING_ALGO",
      "SKIPRING_HOST_MAP",
      "SKIPRING_TREE_GRAPH",
      "SKIPRING_MULTITREE_K",
      "SKIPRING_MODEL_LAT_US",
      "SKIPRING_MODEL_GBPS",
      "SKIPRING_MODEL_REDUCE_GBPS",
      "SKIPRING_SKIP_T_US",
      "SKIPRING_GPU_STAGING",
      "SKIPRING_AUTO_STRAGGLER",
      "SKIPRING_LATE_CHAIN",
      "SKIPRING_LATE_SEGMENT_BYTES",
      "SKIPRING_LATE_INFLIGHT",
#ifdef SKIPRING_SIMGRID
      "SKIPRING_SIM_REDUCE_GBPS",
#endif
  };
  // Communicators are set up often (dup, split): the list is computed once per distinct set
  // of these fields (no formatting or file reading on the way).
  std::string fingerprint;
  auto raw = [&fingerprint](const auto& v) {
    fingerprint.append(reinterpret_cast<const char*>(&v), sizeof(v));
  };
  raw(cfg.enable);
  raw(cfg.segment_bytes);
  raw(cfg.pipeline_depth);
  raw(cfg.check);
  raw(cfg.transport);
  raw(cfg.skip);
  raw(cfg.direct_allgather);
  raw(cfg.late_chain);
  raw(cfg.late_segment_bytes);
  raw(cfg.late_inflight);
  raw(cfg.algo);
  raw(cfg.multitree_k);
  raw(cfg.auto_straggler);
  raw(cfg.model_lat_us);
  raw(cfg.model_gbps);
  raw(cfg.model_reduce_gbps);
  raw(cfg.skip_t_us > 0);
  raw(cfg.gpu_staging);
  raw(cfg.sim_reduce_gbps);
  fingerprint += cfg.host_map + '\0' + cfg.tree_graph;
  static std::mutex cache_mutex;
  static std::string cached_fingerprint;
  static std::vector<AgreedValue> cached;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (!cached.empty() && fingerprint == cached_fingerprint) return cached;
  }
  std::vector<AgreedValue> out;
  for (const char* name : kNames) {
    const ParamDef* def = nullptr;
    for (const ParamDef& p : param_table()) {
      if (std::strcmp(p.name, name) == 0) def = &p;
    }
    if (def == nullptr) continue;
    AgreedValue v{def->name, show_param(*def, cfg), 0};
    std::string digested = v.shown;
    if (std::strcmp(name, "SKIPRING_SKIP_T_US") == 0) {
      digested = cfg.skip_t_us > 0 ? "given" : "learnt";
    } else if (std::strcmp(name, "SKIPRING_TREE_GRAPH") == 0 && !cfg.tree_graph.empty()) {
      std::ifstream in(cfg.tree_graph, std::ios::binary);
      digested = "file:" + std::string(std::istreambuf_iterator<char>(in), {});
    }
    v.digest = static_cast<int64_t>(fnv1a64(std::string(name) + "=" + digested) >> 2);
    out.push_back(std::move(v));
  }
  std::lock_guard<std::mutex> lock(cache_mutex);
  cached_fingerprint = fingerprint;
  cached = out;
  return out;
}

// No lock: the caller reads through the returned reference anyway, after any lock here would
// have been released. The configuration is written at init and by the skipring_set_* calls,
// which the API documents as not concurrent with collectives. (The lock cost ~10 ns per call,
// several times per all-reduce.)
const Config& global_config() { return g_config; }

Status init_global_config(std::string* error) {
  std::vector<std::string> names;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    names.emplace_back(*e, eq ? static_cast<size_t>(eq - *e) : std::strlen(*e));
  }
  Config cfg;
  SKIPRING_RETURN_IF_ERROR(load_config(process_env(), &cfg, error, &names));
  std::lock_guard<std::mutex> lock(g_mutex);
  g_config = cfg;
  return Status::kOk;
}

void set_global_config(const Config& cfg) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_config = cfg;
}

}  // namespace skipring
