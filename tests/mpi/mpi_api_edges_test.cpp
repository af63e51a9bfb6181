// API edges (issue 13): every call that MPI makes erroneous returns an MPI error code with a
// message, never a signal and never a silent wrong answer, and the communicator still works
// right after (an all-reduce gives the right sum, nothing left unmatched):
//   - MPI_IN_PLACE as recvbuf (alone or with sendbuf), sendbuf == recvbuf, for the all-reduce,
//     reduce-scatter, allgather, broadcast and reduce (codes: Open MPI 4.1's own checks);
//   - injection specs with a rank outside the job, absurd delays, a huge lognormal sigma;
//   - calls before MPI_Init and after MPI_Finalize (MPI_ERR_OTHER, no MPI call made);
//   - empty SKIPRING_HOST_MAP= and SKIPRING_TRACE= (set by ctest): init succeeds.
// --pmpi (run with libskipring_pmpi.so preloaded): the same edges through MPI_Allreduce on
// MPI_ERRORS_RETURN, MPI_Allreduce before MPI_Init / after MPI_Finalize, and arguments MPI
// rejects (negative count, null handles and buffers) raised on the communicator's handler.
// Prints "N passed, M failed" (before finalize) and exits non-zero on any failure.
#include <mpi.h>
#include <skipring/skipring.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/mpi/mpi_test_util.h"

namespace {

// The error class of an MPI error code (the code itself if MPI cannot tell).
int cls(int rc) {
  int c = rc;
  MPI_Error_class(rc, &c);
  return c;
}
using mpitest::check;
using mpitest::g_rank;
using mpitest::g_size;
using mpitest::no_leftovers;

// What `call` writes to stderr (skipring's log lines), with its result.
std::string capture_stderr(const std::function<void()>& call) {
  std::fflush(stderr);
  char path[] = "/tmp/skipring-api-edges-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    call();
    return "(mkstemp failed)";
  }
  const int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  call();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string text;
  lseek(fd, 0, SEEK_SET);
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fd);
  unlink(path);
  std::fputs(text.c_str(), stderr);  // still shown in the test log
  return text;
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

std::string code_text(int rc) {
  return std::to_string(rc) + " (" + skipring_error_string(rc) + ")";
}

// Expects `rc` == `want`, naming the case.
void expect_rc(int rc, int want, const std::string& what) {
  check(rc == want, what + ": rc=" + code_text(rc) + ", expected " + code_text(want));
}

// The communicator still works after a rejected call: a skipring all-reduce gives the right
// sum on every rank and leaves nothing unmatched.
void still_works(const std::string& after) {
  std::vector<long> in(1000, g_rank + 1), out(1000, -1);
  const int rc = skipring_allreduce(in.data(), out.data(), 1000, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  const long want = static_cast<long>(g_size) * (g_size + 1) / 2;
  check(
      rc == MPI_SUCCESS && out[0] == want && out[999] == want,
      "all-reduce after " + after + ": rc=" + code_text(rc) + " out[0]=" + std::to_string(out[0]));
  check(no_leftovers(), "message left unmatched after " + after);
}

// One rejected call, made by every rank (the error is local: nobody communicates), with the
// expected code, a log line containing `log`, buffers untouched, then the check above.
void rejected(const std::string& what, int want, const std::string& log,
              const std::function<int()>& call, const std::vector<int>* buf = nullptr,
              const std::vector<int>* buf_before = nullptr) {
  int rc = MPI_SUCCESS;
  const std::string text = capture_stderr([&] { rc = call(); });
  expect_rc(rc, want, what);
  check(contains(text, log), what + ": no log line containing '" + log + "' (got '" + text + "')");
  if (buf != nullptr) check(*buf == *buf_before, what + ": buffer modified");
  still_works(what);
}

void collective_edges() {
  const int n = g_size;
  std::vector<int> a(8 * n), b(8 * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int>(100 * g_rank + i);
  const std::vector<int> a0 = a;
  const char* kInPlaceRecv = "recvbuf is MPI_IN_PLACE";
  const char* kAlias = "sendbuf and recvbuf are the same buffer";
  void* const in_place = MPI_IN_PLACE;

  // All-reduce: MPI_ERR_BUFFER, as Open MPI's check (which lets an aliased count of 1 through;
  // skipring does not: it would be taken as in place).
  rejected(
      "allreduce recvbuf=MPI_IN_PLACE", MPI_ERR_BUFFER, kInPlaceRecv,
      [&] { return skipring_allreduce(a.data(), in_place, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD); },
      &a, &a0);
  rejected("allreduce both MPI_IN_PLACE", MPI_ERR_BUFFER, "both MPI_IN_PLACE", [&] {
    return skipring_allreduce(MPI_IN_PLACE, in_place, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  });
  for (int count : {1, 4, 8 * n}) {
    rejected(
        "allreduce sendbuf == recvbuf count " + std::to_string(count), MPI_ERR_BUFFER, kAlias,
        [&] {
          return skipring_allreduce(a.data(), a.data(), count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        },
        &a, &a0);
  }
  rejected(
      "allreduce sendbuf == recvbuf, float max", MPI_ERR_BUFFER, kAlias,
      [&] { return skipring_allreduce(a.data(), a.data(), 4, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD); },
      &a, &a0);
  // Also before the fallback: REPLACE would go to PMPI_Allreduce (whose error handler aborts).
  // MAXLOC on MPI_2INT, the fallback here before issue 40, is skipring's own now.
  rejected("allreduce REPLACE recvbuf=MPI_IN_PLACE", MPI_ERR_BUFFER, kInPlaceRecv, [&] {
    return skipring_allreduce(a.data(), in_place, 2, MPI_INT, MPI_REPLACE, MPI_COMM_WORLD);
  });
  rejected(
      "allreduce REPLACE sendbuf == recvbuf", MPI_ERR_BUFFER, kAlias,
      [&] {
        return skipring_allreduce(a.data(), a.data(), 2, MPI_INT, MPI_REPLACE, MPI_COMM_WORLD);
      },
      &a, &a0);
  rejected(
      "allreduce MAXLOC sendbuf == recvbuf", MPI_ERR_BUFFER, kAlias,
      [&] {
        return skipring_allreduce(a.data(), a.data(), 2, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD);
      },
      &a, &a0);
  // Aliasing with count 0 moves nothing: fine.
  expect_rc(skipring_allreduce(a.data(), a.data(), 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
            MPI_SUCCESS, "allreduce sendbuf == recvbuf count 0");
  still_works("allreduce count 0");

  // Reduce-scatter (block): recvbuf MPI_IN_PLACE is MPI_ERR_ARG (Open MPI); aliasing
  // MPI_ERR_BUFFER (Open MPI does not check it).
  rejected(
      "reduce_scatter_block recvbuf=MPI_IN_PLACE", MPI_ERR_ARG, kInPlaceRecv,
      [&] {
        return skipring_reduce_scatter_block(a.data(), in_place, 2, MPI_INT, MPI_SUM,
                                             MPI_COMM_WORLD);
      },
      &a, &a0);
  rejected("reduce_scatter_block both MPI_IN_PLACE", MPI_ERR_ARG, kInPlaceRecv, [&] {
    return skipring_reduce_scatter_block(MPI_IN_PLACE, in_place, 2, MPI_INT, MPI_SUM,
                                         MPI_COMM_WORLD);
  });
  rejected(
      "reduce_scatter_block sendbuf == recvbuf", MPI_ERR_BUFFER, kAlias,
      [&] {
        return skipring_reduce_scatter_block(a.data(), a.data(), 2, MPI_INT, MPI_SUM,
                                             MPI_COMM_WORLD);
      },
      &a, &a0);

  // Allgather: the same codes.
  rejected(
      "allgather recvbuf=MPI_IN_PLACE", MPI_ERR_ARG, kInPlaceRecv,
      [&] {
        return skipring_allgather(a.data(), 2, MPI_INT, in_place, 2, MPI_INT, MPI_COMM_WORLD);
      },
      &a, &a0);
  rejected("allgather both MPI_IN_PLACE", MPI_ERR_ARG, kInPlaceRecv, [&] {
    return skipring_allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, in_place, 2, MPI_INT,
                              MPI_COMM_WORLD);
  });
  rejected(
      "allgather sendbuf == recvbuf", MPI_ERR_BUFFER, kAlias,
      [&] {
        return skipring_allgather(a.data(), 2, MPI_INT, a.data(), 2, MPI_INT, MPI_COMM_WORLD);
      },
      &a, &a0);

  // Broadcast has no in-place form: MPI_ERR_ARG (Open MPI).
  rejected("bcast buffer=MPI_IN_PLACE", MPI_ERR_ARG, "buffer is MPI_IN_PLACE",
           [&] { return skipring_bcast(in_place, 2, MPI_INT, 0, MPI_COMM_WORLD); });

  // Reduce: MPI_ERR_ARG (Open MPI) for MPI_IN_PLACE as the root's recvbuf, aliasing at the root,
  // MPI_IN_PLACE as a non-root's sendbuf. Each is an error of one rank's arguments only, so
  // only that rank calls (the others would enter the collective and wait).
  for (int root = 0; root < n; ++root) {
    const bool me = g_rank == root;
    const std::string r = " (root " + std::to_string(root) + ")";
    if (me) {
      int rc = 0;
      std::string text = capture_stderr([&] {
        rc = skipring_reduce(a.data(), in_place, 4, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
      });
      expect_rc(rc, MPI_ERR_ARG, "reduce recvbuf=MPI_IN_PLACE at the root" + r);
      check(contains(text, "recvbuf is MPI_IN_PLACE at the root"), "reduce IN_PLACE log" + r);
      text = capture_stderr([&] {
        rc = skipring_reduce(a.data(), a.data(), 4, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
      });
      expect_rc(rc, MPI_ERR_ARG, "reduce sendbuf == recvbuf at the root" + r);
      check(contains(text, kAlias), "reduce alias log" + r);
      check(a == a0, "reduce alias at the root: buffer modified" + r);
    } else {
      int rc = 0;
      const std::string text = capture_stderr([&] {
        rc = skipring_reduce(MPI_IN_PLACE, b.data(), 4, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
      });
      expect_rc(rc, MPI_ERR_ARG, "reduce sendbuf=MPI_IN_PLACE at a non-root" + r);
      check(contains(text, "sendbuf is MPI_IN_PLACE at a non-root rank"),
            "reduce non-root log" + r);
    }
    still_works("reduce edges" + r);
    // recvbuf is not significant at a non-root: sendbuf == recvbuf or MPI_IN_PLACE there is a
    // valid reduce, and the root gets the right sum.
    std::vector<int> v(4, g_rank + 1), sum(4, -1);
    void* recv = me ? static_cast<void*>(sum.data())
                    : (g_rank % 2 ? static_cast<void*>(v.data()) : in_place);
    expect_rc(skipring_reduce(v.data(), recv, 4, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD),
              MPI_SUCCESS, "reduce with a non-root recvbuf == sendbuf / MPI_IN_PLACE" + r);
    if (me) check(sum[3] == n * (n + 1) / 2, "reduce with odd non-root recvbufs: sum" + r);
    still_works("reduce with odd non-root recvbufs" + r);
  }
}

void injection_edges() {
  const std::string n = std::to_string(g_size);
  rejected("skipring_set_inject rank=99", MPI_ERR_ARG,
           "bad rank '99': the job has " + n +
               " ranks (MPI_COMM_WORLD), expects an integer in [0, " + std::to_string(g_size - 1) +
               "]",
           [] { return skipring_set_inject("rank=99,delay=1ms"); });
  rejected("skipring_set_inject rank=n", MPI_ERR_ARG, "bad rank '" + n + "'",
           [&] { return skipring_set_inject(("rank=" + n + ",delay=1ms").c_str()); });
  rejected("skipring_set_inject delay=1e300s", MPI_ERR_ARG, "bad delay '1e300s': must be at most",
           [] { return skipring_set_inject("rank=0,delay=1e300s"); });
  rejected("skipring_set_inject delay=nanms", MPI_ERR_ARG, "bad delay 'nanms'",
           [] { return skipring_set_inject("rank=0,delay=nanms"); });
  rejected("skipring_set_inject lognormal sigma 1e300", MPI_ERR_ARG, "SIGMA '1e300'",
           [] { return skipring_set_inject("rank=*,dist=lognormal:1ms:1e300,at=rs"); });
  rejected("skipring_set_inject exp mean 1e9s", MPI_ERR_ARG, "MEAN '1e9s'",
           [] { return skipring_set_inject("rank=*,dist=exp:1e9s"); });
  // A valid plan is taken, then cleared; the all-reduce still gives the right sum.
  expect_rc(skipring_set_inject("rank=0,delay=1ms,at=arrive"), MPI_SUCCESS, "valid inject spec");
  still_works("a valid inject spec");
  expect_rc(skipring_set_inject(""), MPI_SUCCESS, "clearing the inject spec");
}

// MPI_Allreduce through the preloaded library, on MPI_ERRORS_RETURN.
void pmpi_edges() {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::vector<int> a(16, g_rank + 1);
  const std::vector<int> a0 = a;
  void* const in_place = MPI_IN_PLACE;
  struct Case {
    const char* what;
    const void* send;
    void* recv;
    int count;
    MPI_Datatype type;
    MPI_Op op;
    const char* log;
  };
  const Case cases[] = {
      {"MPI_Allreduce recvbuf=MPI_IN_PLACE", a.data(), in_place, 4, MPI_INT, MPI_SUM,
       "recvbuf is MPI_IN_PLACE"},
      {"MPI_Allreduce both MPI_IN_PLACE", MPI_IN_PLACE, in_place, 4, MPI_INT, MPI_SUM,
       "both MPI_IN_PLACE"},
      {"MPI_Allreduce sendbuf == recvbuf count 1", a.data(), a.data(), 1, MPI_INT, MPI_SUM,
       "the same buffer"},
      {"MPI_Allreduce sendbuf == recvbuf count 16", a.data(), a.data(), 16, MPI_INT, MPI_MAX,
       "the same buffer"},
      {"MPI_Allreduce MAXLOC sendbuf == recvbuf", a.data(), a.data(), 2, MPI_2INT, MPI_MAXLOC,
       "the same buffer"},
  };
  for (const Case& c : cases) {
    int rc = 0;
    const std::string text = capture_stderr(
        [&] { rc = MPI_Allreduce(c.send, c.recv, c.count, c.type, c.op, MPI_COMM_WORLD); });
    check(cls(rc) == MPI_ERR_BUFFER, std::string(c.what) + ": class " + code_text(cls(rc)));
    check(contains(text, c.log), std::string(c.what) + ": no log line with '" + c.log + "'");
    check(a == a0, std::string(c.what) + ": buffer modified");
    long one = 1, total = 0;
    check(MPI_Allreduce(&one, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS &&
              total == g_size,
          std::string("MPI_Allreduce after ") + c.what);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

// Arguments MPI rejects, through the preloaded MPI_Allreduce: checked by the library before
// any PMPI call (MPICH 4.0 aborts inside PMPI_Allreduce on a negative count whatever the error
// handler), raised once on the communicator's error handler with the right class and a message,
// nothing written, the communicator usable after. Supported and fallback types alike.
int g_handler_calls = 0;
int g_handler_code = MPI_SUCCESS;
void counting_handler(MPI_Comm*, int* code, ...) {
  ++g_handler_calls;
  g_handler_code = *code;
}

void pmpi_argument_edges() {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Errhandler handler;
  MPI_Comm_create_errhandler(counting_handler, &handler);
  MPI_Comm_set_errhandler(comm, handler);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::vector<int> a(8, g_rank + 1), b(8, -7);
  const std::vector<int> b0 = b;
  void* const in_place = MPI_IN_PLACE;
  struct Case {
    const char* what;
    const void* send;
    void* recv;
    int count;
    MPI_Datatype type;
    MPI_Op op;
    int want;
    const char* log;
  };
  const Case cases[] = {
      {"count -1 (int sum)", a.data(), b.data(), -1, MPI_INT, MPI_SUM, MPI_ERR_COUNT,
       "count is negative: MPI_ERR_COUNT"},
      {"count -1 in place", MPI_IN_PLACE, b.data(), -1, MPI_INT, MPI_SUM, MPI_ERR_COUNT,
       "count is negative"},
      {"count -3 (int replace, a fallback)", a.data(), b.data(), -3, MPI_INT, MPI_REPLACE,
       MPI_ERR_COUNT, "count is negative"},
      {"count -3 (2int maxloc)", a.data(), b.data(), -3, MPI_2INT, MPI_MAXLOC, MPI_ERR_COUNT,
       "count is negative"},
      {"MPI_DATATYPE_NULL", a.data(), b.data(), 4, MPI_DATATYPE_NULL, MPI_SUM, MPI_ERR_TYPE,
       "datatype is MPI_DATATYPE_NULL: MPI_ERR_TYPE"},
      {"MPI_OP_NULL", a.data(), b.data(), 4, MPI_INT, MPI_OP_NULL, MPI_ERR_OP,
       "op is MPI_OP_NULL: MPI_ERR_OP"},
      {"NULL recvbuf", a.data(), nullptr, 4, MPI_INT, MPI_SUM, MPI_ERR_BUFFER,
       "recvbuf is NULL with a predefined datatype"},
      {"NULL sendbuf", nullptr, b.data(), 4, MPI_DOUBLE, MPI_MAX, MPI_ERR_BUFFER,
       "sendbuf is NULL with a predefined datatype"},
      {"NULL sendbuf (int replace, a fallback)", nullptr, b.data(), 2, MPI_INT, MPI_REPLACE,
       MPI_ERR_BUFFER, "sendbuf is NULL"},
      {"NULL sendbuf (2int maxloc)", nullptr, b.data(), 2, MPI_2INT, MPI_MAXLOC, MPI_ERR_BUFFER,
       "sendbuf is NULL"},
      {"recvbuf=MPI_IN_PLACE on a communicator", a.data(), in_place, 4, MPI_INT, MPI_SUM,
       MPI_ERR_BUFFER, "recvbuf is MPI_IN_PLACE"},
  };
  for (const Case& c : cases) {
    g_handler_calls = 0;
    g_handler_code = MPI_SUCCESS;
    int rc = MPI_SUCCESS;
    const std::string text =
        capture_stderr([&] { rc = MPI_Allreduce(c.send, c.recv, c.count, c.type, c.op, comm); });
    const std::string what = std::string("MPI_Allreduce ") + c.what;
    check(cls(rc) == c.want,
          what + ": class " + code_text(cls(rc)) + ", expected " + code_text(c.want));
    check(g_handler_calls == 1 && cls(g_handler_code) == c.want,
          what + ": the communicator's error handler ran " + std::to_string(g_handler_calls) +
              " times");
    check(contains(text, c.log), what + ": no log line with '" + c.log + "'");
    check(b == b0, what + ": recvbuf modified");
    long one = 1, total = 0;
    check(MPI_Allreduce(&one, &total, 1, MPI_LONG, MPI_SUM, comm) == MPI_SUCCESS && total == g_size,
          what + ": the communicator works after");
  }
  // MPI_COMM_NULL has no handler: MPI_COMM_WORLD's (MPI_ERRORS_RETURN here).
  int rc = MPI_SUCCESS;
  const std::string text = capture_stderr(
      [&] { rc = MPI_Allreduce(a.data(), b.data(), 4, MPI_INT, MPI_SUM, MPI_COMM_NULL); });
  check(cls(rc) == MPI_ERR_COMM, "MPI_Allreduce on MPI_COMM_NULL: class " + code_text(cls(rc)));
  check(contains(text, "comm is MPI_COMM_NULL: MPI_ERR_COMM"),
        "MPI_Allreduce on MPI_COMM_NULL: no log line");
  // Count 0 moves nothing: NULL buffers are fine there.
  g_handler_calls = 0;
  check(MPI_Allreduce(nullptr, nullptr, 0, MPI_INT, MPI_SUM, comm) == MPI_SUCCESS &&
            g_handler_calls == 0,
        "MPI_Allreduce count 0 with NULL buffers succeeds");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  MPI_Errhandler_free(&handler);
  MPI_Comm_free(&comm);
}

}  // namespace

int main(int argc, char** argv) {
  bool pmpi = false;
  for (int i = 1; i < argc; ++i) pmpi = pmpi || std::string(argv[i]) == "--pmpi";
  int x[2] = {1, 2}, y[2] = {0, 0};

  // Before MPI_Init: MPI_ERR_OTHER and a message, no MPI call (Open MPI would abort).
  int before[6];
  const std::string before_log = capture_stderr([&] {
    before[0] = skipring_init();
    before[1] = skipring_allreduce(x, y, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    before[2] = skipring_bcast(x, 2, MPI_INT, 0, MPI_COMM_WORLD);
    before[3] = skipring_reduce(x, y, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    before[4] = skipring_set_inject("");
    before[5] = pmpi ? MPI_Allreduce(x, y, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD) : MPI_ERR_OTHER;
  });

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const char* names[] = {"skipring_init",   "skipring_allreduce",  "skipring_bcast",
                         "skipring_reduce", "skipring_set_inject", "MPI_Allreduce"};
  for (int i = 0; i < 6; ++i) {
    expect_rc(before[i], MPI_ERR_OTHER, std::string(names[i]) + " before MPI_Init");
    if (i < 5 || pmpi) {
      check(contains(before_log, std::string(names[i]) + " called before MPI_Init"),
            std::string(names[i]) + " before MPI_Init: no message");
    }
  }
  check(y[0] == 0 && y[1] == 0, "recvbuf written before MPI_Init");
  // ctest sets SKIPRING_HOST_MAP= and SKIPRING_TRACE= (empty: the default, README.md).
  for (const char* var : {"SKIPRING_HOST_MAP", "SKIPRING_TRACE"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v == '\0') {
      expect_rc(skipring_init(), MPI_SUCCESS, std::string("skipring_init with ") + var + "=");
    }
  }
  still_works("MPI_Init");

  if (pmpi) {
    pmpi_edges();
    pmpi_argument_edges();
  } else {
    collective_edges();
    injection_edges();
  }
  const int status = mpitest::finish();
  MPI_Finalize();

  // After MPI_Finalize: MPI_ERR_OTHER and a message, no abort, no MPI call.
  long failed = 0;
  const auto after = [&](int rc, int want, const char* what) {
    if (rc != want) {
      ++failed;
      std::fprintf(stderr, "rank %d FAIL: %s after MPI_Finalize: rc=%d, expected %d\n", g_rank,
                   what, rc, want);
    }
  };
  skipring_stats_t st;
  skipring_totals_t totals;
  int handled = 0;
  const std::string after_log = capture_stderr([&] {
    after(skipring_allreduce(x, y, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_OTHER,
          "skipring_allreduce");
    after(skipring_allreduce(MPI_IN_PLACE, y, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_OTHER,
          "skipring_allreduce in place");
    after(skipring_reduce_scatter_block(x, y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_OTHER,
          "skipring_reduce_scatter_block");
    after(skipring_allgather(x, 1, MPI_INT, y, 1, MPI_INT, MPI_COMM_WORLD), MPI_ERR_OTHER,
          "skipring_allgather");
    after(skipring_bcast(x, 2, MPI_INT, 0, MPI_COMM_WORLD), MPI_ERR_OTHER, "skipring_bcast");
    after(skipring_reduce(x, y, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD), MPI_ERR_OTHER,
          "skipring_reduce");
    after(skipring_init(), MPI_ERR_OTHER, "skipring_init");
    after(skipring_handles(MPI_INT, MPI_SUM, MPI_COMM_WORLD, &handled), MPI_ERR_OTHER,
          "skipring_handles");
    after(skipring_last_stats(MPI_COMM_WORLD, &st), MPI_ERR_OTHER, "skipring_last_stats");
    after(skipring_set_inject("rank=0,delay=1ms"), MPI_ERR_OTHER, "skipring_set_inject");
    after(skipring_set_algo("ring"), MPI_ERR_OTHER, "skipring_set_algo");
    after(skipring_get_totals(&totals), MPI_SUCCESS, "skipring_get_totals");
    after(skipring_finalize(), MPI_SUCCESS, "skipring_finalize");
    if (pmpi) {
      after(MPI_Allreduce(x, y, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_OTHER,
            "MPI_Allreduce (preloaded)");
    }
  });
  if (!contains(after_log, "skipring_allreduce called after MPI_Finalize") ||
      !contains(after_log, "skipring_bcast called after MPI_Finalize") ||
      (pmpi && !contains(after_log, "MPI_Allreduce called after MPI_Finalize"))) {
    ++failed;
    std::fprintf(stderr, "rank %d FAIL: no 'called after MPI_Finalize' message\n", g_rank);
  }
  if (y[0] != 0 || y[1] != 0) {
    ++failed;
    std::fprintf(stderr, "rank %d FAIL: recvbuf written after MPI_Finalize\n", g_rank);
  }
  std::fprintf(stderr, "rank %d: after MPI_Finalize: %ld failed\n", g_rank, failed);
  return status != 0 || failed != 0 ? 1 : 0;
}
