// Agreement before trust and cheap communicators (issue 13), 2 ranks or more:
//   --mismatch VAR=A,B   rank 0 runs with VAR=A, the others with VAR=B (set before MPI_Init):
//                        the first all-reduce fails on every rank with MPI_ERR_ARG and each
//                        rank's log names VAR and both values with their ranks; a second try
//                        fails the same way (no hang).
//   --dups N             N x (MPI_Comm_dup, all-reduce, check, MPI_Comm_free); rank 0's info
//                        log must show exactly --expect-measured cost-model measurements.
//   --local-errors       count < 0, an op the type lacks, and (SKIPRING_ALGO=rd) more than
//                        2 GiB each fail locally, then an all-reduce on the same communicator
//                        succeeds.
//   --check-mismatch     (SKIPRING_CHECK=1) rank 0 passes another count: every rank gets
//                        MPI_ERR_COUNT naming the ranks, then a matching call succeeds.
// Each rank captures its own stderr to check what skipring logged.
#include <mpi.h>
#include <skipring/skipring.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/mpi/mpi_test_util.h"

using mpitest::check;
using mpitest::g_rank;
using mpitest::g_size;

namespace {

// Redirects fd 2 to a temporary file until text(), which restores it, echoes what was
// captured to the real stderr and returns it.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    char name[] = "/tmp/skipring_agree_XXXXXX";
    fd_ = mkstemp(name);
    if (fd_ >= 0) {
      unlink(name);
      saved_ = dup(2);
      dup2(fd_, 2);
    }
  }
  std::string text() {
    if (fd_ < 0) return std::string();
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    std::string out;
    char buf[4096];
    lseek(fd_, 0, SEEK_SET);
    for (ssize_t n; (n = read(fd_, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
    close(fd_);
    fd_ = -1;
    std::fputs(out.c_str(), stderr);
    return out;
  }
  ~StderrCapture() { text(); }

 private:
  int fd_ = -1, saved_ = -1;
};

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

int launcher_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    if (const char* s = std::getenv(v)) return std::atoi(s);
  }
  return -1;
}

bool allreduce_ok(MPI_Comm comm, int count) {
  std::vector<int64_t> in(static_cast<size_t>(count)), out(static_cast<size_t>(count), -1);
  for (int i = 0; i < count; ++i) in[i] = (int64_t{1} << 40) + g_rank * 7 + i;
  if (skipring_allreduce(in.data(), out.data(), count, MPI_INT64_T, MPI_SUM, comm) != MPI_SUCCESS) {
    return false;
  }
  for (int i = 0; i < count; ++i) {
    const int64_t want = g_size * ((int64_t{1} << 40) + i) + 7 * (g_size * (g_size - 1) / 2);
    if (out[i] != want) return false;
  }
  return true;
}

void mismatch(const std::string& var) {
  StderrCapture cap;
  uint64_t in = 1, out = 0;
  const int rc1 = skipring_allreduce(&in, &out, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  const int rc2 = skipring_allreduce(&in, &out, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  const std::string log = cap.text();
  check(rc1 == MPI_ERR_ARG,
        "first all-reduce fails with MPI_ERR_ARG (got " + std::to_string(rc1) + ")");
  check(rc2 == MPI_ERR_ARG, "second all-reduce fails too (got " + std::to_string(rc2) + ")");
  check(count_of(log, var + " differs") >= 2, "the log names " + var + " (twice: two tries)");
  check(log.find("on rank 0") != std::string::npos, "the log names rank 0");
  check(log.find(g_size > 2 ? "on ranks 1," : "on rank 1") != std::string::npos,
        "the log names the other ranks");
}

void dups(int n, int expect_measured) {
  StderrCapture cap;
  for (int i = 0; i < n; ++i) {
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    check(allreduce_ok(c, 1 + i % 3), "all-reduce on dup " + std::to_string(i));
    MPI_Comm_free(&c);
  }
  // A split communicator of the same shape (every rank in one part) reuses them too.
  MPI_Comm s;
  MPI_Comm_split(MPI_COMM_WORLD, 0, g_size - g_rank, &s);
  check(allreduce_ok(s, 5), "all-reduce on a split communicator");
  MPI_Comm_free(&s);
  const std::string log = cap.text();
  if (g_rank == 0) {
    const int measured = count_of(log, "cost model (measured)");
    check(measured == expect_measured, "cost model measured " + std::to_string(measured) +
                                           " times, expected " + std::to_string(expect_measured));
  }
}

void local_errors() {
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  check(allreduce_ok(c, 4), "first all-reduce");
  int32_t x = 1, y = 0;
  check(skipring_allreduce(&x, &y, -1, MPI_INT32_T, MPI_SUM, c) == MPI_ERR_COUNT, "count < 0");
  check(allreduce_ok(c, 4), "all-reduce after count < 0");
  float f = 1, g = 0;
  check(skipring_allreduce(&f, &g, 1, MPI_FLOAT, MPI_BAND, c) == MPI_ERR_OP, "MPI_BAND on float");
  check(allreduce_ok(c, 4), "all-reduce after a bad op");
  // More than 2 GiB (untouched, reserved pages): recursive doubling cannot send it in one
  // message. A local error before anything is sent.
  const char* algo = std::getenv("SKIPRING_ALGO");
  if (algo != nullptr && std::string(algo) == "rd") {
    const size_t count = (size_t{1} << 31) / sizeof(double) + 16;
    void* big = mmap(nullptr, count * sizeof(double), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    check(big != MAP_FAILED, "mmap");
    if (big != MAP_FAILED) {
      StderrCapture cap;
      const int rc =
          skipring_allreduce(MPI_IN_PLACE, big, static_cast<int>(count), MPI_DOUBLE, MPI_SUM, c);
      const std::string log = cap.text();
      check(rc == MPI_ERR_COUNT, "rd with > 2 GiB: MPI_ERR_COUNT (got " + std::to_string(rc) + ")");
      check(log.find("exceed what recursive doubling can send") != std::string::npos,
            "rd with > 2 GiB: the log says why");
      check(log.find("negative") == std::string::npos, "rd with > 2 GiB: not called negative");
      munmap(big, count * sizeof(double));
    }
    check(allreduce_ok(c, 4), "all-reduce after > 2 GiB with rd");
  }
  MPI_Comm_free(&c);
}

void check_mismatch() {
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  check(allreduce_ok(c, 3), "first all-reduce");
  std::vector<int64_t> in(64, 1), out(64, 0);
  int rc;
  std::string log;
  {
    StderrCapture cap;
    rc = skipring_allreduce(in.data(), out.data(), g_rank == 0 ? 64 : 32, MPI_INT64_T, MPI_SUM, c);
    log = cap.text();
  }
  check(rc == MPI_ERR_COUNT, "mismatched counts: MPI_ERR_COUNT (got " + std::to_string(rc) + ")");
  check(log.find("the count differs") != std::string::npos, "the log names the count");
  check(log.find("rank 0: allreduce(count 64") != std::string::npos &&
            log.find("rank 1: allreduce(count 32") != std::string::npos,
        "the log names each rank's count");
  check(allreduce_ok(c, 3), "all-reduce after the mismatch");
  MPI_Comm_free(&c);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode, var;
  int n = 0, expect_measured = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mismatch" && i + 1 < argc) {
      mode = a;
      // VAR=A,B: rank 0 gets A, the others B.
      const std::string spec = argv[++i];
      const size_t eq = spec.find('='), comma = spec.find(',');
      var = spec.substr(0, eq);
      const int r = launcher_rank();
      const std::string value =
          r == 0 ? spec.substr(eq + 1, comma - eq - 1) : spec.substr(comma + 1);
      setenv(var.c_str(), value.c_str(), 1);
    } else if (a == "--dups" && i + 1 < argc) {
      mode = a;
      n = std::atoi(argv[++i]);
    } else if (a == "--expect-measured" && i + 1 < argc) {
      expect_measured = std::atoi(argv[++i]);
    } else {
      mode = a;
    }
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (mode == "--mismatch") {
    mismatch(var);
  } else if (mode == "--dups") {
    dups(n, expect_measured);
  } else if (mode == "--local-errors") {
    local_errors();
  } else if (mode == "--check-mismatch") {
    check_mismatch();
  } else {
    check(false, "unknown mode '" + mode + "'");
  }
  const int rc = mpitest::finish();
  MPI_Finalize();
  return rc;
}
