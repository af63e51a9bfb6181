// skipring_bench options: the CLI11 command line and the checks that span several options.
#include "apps/bench/options.h"

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <sstream>
#include <stdexcept>

#include "apps/app_version.h"
#include "apps/bench_util.h"

namespace skipring_bench {
namespace {

// Option values that only decide how Options is filled in, and the options whose presence
// matters after parsing.
struct RawOptions {
  int check = 1;
  std::string compare = "none";
  bool inplace_only = false;
  bool outofplace_only = false;
  std::string algo_text;
  std::string format = "nccl";
  CLI::Option* inject = nullptr;
  CLI::Option* late_rank = nullptr;
};

// "" when every comma-separated name is an algorithm --algo accepts, else the complaint.
std::string check_algo_list(const std::string& text) {
  for (const std::string& a : split_list(text)) {
    if (a != "auto" && a != "ring" && a != "skipring" && a != "rd" && a != "rabenseifner" &&
        a != "tree" && a != "multitree" && a != "hier") {
      return "unknown algorithm '" + a + "'";
    }
  }
  return std::string();
}

// -b -e -f -i -n -w: the message sizes and iteration counts.
void add_size_options(CLI::App& app, Options& opts) {
  app.add_option("-b,--minbytes", opts.min_text, "smallest message size in bytes")
      ->capture_default_str()
      ->type_name("SIZE");
  app.add_option("-e,--maxbytes", opts.max_text, "largest message size in bytes")
      ->capture_default_str()
      ->type_name("SIZE");
  app.add_option("-f,--stepfactor", opts.step_factor,
                 "multiply the size by this factor (1: add --stepbytes instead)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("-i,--stepbytes", opts.step_text, "size increment when --stepfactor is 1")
      ->capture_default_str()
      ->type_name("SIZE");
  app.add_option("-n,--iters", opts.iters, "timed iterations per size")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("-w,--warmup_iters", opts.warmup, "untimed warm-up iterations per size")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
}

// -c -d -o --compare --json --back-to-back --algo --csv: what each size runs and the files.
void add_run_options(CLI::App& app, Options& opts, RawOptions& raw) {
  app.add_option("-c,--check", raw.check, "verify every result element (0/1)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1));
  app.add_option("-d,--datatype", opts.type_text,
                 "datatype(s), comma-separated, or all: " + type_names())
      ->capture_default_str()
      ->type_name("TYPES");
  app.add_option("-o,--op", opts.op_text, "reduction(s), comma-separated, or all: " + op_names())
      ->capture_default_str()
      ->type_name("OPS");
  app.add_option("--compare", raw.compare,
                 "mpi: also time PMPI_Allreduce on the same buffers and print the speedup")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "mpi"}));
  app.add_option("--json", opts.json_path, "write every row to FILE as a JSON array (rank 0)")
      ->type_name("FILE");
  app.add_option("--back-to-back", opts.back_to_back,
                 "calls per timed iteration without a barrier between them (time = their mean; "
                 "out-of-place only)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--algo", raw.algo_text,
                 "all-reduce algorithms to run per size, comma-separated (auto, ring, skipring, "
                 "rd, rabenseifner, tree, multitree, hier); each row names what ran")
      ->check(check_algo_list);
  app.add_option("--csv", opts.csv_path, "write every row to FILE as CSV (rank 0)")
      ->type_name("FILE");
  app.add_option("--format", raw.format,
                 "the table on stdout: nccl (nccl-tests' all_reduce_perf columns first) or osu "
                 "(osu_allreduce -f's: avg/min/max over ranks of each rank's mean latency; "
                 "out-of-place unless --inplace-only)")
      ->capture_default_str()
      ->check(CLI::IsMember({"nccl", "osu"}));
}

// --inplace-only --outofplace-only --inject --late-rank --late-ms --overhead: the modes.
void add_mode_options(CLI::App& app, Options& opts, RawOptions& raw) {
  auto* ip = app.add_flag("--inplace-only", raw.inplace_only, "run only the in-place variant");
  auto* oop =
      app.add_flag("--outofplace-only", raw.outofplace_only, "run only the out-of-place variant");
  ip->excludes(oop);
  raw.inject = app.add_option("--inject", opts.inject,
                              "straggler mode; injection spec for skipring_set_inject, e.g. "
                              "\"rank=1,delay=2ms,at=rs\" (slows the skip and ring variants only)")
                   ->type_name("SPEC");
  raw.late_rank =
      app.add_option("--late-rank", opts.late_rank,
                     "straggler mode: this rank sleeps --late-ms after the barrier, before every "
                     "call of every variant (needs --late-ms)")
          ->check(CLI::Range(0, INT_MAX))
          ->type_name("RANK");
  auto* late_ms = app.add_option("--late-ms", opts.late_ms, "how late --late-rank arrives, in ms")
                      ->check(CLI::Range(0.0, 3.6e6))
                      ->type_name("MS");
  auto* every =
      app.add_option("--late-every", opts.late_every,
                     "straggler mode: --late-rank is late at one iteration in K; before each timed "
                     "(late) iteration every variant runs K-1 untimed calls nobody is late for "
                     "(a straggler after a quiet spell; needs --late-rank)")
          ->check(CLI::Range(1, 1000))
          ->type_name("K");
  every->needs(raw.late_rank);
  raw.late_rank->needs(late_ms);
  late_ms->needs(raw.late_rank);
  auto* overhead = app.add_flag("--overhead", opts.overhead,
                                "no straggler: skip-ahead vs plain ring interleaved per iteration "
                                "(with --compare mpi also PMPI_Allreduce)");
  overhead->excludes(raw.inject);
  overhead->excludes(raw.late_rank);
  overhead->excludes(late_ms);
}

// The sizes from their text; the error message when one is malformed or they disagree.
std::optional<std::string> resolve_sizes(Options& opts) {
  const auto min_bytes = parse_bytes(opts.min_text);
  const auto max_bytes = parse_bytes(opts.max_text);
  const auto step_bytes = parse_bytes(opts.step_text);
  if (!min_bytes) return "--minbytes: not a size: '" + opts.min_text + "'";
  if (!max_bytes) return "--maxbytes: not a size: '" + opts.max_text + "'";
  if (!step_bytes) return "--stepbytes: not a size: '" + opts.step_text + "'";
  if (*min_bytes > *max_bytes) return std::string("--minbytes is larger than --maxbytes");
  if (opts.step_factor == 1 && *step_bytes == 0) {
    return std::string("--stepbytes must be positive when --stepfactor is 1");
  }
  opts.min_bytes = *min_bytes;
  opts.max_bytes = *max_bytes;
  opts.step_bytes = *step_bytes;
  return std::nullopt;
}

// Fills in the rest of opts from the parsed values; the error message when they conflict.
std::optional<std::string> resolve_options(const RawOptions& raw, Options& opts) {
  if (auto error = resolve_sizes(opts)) return error;
  try {
    opts.types = resolve_types(opts.type_text);
    opts.ops = resolve_ops(opts.op_text);
  } catch (const std::invalid_argument& e) {
    return std::string(e.what());
  }
  opts.check = raw.check != 0;
  opts.algos = split_list(raw.algo_text);
  if (opts.back_to_back > 1 && !raw.outofplace_only) {
    return std::string(
        "--back-to-back: add --outofplace-only (in place, each call would sum the last "
        "call's result)");
  }
  opts.compare_mpi = raw.compare == "mpi";
  opts.osu = raw.format == "osu";
  opts.run_oop = !raw.inplace_only;
  opts.run_ip = !raw.outofplace_only && !(opts.osu && !raw.inplace_only);
  opts.inject_given = raw.inject->count() > 0;
  opts.straggler = opts.inject_given || raw.late_rank->count() > 0;
  if (opts.osu && opts.compare_mpi) {
    return std::string(
        "--format osu: one latency per size; run without --compare mpi (or use "
        "--format nccl)");
  }
  if (opts.interleaved()) {
    const char* mode = opts.straggler ? "--inject/--late-rank" : "--overhead";
    if (opts.osu) return std::string("--format osu: ") + mode + " has its own table";
    if (!opts.algos.empty()) {
      return std::string("--algo: ") + mode + " compares skip-ahead and the ring";
    }
    if (raw.inplace_only) return std::string("--inplace-only: ") + mode + " runs out-of-place only";
    opts.run_oop = true;
    opts.run_ip = false;
    opts.variants = {Variant::kSkip, Variant::kRing};
    if (opts.straggler || opts.compare_mpi) opts.variants.push_back(Variant::kMpi);
  }
  return std::nullopt;
}

}  // namespace

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::kSkip:
      return "skip";
    case Variant::kRing:
      return "ring";
    case Variant::kMpi:
      return "mpi";
  }
  return "?";
}

std::optional<int> parse_options(int argc, char** argv, int rank, Options& opts) {
  CLI::App app{
      "skipring_bench: all-reduce benchmark of skipring (nccl-tests all_reduce_perf style).\n"
      "Run under mpirun; every rank takes part. Sizes take K/M/G suffixes (powers of 1024)."};
  app.set_version_flag("--version", skipring_apps::version_text("skipring_bench"),
                       "print the version (and git describe of the source) and exit");
  RawOptions raw;
  add_size_options(app, opts);
  add_run_options(app, opts, raw);
  add_mode_options(app, opts, raw);

  std::ostringstream sink;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : app.exit(e, sink, sink);
  }
  if (const auto error = resolve_options(raw, opts)) {
    if (rank == 0) {
      fmt::print(stderr, "skipring_bench: {}\nRun with --help for more information.\n", *error);
    }
    return 2;
  }
  return std::nullopt;
}

}  // namespace skipring_bench
