// Per-rank message log (SKIPRING_MSGLOG): one tab-separated line per message the progress engine
// completed (posted when, completed when, peer, tag, bytes) and per collective it ran, so that a
// straggler experiment can be read message by message: which link carried what, when, and what
// waited for what (scripts/msglog_summary.py summarises and cross-checks the files).
#pragma once

#include <cstddef>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"

namespace skipring {

// File <dir>/skipring-msglog-rank<R>.tsv. After a comment line naming the rank and a header
// line, each line is
//   kind  t_post  t_done  engine  peer  tag  bytes
// kind: S (send) or R (receive) of a message: t_post when the engine posted it, t_done when it
// completed; peer in the collective's communicator (-1 when the transport does not say); tag
// as the collective gave it; bytes of payload (sent, or received); B / E: a collective began /
// ended at t_done (t_post = 0; bytes: 0 on success, 1 on an error). engine numbers the progress
// engines of the process (one per communicator), so lines of collectives on different
// communicators can be told apart. Times are seconds of the engine's clock (steady_clock,
// the same time base for all ranks of a host; MPI_Wtime under SimGrid). Thread-safe; lines are
// buffered and the file is flushed after every collective.
class MessageLog {
 public:
  // Creates `dir` if missing. On failure returns kErrConfig and a message naming the path.
  static Status open(const std::string& dir, int rank, std::unique_ptr<MessageLog>* out,
                     std::string* error);
  ~MessageLog();
  MessageLog(const MessageLog&) = delete;
  MessageLog& operator=(const MessageLog&) = delete;

  void message(bool is_recv, double t_post, double t_done, int engine, int peer, int tag,
               size_t bytes);
  void collective(bool begin, double t, int engine, bool failed = false);
  // Flushes and closes; idempotent. kErrInternal if any write failed.
  Status close();
  const std::string& path() const { return path_; }

 private:
  MessageLog(std::FILE* file, std::string path);
  void line(const char* text, int len);

  std::mutex mu_;
  std::FILE* file_;
  std::string path_;
  bool failed_ = false;
};

// The process's log, null when SKIPRING_MSGLOG is not set (runtime/api_state.cpp opens it at init
// and closes it at finalize). Engines read it when a collective begins.
MessageLog* message_log();
void set_message_log(MessageLog* log);

}  // namespace skipring
