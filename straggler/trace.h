// Per-rank Chrome trace writer (the {"traceEvents":[...]} JSON that chrome://tracing and Perfetto
// open): one complete event per collective, one per ring step, an instant event per skip-ahead.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/step_stats.h"

namespace skipring {

// Creates `dir` (and its parents) if missing and opens <dir>/<name> for writing. On failure
// returns null and sets *error to a message starting with `what` and naming the path.
std::FILE* open_rank_file(const std::string& dir, const std::string& name, const char* what,
                          std::string* path, std::string* error);

// Events are streamed to the file and flushed after every collective, so a crashed run still
// leaves all but the closing bracket. Not thread-safe.
//
// Layout: pid = rank; tid 0 carries the collectives, tid 1 the steps and skip instants. Metadata
// events ("ph":"M") name the process "rank <r>" and the threads "collectives" and "steps". Times
// are the clock's absolute time in microseconds (steady_clock: one time base for every rank of
// a host, so the per-rank files line up when loaded together; MPI_Wtime under SimGrid).
class TraceWriter {
 public:
  // Opens <dir>/skipring-trace-rank<rank>.json for writing, creating `dir` (and its parents) if
  // missing. On failure returns Status::kErrConfig and sets *error to a message naming the path.
  static Status open(const std::string& dir, int rank, std::unique_ptr<TraceWriter>* out,
                     std::string* error);

  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Appends the events of one collective:
  //  - "allreduce seq=N", "ph":"X", tid 0, from start to end; args bytes, skips, late, wait_s,
  //    slowest_neighbour;
  //  - "RS step s" / "AG step s", "ph":"X", tid 1, from t_start to t_end (steps with
  //    t_end <= t_start are left out); args chunk, from, to, segments, wait_us, reduce_us,
  //    transfer_us, skips, late_pieces;
  //  - "skip", "ph":"i" (thread scope), tid 1, at t_start of each step with skips > 0; args step,
  //    phase ("RS"/"AG"), skips, late_pieces.
  // No-op after close() or after a write error.
  void add(const CollectiveStats& stats);

  // Writes the closing bracket and closes the file; the file is valid JSON afterwards even if
  // add() was never called. Idempotent. Returns kErrInternal if any write failed.
  Status close();

  const std::string& path() const { return path_; }
  // Number of trace events written so far (metadata included).
  size_t events() const { return events_; }

 private:
  TraceWriter(std::FILE* file, std::string path, int rank);
  void event(const std::string& json);

  std::FILE* file_;
  std::string path_;
  int rank_;
  size_t events_ = 0;
  bool failed_ = false;
};

}  // namespace skipring
