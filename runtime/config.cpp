// The SKIPRING_* parameter registry: parsing, validation and description.
#include "runtime/config.h"

#include "topology/multitree.h"

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>

extern char** environ;

namespace skipring {
namespace {

struct ParamDesc {
  const char* name;
  const char* type;
  const char* accepts;
  const char* help;
  // Parses `text` into cfg; false when the value is not accepted.
  bool (*parse)(const std::string& text, Config* cfg);
  std::string (*show)(const Config& cfg);
};

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool parse_bool(const std::string& text, bool* out) {
  const std::string t = lower(text);
  if (t == "1" || t == "true" || t == "yes" || t == "on") return *out = true, true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return *out = false, true;
  return false;
}

bool parse_int(const std::string& text, long lo, long hi, int* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

// A finite number in (lo, hi] when lo_open, else [lo, hi].
bool parse_double(const std::string& text, double lo, double hi, bool lo_open, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !(lo_open ? v > lo : v >= lo) || !(v <= hi)) return false;
  *out = v;
  return true;
}

// Accepts a byte count with an optional K/M/G suffix (powers of 1024), optional trailing B.
bool parse_size(const std::string& text, size_t lo, size_t hi, size_t* out) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0) return false;
  std::string suffix = lower(end);
  if (!suffix.empty() && suffix.back() == 'b') suffix.pop_back();
  if (!suffix.empty() && suffix.back() == 'i') suffix.pop_back();
  unsigned long long mult = 1;
  if (suffix == "k") mult = 1ull << 10;
  else if (suffix == "m") mult = 1ull << 20;
  else if (suffix == "g") mult = 1ull << 30;
  else if (!suffix.empty()) return false;
  if (v > std::numeric_limits<unsigned long long>::max() / mult) return false;
  v *= mult;
  if (v < lo || v > hi) return false;
  *out = static_cast<size_t>(v);
  return true;
}

const char* bool_str(bool b) { return b ? "1" : "0"; }

std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

const char* log_level_name(LogLevel l) {
  static const char* names[] = {"trace", "debug", "info", "warn", "error", "off"};
  return names[static_cast<int>(l)];
}

const ParamDesc kParams[] = {
    {"SKIPRING_ENABLE", "bool", "0|1 (also true/false, yes/no, on/off)",
     "Use skipring's all-reduce; 0 makes the PMPI library pass every call to PMPI_Allreduce.",
     [](const std::string& t, Config* c) { return parse_bool(t, &c->enable); },
     [](const Config& c) { return std::string(bool_str(c.enable)); }},
    {"SKIPRING_LOG_LEVEL", "enum", "trace|debug|info|warn|error|off",
     "Logging threshold; lines go to stderr prefixed with the rank.",
     [](const std::string& t, Config* c) {
       const std::string v = lower(t);
       for (int i = 0; i <= static_cast<int>(LogLevel::kOff); ++i) {
         if (v == log_level_name(static_cast<LogLevel>(i))) {
           c->log_level = static_cast<LogLevel>(i);
           return true;
         }
       }
       return false;
     },
     [](const Config& c) { return std::string(log_level_name(c.log_level)); }},
    {"SKIPRING_REPORT", "bool", "0|1",
     "PMPI library: at MPI_Finalize each rank prints one 'skipring: rank=...' line to stderr.",
     [](const std::string& t, Config* c) { return parse_bool(t, &c->report); },
     [](const Config& c) { return std::string(bool_str(c.report)); }},
    {"SKIPRING_SEGMENT_BYTES", "size", "1K..1G, suffix K/M/G allowed",
     "Pipelining unit: each chunk is sent in segments of at most this many bytes.",
     [](const std::string& t, Config* c) {
       return parse_size(t, 1024, size_t{1} << 30, &c->segment_bytes);
     },
     [](const Config& c) { return std::to_string(c.segment_bytes); }},
    {"SKIPRING_PIPELINE_DEPTH", "int", "1..64",
     "Segments in flight per direction (receives posted ahead, sends outstanding).",
     [](const std::string& t, Config* c) { return parse_int(t, 1, 64, &c->pipeline_depth); },
     [](const Config& c) { return std::to_string(c.pipeline_depth); }},
    {"SKIPRING_POLL_SPINS", "int", "0..1000000",
     "Progress engine: idle polls before it starts yielding the core.",
     [](const std::string& t, Config* c) { return parse_int(t, 0, 1000000, &c->poll_spins); },
     [](const Config& c) { return std::to_string(c.poll_spins); }},
    {"SKIPRING_IDLE_SLEEP_US", "int", "0..100000",
     "Progress engine: longest sleep between polls once idle for a while (0: only yield).",
     [](const std::string& t, Config* c) { return parse_int(t, 0, 100000, &c->idle_sleep_us); },
     [](const Config& c) { return std::to_string(c.idle_sleep_us); }},
#ifdef SKIPRING_SIMGRID
    // Under SMPI std::chrono::steady_clock is the host's real time, not the simulated time.
    {"SKIPRING_CLOCK", "enum", "mpi_wtime (the SimGrid build runs on simulated time only)",
     "Time source of the progress engine; the SimGrid SMPI build uses MPI_Wtime (simulated).",
     [](const std::string& t, Config* c) {
       if (lower(t) != "mpi_wtime") return false;
       c->clock = ClockKind::kMpiWtime;
       return true;
     },
#else
    {"SKIPRING_CLOCK", "enum", "steady|mpi_wtime",
     "Time source of the progress engine; mpi_wtime under SimGrid SMPI (simulated time).",
     [](const std::string& t, Config* c) {
       const std::string v = lower(t);
       if (v == "steady") return c->clock = ClockKind::kSteady, true;
       if (v == "mpi_wtime") return c->clock = ClockKind::kMpiWtime, true;
       return false;
     },
#endif
     [](const Config& c) {
       return std::string(c.clock == ClockKind::kSteady ? "steady" : "mpi_wtime");
     }},
    {"SKIPRING_CHECK", "bool", "0|1",
     "After each collective, verify no message is left unmatched on the internal communicator.",
     [](const std::string& t, Config* c) { return parse_bool(t, &c->check); },
     [](const Config& c) { return std::string(bool_str(c.check)); }},
    {"SKIPRING_SKIP", "bool", "0|1",
     "Skip ahead past a slow predecessor (1). 0: plain ring, run-to-run identical results.",
     [](const std::string& t, Config* c) { return parse_bool(t, &c->skip); },
     [](const Config& c) { return std::string(bool_str(c.skip)); }},
    {"SKIPRING_DIRECT_ALLGATHER", "enum", "auto|0|1",
     "Allgather once skip-ahead met a straggler: 1 each owner sends its final segments to every "
     "rank, 0 around the ring and past the late rank; auto: 1 when every rank is on one host.",
     [](const std::string& t, Config* c) {
       if (lower(t) == "auto") return c->direct_allgather = -1, true;
       bool b = false;
       if (!parse_bool(t, &b)) return false;
       c->direct_allgather = b ? 1 : 0;
       return true;
     },
     [](const Config& c) {
       return std::string(c.direct_allgather < 0 ? "auto" : c.direct_allgather ? "1" : "0");
     }},
    {"SKIPRING_ALPHA", "double", "a number > 1 and <= 1000",
     "Skip threshold factor: skip when the wait exceeds alpha * T + T_trans.",
     [](const std::string& t, Config* c) {
       return parse_double(t, 1.0, 1000.0, /*lo_open=*/true, &c->alpha);
     },
     [](const Config& c) { return fmt_double(c.alpha); }},
    {"SKIPRING_SKIP_MIN_WAIT_US", "int", "0..10000000",
     "Floor of the skip threshold in microseconds (guards against noise when T is tiny).",
     [](const std::string& t, Config* c) {
       return parse_int(t, 0, 10000000, &c->skip_min_wait_us);
     },
     [](const Config& c) { return std::to_string(c.skip_min_wait_us); }},
    {"SKIPRING_SKIP_T_US", "double", "a number >= 0 and <= 1e7 (0: learn T)",
     "T of the skip threshold in microseconds, given instead of learnt (experiments).",
     [](const std::string& t, Config* c) {
       return parse_double(t, 0.0, 1e7, /*lo_open=*/false, &c->skip_t_us);
     },
     [](const Config& c) { return fmt_double(c.skip_t_us); }},
    {"SKIPRING_SKIP_TTRANS_US", "double", "a number >= 0 and <= 1e7 (0: fit T_trans)",
     "T_trans of the skip threshold in microseconds, given instead of fitted (experiments).",
     [](const std::string& t, Config* c) {
       return parse_double(t, 0.0, 1e7, /*lo_open=*/false, &c->skip_ttrans_us);
     },
     [](const Config& c) { return fmt_double(c.skip_ttrans_us); }},
    {"SKIPRING_ALGO", "enum", "auto|ring|skipring|rd|rabenseifner|tree|multitree|hier",
     "All-reduce algorithm: auto picks by the alpha-beta cost model (skipring_info --algo "
     "prints the table); any other value forces that algorithm for every size.",
     [](const std::string& t, Config* c) { return parse_algo(t, &c->algo); },
     [](const Config& c) { return std::string(algo_name(c.algo)); }},
    {"SKIPRING_HOST_MAP", "string", "block:K | one host label per rank, ',' separated",
     "Rank -> host override (tests, SimGrid): fakes several hosts; empty: the real hosts.",
     [](const std::string& t, Config* c) {
       if (t.rfind("block:", 0) == 0) {
         int k = 0;
         if (!parse_int(t.substr(6), 1, 1 << 24, &k)) return false;
       } else {
         size_t start = 0;
         while (true) {
           const size_t comma = t.find(',', start);
           const std::string label = t.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
           if (label.empty()) return false;
           if (comma == std::string::npos) break;
           start = comma + 1;
         }
       }
       c->host_map = t;
       return true;
     },
     [](const Config& c) { return c.host_map.empty() ? std::string("(hosts)") : c.host_map; }},
    {"SKIPRING_TREE_GRAPH", "path", "a readable link-graph file (docs/multitree.md)",
     "Link graph (latency, bandwidth per link) the multitree algorithm builds its trees on; "
     "empty: derived from the topology.",
     [](const std::string& t, Config* c) {
       // Read and checked now (its node count against the communicator at setup).
       LinkGraph g;
       std::string why;
       if (!t.empty() && !ok(LinkGraph::load(t, &g, &why))) return false;
       c->tree_graph = t;
       return true;
     },
     [](const Config& c) { return c.tree_graph.empty() ? std::string("(topology)") : c.tree_graph; }},
    {"SKIPRING_MULTITREE_K", "int", "1..16",
     "Most spanning trees the multitree all-reduce builds.",
     [](const std::string& t, Config* c) { return parse_int(t, 1, 16, &c->multitree_k); },
     [](const Config& c) { return std::to_string(c.multitree_k); }},
    {"SKIPRING_MODEL_LAT_US", "double", "a number >= 0 and <= 1e6 (0: measure)",
     "Cost model: per-message latency in microseconds; 0 measures it at communicator setup.",
     [](const std::string& t, Config* c) {
       return parse_double(t, 0.0, 1e6, /*lo_open=*/false, &c->model_lat_us);
     },
     [](const Config& c) { return fmt_double(c.model_lat_us); }},
    {"SKIPRING_MODEL_GBPS", "double", "a number >= 0 and <= 1e6 (0: measure)",
     "Cost model: point-to-point bandwidth in GB/s; 0 measures it at communicator setup.",
     [](const std::string& t, Config* c) {
       return parse_double(t, 0.0, 1e6, /*lo_open=*/false, &c->model_gbps);
     },
     [](const Config& c) { return fmt_double(c.model_gbps); }},
    {"SKIPRING_MODEL_REDUCE_GBPS", "double", "a number >= 0 and <= 1e6 (0: measure)",
     "Cost model: reduction rate in GB/s; 0 measures it at communicator setup.",
     [](const std::string& t, Config* c) {
       return parse_double(t, 0.0, 1e6, /*lo_open=*/false, &c->model_reduce_gbps);
     },
     [](const Config& c) { return fmt_double(c.model_reduce_gbps); }},
    {"SKIPRING_INJECT", "spec", "rules 'rank=R,delay=D|dist=...,at=arrive|rs|ag|step,prob=P,every=N,seed=S' separated by ';'",
     "Straggler injection for experiments (see README); empty: none.",
     [](const std::string& t, Config* c) {
       c->inject = t;
       return true;  // validated by the injection parser at init (its message names the part)
     },
     [](const Config& c) { return c.inject.empty() ? std::string("(none)") : c.inject; }},
    {"SKIPRING_TRACE", "path", "a directory (created if missing)",
     "Write a per-rank Chrome-trace JSON (opens in Perfetto) of every collective into it.",
     [](const std::string& t, Config* c) {
       if (t.empty()) return false;
       c->trace_dir = t;
       return true;
     },
     [](const Config& c) { return c.trace_dir.empty() ? std::string("(off)") : c.trace_dir; }},
    {"SKIPRING_SIM_REDUCE_GBPS", "double", "a number > 0 and <= 1e6 (GB/s, 1e9 bytes per second)",
     "SimGrid SMPI build: each reduction costs bytes / rate of simulated time (default: 8 KiB "
     "in 3 us); validated but ignored by the normal build.",
     [](const std::string& t, Config* c) {
       return parse_double(t, 0.0, 1e6, /*lo_open=*/true, &c->sim_reduce_gbps);
     },
     [](const Config& c) { return fmt_double(c.sim_reduce_gbps); }},
    {"SKIPRING_SIM_POLL_NS", "int", "1..1000000",
     "SimGrid SMPI build, SKIPRING_SIM_WAIT=poll (or no loopback link): simulated nanoseconds "
     "an idle rank sleeps between polls (bounds how late it sees a message); ignored by the "
     "normal build.",
     [](const std::string& t, Config* c) { return parse_int(t, 1, 1000000, &c->sim_poll_ns); },
     [](const Config& c) { return std::to_string(c.sim_poll_ns); }},
    {"SKIPRING_SIM_WAIT", "enum", "block|poll",
     "SimGrid SMPI build: an idle rank blocks until its next completion or timer (block: exact "
     "and fast) or polls every SKIPRING_SIM_POLL_NS (poll); ignored by the normal build.",
     [](const std::string& t, Config* c) {
       const std::string v = lower(t);
       if (v == "block") return c->sim_block = true, true;
       if (v == "poll") return c->sim_block = false, true;
       return false;
     },
     [](const Config& c) { return std::string(c.sim_block ? "block" : "poll"); }},
};

std::mutex g_mutex;
Config g_config;

}  // namespace

namespace {
const char* const kAlgoNames[] = {"auto", "ring", "skipring", "rd", "rabenseifner",
                                  "tree", "multitree", "hier"};
}  // namespace

const char* algo_name(Algo a) { return kAlgoNames[static_cast<int>(a)]; }

bool parse_algo(const std::string& text, Algo* out) {
  const std::string t = lower(text);
  for (int i = 0; i < static_cast<int>(sizeof(kAlgoNames) / sizeof(kAlgoNames[0])); ++i) {
    if (t == kAlgoNames[i]) {
      *out = static_cast<Algo>(i);
      return true;
    }
  }
  return false;
}

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
  for (const auto& p : kParams) {
    std::string value;
    if (!env(p.name, &value)) continue;
    if (!p.parse(value, &cfg)) {
      *error = std::string("invalid value '") + value + "' for " + p.name + ": accepts " +
               p.accepts;
      return Status::kErrConfig;
    }
  }
  if (env_names != nullptr) {
    for (const auto& n : *env_names) {
      if (n.rfind("SKIPRING_", 0) != 0) continue;
      bool known = false;
      for (const auto& p : kParams) known = known || n == p.name;
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
  for (const auto& p : kParams) {
    ParamInfo info;
    info.name = p.name;
    info.type = p.type;
    info.accepts = p.accepts;
    info.default_value = p.show(defaults);
    info.current_value = p.show(cfg);
    std::string unused;
    info.set_in_env = env(p.name, &unused);
    info.help = p.help;
    rows.push_back(std::move(info));
  }
  return rows;
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
  SKIPRING_CHECK(load_config(process_env(), &cfg, error, &names));
  std::lock_guard<std::mutex> lock(g_mutex);
  g_config = cfg;
  return Status::kOk;
}

void set_global_config(const Config& cfg) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_config = cfg;
}

}  // namespace skipring
