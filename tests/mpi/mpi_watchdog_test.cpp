// The progress engine's watchdog under mpirun (SKIPRING_TIMEOUT, issue 13). One case per run:
//   --case stop     rank 1 SIGSTOPs itself before an all-reduce (rank 0 sends SIGCONT later):
//                   the others return MPI_ERR_OTHER within the timeout, and their error names
//                   rank 1 (its successor: "rank 1 has not entered all-reduce #S");
//   --case skip     rank 1 calls one all-reduce fewer: the others time out the same way;
//   --case counts   count 0 on rank 1, then a NULL send buffer on rank 1 (an argument error
//                   there alone), each on its own communicator: every rank that does not finish
//                   returns an error within the timeout, none hangs, rank 1's successor names it;
//   --case counts-differ  a different count on every rank: a receive shorter than its message
//                   is a protocol error where it happens (the internal communicator returns
//                   MPI error codes), the others time out; every rank returns an error;
//   --case setup    rank 1 joins the first all-reduce on a new communicator only after the
//                   others timed out in its setup (the agreement all-reduce): they return
//                   MPI_ERR_OTHER saying which setup step waited; rank 1 then times out in
//                   the next setup step; nothing hangs;
//   --case healthy  all-reduces that must succeed, exact, with no warning (run it with the
//                   default timeout, or with a short one and an injected slow rank: a slow
//                   collective that keeps moving never warns).
// --algo NAME (default skipring: the ring with skip-ahead, run by the progress engine): with
// rd, the direct recursive doubling (runtime/rd_direct.cpp: auto's pick for small sizes, no
// engine), whose waits are watched the same way; there the ranks that wait for the victim name
// it ("rank 1 has not answered") and the others name the rank they wait for.
// With SKIPRING_ON_TIMEOUT=abort (--case skip) the first rank to time out ends the job.
// After a timeout the communicator is unusable: the next call returns an error at once and
// says why. Each rank's stderr goes to a file the rank reads back to check its own log (and
// copies to the real stderr at the end). Prints "N passed, M failed".
#include <mpi.h>
#include <signal.h>
#include <skipring/skipring.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/mpi/mpi_test_util.h"

namespace {
using mpitest::check;
using mpitest::g_rank;
using mpitest::g_size;

constexpr int kVictim = 1;
double g_timeout = 2;             // SKIPRING_TIMEOUT of the run
std::string g_algo = "skipring";  // --algo

// This rank's stderr, redirected to a file (skipring logs there). The file is unlinked at once
// (nothing is left behind even when the job is aborted) and read back through its descriptor.
struct Capture {
  int fd = -1;           // the file, for reading
  int saved = -1;        // the real stderr
  size_t read_from = 0;  // log() returns what came after the last mark()

  void start() {
    char name[] = "/tmp/skipring-watchdog-XXXXXX";
    fd = mkstemp(name);
    if (fd < 0) return;
    unlink(name);
    std::fflush(stderr);
    saved = dup(2);
    dup2(fd, 2);
  }
  std::string all() const {
    std::fflush(stderr);
    std::string text;
    if (fd < 0) return text;
    char buf[4096];
    for (off_t at = 0;;) {
      const ssize_t got = pread(fd, buf, sizeof(buf), at);
      if (got <= 0) break;
      text.append(buf, static_cast<size_t>(got));
      at += got;
    }
    return text;
  }
  std::string log() const { return all().substr(std::min(read_from, all().size())); }
  void mark() { read_from = all().size(); }
  // Restores stderr and copies the log to it.
  void stop() {
    if (saved < 0) return;
    const std::string text = all();
    dup2(saved, 2);
    close(saved);
    close(fd);
    saved = fd = -1;
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  }
};
Capture g_capture;

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// The line of `text` that contains `what` (empty when none).
std::string line_with(const std::string& text, const std::string& what) {
  const size_t at = text.find(what);
  if (at == std::string::npos) return "";
  const size_t b = text.rfind('\n', at);
  const size_t e = text.find('\n', at);
  return text.substr(b == std::string::npos ? 0 : b + 1,
                     e == std::string::npos ? std::string::npos : e - (b + 1));
}

// Whether `text` names `rank` as "rank R" or in a list "rank(s) A,B,...".
bool names_rank(const std::string& text, int rank) {
  const std::string r = std::to_string(rank);
  if (contains(text, "rank " + r + " ") || contains(text, "rank " + r + ")")) return true;
  for (size_t at = text.find("rank(s) "); at != std::string::npos;
       at = text.find("rank(s) ", at + 1)) {
    size_t i = at + 8;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) != 0)) {
      size_t e = i;
      while (e < text.size() && std::isdigit(static_cast<unsigned char>(text[e])) != 0) ++e;
      if (text.compare(i, e - i, r) == 0) return true;
      i = e < text.size() && text[e] == ',' ? e + 1 : text.size();
    }
  }
  return false;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// An all-reduce of `count` int64 (values depend on rank and call), checked against PMPI when
// it succeeds and `verify`; returns the error code.
int allreduce(MPI_Comm comm, int count, int call, bool verify, bool null_send = false) {
  std::vector<int64_t> in(static_cast<size_t>(count) + 1), out(in.size(), -1), ref(in.size());
  for (int i = 0; i < count; ++i) in[i] = (i * 7919 + g_rank * 104729 + call) % 1000003;
  const int rc = skipring_allreduce(null_send ? nullptr : in.data(), out.data(), count, MPI_INT64_T,
                                    MPI_SUM, comm);
  if (verify && rc == MPI_SUCCESS) {
    PMPI_Allreduce(in.data(), ref.data(), count, MPI_INT64_T, MPI_SUM, comm);
    out.resize(count);
    ref.resize(count);
    check(out == ref, "all-reduce " + std::to_string(call) + " equals PMPI_Allreduce");
  }
  return rc;
}

// The successor of kVictim in the ring (identity order on one host without SKIPRING_HOST_MAP).
int victim_successor() { return (kVictim + 1) % g_size; }

// What the ranks waiting for kVictim must see after all-reduce #seq timed out on them (rc,
// elapsed: that call's), then the refusal of the next call.
void expect_timed_out(MPI_Comm comm, int rc, double elapsed, int seq) {
  const std::string log = g_capture.log();
  const std::string where = " (rank " + std::to_string(g_rank) + ")";
  check(rc == MPI_ERR_OTHER,
        "the timed-out all-reduce returns MPI_ERR_OTHER, got " + std::to_string(rc) + where);
  check(elapsed >= g_timeout * 0.9 && elapsed < g_timeout + 3,
        "it returns after about SKIPRING_TIMEOUT: " + std::to_string(elapsed) + " s" + where);
  const std::string err = line_with(log, "] error: watchdog: no progress for");
  check(!err.empty(), "the watchdog logs the timeout" + where);
  check(contains(err, "all-reduce #" + std::to_string(seq)),
        "the error names the collective (all-reduce #" + std::to_string(seq) + "): " + err);
  check(contains(log, "] warning: watchdog: no progress for"), "a warning came first" + where);
  if (g_algo == "rd") {
    // Each rank names the partner it waits for; the victim's partners name the victim.
    check(contains(err, "(recursive doubling), round ") && contains(err, " has not answered"),
          "the error names the round and the rank waited for: " + err);
    // Rank 0 is the victim's partner in the first round (virtual ranks 0 and 1 with 4 ranks).
    if (g_rank == 0) {
      check(contains(err, "round 1: rank " + std::to_string(kVictim) + " has not answered"),
            "rank 0, the victim's first partner, names it: " + err);
    }
  } else if (g_rank == victim_successor()) {
    check(contains(err, "rank " + std::to_string(kVictim) + " has not entered all-reduce #" +
                            std::to_string(seq)),
          "the victim's successor says the victim has not entered: " + err);
  } else {
    // The others see the victim's input missing from their chunk (with the inputs held up
    // behind it) or its pieces absent.
    check(names_rank(err, kVictim), "the error names rank " + std::to_string(kVictim) + ": " + err);
  }
  check(contains(log, "allreduce seq " + std::to_string(seq) + " failed"),
        "the communicator reports the failed call" + where);
  // The communicator is broken now: the next call fails at once and says why.
  g_capture.mark();
  const double t0 = now_s();
  const int rc2 = allreduce(comm, 64, 99, false);
  check(rc2 != MPI_SUCCESS && now_s() - t0 < 1, "a later call fails at once" + where);
  check(contains(g_capture.log(),
                 "unusable since allreduce seq " + std::to_string(seq) + " timed out"),
        "the later call's error mentions the timeout" + where);
}

constexpr int kCount = 1 << 12;  // 32 KiB of int64: every chunk has pieces

void case_stop() {
  // Rank 0 resumes the victim once the others have timed out.
  std::vector<int> pids(g_size);
  const int me = static_cast<int>(getpid());
  PMPI_Allgather(&me, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::thread resumer;
  if (g_rank == 0) {
    const pid_t victim = pids[kVictim];
    resumer = std::thread([victim] {
      std::this_thread::sleep_for(std::chrono::duration<double>(g_timeout + 1.5));
      kill(victim, SIGCONT);
    });
  }
  PMPI_Barrier(MPI_COMM_WORLD);
  g_capture.mark();
  if (g_rank == kVictim) raise(SIGSTOP);
  const double t0 = now_s();
  const int rc = allreduce(MPI_COMM_WORLD, kCount, 2, false);
  const double elapsed = now_s() - t0;
  if (g_rank == kVictim) {
    // Resumed after the others gave up: it cannot finish either, and must not hang.
    check(rc != MPI_SUCCESS, "the stopped rank's all-reduce fails after it resumes");
    check(elapsed < g_timeout + 3, "... within the timeout: " + std::to_string(elapsed) + " s");
  } else {
    expect_timed_out(MPI_COMM_WORLD, rc, elapsed, 2);
  }
  if (resumer.joinable()) resumer.join();
}

void case_skip() {
  g_capture.mark();
  if (g_rank == kVictim) return;  // one all-reduce fewer
  const double t0 = now_s();
  const int rc = allreduce(MPI_COMM_WORLD, kCount, 2, false);
  expect_timed_out(MPI_COMM_WORLD, rc, now_s() - t0, 2);
}

// Runs one all-reduce with this rank's `count` (and a NULL send buffer on the victim when
// `null_send`) on a fresh communicator (after a good one): every rank returns within the
// timeout; a rank that fails says why in its log.
// `one_victim`: only kVictim differs (its successor, or with rd its first partner rank 0,
// must name it).
// Returns how many ranks failed.
void case_setup() {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  g_capture.mark();
  if (g_rank == kVictim) {
    std::this_thread::sleep_for(std::chrono::duration<double>(g_timeout + 1));
  }
  const double t0 = now_s();
  const int rc = allreduce(comm, 64, 1, false);
  const double elapsed = now_s() - t0;
  const std::string where = " (rank " + std::to_string(g_rank) + ")";
  const std::string log = g_capture.log();
  check(rc == MPI_ERR_OTHER,
        "the setup's timeout returns MPI_ERR_OTHER, got " + std::to_string(rc) + where);
  check(elapsed >= g_timeout * 0.9 && elapsed < g_timeout + 3,
        "it returns after about SKIPRING_TIMEOUT: " + std::to_string(elapsed) + " s" + where);
  const std::string err = line_with(log, "] error: watchdog: no progress for");
  if (g_rank != kVictim) {
    check(contains(err, "communicator setup: the agreement all-reduce: some rank has not joined"),
          "the error names the setup step: " + err);
  } else {
    check(contains(err, "communicator setup:"), "the late rank's error names a setup step: " + err);
  }
  // Not freed: a setup collective left pending on it (MPI lets nobody cancel one) would be
  // progressed on a freed communicator (Open MPI 4.1's libnbc then crashes).
}

int mismatched(int count, const char* what, bool null_send = false, bool one_victim = true) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  check(allreduce(comm, kCount, 0, true) == MPI_SUCCESS, std::string(what) + ": warm-up");
  PMPI_Barrier(comm);
  g_capture.mark();
  const double t0 = now_s();
  const int rc = allreduce(comm, count, 1, false, null_send && g_rank == kVictim);
  const double elapsed = now_s() - t0;
  check(elapsed < g_timeout + 3, std::string(what) + ": returns within the timeout (" +
                                     std::to_string(elapsed) + " s, rank " +
                                     std::to_string(g_rank) + ")");
  if (rc != MPI_SUCCESS && !(null_send && g_rank == kVictim)) {
    check(contains(g_capture.log(), "allreduce seq 1 failed"),
          std::string(what) + ": the failing rank logs the error (rank " + std::to_string(g_rank) +
              ")");
  }
  if (one_victim && g_algo != "rd" && g_rank == victim_successor() && rc != MPI_SUCCESS) {
    check(contains(g_capture.log(), "rank " + std::to_string(kVictim) + " has not entered"),
          std::string(what) + ": the victim's successor names it");
  }
  if (one_victim && g_algo == "rd" && g_rank == 0 && rc != MPI_SUCCESS) {
    check(
        contains(g_capture.log(), "round 1: rank " + std::to_string(kVictim) + " has not answered"),
        std::string(what) + ": the victim's first partner names it");
  }
  int failed = rc != MPI_SUCCESS ? 1 : 0, failures = 0;
  PMPI_Allreduce(&failed, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  check(failures >= 1, std::string(what) + ": the mismatch is an error somewhere");
  MPI_Comm_free(&comm);
  return failures;
}

void case_counts() {
  // Count 0 on the victim: it has nothing to do and returns; the others wait for it.
  mismatched(g_rank == kVictim ? 0 : kCount, "count 0 on one rank");
  // An argument error on the victim alone (NULL send buffer): it returns MPI_ERR_BUFFER at
  // once; the others wait for it, then time out naming it.
  mismatched(kCount, "NULL send buffer on one rank", true);
}

// A different count on every rank: a receive shorter than the message it matches is
// MPI_ERR_TRUNCATE on the internal communicator (MPI_ERRORS_RETURN: an error code, not the end
// of the job); ranks whose receives fit wait for the failed ones and time out.
void case_counts_differ() {
  // Every rank fails: a truncated receive is a protocol error, a rank whose receives all
  // fitted waits for the others and times out.
  const int failures = mismatched(kCount + 37 * g_rank, "different counts", false, false);
  check(failures == g_size, "different counts: every rank returns an error, " +
                                std::to_string(failures) + " of " + std::to_string(g_size));
}

void case_healthy(int iters) {
  g_capture.mark();
  double longest = 0;
  for (int it = 0; it < iters; ++it) {
    const double t0 = now_s();
    check(allreduce(MPI_COMM_WORLD, kCount, 2 + it, true) == MPI_SUCCESS, "healthy all-reduce");
    longest = std::max(longest, now_s() - t0);
  }
  check(!contains(g_capture.log(), "] warning:") && !contains(g_capture.log(), "] error:"),
        "no warning or error in a healthy run (rank " + std::to_string(g_rank) + ")");
  const char* expect = std::getenv("WATCHDOG_TEST_MIN_S");
  if (expect != nullptr && g_rank == 0) {
    // A slow run must be slower than the first warning point, or it proves nothing.
    check(longest > std::atof(expect),
          "the slow collective took " + std::to_string(longest) + " s > " + expect + " s");
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  std::string which;
  int iters = 4;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--case") == 0) which = argv[++i];
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--algo") == 0) g_algo = argv[++i];
  }
  if (const char* t = std::getenv("SKIPRING_TIMEOUT")) g_timeout = std::atof(t);
  // With SKIPRING_ON_TIMEOUT=abort the job ends inside the call: the log must reach mpirun.
  const char* on_timeout = std::getenv("SKIPRING_ON_TIMEOUT");
  const bool aborting = on_timeout != nullptr && std::strcmp(on_timeout, "abort") == 0;
  if (!aborting) g_capture.start();
  check(skipring_set_algo(g_algo.c_str()) == MPI_SUCCESS, "skipring_set_algo " + g_algo);
  // Warm-up: the communicator's setup (cost measurement) with every rank present.
  for (int call = 0; call < 2; ++call) {
    check(allreduce(MPI_COMM_WORLD, kCount, call, true) == MPI_SUCCESS, "warm-up all-reduce");
  }
  if (which == "stop") {
    case_stop();
  } else if (which == "skip") {
    case_skip();
    // Not reached with SKIPRING_ON_TIMEOUT=abort.
    if (aborting) check(false, "SKIPRING_ON_TIMEOUT=abort ends the job at the timeout");
  } else if (which == "counts") {
    case_counts();
  } else if (which == "counts-differ") {
    case_counts_differ();
  } else if (which == "setup") {
    case_setup();
  } else if (which == "healthy") {
    case_healthy(iters);
  } else {
    check(false, "--case stop|skip|counts|healthy");
  }
  g_capture.stop();
  const int rc = mpitest::finish();
  MPI_Finalize();
  return rc;
}
