// The SKIPRING_* configuration: the Config every component reads (its member initializers are
// the defaults), loaded from the environment and validated at init through the parameter table
// of runtime/params.h (name, range, meaning), which skipring_info and README.md print.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/algorithms.h"
#include "common/status.h"

// The few C++ entry points libskipring.so exports besides the C API, for libskipring_pmpi.so
// (runtime/libskipring.map lists them; tests/check_exports.sh checks the exports).
#define SKIPRING_INTERNAL_API __attribute__((visibility("default")))

namespace skipring {

enum class LogLevel : int { kTrace, kDebug, kInfo, kWarn, kError, kOff };
enum class ClockKind : int { kSteady, kMpiWtime };
// What carries the progress engine's messages (SKIPRING_TRANSPORT).
enum class TransportKind : int { kMpi, kUcx };

struct Config {
  bool enable = true;                    // SKIPRING_ENABLE
  LogLevel log_level = LogLevel::kWarn;  // SKIPRING_LOG_LEVEL
  bool report = false;                   // SKIPRING_REPORT
  size_t segment_bytes = 256 * 1024;     // SKIPRING_SEGMENT_BYTES
  int pipeline_depth = 8;                // SKIPRING_PIPELINE_DEPTH
  int poll_spins = 200;                  // SKIPRING_POLL_SPINS
  int idle_sleep_us = 20;                // SKIPRING_IDLE_SLEEP_US
  // The progress engine's watchdog: a collective with no progress (no message completed) for
  // timeout_s seconds fails with kErrTimeout (0: never); warnings name what it waits for before.
  double timeout_s = 300;         // SKIPRING_TIMEOUT
  bool abort_on_timeout = false;  // SKIPRING_ON_TIMEOUT=error|abort (abort: MPI_Abort)
#ifdef SKIPRING_SIMGRID
  ClockKind clock = ClockKind::kMpiWtime;  // SKIPRING_CLOCK (SMPI: simulated time only)
#else
  ClockKind clock = ClockKind::kSteady;  // SKIPRING_CLOCK
#endif
  bool check = false;                             // SKIPRING_CHECK
  TransportKind transport = TransportKind::kMpi;  // SKIPRING_TRANSPORT
  // Straggler handling (DESIGN.md 2): skip ahead when the predecessor is later than
  // alpha * T + T_trans (and at least skip_min_wait_us).
  bool skip = true;           // SKIPRING_SKIP
  double alpha = 2.0;         // SKIPRING_ALPHA (> 1)
  int skip_min_wait_us = 50;  // SKIPRING_SKIP_MIN_WAIT_US
  // Given instead of learnt (0: learn): T and T_trans of the threshold, in microseconds. The
  // paper's model has T = the reduce time of a step (3 us) apart from T_trans; the learnt T is
  // the whole step (transfer included).
  double skip_t_us = 0;       // SKIPRING_SKIP_T_US
  double skip_ttrans_us = 0;  // SKIPRING_SKIP_TTRANS_US
  // Skip-ahead's allgather once a straggler was met: -1 auto (direct when every rank is on one
  // host), 0 routed around the late rank, 1 direct from each owner (RingParams::direct_allgather).
  int direct_allgather = -1;  // SKIPRING_DIRECT_ALLGATHER
  // The late path (collectives/late_chain.h; docs/skip_ahead.md "The late path"): -1 auto
  // (skip-ahead across hosts from kLateChainMinBytes), 0 off, 1 whenever skip-ahead runs.
  int late_chain = -1;              // SKIPRING_LATE_CHAIN
  double late_wait_us = 0;          // SKIPRING_LATE_WAIT_US: the census's wait (0: derived)
  double late_wait_suspect_us = 0;  // SKIPRING_LATE_WAIT_SUSPECT_US: for last time's late ranks
  // SKIPRING_LATE_SEGMENT_BYTES: the late path's message size; 0: kLateChainSegmentBytes (at most
  // SKIPRING_SEGMENT_BYTES; collectives/late_chain.h).
  size_t late_segment_bytes = 0;
  // SKIPRING_LATE_INFLIGHT: a late rank's piece sends in flight; 0: kLateChainInflight.
  int late_inflight = 0;
  // Algorithm choice and topology (issue 5).
  Algo algo = Algo::kAuto;  // SKIPRING_ALGO (collectives/algorithms.h)
  // Rank -> host override: "" (hwloc/hostname), "block:K" (K consecutive ranks per host) or
  // one label per rank separated by ',' (e.g. "a,a,b,b"); the length is checked at setup.
  std::string host_map;    // SKIPRING_HOST_MAP
  std::string tree_graph;  // SKIPRING_TREE_GRAPH: link graph file for multitree
  int multitree_k = 4;     // SKIPRING_MULTITREE_K: at most this many trees
  // Straggler-aware auto: once late arrivals were seen on a communicator, auto prefers the
  // skip-ahead algorithm where its modelled time is at most this factor of the model's choice
  // (below 1: off; select_algo_stragglers).
  double auto_straggler = 1.5;  // SKIPRING_AUTO_STRAGGLER
  // auto may hand an all-reduce to the MPI library's own (the `mpi` row) where the measured
  // cost model finds it faster (small sizes); false: never (the watchdog then covers every size).
  bool auto_mpi = true;  // SKIPRING_AUTO_MPI
  // Cost model parameters (0: measured at communicator setup).
  double model_lat_us = 0;       // SKIPRING_MODEL_LAT_US: per-message latency alpha
  double model_gbps = 0;         // SKIPRING_MODEL_GBPS: link bandwidth 1/beta
  double model_reduce_gbps = 0;  // SKIPRING_MODEL_REDUCE_GBPS: reduction rate 1/gamma
  std::string inject;            // SKIPRING_INJECT (validated by parse_inject_spec)
  std::string trace_dir;         // SKIPRING_TRACE (empty: no trace)
  std::string msglog_dir;        // SKIPRING_MSGLOG (empty: no message log)
  // Device (CUDA) buffers: staged through pinned host buffers when a device path exists (true)
  // or handed to the MPI library, counted as fallbacks (false). docs/gpu.md.
  bool gpu_staging = true;  // SKIPRING_GPU_STAGING
  // SimGrid SMPI build only (ignored otherwise): reductions are charged as simulated compute
  // time bytes / rate; 2.73 GB/s = 8 KiB in 3 us, the paper's T.
  double sim_reduce_gbps = 2.73;  // SKIPRING_SIM_REDUCE_GBPS (> 0)
  // SimGrid SMPI build only: simulated time an idle progress engine sleeps between polls (the
  // most it can be late to see a message).
  int sim_poll_ns = 100;  // SKIPRING_SIM_POLL_NS
  // SimGrid SMPI build only: an idle rank blocks until its next completion or timer (true,
  // exact) or polls every sim_poll_ns (false).
  bool sim_block = true;  // SKIPRING_SIM_WAIT=block|poll
};

// One parameter of the table with its values, for printing.
struct ParamInfo {
  std::string name;     // e.g. "SKIPRING_SEGMENT_BYTES"
  std::string type;     // "bool", "int", "size", "double", "enum", "string", "path", "spec"
  std::string accepts;  // human-readable domain, e.g. "1..64" or "trace, debug, info, ..."
  std::string default_value;
  std::string current_value;  // in the Config passed to describe_params
  bool set_in_env = false;
  std::string help;
};

// Looks up an environment variable; returns false when unset.
using EnvLookup = std::function<bool(const char* name, std::string* value)>;
SKIPRING_INTERNAL_API EnvLookup process_env();

// Parses every SKIPRING_* parameter through `env` into *out; a variable set to the empty
// string takes its default, as an unset one does. On a bad value returns
// kErrConfig and sets *error to a message naming the variable, the value and what it
// accepts. `env_names` (if given) lists the names of every variable in the environment: a
// SKIPRING_* name there that is no parameter is reported as an error too.
SKIPRING_INTERNAL_API Status load_config(const EnvLookup& env, Config* out, std::string* error,
                                         const std::vector<std::string>* env_names = nullptr);

std::vector<ParamInfo> describe_params(const Config& cfg, const EnvLookup& env);

// A SKIPRING_* value every rank of a communicator must share (the protocol, the algorithm
// choice or whether a collective step runs depend on it): the variable, its value as shown in
// messages, and a digest (62 bits, >= 0) that the ranks compare at communicator setup
// (Communicator::create). agreed_values lists them, in table order: the parameters whose
// ParamDef::agree is not kLocal (runtime/params.h; README's "ranks" column); the others are
// local (logging, polling, the clock, the skip threshold's alpha and floor, injection,
// tracing). Cached: a config with the same agreed fields costs one key comparison.
struct AgreedValue {
  const char* name;
  std::string shown;
  int64_t digest;
};
std::vector<AgreedValue> agreed_values(const Config& cfg);

// The process-wide configuration, loaded once from the environment by init_global_config().
// Before that it holds the defaults.
SKIPRING_INTERNAL_API const Config& global_config();
Status init_global_config(std::string* error);
// Replaces the global configuration (skipring_set_skip, skipring_set_algo).
void set_global_config(const Config& cfg);

}  // namespace skipring
