// TraceWriter: streams Chrome trace events of each collective to a per-rank JSON file.
#include "straggler/trace.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

namespace skipring {
namespace {

// JSON has no NaN/inf: non-finite values are written as 0.
double finite(double v) { return std::isfinite(v) ? v : 0.0; }

// Microseconds with nanosecond resolution.
std::string us(double seconds) { return fmt::format("{:.3f}", finite(seconds * 1e6)); }

std::string secs(double seconds) { return fmt::format("{:.9g}", finite(seconds)); }

const char* phase_tag(Phase p) { return p == Phase::kReduceScatter ? "RS" : "AG"; }

}  // namespace

std::FILE* open_rank_file(const std::string& dir, const std::string& name, const char* what,
                          std::string* path, std::string* error) {
  namespace fs = std::filesystem;
  const std::string where = dir.empty() ? std::string(".") : dir;
  std::error_code ec;
  fs::create_directories(where, ec);
  if (ec) {
    if (error != nullptr) {
      *error = fmt::format("{}: cannot create directory '{}': {}", what, where, ec.message());
    }
    return nullptr;
  }
  *path = (fs::path(where) / name).string();
  std::FILE* file = std::fopen(path->c_str(), "w");
  if (file == nullptr && error != nullptr) {
    *error = fmt::format("{}: cannot open '{}' for writing: {}", what, *path, std::strerror(errno));
  }
  return file;
}

Status TraceWriter::open(const std::string& dir, int rank, std::unique_ptr<TraceWriter>* out,
                         std::string* error) {
  std::string path;
  std::FILE* file =
      open_rank_file(dir, fmt::format("skipring-trace-rank{}.json", rank), "trace", &path, error);
  if (file == nullptr) return Status::kErrConfig;
  std::unique_ptr<TraceWriter> writer(new TraceWriter(file, std::move(path), rank));
  // Header and metadata naming the process and its two threads.
  std::string head = "{\"traceEvents\":[\n";
  std::fwrite(head.data(), 1, head.size(), file);
  writer->event(fmt::format(
      R"({{"name":"process_name","ph":"M","pid":{},"tid":0,"args":{{"name":"rank {}"}}}})", rank,
      rank));
  writer->event(fmt::format(
      R"({{"name":"thread_name","ph":"M","pid":{},"tid":0,"args":{{"name":"collectives"}}}})",
      rank));
  writer->event(fmt::format(
      R"({{"name":"thread_name","ph":"M","pid":{},"tid":1,"args":{{"name":"steps"}}}})", rank));
  if (std::fflush(file) != 0 || std::ferror(file)) {
    if (error != nullptr) {
      *error = fmt::format("trace: cannot write '{}': {}", writer->path_, std::strerror(errno));
    }
    writer->failed_ = true;
    return Status::kErrConfig;  // the destructor closes the file
  }
  *out = std::move(writer);
  return Status::kOk;
}

TraceWriter::TraceWriter(std::FILE* file, std::string path, int rank)
    : file_(file), path_(std::move(path)), rank_(rank) {}

TraceWriter::~TraceWriter() { close(); }

void TraceWriter::event(const std::string& json) {
  if (file_ == nullptr || failed_) return;
  const char* sep = events_ == 0 ? "" : ",\n";
  if (std::fputs(sep, file_) < 0 ||
      std::fwrite(json.data(), 1, json.size(), file_) != json.size()) {
    failed_ = true;
    return;
  }
  ++events_;
}

void TraceWriter::add(const CollectiveStats& stats) {
  if (file_ == nullptr || failed_) return;
  const int pid = rank_;
  event(fmt::format(R"({{"name":"allreduce seq={}","ph":"X","pid":{},"tid":0,"ts":{},"dur":{},)"
                    R"("args":{{"bytes":{},"skips":{},"late":{},"direct_segments":{},"wait_s":{},)"
                    R"("slowest_neighbour":{}}}}})",
                    stats.seq, pid, us(stats.start),
                    us(stats.end > stats.start ? stats.end - stats.start : 0.0), stats.bytes,
                    stats.skips, stats.late_pieces, stats.direct_segments, secs(stats.wait_s),
                    stats.slowest_neighbour));
  for (const StepRecord& s : stats.steps) {
    if (s.t_end > s.t_start) {
      event(fmt::format(
          R"({{"name":"{} step {}","ph":"X","pid":{},"tid":1,"ts":{},"dur":{},)"
          R"("args":{{"chunk":{},"from":{},"to":{},"segments":{},"wait_us":{},"reduce_us":{},)"
          R"("transfer_us":{},"skips":{},"late_pieces":{}}}}})",
          phase_tag(s.phase), s.step, pid, us(s.t_start), us(s.t_end - s.t_start), s.chunk, s.from,
          s.to, s.segments, us(s.wait_s), us(s.reduce_s), us(s.transfer_s), s.skips,
          s.late_pieces));
    }
    if (s.skips > 0) {
      event(fmt::format(R"({{"name":"skip","ph":"i","s":"t","pid":{},"tid":1,"ts":{},)"
                        R"("args":{{"step":{},"phase":"{}","skips":{},"late_pieces":{}}}}})",
                        pid, us(s.t_start), s.step, phase_tag(s.phase), s.skips, s.late_pieces));
    }
  }
  if (!failed_ && std::fflush(file_) != 0) failed_ = true;
}

Status TraceWriter::close() {
  if (file_ == nullptr) return failed_ ? Status::kErrInternal : Status::kOk;
  static const char kTail[] = "\n]}\n";
  if (std::fputs(kTail, file_) < 0) failed_ = true;
  if (std::fclose(file_) != 0) failed_ = true;
  file_ = nullptr;
  return failed_ ? Status::kErrInternal : Status::kOk;
}

}  // namespace skipring
