// MessageLog: the per-rank message log of SKIPRING_MSGLOG.
#include "straggler/msglog.h"

#include <fmt/format.h>

#include <atomic>
#include <utility>

#include "straggler/trace.h"

namespace skipring {
namespace {
std::atomic<MessageLog*> g_log{nullptr};
}  // namespace

MessageLog* message_log() { return g_log.load(std::memory_order_acquire); }
void set_message_log(MessageLog* log) { g_log.store(log, std::memory_order_release); }

Status MessageLog::open(const std::string& dir, int rank, std::unique_ptr<MessageLog>* out,
                        std::string* error) {
  std::string path;
  std::FILE* file =
      open_rank_file(dir, fmt::format("skipring-msglog-rank{}.tsv", rank), "msglog", &path, error);
  if (file == nullptr) return Status::kErrConfig;
  std::unique_ptr<MessageLog> log(new MessageLog(file, std::move(path)));
  const std::string head = fmt::format(
      "# skipring message log, rank {}\nkind\tt_post\tt_done\tengine\tpeer\ttag\tbytes\n", rank);
  log->line(head.data(), static_cast<int>(head.size()));
  *out = std::move(log);
  return Status::kOk;
}

MessageLog::MessageLog(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
}

MessageLog::~MessageLog() { (void)close(); }

void MessageLog::line(const char* text, int len) {
  if (file_ == nullptr || len <= 0) return;
  if (std::fwrite(text, 1, static_cast<size_t>(len), file_) != static_cast<size_t>(len)) {
    failed_ = true;
  }
}

void MessageLog::message(bool is_recv, double t_post, double t_done, int engine, int peer, int tag,
                         size_t bytes) {
  char buf[160];
  const int len = std::snprintf(buf, sizeof buf, "%c\t%.9f\t%.9f\t%d\t%d\t%d\t%zu\n",
                                is_recv ? 'R' : 'S', t_post, t_done, engine, peer, tag, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  line(buf, len);
}

void MessageLog::collective(bool begin, double t, int engine, bool failed) {
  char buf[96];
  const int len = std::snprintf(buf, sizeof buf, "%c\t0\t%.9f\t%d\t-1\t-1\t%d\n", begin ? 'B' : 'E',
                                t, engine, failed ? 1 : 0);
  std::lock_guard<std::mutex> lock(mu_);
  line(buf, len);
  if (!begin && file_ != nullptr && std::fflush(file_) != 0) failed_ = true;
}

Status MessageLog::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ == nullptr) return failed_ ? Status::kErrInternal : Status::kOk;
  if (std::fflush(file_) != 0 || std::ferror(file_)) failed_ = true;
  if (std::fclose(file_) != 0) failed_ = true;
  file_ = nullptr;
  return failed_ ? Status::kErrInternal : Status::kOk;
}

}  // namespace skipring
