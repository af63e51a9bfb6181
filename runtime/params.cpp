// The SKIPRING_* parameter table (see params.h): the entries, their parsers and their texts.
#include "runtime/params.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <mutex>
#include <type_traits>

#include "common/hash.h"
#include "common/size_parse.h"
#include "common/text.h"
#include "topology/affinity.h"
#include "topology/multitree.h"

namespace skipring {
namespace {

bool parse_bool(const std::string& text, bool* out) {
  const std::string t = skipring::to_lower(text);
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
bool parse_double(const std::string& text, const ParamBounds& b, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !(b.lo_open ? v > b.lo : v >= b.lo) || !(v <= b.hi)) {
    return false;
  }
  *out = v;
  return true;
}

// A byte count with an optional binary suffix (common/size_parse.h), within [lo, hi].
bool parse_size_in(const std::string& text, size_t lo, size_t hi, size_t* out) {
  const std::optional<uint64_t> v = parse_size(text);
  if (!v || *v < lo || *v > hi) return false;
  *out = static_cast<size_t>(*v);
  return true;
}

// %g without the exponent's '+' and leading zeros: 2.73, 1000, 1e6.
std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  std::string s = buf;
  const size_t e = s.find('e');
  if (e == std::string::npos) return s;
  std::string exponent = s.substr(e + 1);
  const bool negative = exponent[0] == '-';
  exponent = exponent.substr(exponent.find_first_not_of("+-0"));
  return s.substr(0, e + 1) + (negative ? "-" : "") + exponent;
}

// Bytes with the largest K/M/G suffix that divides them exactly: 262144 -> "256K".
std::string fmt_size(double bytes) {
  const auto b = static_cast<unsigned long long>(bytes);
  for (const auto& [shift, suffix] : {std::pair{30, "G"}, std::pair{20, "M"}, std::pair{10, "K"}}) {
    if (b != 0 && b % (1ull << shift) == 0) return std::to_string(b >> shift) + suffix;
  }
  return std::to_string(b);
}

// CustomParam::key for the field F: its bytes (a string: its length, then its characters).
template <auto F>
void field_key(const Config& c, std::string* out) {
  const auto& v = c.*F;
  if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>) {
    const size_t n = v.size();
    out->append(reinterpret_cast<const char*>(&n), sizeof(n));
    out->append(v);
  } else {
    static_assert(std::is_trivially_copyable_v<std::decay_t<decltype(v)>>);
    out->append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
}

const char* log_level_name(LogLevel l) {
  static const char* names[] = {"trace", "debug", "info", "warn", "error", "off"};
  return names[static_cast<int>(l)];
}

bool parse_log_level(const std::string& text, Config* c) {
  const std::string v = skipring::to_lower(text);
  for (int i = 0; i <= static_cast<int>(LogLevel::kOff); ++i) {
    if (v == log_level_name(static_cast<LogLevel>(i))) {
      c->log_level = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

bool parse_clock(const std::string& text, Config* c) {
  const std::string v = skipring::to_lower(text);
#ifndef SKIPRING_SIMGRID
  if (v == "steady") return c->clock = ClockKind::kSteady, true;
#endif
  // Under SMPI std::chrono::steady_clock is the host's real time, not the simulated time.
  if (v == "mpi_wtime") return c->clock = ClockKind::kMpiWtime, true;
  return false;
}

bool parse_transport(const std::string& text, Config* c) {
  const std::string v = skipring::to_lower(text);
  if (v == "mpi") return c->transport = TransportKind::kMpi, true;
#ifdef SKIPRING_HAVE_UCX
  if (v == "ucx") return c->transport = TransportKind::kUcx, true;
#endif
  return false;
}

bool parse_direct_allgather(const std::string& text, Config* c) {
  if (skipring::to_lower(text) == "auto") return c->direct_allgather = -1, true;
  bool b = false;
  if (!parse_bool(text, &b)) return false;
  c->direct_allgather = b ? 1 : 0;
  return true;
}

// "auto" (-1) or a boolean (0 / 1).
template <int Config::*F>
bool parse_auto_bool(const std::string& text, Config* c) {
  if (skipring::to_lower(text) == "auto") return c->*F = -1, true;
  bool b = false;
  if (!parse_bool(text, &b)) return false;
  c->*F = b ? 1 : 0;
  return true;
}
template <int Config::*F>
std::string print_auto_bool(const Config& c) {
  return c.*F < 0 ? "auto" : c.*F ? "1" : "0";
}

// "block:K" (K >= 1) or one non-empty label per rank separated by ','.
bool parse_host_map(const std::string& text, Config* c) {
  if (text.rfind("block:", 0) == 0) {
    int k = 0;
    if (!parse_int(text.substr(6), 1, 1 << 24, &k)) return false;
  } else {
    size_t start = 0;
    while (true) {
      const size_t comma = text.find(',', start);
      const size_t len = comma == std::string::npos ? std::string::npos : comma - start;
      if (text.substr(start, len).empty()) return false;
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  c->host_map = text;
  return true;
}

bool parse_tree_graph(const std::string& text, Config* c) {
  // Read and checked now (its node count against the communicator at setup).
  LinkGraph g;
  std::string why;
  if (!text.empty() && !ok(LinkGraph::load(text, &g, &why))) return false;
  c->tree_graph = text;
  return true;
}

bool parse_sim_wait(const std::string& text, Config* c) {
  const std::string v = skipring::to_lower(text);
  if (v == "block") return c->sim_block = true, true;
  if (v == "poll") return c->sim_block = false, true;
  return false;
}

const CustomParam kLogLevel{
    "enum", "trace, debug, info, warn, error, off", parse_log_level,
    [](const Config& c) { return std::string(log_level_name(c.log_level)); }};
const CustomParam kClock{
    "enum",
#ifdef SKIPRING_SIMGRID
    "mpi_wtime (the SimGrid build runs on simulated time only)",
#else
    "steady, mpi_wtime",
#endif
    parse_clock, [](const Config& c) {
      return std::string(c.clock == ClockKind::kSteady ? "steady" : "mpi_wtime");
    }};
const CustomParam kDirectAllgather{
    "enum", "auto, 0, 1", parse_direct_allgather,
    [](const Config& c) {
      return std::string(c.direct_allgather < 0 ? "auto" : c.direct_allgather ? "1" : "0");
    },
    field_key<&Config::direct_allgather>};
const CustomParam kLateChain{"enum", "auto, 0, 1", parse_auto_bool<&Config::late_chain>,
                             print_auto_bool<&Config::late_chain>, field_key<&Config::late_chain>};
// What SKIPRING_ALGO accepts: the names of the algorithm table (collectives/algorithms.h).
const char* algo_accepts() {
  static const std::string names = algo_names(", ");
  return names.c_str();
}
CustomParam algo_param() {
  return {"enum", algo_accepts(),
          [](const std::string& t, Config* c) { return parse_algo(t, &c->algo); },
          [](const Config& c) { return std::string(algo_name(c.algo)); }, field_key<&Config::algo>};
}
const CustomParam kHostMap{
    "string", "`block:K`, or one label per rank (`a,a,b,b`)", parse_host_map,
    [](const Config& c) { return c.host_map.empty() ? std::string("(hosts)") : c.host_map; },
    field_key<&Config::host_map>};
// SKIPRING_GPU is per rank and read by the topology gather itself (runtime/topology_gather.cpp,
// topology/affinity.h): here it is only checked (an index) and listed; the GPU each rank
// ends up with is what `skipring_info --topology` shows.
const CustomParam kGpu{"int", "a GPU index `0..` among the host's GPUs (PCI bus order)",
                       [](const std::string& t, Config*) { return parse_gpu_request(t) >= 0; },
                       [](const Config&) { return std::string("(local rank)"); }};
const CustomParam kTreeGraph{
    "path", "a link-graph file (`docs/multitree.md`)", parse_tree_graph,
    [](const Config& c) { return c.tree_graph.empty() ? std::string("(topology)") : c.tree_graph; },
    field_key<&Config::tree_graph>};
const CustomParam kInject{
    "spec", "rules separated by `;` (README: Straggler injection)",
    [](const std::string& t, Config* c) {
      c->inject = t;
      return true;  // validated by the injection parser at init (its message names the part)
    },
    [](const Config& c) { return c.inject.empty() ? std::string("(none)") : c.inject; }};
// A directory parameter (SKIPRING_TRACE, SKIPRING_MSGLOG): any non-empty path; "(off)" unset.
template <std::string Config::*Field>
CustomParam dir_param() {
  return CustomParam{
      "path", "a directory (created if missing)",
      [](const std::string& t, Config* c) {
        if (t.empty()) return false;
        c->*Field = t;
        return true;
      },
      [](const Config& c) { return (c.*Field).empty() ? std::string("(off)") : c.*Field; }};
}
const CustomParam kTrace = dir_param<&Config::trace_dir>();
const CustomParam kMsgLog = dir_param<&Config::msglog_dir>();
bool parse_on_timeout(const std::string& text, Config* c) {
  const std::string v = skipring::to_lower(text);
  if (v == "error") return c->abort_on_timeout = false, true;
  if (v == "abort") return c->abort_on_timeout = true, true;
  return false;
}
const CustomParam kTransport{
    "enum",
#ifdef SKIPRING_HAVE_UCX
    "mpi, ucx",
#else
    "mpi (this build has no UCX)",
#endif
    parse_transport,
    [](const Config& c) { return std::string(c.transport == TransportKind::kUcx ? "ucx" : "mpi"); },
    field_key<&Config::transport>};
const CustomParam kOnTimeout{"enum", "error, abort", parse_on_timeout, [](const Config& c) {
                               return std::string(c.abort_on_timeout ? "abort" : "error");
                             }};
const CustomParam kSimWait{"enum", "block, poll", parse_sim_wait, [](const Config& c) {
                             return std::string(c.sim_block ? "block" : "poll");
                           }};

// The table's words for ParamAgree: kLocal may differ between ranks; the others must agree.
constexpr ParamAgree kLocal = ParamAgree::kLocal;
constexpr ParamAgree kAgree = ParamAgree::kValue;
constexpr ParamAgree kGiven = ParamAgree::kWhetherGiven;
constexpr ParamAgree kFile = ParamAgree::kFileContents;

}  // namespace

// One entry per variable: name, whether the ranks must agree on it (kLocal, or kAgree / kGiven /
// kFile with the reason above the entry), field (or parser), bounds, default note, meaning[,
// group]. A new parameter that the protocol, the algorithm choice or whether a collective step
// runs depends on must be agreed: ranks that differ on it would otherwise run different
// protocols and hang or corrupt data, with nothing naming the cause.
// clang-format off
const std::vector<ParamDef>& param_table() {
  static const std::vector<ParamDef> kTable = {
      // agree: the PMPI library runs skipring or PMPI_Allreduce (always 1 here: a rank with 0
      // never sets up a communicator)
      {"SKIPRING_ENABLE", kAgree, &Config::enable, {}, "",
       "use skipring's all-reduce; 0 makes the PMPI library pass every call to `PMPI_Allreduce`"},
      {"SKIPRING_LOG_LEVEL", kLocal, kLogLevel, {}, "",
       "logging to stderr, each line prefixed `[skipring rN]`; debug prints per-step stats of "
       "every collective"},
      {"SKIPRING_REPORT", kLocal, &Config::report, {}, "",
       "PMPI library: one report line per rank at `MPI_Finalize`"},
      // agree: pieces and message sizes
      {"SKIPRING_SEGMENT_BYTES", kAgree, &Config::segment_bytes, {1024, 1 << 30}, "",
       "pipelining unit: each chunk moves in segments of at most this size (the ring across "
       "hosts cuts a chunk into at least 8, down to 128 KiB, and to 60 KiB where they would be "
       "smaller than this over TCP)"},
      // agree: slots and messages in flight
      {"SKIPRING_PIPELINE_DEPTH", kAgree, &Config::pipeline_depth, {1, 64}, "",
       "segments in flight per direction (receive slots / send slots)"},
      {"SKIPRING_POLL_SPINS", kLocal, &Config::poll_spins, {0, 1000000}, "",
       "idle polls before the progress engine starts yielding the core"},
      {"SKIPRING_IDLE_SLEEP_US", kLocal, &Config::idle_sleep_us, {0, 100000}, "",
       "longest back-off sleep when idle (0: only `sched_yield`)"},
      {"SKIPRING_TIMEOUT", kLocal, &Config::timeout_s, {0, 1e6}, "",
       "seconds a collective may make no progress before it fails (0 = never); warnings name "
       "the ranks it waits for from half of it (at most 30 s)"},
      {"SKIPRING_ON_TIMEOUT", kLocal, kOnTimeout, {}, "",
       "at the timeout: `error` returns an MPI error (the communicator is then unusable), "
       "`abort` calls `MPI_Abort`"},
      {"SKIPRING_CLOCK", kLocal, kClock, {}, "", "time source; `mpi_wtime` under SimGrid SMPI"},
      // agree: the barrier and probe after each collective
      {"SKIPRING_CHECK", kAgree, &Config::check, {}, "",
       "after each collective, barrier + probe: fail if any message is left unmatched"},
      // agree: a message sent on one transport is never received on the other
      {"SKIPRING_TRANSPORT", kAgree, kTransport, {}, "",
       "what carries the collectives' messages: `mpi` (point-to-point on a duplicate of the "
       "communicator) or `ucx` (UCP tag API, one worker per communicator; small sizes' direct "
       "recursive doubling and the setup stay on MPI)"},
      // agree: skip-ahead's control messages
      {"SKIPRING_SKIP", kAgree, &Config::skip, {}, "",
       "skip ahead past a slow predecessor; 0 = plain ring (run-to-run identical results)"},
      // agree: who sends the final segments to whom
      {"SKIPRING_DIRECT_ALLGATHER", kAgree, kDirectAllgather, {}, "",
       "allgather once skip-ahead met a straggler: 1 = each owner sends its final segments to "
       "every rank (one hop), 0 = around the ring and past the late rank; auto = 1 when all "
       "ranks share one host ([docs/skip_ahead.md](docs/skip_ahead.md))"},
      // agree: the algorithm (the census and the late path, or the ring alone)
      {"SKIPRING_LATE_CHAIN", kAgree, kLateChain, {}, "",
       "the late path: skip-ahead with a census first; ranks that have not arrived within "
       "`SKIPRING_LATE_WAIT_US` are taken out, the others run their reduce-scatter, and a late "
       "rank's input goes straight to the block owners the moment it comes; auto = across hosts "
       "from 1 MiB, the census resting while it takes nobody out (from its fourth such call in a "
       "row the calls run the plain ring but for probes, about 1 in 8, and the calls where a "
       "straggler periodic in the calls is expected; a rested call that a rank came later to "
       "than the census would have waited brings the census back); 1 = a census at every call "
       "([docs/skip_ahead.md](docs/skip_ahead.md))"},
      {"SKIPRING_LATE_WAIT_US", kLocal, &Config::late_wait_us, {0, 1e9}, "(0: derived)",
       "the census's wait for late ranks in µs; 0 = a share of the fastest time of this size "
       "seen on the communicator (the cost model's before any) that follows the late path's "
       "extra cost over the ring: a quarter at 4 ranks, 14 % at 8, 7 % at 16, 5 % from 24; at "
       "least the skip threshold's floor"},
      {"SKIPRING_LATE_WAIT_SUSPECT_US", kLocal, &Config::late_wait_suspect_us, {0, 1e9}, "(0: derived)",
       "the census's wait in µs for the ranks it took out last time, once every other rank is "
       "in; 0 = 2 % of the fastest time of this size (the cost model's before any), at least "
       "SKIPRING_SKIP_MIN_WAIT_US (never the 5 ms oversubscription floor)"},
      // agree: a late rank's window: harmless to agree on
      {"SKIPRING_LATE_INFLIGHT", kAgree, &Config::late_inflight, {0, 64}, "(0: 8, or n - 1 up to 64 where that is more)",
       "late path: a late rank's input messages in flight to the block owners"},
      // agree: both ends cut the blocks into the same late pieces
      {"SKIPRING_LATE_SEGMENT_BYTES", kAgree, &Config::late_segment_bytes, {0, 1 << 30},
       "(0: 60 KiB, at most `SKIPRING_SEGMENT_BYTES`)",
       "late path: the size of the late pieces and of the owners' final segments"},
      {"SKIPRING_ALPHA", kLocal, &Config::alpha, {1, 1000, /*lo_open=*/true}, "",
       "skip threshold `α·T + T_trans` (T: normal piece time per predecessor, learnt)"},
      {"SKIPRING_SKIP_MIN_WAIT_US", kLocal, &Config::skip_min_wait_us, {0, 10000000},
       "(5000 when a host runs more ranks than cores)",
       "floor of the skip threshold; set it to override the oversubscription default"},
      // agree whether given: given or learnt: learning it measures the cost model, a collective
      // step; the value is local
      {"SKIPRING_SKIP_T_US", kGiven, &Config::skip_t_us, {0, 1e7}, "",
       "T of the threshold in µs given instead of learnt (0 = learn; the paper's model: the "
       "reduce time of a step)"},
      {"SKIPRING_SKIP_TTRANS_US", kLocal, &Config::skip_ttrans_us, {0, 1e7}, "",
       "T_trans of the threshold in µs given instead of fitted (0 = fit)"},
      // agree: the algorithm
      {"SKIPRING_ALGO", kAgree, algo_param(), {}, "",
       "all-reduce algorithm; `auto` picks by the cost model (`skipring_info --algo` prints its "
       "table), anything else forces one for every size"},
      // agree: hosts and ring order (gather_topology checks it too)
      {"SKIPRING_HOST_MAP", kAgree, kHostMap, {}, "",
       "rank → host override: fakes several hosts (tests, SimGrid); empty: the real hostnames"},
      {"SKIPRING_GPU", kLocal, kGpu, {}, "",
       "this rank's GPU; unset: local rank modulo the host's GPUs. Its NIC for UCX and hier's "
       "inter-host leaders follow from it ([docs/topology.md](docs/topology.md))"},
      // agree on the file: the trees (the file's contents, whatever its path)
      {"SKIPRING_TREE_GRAPH", kFile, kTreeGraph, {}, "",
       "the network the multi-tree planner builds its trees on; empty: derived from topology "
       "and measured costs"},
      // agree: the trees
      {"SKIPRING_MULTITREE_K", kAgree, &Config::multitree_k, {1, 16}, "",
       "most spanning trees of `multitree`"},
      // agree: auto's choice once late arrivals were seen, and whether the ranks take part in the
      // agreement on them
      {"SKIPRING_AUTO_STRAGGLER", kAgree, &Config::auto_straggler, {0, 100}, "",
       "`auto` on a communicator where late arrivals were seen (agreed every 8 non-rd calls): the "
       "skip-ahead ring (hier across hosts) wherever its modelled time is at most this factor "
       "of the cheapest; below 1: off ([docs/training.md](docs/training.md))"},
      // agree: auto's choice, and whether the MPI all-reduce is measured
      {"SKIPRING_AUTO_MPI", kAgree, &Config::auto_mpi, {}, "",
       "`auto` hands an all-reduce to the MPI library's own `MPI_Allreduce` (the `mpi` "
       "algorithm) where the cost model, which measures it at setup, finds it faster than "
       "skipring's (small sizes); 0 = never (SKIPRING_TIMEOUT's watchdog then covers every call: "
       "the MPI library's all-reduce waits as MPI does), and the drop-in's other collectives run "
       "on skipring at every size instead of below their size thresholds on the MPI library "
       "(README, Drop-in)"},
      // agree: auto's choice
      {"SKIPRING_MODEL_LAT_US", kAgree, &Config::model_lat_us, {0, 1e6}, "",
       "cost-model latency per message in µs given instead of measured (0 = measure on the "
       "first `auto` all-reduce)"},
      // agree: auto's choice
      {"SKIPRING_MODEL_GBPS", kAgree, &Config::model_gbps, {0, 1e6}, "",
       "cost-model point-to-point bandwidth in GB/s given instead of measured (0 = measure)"},
      // agree: auto's choice
      {"SKIPRING_MODEL_REDUCE_GBPS", kAgree, &Config::model_reduce_gbps, {0, 1e6}, "",
       "cost-model reduction rate in GB/s given instead of measured (0 = measure)"},
      {"SKIPRING_INJECT", kLocal, kInject, {}, "", "straggler injection for experiments"},
      {"SKIPRING_TRACE", kLocal, kTrace, {}, "",
       "per-rank Chrome-trace JSON of every collective (`skipring-trace-rank<R>.json`, opens "
       "in Perfetto)"},
      {"SKIPRING_MSGLOG", kLocal, kMsgLog, {}, "",
       "per-rank log of every message the progress engine completes "
       "(`skipring-msglog-rank<R>.tsv`: posted and completed when, peer, tag, bytes), for "
       "reading an experiment message by message; `scripts/msglog_summary.py` summarises and "
       "cross-checks it ([docs/skip_ahead.md](docs/skip_ahead.md))"},
      // agree: device-buffer calls run in skipring (staged) or in PMPI
      {"SKIPRING_GPU_STAGING", kAgree, &Config::gpu_staging, {}, "",
       "CUDA device buffers: 1 = copied through pinned host buffers and reduced by skipring "
       "when a device path exists, 0 = handed to the MPI library (counted as fallbacks)"},
      // agree: auto's choice under SimGrid (agreed in the SimGrid build only)
      {"SKIPRING_SIM_REDUCE_GBPS", kAgree, &Config::sim_reduce_gbps, {0, 1e6, /*lo_open=*/true}, "",
       "reductions cost bytes / rate (GB/s) of simulated time; 2.73 = 8 KiB in 3 µs, the "
       "paper's T",
       ParamGroup::kSimGrid},
      {"SKIPRING_SIM_POLL_NS", kLocal, &Config::sim_poll_ns, {1, 1000000}, "",
       "simulated ns between polls when polling (how late a message can be seen)",
       ParamGroup::kSimGrid},
      {"SKIPRING_SIM_WAIT", kLocal, kSimWait, {}, "",
       "`block`: an idle rank wakes exactly at its next event; `poll`: every "
       "`SKIPRING_SIM_POLL_NS`",
       ParamGroup::kSimGrid},
  };
  return kTable;
}
// clang-format on

bool parse_param(const ParamDef& def, const std::string& text, Config* cfg) {
  const ParamBounds& b = def.bounds;
  const ParamTarget& t = def.target;
  if (const auto* field = std::get_if<bool Config::*>(&t)) return parse_bool(text, &(cfg->**field));
  if (const auto* field = std::get_if<int Config::*>(&t)) {
    return parse_int(text, static_cast<long>(b.lo), static_cast<long>(b.hi), &(cfg->**field));
  }
  if (const auto* field = std::get_if<size_t Config::*>(&t)) {
    return parse_size_in(text, static_cast<size_t>(b.lo), static_cast<size_t>(b.hi),
                         &(cfg->**field));
  }
  if (const auto* field = std::get_if<double Config::*>(&t)) {
    return parse_double(text, b, &(cfg->**field));
  }
  return std::get<CustomParam>(t).parse(text, cfg);
}

std::string show_param(const ParamDef& def, const Config& cfg) {
  const ParamTarget& t = def.target;
  if (const auto* field = std::get_if<bool Config::*>(&t)) return cfg.**field ? "1" : "0";
  if (const auto* field = std::get_if<int Config::*>(&t)) return std::to_string(cfg.**field);
  if (const auto* field = std::get_if<size_t Config::*>(&t)) return std::to_string(cfg.**field);
  if (const auto* field = std::get_if<double Config::*>(&t)) return fmt_double(cfg.**field);
  return std::get<CustomParam>(t).show(cfg);
}

std::string param_type(const ParamDef& def) {
  const ParamTarget& t = def.target;
  if (std::holds_alternative<bool Config::*>(t)) return "bool";
  if (std::holds_alternative<int Config::*>(t)) return "int";
  if (std::holds_alternative<size_t Config::*>(t)) return "size";
  if (std::holds_alternative<double Config::*>(t)) return "double";
  return std::get<CustomParam>(t).type;
}

std::string param_accepts(const ParamDef& def) {
  const ParamBounds& b = def.bounds;
  const ParamTarget& t = def.target;
  if (std::holds_alternative<bool Config::*>(t)) return "0/1 (or true/false, yes/no, on/off)";
  if (std::holds_alternative<int Config::*>(t)) {
    return std::to_string(static_cast<long>(b.lo)) + ".." + std::to_string(static_cast<long>(b.hi));
  }
  if (std::holds_alternative<size_t Config::*>(t)) {
    return fmt_size(b.lo) + ".." + fmt_size(b.hi) + ", K/M/G suffix";
  }
  if (std::holds_alternative<double Config::*>(t)) {
    return std::string("a number ") + (b.lo_open ? "> " : ">= ") + fmt_double(b.lo) +
           " and <= " + fmt_double(b.hi);
  }
  return std::get<CustomParam>(t).accepts;
}

std::string param_agree_text(const ParamDef& def) {
  switch (def.agree) {
    case ParamAgree::kLocal:
      return "may differ";
    case ParamAgree::kValue:
      return "must agree";
    case ParamAgree::kWhetherGiven:
      return "must agree on 0 or not";
    case ParamAgree::kFileContents:
      return "must agree (the file's contents)";
  }
  return "?";
}

bool param_agreed(const ParamDef& def) {
#ifndef SKIPRING_SIMGRID
  if (def.group == ParamGroup::kSimGrid) return false;  // validated and ignored here
#endif
  return def.agree != ParamAgree::kLocal;
}

namespace {

// kWhetherGiven: a numeric field is given when non-zero, a custom one when not at its default.
bool param_given(const ParamDef& def, const Config& cfg) {
  const ParamTarget& t = def.target;
  if (const auto* field = std::get_if<bool Config::*>(&t)) return cfg.**field;
  if (const auto* field = std::get_if<int Config::*>(&t)) return cfg.**field != 0;
  if (const auto* field = std::get_if<size_t Config::*>(&t)) return cfg.**field != 0;
  if (const auto* field = std::get_if<double Config::*>(&t)) return cfg.**field != 0;
  return show_param(def, cfg) != show_param(def, Config());
}

}  // namespace

void param_key(const ParamDef& def, const Config& cfg, std::string* out) {
  auto raw = [out](const auto& v) { out->append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  if (def.agree == ParamAgree::kWhetherGiven) {
    out->push_back(param_given(def, cfg) ? '\1' : '\0');
    return;
  }
  const ParamTarget& t = def.target;
  if (const auto* field = std::get_if<bool Config::*>(&t)) return raw(cfg.**field);
  if (const auto* field = std::get_if<int Config::*>(&t)) return raw(cfg.**field);
  if (const auto* field = std::get_if<size_t Config::*>(&t)) return raw(cfg.**field);
  if (const auto* field = std::get_if<double Config::*>(&t)) return raw(cfg.**field);
  const CustomParam& custom = std::get<CustomParam>(t);
  if (custom.key != nullptr) return custom.key(cfg, out);
  const std::string text = custom.show(cfg);
  raw(text.size());
  out->append(text);
}

std::string agreed_fingerprint(const Config& cfg, const std::vector<ParamDef>& table) {
  std::string out;
  out.reserve(256);  // the real table's key is ~150 bytes: one allocation
  for (const ParamDef& def : table) {
    if (param_agreed(def)) param_key(def, cfg, &out);
  }
  return out;
}

std::vector<AgreedValue> agreed_values(const Config& cfg, const std::vector<ParamDef>& table) {
  // Communicators are set up often (dup, split): the list is computed once per distinct table
  // and fingerprint (the agreed fields' bytes: no formatting or file reading on the way).
  const std::string fingerprint = agreed_fingerprint(cfg, table);
  static std::mutex cache_mutex;
  static const std::vector<ParamDef>* cached_table = nullptr;
  static std::string cached_fingerprint;
  static std::vector<AgreedValue> cached;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (cached_table == &table && fingerprint == cached_fingerprint) return cached;
  }
  const Config defaults;
  std::vector<AgreedValue> out;
  for (const ParamDef& def : table) {
    if (!param_agreed(def)) continue;
    AgreedValue v{def.name, show_param(def, cfg), 0};
    std::string digested = v.shown;
    if (def.agree == ParamAgree::kWhetherGiven) {
      digested = param_given(def, cfg) ? "given" : "derived";
    } else if (def.agree == ParamAgree::kFileContents && v.shown != show_param(def, defaults)) {
      std::ifstream in(v.shown, std::ios::binary);  // a path parameter shows its path
      digested = "file:" + std::string(std::istreambuf_iterator<char>(in), {});
    }
    v.digest = static_cast<int64_t>(fnv1a64(std::string(def.name) + "=" + digested) >> 2);
    out.push_back(std::move(v));
  }
  std::lock_guard<std::mutex> lock(cache_mutex);
  cached_table = &table;
  cached_fingerprint = fingerprint;
  cached = out;
  return out;
}

std::string param_default_text(const ParamDef& def) {
  const Config defaults;
  const auto* size_field = std::get_if<size_t Config::*>(&def.target);
  std::string text =
      size_field ? fmt_size(static_cast<double>(defaults.**size_field)) : show_param(def, defaults);
  if (*def.default_note != '\0') text += std::string(" ") + def.default_note;
  return text;
}

namespace {

// A Markdown table cell: '|' would end it.
std::string cell(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string params_markdown(ParamGroup group) {
  std::string out = group == ParamGroup::kSimGrid
                        ? "| variable (SimGrid build only; accepted and ignored otherwise) "
                          "| default | accepts | ranks | meaning |\n"
                        : "| variable | default | accepts | ranks | meaning |\n";
  out += "|---|---|---|---|---|\n";
  for (const ParamDef& def : param_table()) {
    if (def.group != group) continue;
    out += "| `" + std::string(def.name) + "` | " + cell(param_default_text(def)) + " | " +
           cell(param_accepts(def)) + " | " + param_agree_text(def) + " | " + cell(def.meaning) +
           " |\n";
  }
  return out;
}

}  // namespace skipring
