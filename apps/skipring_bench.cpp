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

struct Row {
  uint64_t bytes = 0;
  uint64_t count = 0;
  std::string type;
  std::string op;
  std::optional<bool> native;
  std::optional<ModeResult> oop;
  std::optional<ModeResult> ip;
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
    const size_t group = GroupWidth();
    std::string labels = fmt::format("#{:>{}}", "", kPrefixWidth - 1);
    if (opts_.run_oop) labels += fmt::format("{:^{}}", "out-of-place", group);
    if (opts_.run_ip) labels += fmt::format("{:^{}}", "in-place", group);
    fmt::print("{}\n", TrimRight(labels));
    std::string titles =
        fmt::format("#{:>11} {:>13} {:>9} {:>7}", "size", "count", "type", "redop");
    std::string units = fmt::format("#{:>11} {:>13} {:>9} {:>7}", "(B)", "(elements)", "", "");
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
    std::string line =
        fmt::format("{:>12} {:>13} {:>9} {:>7}", row.bytes, row.count, row.type, row.op);
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

  int64_t rows_added() const { return rows_added_; }

  // Prints the summary, writes the JSON file; returns the number of wrong values (skipring and
  // MPI reference together).
  int64_t Finish(const std::string& failure) {
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
      if (json_.is_open()) {
        json_ << rows_.dump(2) << "\n";
        json_.close();
        if (!json_) fmt::print(stderr, "skipring_bench: writing '{}' failed\n", opts_.json_path);
      }
      if (csv_.is_open()) csv_.close();
    }
    return wrong_ + mpi_wrong_;
  }

 private:
  static constexpr int kPrefixWidth = 44;  // "size count type redop" columns

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
  for (int it = 0; it < iters; ++it) {
    prepare(it);
    CheckMpi(MPI_Barrier(ctx.comm), "MPI_Barrier");
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = call();
    const auto t1 = std::chrono::steady_clock::now();
    local_s[static_cast<size_t>(it)] = std::chrono::duration<double>(t1 - t0).count();
    if (rc == MPI_SUCCESS && impl == Impl::kSkipring) {
      skipring_stats_t st{};
      if (skipring_last_stats(ctx.comm, &st) == MPI_SUCCESS) {
        stat_counts[0] += st.skips;
        stat_counts[1] += st.late_pieces;
        wait_s += st.wait_s;
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
    Row row;
    row.bytes = bytes;
    row.count = count;
    row.type = type.name;
    row.op = op.name;
    row.native = native;
    if (ctx.opts.run_oop) row.oop = RunMode(ctx, pattern, type, op, count, false);
    if (ctx.opts.run_ip) row.ip = RunMode(ctx, pattern, type, op, count, true);
    report.AddRow(row);
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
  app.add_option("--csv", opts.csv_path, "write every row to FILE as CSV (rank 0)")
      ->type_name("FILE");
  auto* ip = app.add_flag("--inplace-only", inplace_only, "run only the in-place variant");
  auto* oop =
      app.add_flag("--outofplace-only", outofplace_only, "run only the out-of-place variant");
  ip->excludes(oop);

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
  opts.compare_mpi = compare == "mpi";
  opts.run_oop = !inplace_only;
  opts.run_ip = !outofplace_only;
  return std::nullopt;
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
