// skipring_bench: nccl-tests-style all-reduce benchmark of skipring, optionally against MPI.
//
// For every message size, datatype and reduction it times skipring_allreduce out-of-place and
// in-place (a barrier before every iteration; an iteration's time is the slowest rank's), checks
// every output element against an exactly known result, and with --compare mpi times
// PMPI_Allreduce on the same buffers. Rank 0 prints one row per size and can write JSON / CSV.
#include <fmt/core.h>
#include <mpi.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "apps/bench_util.h"
#include "skipring/skipring.h"

extern char** environ;

namespace skipring_bench {
namespace {

using Json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------
// Datatypes and reductions.

enum class TypeId {
  kInt8,
  kUint8,
  kInt16,
  kUint16,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kFloat,
  kDouble
};

struct TypeDesc {
  TypeId id;
  const char* name;
  MPI_Datatype mpi;
  size_t size;
  bool is_float;
};

const std::vector<TypeDesc>& AllTypes() {
  static const std::vector<TypeDesc> kTypes = {
      {TypeId::kInt8, "int8", MPI_INT8_T, 1, false},
      {TypeId::kUint8, "uint8", MPI_UINT8_T, 1, false},
      {TypeId::kInt16, "int16", MPI_INT16_T, 2, false},
      {TypeId::kUint16, "uint16", MPI_UINT16_T, 2, false},
      {TypeId::kInt32, "int32", MPI_INT32_T, 4, false},
      {TypeId::kUint32, "uint32", MPI_UINT32_T, 4, false},
      {TypeId::kInt64, "int64", MPI_INT64_T, 8, false},
      {TypeId::kUint64, "uint64", MPI_UINT64_T, 8, false},
      {TypeId::kFloat, "float", MPI_FLOAT, 4, true},
      {TypeId::kDouble, "double", MPI_DOUBLE, 8, true},
  };
  return kTypes;
}

enum class OpId { kSum, kProd, kMin, kMax, kBand, kBor, kBxor, kLand, kLor, kLxor };

struct OpDesc {
  OpId id;
  const char* name;
  MPI_Op mpi;
  bool integer_only;
};

const std::vector<OpDesc>& AllOps() {
  static const std::vector<OpDesc> kOps = {
      {OpId::kSum, "sum", MPI_SUM, false},   {OpId::kProd, "prod", MPI_PROD, false},
      {OpId::kMin, "min", MPI_MIN, false},   {OpId::kMax, "max", MPI_MAX, false},
      {OpId::kBand, "band", MPI_BAND, true}, {OpId::kBor, "bor", MPI_BOR, true},
      {OpId::kBxor, "bxor", MPI_BXOR, true}, {OpId::kLand, "land", MPI_LAND, true},
      {OpId::kLor, "lor", MPI_LOR, true},    {OpId::kLxor, "lxor", MPI_LXOR, true},
  };
  return kOps;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto b = item.find_first_not_of(" \t");
    const auto e = item.find_last_not_of(" \t");
    if (b != std::string::npos) items.push_back(Lower(item.substr(b, e - b + 1)));
  }
  return items;
}

// Resolves "float,int32", "all" and aliases (char, int, uint, float32, float64, ...).
std::vector<TypeDesc> ResolveTypes(const std::string& text) {
  std::vector<TypeDesc> out;
  for (std::string name : SplitList(text)) {
    if (name == "all") return AllTypes();
    if (name == "char") name = "int8";
    if (name == "uchar" || name == "byte") name = "uint8";
    if (name == "short") name = "int16";
    if (name == "int") name = "int32";
    if (name == "uint") name = "uint32";
    if (name == "float32") name = "float";
    if (name == "float64") name = "double";
    bool found = false;
    for (const TypeDesc& t : AllTypes()) {
      if (name == t.name) {
        out.push_back(t);
        found = true;
      }
    }
    if (!found) throw std::invalid_argument("unknown datatype '" + name + "'");
  }
  if (out.empty()) throw std::invalid_argument("no datatype given");
  return out;
}

std::vector<OpDesc> ResolveOps(const std::string& text) {
  std::vector<OpDesc> out;
  for (const std::string& name : SplitList(text)) {
    if (name == "all") return AllOps();
    bool found = false;
    for (const OpDesc& o : AllOps()) {
      if (name == o.name) {
        out.push_back(o);
        found = true;
      }
    }
    if (!found) throw std::invalid_argument("unknown reduction '" + name + "'");
  }
  if (out.empty()) throw std::invalid_argument("no reduction given");
  return out;
}

std::string TypeNames() {
  std::string s;
  for (const TypeDesc& t : AllTypes()) s += std::string(s.empty() ? "" : ", ") + t.name;
  return s;
}

std::string OpNames() {
  std::string s;
  for (const OpDesc& o : AllOps()) s += std::string(s.empty() ? "" : ", ") + o.name;
  return s;
}

// ---------------------------------------------------------------------------------------------
// Test data whose reduction is exactly known and exactly representable.
//
// Rank r's element i is a hash of (i, r) mapped into a range small enough that every partial
// result of the reduction is exact in T, whatever order the ranks are combined in:
//   sum        integers in [-K, K] ([0, K] unsigned), K = min(64, largest exact value / nranks)
//   prod       +-1 or 2 (unsigned: 1 or 2); element i has k(i) <= min(nranks, digits-1, 16) twos
//   min/max    integers in [-100, 100] ([0, 200] unsigned)
//   band/bor/bxor  random bits (denser for band, sparser for bor)
//   land/lor/lxor  zero / non-zero with probabilities that keep both results common
// Logical values are zero or any non-zero number, so 0/1 normalisation is exercised. The
// expected value is computed by combining every rank's values in a wide type. (Only 8-bit sums
// over more than 127 ranks can leave T's range; they wrap, as in every implementation.)

template <typename T>
class Pattern {
 public:
  using Wide = std::conditional_t<std::is_floating_point_v<T>, double,
                                  std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
  static constexpr bool kSigned = std::is_signed_v<T>;  // true for floating point too

  Pattern(OpId op, int nranks) : op_(op), nranks_(nranks) {
    const double exact_max = std::is_floating_point_v<T>
                                 ? std::ldexp(1.0, std::numeric_limits<T>::digits)
                                 : static_cast<double>(std::numeric_limits<T>::max());
    const double bound = std::floor(exact_max / std::max(nranks, 1));
    sum_bound_ = static_cast<int64_t>(std::clamp(bound, 1.0, 64.0));
    max_twos_ = static_cast<uint64_t>(std::min({nranks, std::numeric_limits<T>::digits - 1, 16}));
  }

  T Value(uint64_t i, int rank) const {
    const uint64_t h = Mix64(i * 0x9E3779B97F4A7C15ULL +
                             (static_cast<uint64_t>(rank) + 1) * 0xD6E8FEB86659FD93ULL);
    switch (op_) {
      case OpId::kSum:
        if constexpr (kSigned) {
          const auto span = static_cast<uint64_t>(2 * sum_bound_ + 1);
          return static_cast<T>(static_cast<Wide>(static_cast<int64_t>(h % span) - sum_bound_));
        } else {
          return static_cast<T>(h % static_cast<uint64_t>(sum_bound_ + 1));
        }
      case OpId::kProd: {
        const uint64_t twos = Mix64(i ^ 0x5851F42D4C957F2DULL) % (max_twos_ + 1);
        Wide v = static_cast<uint64_t>(rank) < twos ? 2 : 1;
        if constexpr (kSigned) {
          if (h >> 63) v = -v;
        }
        return static_cast<T>(v);
      }
      case OpId::kMin:
      case OpId::kMax:
        if constexpr (kSigned) {
          return static_cast<T>(static_cast<Wide>(static_cast<int64_t>(h % 201) - 100));
        } else {
          return static_cast<T>(h % 201);
        }
      default:
        break;
    }
    if constexpr (std::is_integral_v<T>) {
      const uint64_t h2 = Mix64(h + 1);
      switch (op_) {
        case OpId::kBand:
          return static_cast<T>(h | h2);
        case OpId::kBor:
          return static_cast<T>(h & h2);
        case OpId::kBxor:
          return static_cast<T>(h);
        case OpId::kLand:
          return static_cast<T>(h % 8 == 0 ? 0 : 1 + (h >> 8) % 100);
        case OpId::kLor:
          return static_cast<T>(h % 8 != 0 ? 0 : 1 + (h >> 8) % 100);
        case OpId::kLxor:
          return static_cast<T>(h % 2 == 0 ? 0 : 1 + (h >> 8) % 100);
        default:
          break;
      }
    }
    return T(0);
  }

  T Expected(uint64_t i) const {
    if (nranks_ == 1) return Value(i, 0);  // a one-rank reduction applies no operation
    if (op_ == OpId::kLand || op_ == OpId::kLor || op_ == OpId::kLxor) {
      bool acc = Value(i, 0) != T(0);
      for (int r = 1; r < nranks_; ++r) {
        const bool v = Value(i, r) != T(0);
        if (op_ == OpId::kLand) acc = acc && v;
        if (op_ == OpId::kLor) acc = acc || v;
        if (op_ == OpId::kLxor) acc = acc != v;
      }
      return static_cast<T>(acc ? 1 : 0);
    }
    Wide acc = static_cast<Wide>(Value(i, 0));
    for (int r = 1; r < nranks_; ++r) {
      const Wide v = static_cast<Wide>(Value(i, r));
      switch (op_) {
        case OpId::kSum:
          acc = static_cast<Wide>(acc + v);
          break;
        case OpId::kProd:
          acc = static_cast<Wide>(acc * v);
          break;
        case OpId::kMin:
          acc = std::min(acc, v);
          break;
        case OpId::kMax:
          acc = std::max(acc, v);
          break;
        default:
          if constexpr (std::is_integral_v<T>) {
            if (op_ == OpId::kBand) acc &= v;
            if (op_ == OpId::kBor) acc |= v;
            if (op_ == OpId::kBxor) acc ^= v;
          }
          break;
      }
    }
    return static_cast<T>(acc);
  }

  // A value that stands for "not written"; alternating between two values per iteration means
  // an element the all-reduce skipped is caught even where one of them is a legitimate result.
  static T Poison(int iteration) {
    if constexpr (std::is_floating_point_v<T>) {
      (void)iteration;
      return std::numeric_limits<T>::quiet_NaN();
    } else {
      return iteration % 2 == 0 ? std::numeric_limits<T>::max() : std::numeric_limits<T>::lowest();
    }
  }

 private:
  OpId op_;
  int nranks_;
  int64_t sum_bound_ = 1;
  uint64_t max_twos_ = 0;
};

template <typename T>
void FillInput(const Pattern<T>& pattern, T* buf, uint64_t count, int rank) {
  for (uint64_t i = 0; i < count; ++i) buf[i] = pattern.Value(i, rank);
}

template <typename T>
void FillExpected(const Pattern<T>& pattern, T* buf, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) buf[i] = pattern.Expected(i);
}

// Elements that differ (NaN never equals anything, so a NaN poison left behind counts).
template <typename T>
int64_t CountMismatches(const T* got, const T* want, uint64_t count) {
  int64_t wrong = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (!(got[i] == want[i])) ++wrong;
  }
  return wrong;
}

// Elements of an out-of-place send buffer that the all-reduce modified.
template <typename T>
int64_t CountInputChanges(const Pattern<T>& pattern, const T* buf, uint64_t count, int rank) {
  int64_t changed = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (!(buf[i] == pattern.Value(i, rank))) ++changed;
  }
  return changed;
}

// ---------------------------------------------------------------------------------------------
// Options, buffers, errors.

// Interleaved modes (straggler, overhead): what one variant runs. skip: skipring with
// skip-ahead on; ring: skipring with skip-ahead off (plain ring); mpi: PMPI_Allreduce.
enum class Variant { kSkip = 0, kRing = 1, kMpi = 2 };
constexpr int kVariantCount = 3;

const char* VariantName(Variant v) {
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

struct Options {
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 64ULL << 20;
  uint64_t step_factor = 2;
  uint64_t step_bytes = 1ULL << 20;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  std::vector<TypeDesc> types;
  std::vector<OpDesc> ops;
  bool compare_mpi = false;
  std::string json_path;
  std::string csv_path;
  bool run_oop = true;
  bool run_ip = true;
  // Straggler mode (--inject and/or --late-rank/--late-ms) and --overhead mode: the variants
  // below run interleaved per iteration, out-of-place only.
  bool straggler = false;
  bool inject_given = false;
  std::string inject;  // --inject spec, passed to skipring_set_inject
  int late_rank = -1;  // --late-rank; -1: nobody arrives late
  double late_ms = 0;  // --late-ms
  bool overhead = false;
  int back_to_back = 1;  // --back-to-back: calls per timed iteration
  // --algo: algorithms to run per size (skipring_set_algo), in order; empty: SKIPRING_ALGO.
  std::vector<std::string> algos;
  std::vector<Variant> variants;  // in the order they run and are printed
  bool interleaved() const { return straggler || overhead; }
  // Verbatim option text for the header.
  std::string min_text = "8", max_text = "64M", step_text = "1M", type_text = "float",
              op_text = "sum";
};

// A failure every rank knows about (agreed through a collective): the run stops cleanly.
class CollectiveFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void CheckMpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(fmt::format("{} failed: {} (code {})", what, text, rc));
}

// Page-aligned, pre-touched memory.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes) {
    const size_t kAlign = 4096;
    const size_t rounded = std::max<size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    data_.reset(static_cast<unsigned char*>(std::aligned_alloc(kAlign, rounded)));
    if (!data_) throw std::bad_alloc();
    std::memset(data_.get(), 0, rounded);
  }
  template <typename T>
  T* As() const {
    return reinterpret_cast<T*>(data_.get());
  }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char[], Free> data_;
};

// ---------------------------------------------------------------------------------------------
// Results.

struct ImplResult {
  double avg_us = 0, p50_us = 0, p99_us = 0, min_us = 0, max_us = 0, algbw = 0, busbw = 0;
  std::optional<int64_t> wrong;  // nullopt when validation is off
};

struct SkipStats {
  std::string algo;  // what rank 0's last timed call ran (skipring_stats_t.algo)
  uint64_t skips = 0;
  uint64_t late_pieces = 0;
  double wait_us = 0;  // mean per rank and call
};

struct ModeResult {
  ImplResult skipring;
  std::optional<SkipStats> stats;  // nullopt when skipring_last_stats failed
  std::optional<ImplResult> mpi;
  double speedup = 0;  // t_mpi_p50 / t_skipring_p50
};

struct VariantResult {
  Variant variant = Variant::kSkip;
  SampleSummary after_us;  // per iteration: max_rank(t_exit) - max_rank(t_enter) (rank 0 only)
  SampleSummary total_us;  // per iteration: max_rank(t_exit) - min_rank(t_enter) (rank 0 only)
  std::optional<int64_t> wrong;  // all ranks; nullopt when validation is off
  // skipring variants: skip-ahead decisions and late pieces over all ranks and timed iterations
  // (rank 0 only; nullopt for MPI or when skipring_last_stats failed).
  std::optional<uint64_t> skips;
  std::optional<uint64_t> late_pieces;
  int iters = 0;

  // Per timed iteration, all ranks together.
  std::optional<double> PerIter(const std::optional<uint64_t>& total) const {
    if (!total || iters <= 0) return std::nullopt;
    return static_cast<double>(*total) / iters;
  }
};

struct InterleavedRow {
  uint64_t bytes = 0;
  uint64_t count = 0;
  std::string type;
  std::string op;
  std::optional<bool> native;
  std::vector<VariantResult> variants;

  const VariantResult* Find(Variant v) const {
    for (const VariantResult& r : variants) {
      if (r.variant == v) return &r;
    }
    return nullptr;
  }
  // p50 of "after last arrival" of a over that of b; NaN when either variant is missing.
  double P50Ratio(Variant a, Variant b) const {
    const VariantResult* ra = Find(a);
    const VariantResult* rb = Find(b);
    if (!ra || !rb) return std::numeric_limits<double>::quiet_NaN();
    return Ratio(ra->after_us.p50, rb->after_us.p50);
  }
};

struct Row {
  uint64_t bytes = 0;
  uint64_t count = 0;
  std::string type;
  std::string op;
  std::optional<bool> native;
  std::string algo_requested;  // --algo entry ("" without --algo)
  std::optional<ModeResult> oop;
  std::optional<ModeResult> ip;
  // What ran: the algorithm of the first mode's last call, "auto:<choice>" when auto chose.
  std::string AlgoLabel() const {
    std::string ran = "?";
    for (const auto* m : {&oop, &ip}) {
      if (m->has_value() && (*m)->stats && !(*m)->stats->algo.empty()) {
        ran = (*m)->stats->algo;
        break;
      }
    }
    return algo_requested == "auto" || algo_requested.empty() ? "auto:" + ran : ran;
  }
};

// Raw measurements of one implementation in one mode.
struct RawRun {
  std::vector<double> max_s;     // rank 0: per-iteration time of the slowest rank
  std::optional<int64_t> wrong;  // all ranks: summed over ranks
  std::optional<SkipStats> stats;
};

ImplResult Summarize(const RawRun& raw, uint64_t bytes, int nranks) {
  ImplResult r;
  r.wrong = raw.wrong;
  if (raw.max_s.empty()) return r;
  std::vector<double> us;
  for (double s : raw.max_s) us.push_back(s * 1e6);
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  r.avg_us = sum / static_cast<double>(us.size());
  r.p50_us = Percentile(us, 50);
  r.p99_us = Percentile(us, 99);
  r.min_us = us.front();
  r.max_us = us.back();
  r.algbw = r.avg_us > 0 ? static_cast<double>(bytes) / (r.avg_us * 1e-6) / 1e9 : 0;
  const double factor = nranks > 1 ? 2.0 * (nranks - 1) / nranks : 0.0;
  r.busbw = r.algbw * factor;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Report: the table on stdout, the JSON / CSV files and the summary (rank 0 prints and writes;
// every rank keeps the error counts, which decide the exit status).

class Report {
 public:
  Report(const Options& opts, int rank, int nranks) : opts_(opts), rank_(rank), nranks_(nranks) {}

  // Opens the output files (rank 0) and tells every rank whether that worked.
  bool OpenFiles(MPI_Comm comm) {
    int ok = 1;
    std::string error;
    if (rank_ == 0) {
      if (!opts_.json_path.empty()) {
        json_.open(opts_.json_path, std::ios::out | std::ios::trunc);
        if (!json_) error = "cannot open --json file '" + opts_.json_path + "'";
      }
      if (!opts_.csv_path.empty() && error.empty()) {
        csv_.open(opts_.csv_path, std::ios::out | std::ios::trunc);
        if (!csv_) error = "cannot open --csv file '" + opts_.csv_path + "'";
      }
      if (!error.empty()) {
        fmt::print(stderr, "skipring_bench: {}: {}\n", error, std::strerror(errno));
        ok = 0;
      }
    }
    CheckMpi(MPI_Bcast(&ok, 1, MPI_INT, 0, comm), "MPI_Bcast");
    return ok != 0;
  }

  void Comment(const std::string& text) const {
    if (rank_ != 0) return;
    fmt::print("# {}\n", text);
    std::fflush(stdout);
  }

  void PrintHeader(const std::vector<std::string>& preamble) const {
    if (rank_ != 0) return;
    for (const std::string& line : preamble) fmt::print("#{}{}\n", line.empty() ? "" : " ", line);
    fmt::print("#\n");
    if (opts_.interleaved()) {
      PrintInterleavedHeader();
      return;
    }
    const size_t group = GroupWidth();
    std::string labels = fmt::format("#{:>{}}", "", kPrefixWidth + 16);
    if (opts_.run_oop) labels += fmt::format("{:^{}}", "out-of-place", group);
    if (opts_.run_ip) labels += fmt::format("{:^{}}", "in-place", group);
    fmt::print("{}\n", TrimRight(labels));
    std::string titles = fmt::format("#{:>11} {:>13} {:>9} {:>7} {:>16}", "size", "count", "type",
                                     "redop", "algo");
    std::string units =
        fmt::format("#{:>11} {:>13} {:>9} {:>7} {:>16}", "(B)", "(elements)", "", "", "");
    for (int g = 0; g < (opts_.run_oop ? 1 : 0) + (opts_.run_ip ? 1 : 0); ++g) {
      titles += fmt::format(" {:>8} {:>7} {:>7} {:>6} {:>8} {:>8}", "time", "algbw", "busbw",
                            "#wrong", "p50", "p99");
      units += fmt::format(" {:>8} {:>7} {:>7} {:>6} {:>8} {:>8}", "(us)", "(GB/s)", "(GB/s)", "",
                           "(us)", "(us)");
      if (opts_.compare_mpi) {
        titles += fmt::format(" {:>8} {:>7}", "mpi_p50", "speedup");
        units += fmt::format(" {:>8} {:>7}", "(us)", "");
      }
    }
    fmt::print("{}\n{}\n", titles, TrimRight(units));
    std::fflush(stdout);
  }

  void AddRow(const Row& row) {
    ++rows_added_;
    for (const auto* mode : {&row.oop, &row.ip}) {
      if (!mode->has_value()) continue;
      const ModeResult& m = **mode;
      wrong_ += m.skipring.wrong.value_or(0);
      busbw_sum_ += m.skipring.busbw;
      ++busbw_n_;
      if (m.stats) {
        skips_ += m.stats->skips;
        late_ += m.stats->late_pieces;
      }
      if (m.mpi) {
        mpi_wrong_ += m.mpi->wrong.value_or(0);
        mpi_busbw_sum_ += m.mpi->busbw;
        if (m.speedup > 0 && std::isfinite(m.speedup)) {
          log_speedup_sum_ += std::log(m.speedup);
          ++speedup_n_;
        }
      }
    }
    if (rank_ != 0) return;
    std::string line = fmt::format("{:>12} {:>13} {:>9} {:>7} {:>16}", row.bytes, row.count,
                                   row.type, row.op, row.AlgoLabel());
    for (const auto* mode : {&row.oop, &row.ip}) {
      if (!mode->has_value()) continue;
      const ModeResult& m = **mode;
      const ImplResult& s = m.skipring;
      line += fmt::format(" {:>8} {:>7} {:>7} {:>6} {:>8} {:>8}", FormatMicros(s.avg_us),
                          FormatRate(s.algbw), FormatRate(s.busbw),
                          s.wrong ? std::to_string(*s.wrong) : std::string("N/A"),
                          FormatMicros(s.p50_us), FormatMicros(s.p99_us));
      if (opts_.compare_mpi) {
        line +=
            m.mpi ? fmt::format(" {:>8} {:>7}", FormatMicros(m.mpi->p50_us), FormatRate(m.speedup))
                  : fmt::format(" {:>8} {:>7}", "-", "-");
      }
    }
    fmt::print("{}\n", line);
    std::fflush(stdout);
    const Json json_row = ToJson(row);
    rows_.push_back(json_row);
    WriteCsvRow(json_row);
  }

  // One size of the interleaved modes (straggler, overhead).
  void AddInterleavedRow(const InterleavedRow& row) {
    ++rows_added_;
    for (const VariantResult& r : row.variants) {
      variant_wrong_[static_cast<int>(r.variant)] += r.wrong.value_or(0);
      if (r.skips) variant_skips_[static_cast<int>(r.variant)] += *r.skips;
      if (r.late_pieces) variant_late_[static_cast<int>(r.variant)] += *r.late_pieces;
    }
    skip_over_ring_.Add(row.P50Ratio(Variant::kSkip, Variant::kRing));
    skip_over_mpi_.Add(row.P50Ratio(Variant::kSkip, Variant::kMpi));
    if (rank_ != 0) return;
    std::string line =
        fmt::format("{:>12} {:>13} {:>9} {:>7}", row.bytes, row.count, row.type, row.op);
    for (const CellGroup& group : InterleavedCells(&row)) {
      for (const Cell& cell : group.cells) line += fmt::format(" {:>{}}", cell.value, cell.width);
    }
    fmt::print("{}\n", line);
    std::fflush(stdout);
    const Json json_row = InterleavedJson(row);
    rows_.push_back(json_row);
    WriteCsvRow(json_row);
  }

  int64_t rows_added() const { return rows_added_; }

  // Prints the summary, writes the JSON file; returns the number of wrong values (skipring and
  // MPI reference together).
  int64_t Finish(const std::string& failure) {
    if (opts_.interleaved()) return FinishInterleaved(failure);
    if (rank_ == 0) {
      if (opts_.check) {
        fmt::print("# Out of bounds values : {} {}\n", wrong_, wrong_ == 0 ? "OK" : "FAILED");
      } else {
        fmt::print("# Out of bounds values : 0 OK (validation disabled)\n");
      }
      fmt::print("# Avg bus bandwidth    : {:.6g}\n",
                 busbw_n_ > 0 ? busbw_sum_ / static_cast<double>(busbw_n_) : 0.0);
      if (opts_.compare_mpi) {
        fmt::print("# Avg MPI bus bandwidth: {:.6g}\n",
                   busbw_n_ > 0 ? mpi_busbw_sum_ / static_cast<double>(busbw_n_) : 0.0);
        fmt::print("# Geomean speedup      : {:.4g}  (t_mpi_p50 / t_skipring_p50 over {} rows)\n",
                   speedup_n_ > 0 ? std::exp(log_speedup_sum_ / speedup_n_) : 0.0, speedup_n_);
        if (opts_.check) {
          fmt::print("# MPI reference wrong values : {}{}\n", mpi_wrong_,
                     mpi_wrong_ == 0 ? "" : "  (the checker or the MPI library is broken)");
        }
      }
      fmt::print("# skipring skips       : {}  (late pieces: {}; all ranks, timed iterations)\n",
                 skips_, late_);
      if (!failure.empty()) fmt::print("# FAILED: {}\n", failure);
      fmt::print("#\n");
      std::fflush(stdout);
      CloseFiles();
    }
    return wrong_ + mpi_wrong_;
  }

 private:
  static constexpr int kPrefixWidth = 44;  // "size count type redop" columns

  // Interleaved modes: a column (title, unit, width, value) and a labelled group of columns.
  struct Cell {
    std::string title;
    std::string unit;
    int width = 8;
    std::string value;
  };
  struct CellGroup {
    std::string label;
    std::vector<Cell> cells;
  };

  bool HasVariant(Variant v) const {
    return std::find(opts_.variants.begin(), opts_.variants.end(), v) != opts_.variants.end();
  }

  // The interleaved modes' columns after "size count type redop", holding `row`'s values (empty
  // when row is null, for the header); one function for both keeps titles and values in step.
  std::vector<CellGroup> InterleavedCells(const InterleavedRow* row) const {
    auto text = [&](auto&& format) { return row ? format() : std::string(); };
    CellGroup after_p50{"after p50 (us)", {}};
    CellGroup after_p99{"after p99 (us)", {}};
    CellGroup total_p50{"total p50 (us)", {}};
    CellGroup wrong{"#wrong", {}};
    for (const Variant v : opts_.variants) {
      const VariantResult* r = row ? row->Find(v) : nullptr;
      auto micros = [&](double SampleSummary::*stat, SampleSummary VariantResult::*sample) {
        return text([&] { return r ? FormatMicros((r->*sample).*stat) : std::string("-"); });
      };
      after_p50.cells.push_back(
          {VariantName(v), "(us)", 8, micros(&SampleSummary::p50, &VariantResult::after_us)});
      after_p99.cells.push_back(
          {VariantName(v), "(us)", 8, micros(&SampleSummary::p99, &VariantResult::after_us)});
      total_p50.cells.push_back(
          {VariantName(v), "(us)", 8, micros(&SampleSummary::p50, &VariantResult::total_us)});
      wrong.cells.push_back(
          {VariantName(v), "", 6,
           text([&] { return r && r->wrong ? std::to_string(*r->wrong) : std::string("N/A"); })});
    }
    CellGroup ratio{"ratio", {}};
    ratio.cells.push_back({"skip/ring", "", 9, text([&] {
                             return FormatRate(row->P50Ratio(Variant::kSkip, Variant::kRing));
                           })});
    if (HasVariant(Variant::kMpi)) {
      ratio.cells.push_back({"skip/mpi", "", 8, text([&] {
                               return FormatRate(row->P50Ratio(Variant::kSkip, Variant::kMpi));
                             })});
    }
    CellGroup per_iter{"skip per iter", {}};
    const VariantResult* skip = row ? row->Find(Variant::kSkip) : nullptr;
    auto per_iter_text = [&](const std::optional<uint64_t> VariantResult::*field) {
      return text([&] {
        const std::optional<double> v = skip ? skip->PerIter(skip->*field) : std::nullopt;
        return v ? fmt::format("{:.1f}", *v) : std::string("N/A");
      });
    };
    per_iter.cells.push_back({"skips", "", 7, per_iter_text(&VariantResult::skips)});
    per_iter.cells.push_back({"late", "", 7, per_iter_text(&VariantResult::late_pieces)});
    return {after_p50, after_p99, ratio, total_p50, per_iter, wrong};
  }

  void PrintInterleavedHeader() const {
    std::string labels = fmt::format("#{:>{}}", "", kPrefixWidth - 1);
    std::string titles =
        fmt::format("#{:>11} {:>13} {:>9} {:>7}", "size", "count", "type", "redop");
    std::string units = fmt::format("#{:>11} {:>13} {:>9} {:>7}", "(B)", "(elements)", "", "");
    for (const CellGroup& group : InterleavedCells(nullptr)) {
      int width = -1;  // the group's columns and the spaces between them
      for (const Cell& cell : group.cells) {
        width += cell.width + 1;
        titles += fmt::format(" {:>{}}", cell.title, cell.width);
        units += fmt::format(" {:>{}}", cell.unit, cell.width);
      }
      labels += fmt::format(" {:^{}}", group.label, width);
    }
    fmt::print("{}\n{}\n{}\n", TrimRight(labels), titles, TrimRight(units));
    std::fflush(stdout);
  }

  Json InterleavedJson(const InterleavedRow& row) const {
    Json j;
    j["size_bytes"] = row.bytes;
    j["count"] = row.count;
    j["type"] = row.type;
    j["redop"] = row.op;
    j["nranks"] = nranks_;
    j["skipring_native"] = row.native ? Json(*row.native) : Json(nullptr);
    j["mode"] = opts_.straggler ? "straggler" : "overhead";
    j["iters"] = opts_.iters;
    j["late_rank"] = opts_.late_rank >= 0 ? Json(opts_.late_rank) : Json(nullptr);
    j["late_ms"] = opts_.late_rank >= 0 ? Json(opts_.late_ms) : Json(nullptr);
    j["inject"] = opts_.inject_given ? Json(opts_.inject) : Json(nullptr);
    auto finite = [](double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); };
    for (const Variant v : opts_.variants) {
      const VariantResult* r = row.Find(v);
      const std::string p = std::string(VariantName(v)) + "_";
      auto num = [&](double SampleSummary::*stat, SampleSummary VariantResult::*sample) {
        return r ? finite((r->*sample).*stat) : Json(nullptr);
      };
      j[p + "after_p50_us"] = num(&SampleSummary::p50, &VariantResult::after_us);
      j[p + "after_p99_us"] = num(&SampleSummary::p99, &VariantResult::after_us);
      j[p + "after_mean_us"] = num(&SampleSummary::mean, &VariantResult::after_us);
      j[p + "after_min_us"] = num(&SampleSummary::min, &VariantResult::after_us);
      j[p + "after_max_us"] = num(&SampleSummary::max, &VariantResult::after_us);
      j[p + "total_p50_us"] = num(&SampleSummary::p50, &VariantResult::total_us);
      j[p + "total_p99_us"] = num(&SampleSummary::p99, &VariantResult::total_us);
      j[p + "wrong"] = r ? Opt(r->wrong) : Json(nullptr);
      if (v != Variant::kMpi) {
        const std::optional<double> skips = r ? r->PerIter(r->skips) : std::nullopt;
        const std::optional<double> late = r ? r->PerIter(r->late_pieces) : std::nullopt;
        j[p + "skips_per_iter"] = skips ? Json(*skips) : Json(nullptr);
        j[p + "late_pieces_per_iter"] = late ? Json(*late) : Json(nullptr);
      }
    }
    j["skip_over_ring"] = finite(row.P50Ratio(Variant::kSkip, Variant::kRing));
    if (HasVariant(Variant::kMpi)) {
      j["skip_over_mpi"] = finite(row.P50Ratio(Variant::kSkip, Variant::kMpi));
    }
    return j;
  }

  int64_t FinishInterleaved(const std::string& failure) {
    int64_t wrong = 0;
    for (const int64_t w : variant_wrong_) wrong += w;
    if (rank_ == 0) {
      if (opts_.check) {
        std::string per_variant;
        for (const Variant v : opts_.variants) {
          per_variant += fmt::format("{}{} {}", per_variant.empty() ? "" : ", ", VariantName(v),
                                     variant_wrong_[static_cast<int>(v)]);
        }
        fmt::print("# Out of bounds values : {} {}  ({})\n", wrong, wrong == 0 ? "OK" : "FAILED",
                   per_variant);
      } else {
        fmt::print("# Out of bounds values : 0 OK (validation disabled)\n");
      }
      fmt::print(
          "# Geomean skip/ring    : {:.4g}  (p50 after last arrival, over {} rows; < 1: "
          "skip-ahead faster)\n",
          skip_over_ring_.value(), skip_over_ring_.count());
      if (HasVariant(Variant::kMpi)) {
        fmt::print("# Geomean skip/mpi     : {:.4g}  (p50 after last arrival, over {} rows)\n",
                   skip_over_mpi_.value(), skip_over_mpi_.count());
      }
      const int skip = static_cast<int>(Variant::kSkip);
      const int ring = static_cast<int>(Variant::kRing);
      fmt::print(
          "# skipring skips       : {}  (late pieces: {}; skip variant, all ranks, timed "
          "iterations)\n",
          variant_skips_[skip], variant_late_[skip]);
      fmt::print("# plain-ring skips     : {}  (late pieces: {}; must be 0)\n",
                 variant_skips_[ring], variant_late_[ring]);
      if (!failure.empty()) fmt::print("# FAILED: {}\n", failure);
      fmt::print("#\n");
      std::fflush(stdout);
      CloseFiles();
    }
    return wrong;
  }

  void CloseFiles() {
    if (json_.is_open()) {
      json_ << rows_.dump(2) << "\n";
      json_.close();
      if (!json_) fmt::print(stderr, "skipring_bench: writing '{}' failed\n", opts_.json_path);
    }
    if (csv_.is_open()) csv_.close();
  }

  size_t GroupWidth() const { return opts_.compare_mpi ? 67 : 50; }

  static std::string TrimRight(std::string s) {
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
  }

  static Json Opt(const std::optional<int64_t>& v) { return v ? Json(*v) : Json(nullptr); }

  Json ToJson(const Row& row) const {
    Json j;
    j["size_bytes"] = row.bytes;
    j["count"] = row.count;
    j["type"] = row.type;
    j["redop"] = row.op;
    j["algo"] = row.AlgoLabel();
    j["nranks"] = nranks_;
    j["skipring_native"] = row.native ? Json(*row.native) : Json(nullptr);
    struct ModeColumns {
      const char* prefix;
      bool enabled;
      const std::optional<ModeResult>* result;
    };
    const ModeColumns modes[] = {{"oop_", opts_.run_oop, &row.oop}, {"ip_", opts_.run_ip, &row.ip}};
    for (const ModeColumns& mode : modes) {
      if (!mode.enabled) continue;
      const std::string p = mode.prefix;
      const std::optional<ModeResult>& result = *mode.result;
      const ModeResult* m = result.has_value() ? &*result : nullptr;
      const ImplResult* s = m ? &m->skipring : nullptr;
      auto num = [](const ImplResult* r, double ImplResult::*field) {
        return r ? Json((*r).*field) : Json(nullptr);
      };
      j[p + "time_us"] = num(s, &ImplResult::avg_us);
      j[p + "algbw_gbps"] = num(s, &ImplResult::algbw);
      j[p + "busbw_gbps"] = num(s, &ImplResult::busbw);
      j[p + "wrong"] = s ? Opt(s->wrong) : Json(nullptr);
      j[p + "p50_us"] = num(s, &ImplResult::p50_us);
      j[p + "p99_us"] = num(s, &ImplResult::p99_us);
      j[p + "min_us"] = num(s, &ImplResult::min_us);
      j[p + "max_us"] = num(s, &ImplResult::max_us);
      const SkipStats* st = m && m->stats ? &*m->stats : nullptr;
      j[p + "skips"] = st ? Json(st->skips) : Json(nullptr);
      j[p + "late_pieces"] = st ? Json(st->late_pieces) : Json(nullptr);
      j[p + "wait_us"] = st ? Json(st->wait_us) : Json(nullptr);
      if (opts_.compare_mpi) {
        const ImplResult* mp = m && m->mpi ? &*m->mpi : nullptr;
        j[p + "mpi_time_us"] = num(mp, &ImplResult::avg_us);
        j[p + "mpi_algbw_gbps"] = num(mp, &ImplResult::algbw);
        j[p + "mpi_busbw_gbps"] = num(mp, &ImplResult::busbw);
        j[p + "mpi_wrong"] = mp ? Opt(mp->wrong) : Json(nullptr);
        j[p + "mpi_p50_us"] = num(mp, &ImplResult::p50_us);
        j[p + "mpi_p99_us"] = num(mp, &ImplResult::p99_us);
        j[p + "speedup"] = mp ? Json(m->speedup) : Json(nullptr);
      }
    }
    return j;
  }

  void WriteCsvRow(const Json& row) {
    if (!csv_.is_open()) return;
    if (!csv_header_written_) {
      bool first = true;
      for (const auto& item : row.items()) {
        csv_ << (first ? "" : ",") << item.key();
        first = false;
      }
      csv_ << "\n";
      csv_header_written_ = true;
    }
    bool first = true;
    for (const auto& item : row.items()) {
      csv_ << (first ? "" : ",");
      first = false;
      const Json& v = item.value();
      if (v.is_null()) continue;
      csv_ << (v.is_string() ? v.get<std::string>() : v.dump());
    }
    csv_ << "\n";
    csv_.flush();
  }

  const Options& opts_;
  int rank_;
  int nranks_;
  std::ofstream json_;
  std::ofstream csv_;
  bool csv_header_written_ = false;
  int64_t rows_added_ = 0;
  Json rows_ = Json::array();
  int64_t wrong_ = 0;
  int64_t mpi_wrong_ = 0;
  double busbw_sum_ = 0;
  double mpi_busbw_sum_ = 0;
  int busbw_n_ = 0;
  double log_speedup_sum_ = 0;
  int speedup_n_ = 0;
  uint64_t skips_ = 0;
  uint64_t late_ = 0;
  // Interleaved modes, indexed by Variant.
  int64_t variant_wrong_[kVariantCount] = {0, 0, 0};
  uint64_t variant_skips_[kVariantCount] = {0, 0, 0};
  uint64_t variant_late_[kVariantCount] = {0, 0, 0};
  GeoMean skip_over_ring_;
  GeoMean skip_over_mpi_;
};

// ---------------------------------------------------------------------------------------------
// The measurement loop.

enum class Impl { kSkipring, kMpi };

struct Context {
  Options opts;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int nranks = 1;
  Buffer send;
  Buffer recv;
  Buffer expected;
  int hosts = 1;              // distinct hosts the ranks run on
  double clock_offset_s = 0;  // this rank's steady_clock minus rank 0's (several hosts only)
};

// Every rank learns whether any rank's call failed; the failing ranks say why.
void AgreeOnError(const Context& ctx, int rc, Impl impl, const std::string& what) {
  const int local = rc != MPI_SUCCESS ? 1 : 0;
  if (local) {
    std::string text;
    if (impl == Impl::kSkipring) {
      const char* s = skipring_error_string(rc);
      text = s ? s : "(no description)";
    } else {
      char buf[MPI_MAX_ERROR_STRING] = {0};
      int len = 0;
      MPI_Error_string(rc, buf, &len);
      text = buf;
    }
    fmt::print(stderr, "[rank {}] {} failed ({}): {} (code {})\n", ctx.rank,
               impl == Impl::kSkipring ? "skipring_allreduce" : "PMPI_Allreduce", what, text, rc);
    std::fflush(stderr);
  }
  int any = 0;
  CheckMpi(PMPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, ctx.comm), "PMPI_Allreduce(error)");
  if (any) {
    throw CollectiveFailure(
        fmt::format("{} returned an error ({}); see the messages above",
                    impl == Impl::kSkipring ? "skipring_allreduce" : "PMPI_Allreduce", what));
  }
}

template <typename T>
RawRun RunImpl(const Context& ctx, const Pattern<T>& pattern, const TypeDesc& type,
               const OpDesc& op, uint64_t count, bool inplace, Impl impl) {
  T* send = ctx.send.As<T>();
  T* recv = ctx.recv.As<T>();
  const T* expected = ctx.expected.As<T>();
  const uint64_t bytes = count * sizeof(T);
  const bool check = ctx.opts.check;
  const std::string what = fmt::format("{} bytes, {}, {}, {}", bytes, type.name, op.name,
                                       inplace ? "in-place" : "out-of-place");

  auto prepare = [&](int iteration) {
    if (inplace) {
      std::memcpy(recv, send, bytes);  // in-place overwrote the input
    } else if (check) {
      std::fill(recv, recv + count, Pattern<T>::Poison(iteration));
    }
  };
  auto call = [&]() {
    const void* sendbuf = inplace ? MPI_IN_PLACE : static_cast<const void*>(send);
    const int n = static_cast<int>(count);
    if (impl == Impl::kSkipring) {
      return skipring_allreduce(sendbuf, recv, n, type.mpi, op.mpi, ctx.comm);
    }
    return PMPI_Allreduce(sendbuf, recv, n, type.mpi, op.mpi, ctx.comm);
  };

  for (int w = 0; w < ctx.opts.warmup; ++w) {
    prepare(w);
    AgreeOnError(ctx, call(), impl, what + ", warm-up");
  }

  const int iters = ctx.opts.iters;
  std::vector<double> local_s(static_cast<size_t>(iters), 0.0);
  int64_t wrong = 0;
  uint64_t stat_counts[2] = {0, 0};  // skips, late pieces
  double wait_s = 0;
  int stats_ok = 1;
  std::string last_algo;
  for (int it = 0; it < iters; ++it) {
    prepare(it);
    CheckMpi(MPI_Barrier(ctx.comm), "MPI_Barrier");
    const auto t0 = std::chrono::steady_clock::now();
    int rc = call();
    // --back-to-back K: K calls per timed iteration with no barrier in between (as an
    // application issues them); the iteration's time is their mean.
    for (int k = 1; k < ctx.opts.back_to_back && rc == MPI_SUCCESS; ++k) rc = call();
    const auto t1 = std::chrono::steady_clock::now();
    local_s[static_cast<size_t>(it)] =
        std::chrono::duration<double>(t1 - t0).count() / ctx.opts.back_to_back;
    if (rc == MPI_SUCCESS && impl == Impl::kSkipring) {
      skipring_stats_t st{};
      if (skipring_last_stats(ctx.comm, &st) == MPI_SUCCESS) {
        stat_counts[0] += st.skips;
        stat_counts[1] += st.late_pieces;
        wait_s += st.wait_s;
        last_algo.assign(st.algo, strnlen(st.algo, sizeof(st.algo)));
      } else {
        stats_ok = 0;
      }
    }
    if (rc == MPI_SUCCESS && check) wrong += CountMismatches(recv, expected, count);
    AgreeOnError(ctx, rc, impl, what);
  }
  if (check && !inplace) wrong += CountInputChanges(pattern, send, count, ctx.rank);

  RawRun raw;
  std::vector<double> max_s(static_cast<size_t>(iters), 0.0);
  CheckMpi(MPI_Reduce(local_s.data(), max_s.data(), iters, MPI_DOUBLE, MPI_MAX, 0, ctx.comm),
           "MPI_Reduce(times)");
  if (ctx.rank == 0) raw.max_s = std::move(max_s);
  if (check) {
    int64_t total = 0;
    CheckMpi(PMPI_Allreduce(&wrong, &total, 1, MPI_INT64_T, MPI_SUM, ctx.comm),
             "PMPI_Allreduce(#wrong)");
    raw.wrong = total;
  }
  if (impl == Impl::kSkipring) {
    uint64_t counts_sum[2] = {0, 0};
    double wait_sum = 0;
    int all_ok = 0;
    CheckMpi(MPI_Reduce(stat_counts, counts_sum, 2, MPI_UINT64_T, MPI_SUM, 0, ctx.comm),
             "MPI_Reduce(stats)");
    CheckMpi(MPI_Reduce(&wait_s, &wait_sum, 1, MPI_DOUBLE, MPI_SUM, 0, ctx.comm),
             "MPI_Reduce(stats)");
    CheckMpi(MPI_Reduce(&stats_ok, &all_ok, 1, MPI_INT, MPI_MIN, 0, ctx.comm), "MPI_Reduce(stats)");
    if (ctx.rank == 0 && all_ok) {
      SkipStats s;
      s.algo = last_algo;
      s.skips = counts_sum[0];
      s.late_pieces = counts_sum[1];
      s.wait_us = wait_sum / (static_cast<double>(ctx.nranks) * iters) * 1e6;
      raw.stats = s;
    }
  }
  return raw;
}

template <typename T>
ModeResult RunMode(const Context& ctx, const Pattern<T>& pattern, const TypeDesc& type,
                   const OpDesc& op, uint64_t count, bool inplace) {
  const uint64_t bytes = count * sizeof(T);
  ModeResult result;
  FillInput(pattern, ctx.send.As<T>(), count, ctx.rank);
  RawRun sk = RunImpl(ctx, pattern, type, op, count, inplace, Impl::kSkipring);
  result.skipring = Summarize(sk, bytes, ctx.nranks);
  result.stats = sk.stats;
  if (ctx.opts.compare_mpi) {
    FillInput(pattern, ctx.send.As<T>(), count, ctx.rank);  // in case skipring modified it
    RawRun mpi = RunImpl(ctx, pattern, type, op, count, inplace, Impl::kMpi);
    result.mpi = Summarize(mpi, bytes, ctx.nranks);
    result.speedup = result.skipring.p50_us > 0 ? result.mpi->p50_us / result.skipring.p50_us : 0;
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Interleaved modes: every variant once per iteration, in turn, so that noise hits them alike.

// Seconds on a clock common to all ranks. std::chrono::steady_clock is CLOCK_MONOTONIC on Linux,
// one clock for every process of a machine, so stamps taken by different ranks on one host are
// directly comparable. Hosts count from their own boot: across hosts the offset to rank 0's
// clock, estimated at start-up, is subtracted, which is only approximate (a few microseconds,
// plus drift over the run).
double CommonNow(const Context& ctx) {
  const auto since_boot = std::chrono::steady_clock::now().time_since_epoch();
  return std::chrono::duration<double>(since_boot).count() - ctx.clock_offset_s;
}

// This rank's steady_clock minus rank 0's, estimated from ping-pongs with rank 0: of several
// rounds, the one with the shortest round trip, assuming the reply was stamped half-way.
double EstimateClockOffset(MPI_Comm comm, int rank, int nranks) {
  constexpr int kRounds = 32;
  constexpr int kTag = 7301;
  auto now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  double offset = 0;
  for (int peer = 1; peer < nranks; ++peer) {
    if (rank == 0) {
      double best_rtt = std::numeric_limits<double>::infinity();
      double best_offset = 0;
      for (int round = 0; round < kRounds; ++round) {
        const int token = round;
        double remote = 0;
        const double t0 = now();
        CheckMpi(MPI_Send(&token, 1, MPI_INT, peer, kTag, comm), "MPI_Send(clock)");
        CheckMpi(MPI_Recv(&remote, 1, MPI_DOUBLE, peer, kTag, comm, MPI_STATUS_IGNORE),
                 "MPI_Recv(clock)");
        const double t1 = now();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          best_offset = remote - 0.5 * (t0 + t1);
        }
      }
      CheckMpi(MPI_Send(&best_offset, 1, MPI_DOUBLE, peer, kTag, comm), "MPI_Send(clock)");
    } else if (rank == peer) {
      for (int round = 0; round < kRounds; ++round) {
        int token = 0;
        CheckMpi(MPI_Recv(&token, 1, MPI_INT, 0, kTag, comm, MPI_STATUS_IGNORE), "MPI_Recv(clock)");
        const double stamp = now();
        CheckMpi(MPI_Send(&stamp, 1, MPI_DOUBLE, 0, kTag, comm), "MPI_Send(clock)");
      }
      CheckMpi(MPI_Recv(&offset, 1, MPI_DOUBLE, 0, kTag, comm, MPI_STATUS_IGNORE),
               "MPI_Recv(clock)");
    }
  }
  return offset;
}

// Runs ctx.opts.variants interleaved (warm-up, then timed iterations; in each, every variant in
// turn) out-of-place on `count` elements. Per call and rank: a barrier, the late rank's sleep
// (--late-rank/--late-ms, every variant alike), t_enter, the call, t_exit. Rank 0 gets the
// per-iteration times over ranks; every rank gets the error counts.
template <typename T>
std::vector<VariantResult> RunInterleaved(const Context& ctx, const Pattern<T>& pattern,
                                          const TypeDesc& type, const OpDesc& op, uint64_t count) {
  T* send = ctx.send.As<T>();
  T* recv = ctx.recv.As<T>();
  const T* expected = ctx.expected.As<T>();
  const bool check = ctx.opts.check;
  const int iters = ctx.opts.iters;
  const int warmup = ctx.opts.warmup;
  const std::vector<Variant>& variants = ctx.opts.variants;
  const size_t nv = variants.size();
  const int n = static_cast<int>(count);
  const std::string what =
      fmt::format("{} bytes, {}, {}, out-of-place", count * sizeof(T), type.name, op.name);
  const bool late_here = ctx.rank == ctx.opts.late_rank && ctx.opts.late_ms > 0;
  const auto late = std::chrono::duration<double, std::milli>(ctx.opts.late_ms);

  // stamps[v * iters + it]: t_enter / t_exit of variant v in timed iteration it.
  std::vector<double> enters(nv * static_cast<size_t>(iters), 0.0);
  std::vector<double> exits(nv * static_cast<size_t>(iters), 0.0);
  std::vector<int64_t> wrong(nv, 0);
  std::vector<uint64_t> counts(2 * nv, 0);  // skips, late pieces per variant
  std::vector<int> stats_ok(nv, 1);

  FillInput(pattern, send, count, ctx.rank);
  // The variants compare skip-ahead with the plain ring: both must run the ring, whatever
  // SKIPRING_ALGO=auto would pick for this size.
  AgreeOnError(ctx, skipring_set_algo("skipring"), Impl::kSkipring, "skipring_set_algo");
  for (int it = -warmup; it < iters; ++it) {
    const bool timed = it >= 0;
    for (size_t v = 0; v < nv; ++v) {
      const Variant variant = variants[v];
      const Impl impl = variant == Variant::kMpi ? Impl::kMpi : Impl::kSkipring;
      if (check) std::fill(recv, recv + count, Pattern<T>::Poison(it + warmup));
      if (impl == Impl::kSkipring) {
        // Takes effect from the next collective on; no communication.
        AgreeOnError(ctx, skipring_set_skip(variant == Variant::kSkip ? 1 : 0), impl,
                     "skipring_set_skip");
      }
      CheckMpi(MPI_Barrier(ctx.comm), "MPI_Barrier");
      if (late_here) std::this_thread::sleep_for(late);
      const double t_enter = CommonNow(ctx);
      const int rc = impl == Impl::kSkipring
                         ? skipring_allreduce(send, recv, n, type.mpi, op.mpi, ctx.comm)
                         : PMPI_Allreduce(send, recv, n, type.mpi, op.mpi, ctx.comm);
      const double t_exit = CommonNow(ctx);
      if (timed) {
        const size_t at = v * static_cast<size_t>(iters) + static_cast<size_t>(it);
        enters[at] = t_enter;
        exits[at] = t_exit;
        if (rc == MPI_SUCCESS && impl == Impl::kSkipring) {
          skipring_stats_t st{};
          if (skipring_last_stats(ctx.comm, &st) == MPI_SUCCESS) {
            counts[2 * v] += st.skips;
            counts[2 * v + 1] += st.late_pieces;
          } else {
            stats_ok[v] = 0;
          }
        }
        if (rc == MPI_SUCCESS && check) {
          wrong[v] += CountMismatches(recv, expected, count);
          // The variants share the input: a call that modified it is charged, and it is restored
          // so the next variant is not.
          const int64_t changed = CountInputChanges(pattern, send, count, ctx.rank);
          if (changed > 0) {
            wrong[v] += changed;
            FillInput(pattern, send, count, ctx.rank);
          }
        }
      }
      AgreeOnError(ctx, rc, impl,
                   fmt::format("{}, {}{}", what, VariantName(variant), timed ? "" : ", warm-up"));
    }
  }

  // Over ranks: latest entry and exit, earliest entry.
  std::vector<double> stamps = enters;
  stamps.insert(stamps.end(), exits.begin(), exits.end());
  std::vector<double> latest(stamps.size(), 0.0);
  std::vector<double> earliest(enters.size(), 0.0);
  CheckMpi(MPI_Reduce(stamps.data(), latest.data(), static_cast<int>(stamps.size()), MPI_DOUBLE,
                      MPI_MAX, 0, ctx.comm),
           "MPI_Reduce(stamps)");
  CheckMpi(MPI_Reduce(enters.data(), earliest.data(), static_cast<int>(enters.size()), MPI_DOUBLE,
                      MPI_MIN, 0, ctx.comm),
           "MPI_Reduce(stamps)");
  std::vector<int64_t> wrong_sum(nv, 0);
  if (check) {
    CheckMpi(PMPI_Allreduce(wrong.data(), wrong_sum.data(), static_cast<int>(nv), MPI_INT64_T,
                            MPI_SUM, ctx.comm),
             "PMPI_Allreduce(#wrong)");
  }
  std::vector<uint64_t> counts_sum(counts.size(), 0);
  std::vector<int> all_ok(nv, 0);
  CheckMpi(MPI_Reduce(counts.data(), counts_sum.data(), static_cast<int>(counts.size()),
                      MPI_UINT64_T, MPI_SUM, 0, ctx.comm),
           "MPI_Reduce(stats)");
  CheckMpi(MPI_Reduce(stats_ok.data(), all_ok.data(), static_cast<int>(nv), MPI_INT, MPI_MIN, 0,
                      ctx.comm),
           "MPI_Reduce(stats)");

  std::vector<VariantResult> results;
  const size_t exit_base = enters.size();
  for (size_t v = 0; v < nv; ++v) {
    VariantResult r;
    r.variant = variants[v];
    r.iters = iters;
    if (check) r.wrong = wrong_sum[v];
    if (ctx.rank == 0) {
      std::vector<double> after_us, total_us;
      for (int it = 0; it < iters; ++it) {
        const size_t at = v * static_cast<size_t>(iters) + static_cast<size_t>(it);
        ArrivalStamps a;
        a.first_enter = earliest[at];
        a.last_enter = latest[at];
        a.last_exit = latest[exit_base + at];
        after_us.push_back(AfterLastArrival(a) * 1e6);
        total_us.push_back(TotalTime(a) * 1e6);
      }
      r.after_us = SummarizeSample(std::move(after_us));
      r.total_us = SummarizeSample(std::move(total_us));
      if (r.variant != Variant::kMpi && all_ok[v]) {
        r.skips = counts_sum[2 * v];
        r.late_pieces = counts_sum[2 * v + 1];
      }
    }
    results.push_back(r);
  }
  return results;
}

template <typename T>
void RunCombination(const Context& ctx, Report& report, const std::vector<uint64_t>& sizes,
                    const TypeDesc& type, const OpDesc& op) {
  const Pattern<T> pattern(op.id, ctx.nranks);
  std::optional<bool> native;
  int handled = 0;
  if (skipring_handles(type.mpi, op.mpi, ctx.comm, &handled) == MPI_SUCCESS) {
    native = handled != 0;
    if (!handled) {
      report.Comment(fmt::format("note: skipring hands {}/{} to PMPI_Allreduce (fallback)",
                                 type.name, op.name));
    }
  }
  uint64_t previous_bytes = 0;
  for (const uint64_t size : sizes) {
    const uint64_t count = size / sizeof(T);
    if (count == 0) continue;  // smaller than one element
    if (count > static_cast<uint64_t>(INT_MAX)) {
      report.Comment(fmt::format("sizes from {} bytes skipped for {}: count exceeds INT_MAX", size,
                                 type.name));
      break;
    }
    const uint64_t bytes = count * sizeof(T);
    if (bytes == previous_bytes) continue;  // rounding to whole elements repeated a size
    previous_bytes = bytes;
    if (ctx.opts.check) FillExpected(pattern, ctx.expected.As<T>(), count);
    if (ctx.opts.interleaved()) {
      InterleavedRow row;
      row.bytes = bytes;
      row.count = count;
      row.type = type.name;
      row.op = op.name;
      row.native = native;
      row.variants = RunInterleaved(ctx, pattern, type, op, count);
      report.AddInterleavedRow(row);
      continue;
    }
    const std::vector<std::string> algos =
        ctx.opts.algos.empty() ? std::vector<std::string>{""} : ctx.opts.algos;
    for (const std::string& algo : algos) {
      if (!algo.empty()) {
        AgreeOnError(ctx, skipring_set_algo(algo.c_str()), Impl::kSkipring, "skipring_set_algo");
      }
      Row row;
      row.bytes = bytes;
      row.count = count;
      row.type = type.name;
      row.op = op.name;
      row.native = native;
      row.algo_requested = algo;
      if (ctx.opts.run_oop) row.oop = RunMode(ctx, pattern, type, op, count, false);
      if (ctx.opts.run_ip) row.ip = RunMode(ctx, pattern, type, op, count, true);
      report.AddRow(row);
    }
  }
}

void RunType(const Context& ctx, Report& report, const std::vector<uint64_t>& sizes,
             const TypeDesc& type, const OpDesc& op) {
  switch (type.id) {
    case TypeId::kInt8:
      return RunCombination<int8_t>(ctx, report, sizes, type, op);
    case TypeId::kUint8:
      return RunCombination<uint8_t>(ctx, report, sizes, type, op);
    case TypeId::kInt16:
      return RunCombination<int16_t>(ctx, report, sizes, type, op);
    case TypeId::kUint16:
      return RunCombination<uint16_t>(ctx, report, sizes, type, op);
    case TypeId::kInt32:
      return RunCombination<int32_t>(ctx, report, sizes, type, op);
    case TypeId::kUint32:
      return RunCombination<uint32_t>(ctx, report, sizes, type, op);
    case TypeId::kInt64:
      return RunCombination<int64_t>(ctx, report, sizes, type, op);
    case TypeId::kUint64:
      return RunCombination<uint64_t>(ctx, report, sizes, type, op);
    case TypeId::kFloat:
      return RunCombination<float>(ctx, report, sizes, type, op);
    case TypeId::kDouble:
      return RunCombination<double>(ctx, report, sizes, type, op);
  }
}

// MemAvailable from /proc/meminfo in bytes; 0 when unknown.
uint64_t AvailableMemory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string rest;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    std::getline(meminfo, rest);
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Command line and header.

// Parses the command line on every rank (only rank 0 prints). Returns an exit code when the
// program should stop (help, or a usage error), nullopt to run.
std::optional<int> ParseOptions(int argc, char** argv, int rank, Options& opts) {
  CLI::App app{
      "skipring_bench: all-reduce benchmark of skipring (nccl-tests all_reduce_perf style).\n"
      "Run under mpirun; every rank takes part. Sizes take K/M/G suffixes (powers of 1024)."};
  int check = 1;
  std::string compare = "none";
  bool inplace_only = false;
  bool outofplace_only = false;
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
  app.add_option("-c,--check", check, "verify every result element (0/1)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1));
  app.add_option("-d,--datatype", opts.type_text,
                 "datatype(s), comma-separated, or all: " + TypeNames())
      ->capture_default_str()
      ->type_name("TYPES");
  app.add_option("-o,--op", opts.op_text, "reduction(s), comma-separated, or all: " + OpNames())
      ->capture_default_str()
      ->type_name("OPS");
  app.add_option("--compare", compare,
                 "mpi: also time PMPI_Allreduce on the same buffers and print the speedup")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "mpi"}));
  app.add_option("--json", opts.json_path, "write every row to FILE as a JSON array (rank 0)")
      ->type_name("FILE");
  app.add_option("--back-to-back", opts.back_to_back,
                 "calls per timed iteration without a barrier between them (time = their mean; "
                 "out-of-place only)")
      ->check(CLI::Range(1, 1000000));
  std::string algo_text;
  app.add_option("--algo", algo_text,
                 "all-reduce algorithms to run per size, comma-separated (auto, ring, skipring, "
                 "rd, rabenseifner, tree, multitree, hier); each row names what ran")
      ->check([](const std::string& t) {
        for (const std::string& a : SplitList(t)) {
          if (a != "auto" && a != "ring" && a != "skipring" && a != "rd" &&
              a != "rabenseifner" && a != "tree" && a != "multitree" && a != "hier") {
            return "unknown algorithm '" + a + "'";
          }
        }
        return std::string();
      });
  app.add_option("--csv", opts.csv_path, "write every row to FILE as CSV (rank 0)")
      ->type_name("FILE");
  auto* ip = app.add_flag("--inplace-only", inplace_only, "run only the in-place variant");
  auto* oop =
      app.add_flag("--outofplace-only", outofplace_only, "run only the out-of-place variant");
  ip->excludes(oop);
  auto* inject =
      app.add_option("--inject", opts.inject,
                     "straggler mode; injection spec for skipring_set_inject, e.g. "
                     "\"rank=1,delay=2ms,at=rs\" (slows the skip and ring variants only)")
          ->type_name("SPEC");
  auto* late_rank =
      app.add_option("--late-rank", opts.late_rank,
                     "straggler mode: this rank sleeps --late-ms after the barrier, before every "
                     "call of every variant (needs --late-ms)")
          ->check(CLI::Range(0, INT_MAX))
          ->type_name("RANK");
  auto* late_ms = app.add_option("--late-ms", opts.late_ms, "how late --late-rank arrives, in ms")
                      ->check(CLI::Range(0.0, 3.6e6))
                      ->type_name("MS");
  late_rank->needs(late_ms);
  late_ms->needs(late_rank);
  auto* overhead = app.add_flag("--overhead", opts.overhead,
                                "no straggler: skip-ahead vs plain ring interleaved per iteration "
                                "(with --compare mpi also PMPI_Allreduce)");
  overhead->excludes(inject);
  overhead->excludes(late_rank);
  overhead->excludes(late_ms);

  std::ostringstream sink;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : app.exit(e, sink, sink);
  }

  auto fail = [&](const std::string& message) {
    if (rank == 0)
      fmt::print(stderr, "skipring_bench: {}\nRun with --help for more information.\n", message);
    return 2;
  };
  const auto min_bytes = ParseBytes(opts.min_text);
  const auto max_bytes = ParseBytes(opts.max_text);
  const auto step_bytes = ParseBytes(opts.step_text);
  if (!min_bytes) return fail("--minbytes: not a size: '" + opts.min_text + "'");
  if (!max_bytes) return fail("--maxbytes: not a size: '" + opts.max_text + "'");
  if (!step_bytes) return fail("--stepbytes: not a size: '" + opts.step_text + "'");
  if (*min_bytes > *max_bytes) return fail("--minbytes is larger than --maxbytes");
  if (opts.step_factor == 1 && *step_bytes == 0) {
    return fail("--stepbytes must be positive when --stepfactor is 1");
  }
  opts.min_bytes = *min_bytes;
  opts.max_bytes = *max_bytes;
  opts.step_bytes = *step_bytes;
  try {
    opts.types = ResolveTypes(opts.type_text);
    opts.ops = ResolveOps(opts.op_text);
  } catch (const std::invalid_argument& e) {
    return fail(e.what());
  }
  opts.check = check != 0;
  opts.algos = SplitList(algo_text);
  if (opts.back_to_back > 1 && !outofplace_only) {
    return fail("--back-to-back: add --outofplace-only (in place, each call would sum the last "
                "call's result)");
  }
  opts.compare_mpi = compare == "mpi";
  opts.run_oop = !inplace_only;
  opts.run_ip = !outofplace_only;
  opts.inject_given = inject->count() > 0;
  opts.straggler = opts.inject_given || late_rank->count() > 0;
  if (opts.interleaved()) {
    const char* mode = opts.straggler ? "--inject/--late-rank" : "--overhead";
    if (!opts.algos.empty()) return fail(std::string("--algo: ") + mode + " compares skip-ahead and the ring");
    if (inplace_only)
      return fail(std::string("--inplace-only: ") + mode + " runs out-of-place only");
    opts.run_oop = true;
    opts.run_ip = false;
    opts.variants = {Variant::kSkip, Variant::kRing};
    if (opts.straggler || opts.compare_mpi) opts.variants.push_back(Variant::kMpi);
  }
  return std::nullopt;
}

// The header lines that explain the straggler / overhead table.
std::vector<std::string> InterleavedPreamble(const Context& ctx) {
  const Options& o = ctx.opts;
  std::vector<std::string> lines;
  std::string names;
  for (const Variant v : o.variants)
    names += std::string(names.empty() ? "" : ", ") + VariantName(v);
  lines.push_back(
      fmt::format(" mode: {}; variants {} interleaved per iteration (each iteration "
                  "runs every variant in turn)",
                  o.straggler ? "straggler" : "overhead (no straggler)", names));
  lines.push_back(
      "   skip = skipring, skip-ahead on; ring = skipring, skip-ahead off (plain "
      "ring); mpi = PMPI_Allreduce");
  if (o.straggler) {
    lines.push_back(
        o.late_rank >= 0
            ? fmt::format(" late arrival: rank {} sleeps {} ms after the barrier before every call "
                          "(all variants; emulated by the benchmark)",
                          o.late_rank, o.late_ms)
            : std::string(" late arrival: none (no --late-rank)"));
    if (o.inject_given) {
      lines.push_back(
          fmt::format(" inject: \"{}\" (inside skipring: skip and ring variants "
                      "only; PMPI_Allreduce cannot be slowed per step)",
                      o.inject));
      if (o.inject.find("arrive") != std::string::npos) {
        lines.push_back(
            "   note: at=arrive delays happen inside skipring_allreduce, after t_enter: "
            "they count in 'after'; --late-rank is the fair way to arrive late");
      }
    } else {
      lines.push_back(" inject: none (no --inject; SKIPRING_INJECT below still applies if set)");
    }
  }
  lines.push_back(
      " per call: barrier, late sleep, t_enter, call, t_exit (steady_clock on every "
      "rank)");
  lines.push_back(
      "   after = max_rank t_exit - max_rank t_enter: the collective's time after the "
      "last rank arrived");
  lines.push_back("   total = max_rank t_exit - min_rank t_enter: first arrival to last return");
  lines.push_back("   p50/p99 = nearest-rank percentiles over iterations");
  lines.push_back(
      "   ratio = p50 after of skip / p50 after of ring (or mpi); < 1: skip-ahead "
      "faster");
  lines.push_back(
      "   skip per iter = skip-ahead decisions (skips) and late pieces of the skip "
      "variant, all ranks, per iteration");
  lines.push_back("   #wrong = wrong output (and changed input) elements per variant, all ranks");
  lines.push_back(ctx.hosts > 1
                      ? fmt::format(" clocks: ranks on {} hosts; offsets to rank 0's clock "
                                    "estimated by ping-pong: times are approximate",
                                    ctx.hosts)
                      : std::string(" clocks: one host, one CLOCK_MONOTONIC: stamps comparable "
                                    "across ranks"));
  return lines;
}

std::vector<std::string> Preamble(const Context& ctx, const std::vector<std::string>& hosts,
                                  const std::vector<int>& pids) {
  const Options& o = ctx.opts;
  std::vector<std::string> lines;
  lines.push_back(fmt::format("skipring_bench: skipring {}.{}.{} all-reduce, {} ranks",
                              SKIPRING_VERSION_MAJOR, SKIPRING_VERSION_MINOR,
                              SKIPRING_VERSION_PATCH, ctx.nranks));
  const std::string step = o.step_factor > 1 ? fmt::format("{}(factor)", o.step_factor)
                                             : fmt::format("{}(bytes)", o.step_bytes);
  lines.push_back(
      fmt::format(" minBytes {} maxBytes {} step: {} warmup iters: {} iters: {} "
                  "validation: {}",
                  o.min_bytes, o.max_bytes, step, o.warmup, o.iters, o.check ? 1 : 0));
  std::string types, ops;
  for (const TypeDesc& t : o.types) types += std::string(types.empty() ? "" : ",") + t.name;
  for (const OpDesc& p : o.ops) ops += std::string(ops.empty() ? "" : ",") + p.name;
  if (o.interleaved()) {
    lines.push_back(fmt::format(" datatypes: {}  ops: {}  out-of-place only", types, ops));
    for (const std::string& line : InterleavedPreamble(ctx)) lines.push_back(line);
  } else {
    lines.push_back(fmt::format(" datatypes: {}  ops: {}  variants: {}  compare: {}", types, ops,
                                o.run_oop && o.run_ip ? "out-of-place,in-place"
                                : o.run_oop           ? "out-of-place"
                                                      : "in-place",
                                o.compare_mpi ? "mpi (PMPI_Allreduce, same buffers)" : "none"));
    lines.push_back(" time: barrier before each iteration, iteration time = slowest rank's call;");
    lines.push_back("       time = mean, p50/p99 = nearest-rank percentiles over iterations");
    lines.push_back(" algbw = size / time, busbw = algbw * 2(n-1)/n");
    if (o.compare_mpi)
      lines.push_back(" speedup = t_mpi_p50 / t_skipring_p50  (> 1: skipring faster)");
  }
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  if (MPI_Get_library_version(version, &len) == MPI_SUCCESS) {
    std::string first_line(version);
    first_line = first_line.substr(0, first_line.find_first_of("\r\n"));
    lines.push_back(" MPI library: " + first_line);
  }
  std::string env;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "SKIPRING_", 9) == 0) env += std::string(env.empty() ? "" : " ") + *e;
  }
  lines.push_back(" environment: " +
                  (env.empty() ? std::string("(no SKIPRING_* variables)") : env));
  // Open MPI settings that change the figures (mpirun sets many OMPI_MCA_* of its own; these
  // are the ones a user picks), so a recorded run names them.
  std::string mca;
  for (const char* name : {"OMPI_MCA_btl_vader_single_copy_mechanism", "OMPI_MCA_pml",
                           "OMPI_MCA_btl", "OMPI_MCA_pml_ucx_tls", "OMPI_MCA_op",
                           "OMPI_MCA_coll"}) {
    if (const char* v = std::getenv(name)) {
      mca += fmt::format("{}{}={}", mca.empty() ? "" : " ", name, v);
    }
  }
  lines.push_back(" MPI settings: " + (mca.empty() ? std::string("(Open MPI defaults)") : mca));
  lines.push_back("");
  lines.push_back(" Using ranks");
  for (size_t r = 0; r < hosts.size(); ++r) {
    lines.push_back(fmt::format("  Rank {:>3} Pid {:>7} on {}", r, pids[r], hosts[r]));
  }
  return lines;
}

int RunBenchmark(int argc, char** argv) {
  int world_rank = 0;
  CheckMpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
  Context ctx;
  if (const auto code = ParseOptions(argc, argv, world_rank, ctx.opts)) return *code;

  CheckMpi(MPI_Comm_dup(MPI_COMM_WORLD, &ctx.comm), "MPI_Comm_dup");
  // Errors come back as codes, so a failing call is reported instead of aborting the job.
  CheckMpi(MPI_Comm_set_errhandler(ctx.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  CheckMpi(MPI_Comm_rank(ctx.comm, &ctx.rank), "MPI_Comm_rank");
  CheckMpi(MPI_Comm_size(ctx.comm, &ctx.nranks), "MPI_Comm_size");
  struct CommGuard {
    MPI_Comm* comm;
    ~CommGuard() {
      if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
    }
  } guard{&ctx.comm};

  // Configuration errors surface here rather than in the first timed call.
  const int init_rc = skipring_init();
  int init_failed = init_rc != MPI_SUCCESS ? 1 : 0;
  if (init_failed) {
    const char* s = skipring_error_string(init_rc);
    fmt::print(stderr, "[rank {}] skipring_init failed: {} (code {})\n", ctx.rank,
               s ? s : "(no description)", init_rc);
  }
  int any_init_failed = 0;
  CheckMpi(PMPI_Allreduce(&init_failed, &any_init_failed, 1, MPI_INT, MPI_MAX, ctx.comm),
           "PMPI_Allreduce");
  if (any_init_failed) return 1;

  if (ctx.opts.late_rank >= ctx.nranks) {
    if (ctx.rank == 0) {
      fmt::print(stderr, "skipring_bench: --late-rank {} is not a rank (the job has {} ranks)\n",
                 ctx.opts.late_rank, ctx.nranks);
    }
    return 2;
  }
  if (ctx.opts.inject_given) {
    // Same spec everywhere, so every rank accepts or refuses it alike; skipring logs why.
    if (skipring_set_inject(ctx.opts.inject.c_str()) != MPI_SUCCESS) {
      if (ctx.rank == 0) {
        fmt::print(stderr, "skipring_bench: --inject: skipring refused \"{}\" (see its message)\n",
                   ctx.opts.inject);
      }
      return 2;
    }
  }
  // Leave no injection plan behind for anything that runs skipring after the benchmark.
  struct InjectGuard {
    bool active;
    ~InjectGuard() {
      if (active) skipring_set_inject(nullptr);
    }
  } inject_guard{ctx.opts.inject_given};

  // Hosts and pids for the header.
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  int host_len = 0;
  CheckMpi(MPI_Get_processor_name(host, &host_len), "MPI_Get_processor_name");
  std::vector<char> all_hosts(static_cast<size_t>(ctx.nranks) * MPI_MAX_PROCESSOR_NAME, 0);
  CheckMpi(MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all_hosts.data(),
                      MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, ctx.comm),
           "MPI_Gather");
  const int pid = static_cast<int>(getpid());
  std::vector<int> pids(static_cast<size_t>(ctx.nranks), 0);
  CheckMpi(MPI_Gather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, 0, ctx.comm), "MPI_Gather");
  std::vector<std::string> hosts;
  if (ctx.rank == 0) {
    for (int r = 0; r < ctx.nranks; ++r) {
      hosts.emplace_back(&all_hosts[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
    }
    std::vector<std::string> distinct = hosts;
    std::sort(distinct.begin(), distinct.end());
    ctx.hosts = static_cast<int>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  }
  CheckMpi(MPI_Bcast(&ctx.hosts, 1, MPI_INT, 0, ctx.comm), "MPI_Bcast");
  // The interleaved modes compare stamps across ranks (see CommonNow).
  if (ctx.opts.interleaved() && ctx.hosts > 1) {
    ctx.clock_offset_s = EstimateClockOffset(ctx.comm, ctx.rank, ctx.nranks);
  }

  Report report(ctx.opts, ctx.rank, ctx.nranks);
  if (!report.OpenFiles(ctx.comm)) return 2;

  const std::vector<uint64_t> sizes = SizeSequence(ctx.opts.min_bytes, ctx.opts.max_bytes,
                                                   ctx.opts.step_factor, ctx.opts.step_bytes);
  // One set of buffers, as large as the largest message any selected type will use.
  uint64_t buffer_bytes = 0;
  for (const TypeDesc& t : ctx.opts.types) {
    for (const uint64_t size : sizes) {
      const uint64_t count = size / t.size;
      if (count <= static_cast<uint64_t>(INT_MAX))
        buffer_bytes = std::max(buffer_bytes, count * t.size);
    }
  }
  // Refuse sizes that cannot fit in this node's memory (allocation would succeed and the
  // first touch would summon the OOM killer instead).
  int alloc_failed = 0;
  MPI_Comm node = MPI_COMM_NULL;
  CheckMpi(MPI_Comm_split_type(ctx.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
           "MPI_Comm_split_type");
  int node_rank = 0;
  int node_size = 1;
  CheckMpi(MPI_Comm_rank(node, &node_rank), "MPI_Comm_rank");
  CheckMpi(MPI_Comm_size(node, &node_size), "MPI_Comm_size");
  CheckMpi(MPI_Comm_free(&node), "MPI_Comm_free");
  const uint64_t per_rank = buffer_bytes * (ctx.opts.check ? 3 : 2);
  const uint64_t available = AvailableMemory();
  if (available > 0 && per_rank * static_cast<uint64_t>(node_size) > available) {
    alloc_failed = 1;
    if (node_rank == 0) {
      fmt::print(stderr,
                 "skipring_bench: {} ranks on {} need {} bytes of buffers each ({} in all) but "
                 "only {} bytes are available; lower --maxbytes\n",
                 node_size, host, per_rank, per_rank * static_cast<uint64_t>(node_size), available);
    }
  }
  try {
    if (alloc_failed) throw std::bad_alloc();
    ctx.send = Buffer(buffer_bytes);
    ctx.recv = Buffer(buffer_bytes);
    if (ctx.opts.check) ctx.expected = Buffer(buffer_bytes);
  } catch (const std::bad_alloc&) {
    if (!alloc_failed) {
      fmt::print(stderr, "[rank {}] cannot allocate {} bytes of buffers\n", ctx.rank, per_rank);
    }
    alloc_failed = 1;
  }
  int any_alloc_failed = 0;
  CheckMpi(PMPI_Allreduce(&alloc_failed, &any_alloc_failed, 1, MPI_INT, MPI_MAX, ctx.comm),
           "PMPI_Allreduce");
  if (any_alloc_failed) return 1;

  report.PrintHeader(Preamble(ctx, hosts, pids));
  std::string failure;
  try {
    bool any_combination = false;
    for (const TypeDesc& type : ctx.opts.types) {
      for (const OpDesc& op : ctx.opts.ops) {
        if (op.integer_only && type.is_float) {
          if (ctx.opts.types.size() == 1 && ctx.opts.ops.size() == 1) {
            report.Comment(fmt::format("skipping {}/{}: the reduction is defined on integers only",
                                       type.name, op.name));
          }
          continue;
        }
        any_combination = true;
        RunType(ctx, report, sizes, type, op);
      }
    }
    if (!any_combination) {
      failure = "no valid datatype/reduction combination selected";
    } else if (report.rows_added() == 0) {
      failure = "no message size was measured (each is under one element or over INT_MAX elements)";
    }
  } catch (const CollectiveFailure& e) {
    failure = e.what();
  }
  const int64_t wrong = report.Finish(failure);
  return failure.empty() && wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace skipring_bench

int main(int argc, char** argv) {
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    std::fprintf(stderr, "skipring_bench: MPI_Init failed\n");
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = 1;
  try {
    code = skipring_bench::RunBenchmark(argc, argv);
  } catch (const std::exception& e) {
    // Only this rank may have failed; the others cannot be waited for safely.
    std::fprintf(stderr, "[rank %d] skipring_bench: fatal error: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  } catch (...) {
    std::fprintf(stderr, "[rank %d] skipring_bench: fatal error (unknown exception)\n", rank);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}
