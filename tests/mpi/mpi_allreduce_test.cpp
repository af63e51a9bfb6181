// skipring_allreduce under mpirun: every predefined type x op, counts {0, 1, n-1, n, n+1, a
// prime, large}, in place and not; results exact against a reduction computed on the host
// (mpi_test_util.h: integers, bool and byte with every op, floats with MIN/MAX; integer values
// over the full range, high bit set, except signed SUM/PROD), float SUM/PROD bitwise identical
// on every rank and close to PMPI_Allreduce's; no message left unmatched on the internal
// communicator after each collective; bad arguments give MPI error codes.
// Prints "N passed, M failed" and exits non-zero on any failure.
#include <mpi.h>
#include <skipring/skipring.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/mpi/mpi_test_util.h"

namespace {
using mpitest::check;
using mpitest::g_failed;
using mpitest::g_passed;
using mpitest::g_rank;
using mpitest::g_size;
using mpitest::no_leftovers;

struct TypeCase {
  MPI_Datatype type;
  const char* name;
  size_t size;
  int kind;  // 0 signed int, 1 unsigned int, 2 float, 3 bool, 4 byte
};

struct OpCase {
  MPI_Op op;
  const char* name;
};

bool defined(int kind, MPI_Op op) {
  const bool arith = op == MPI_SUM || op == MPI_PROD || op == MPI_MIN || op == MPI_MAX;
  const bool logical = op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR;
  const bool bitwise = op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR;
  switch (kind) {
    case 0:
    case 1:
      return true;
    case 2:
      return arith;
    case 3:
      return logical;
    case 4:
      return bitwise;
  }
  return false;
}

template <typename T>
void fill_values(T* v, size_t count, std::mt19937_64& rng, MPI_Op op) {
  for (size_t i = 0; i < count; ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      std::memset(&v[i], 0, sizeof(T));
      v[i] = op == MPI_PROD ? static_cast<T>(0.9 + 0.2 * (rng() % 1000) / 1000.0)
                            : static_cast<T>(static_cast<double>(rng() % 20000) / 100.0 - 100.0);
    } else {
      v[i] = static_cast<T>(rng() % (op == MPI_PROD ? 4 : 1000));
    }
  }
}

void fill(const TypeCase& t, void* buf, size_t count, std::mt19937_64& rng, MPI_Op op) {
  if (t.kind == 2) {
    if (t.size == 4) return fill_values(static_cast<float*>(buf), count, rng, op);
    if (t.size == 8) return fill_values(static_cast<double*>(buf), count, rng, op);
    return fill_values(static_cast<long double*>(buf), count, rng, op);
  }
  auto* b = static_cast<uint8_t*>(buf);
  if (t.kind == 3) {
    for (size_t i = 0; i < count; ++i) b[i] = rng() & 1;
    return;
  }
  // Unsigned integers with any op, signed ones with MIN/MAX and the logical and bitwise ops:
  // the full range, high bit included (signed SUM/PROD would overflow, undefined in C).
  if (t.kind == 1 || (t.kind == 0 && op != MPI_SUM && op != MPI_PROD)) {
    return mpitest::fill_full_range(b, count, t.size, rng);
  }
  // Signed SUM/PROD: small values in the low byte of each element (little endian).
  std::memset(buf, 0, count * t.size);
  for (size_t i = 0; i < count; ++i) {
    b[i * t.size] = static_cast<uint8_t>(op == MPI_PROD ? rng() % 4 : rng() % 200);
    if (t.kind == 4 || op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR) {
      for (size_t k = 0; k < t.size; ++k) b[i * t.size + k] = static_cast<uint8_t>(rng());
    }
  }
}

double value(const TypeCase& t, const void* buf, size_t i) {
  if (t.size == 4) return static_cast<const float*>(buf)[i];
  if (t.size == 8) return static_cast<const double*>(buf)[i];
  return static_cast<double>(static_cast<const long double*>(buf)[i]);
}

// Checks every rank holds the same bytes as rank 0.
bool identical_everywhere(const std::vector<uint8_t>& out) {
  std::vector<uint8_t> root = out;
  mpitest::bcast(root.data(), static_cast<int>(root.size()), MPI_BYTE, 0);
  int same = root == out ? 1 : 0, all = 0;
  mpitest::allreduce(&same, &all, 1, MPI_INT, MPI_LAND);
  return all != 0;
}

// --expect-algo: the algorithm every all-reduce must report (SKIPRING_ALGO forces it).
std::string g_expect_algo;

void run_case(const TypeCase& t, const OpCase& o, int count, bool in_place, uint64_t seed) {
  std::mt19937_64 rng(seed * 1000003 + g_rank);
  const size_t bytes = count * t.size;
  std::vector<uint8_t> in(bytes + 1), mine(bytes + 1, 0), ref(bytes + 1, 0);
  fill(t, in.data(), count, rng, o.op);
  std::string what = std::string(t.name) + " " + o.name + " count=" + std::to_string(count) +
                     (in_place ? " in-place" : "");
  int rc;
  if (in_place) {
    std::memcpy(mine.data(), in.data(), bytes);
    rc = skipring_allreduce(MPI_IN_PLACE, mine.data(), count, t.type, o.op, MPI_COMM_WORLD);
  } else {
    rc = skipring_allreduce(in.data(), mine.data(), count, t.type, o.op, MPI_COMM_WORLD);
  }
  check(rc == MPI_SUCCESS, what + ": rc=" + std::to_string(rc));
  if (!g_expect_algo.empty() && count > 0) {
    // The `mpi` row runs the direct recursive doubling for the 8-bit types (Open MPI 4.1's op/avx
    // sums them wrongly) and unsigned MIN/MAX (MPICH 4.0.2 compares them as signed:
    // runtime/communicator_mpi.cpp).
    const bool minmax = o.op == MPI_MIN || o.op == MPI_MAX;
    const bool by_rd = t.size == 1 || (t.kind == 1 && minmax);
    const std::string expect = g_expect_algo == "mpi" && by_rd ? "rd" : g_expect_algo;
    skipring_stats_t st;
    check(skipring_last_stats(MPI_COMM_WORLD, &st) == MPI_SUCCESS && std::string(st.algo) == expect,
          what + ": ran " + st.algo + ", expected " + expect);
  }
  // Exact cases against the host's reduction; float SUM/PROD (order-sensitive) against MPI's.
  const bool exact = mpitest::host_reduce(t.type, o.op, in.data(), count, ref.data());
  if (!exact) mpitest::allreduce(in.data(), ref.data(), count, t.type, o.op);
  mine.resize(bytes);
  ref.resize(bytes);
  if (exact) {
    // Long double: compare values, its 6 padding bytes are not part of the value.
    bool same = true;
    if (t.kind == 2 && t.size > 8) {
      for (int i = 0; i < count; ++i)
        same = same && value(t, mine.data(), i) == value(t, ref.data(), i);
    } else {
      same = mine == ref;
    }
    check(same, what + ": differs from the host reference");
  } else {
    bool close = true;
    for (int i = 0; i < count && close; ++i) {
      const double a = value(t, mine.data(), i), b = value(t, ref.data(), i);
      close = std::fabs(a - b) <= (t.size == 4 ? 1e-4 : 1e-10) * (1 + std::fabs(b)) * g_size;
    }
    check(close, what + ": not close to PMPI_Allreduce");
  }
  check(identical_everywhere(mine), what + ": ranks disagree");
  check(no_leftovers(), what + ": a message is left unmatched on the internal communicator");
}

void bad_input() {
  int x[4] = {1, 2, 3, 4}, y[4];
  check(skipring_allreduce(x, y, -1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_ERR_COUNT,
        "count < 0 gives MPI_ERR_COUNT");
  check(skipring_allreduce(nullptr, y, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_ERR_BUFFER,
        "NULL sendbuf gives MPI_ERR_BUFFER");
  check(skipring_allreduce(x, nullptr, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_ERR_BUFFER,
        "NULL recvbuf gives MPI_ERR_BUFFER");
  check(skipring_allreduce(x, y, 4, MPI_BYTE, MPI_SUM, MPI_COMM_WORLD) == MPI_ERR_OP,
        "SUM on MPI_BYTE gives MPI_ERR_OP");
  check(skipring_allreduce(x, y, 4, MPI_FLOAT, MPI_BXOR, MPI_COMM_WORLD) == MPI_ERR_OP,
        "BXOR on MPI_FLOAT gives MPI_ERR_OP");
  check(skipring_allreduce(x, y, 4, MPI_INT, MPI_SUM, MPI_COMM_NULL) == MPI_ERR_COMM,
        "MPI_COMM_NULL gives MPI_ERR_COMM");
  int handled = -1;
  check(skipring_handles(MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD, &handled) == MPI_SUCCESS &&
            handled == 1,
        "MAXLOC on MPI_2INT is handled natively (issue 40)");
  // Argument errors of the entry points that run through the C API's guarded()
  // (runtime/api_common.h).
  check(skipring_handles(MPI_INT, MPI_SUM, MPI_COMM_WORLD, nullptr) == MPI_ERR_ARG,
        "skipring_handles with a NULL result gives MPI_ERR_ARG");
  check(skipring_handles(MPI_INT, MPI_SUM, MPI_COMM_NULL, &handled) == MPI_ERR_COMM && handled == 0,
        "skipring_handles on MPI_COMM_NULL gives MPI_ERR_COMM");
  skipring_stats_t no_stats;
  check(skipring_last_stats(MPI_COMM_NULL, &no_stats) == MPI_ERR_COMM,
        "skipring_last_stats on MPI_COMM_NULL gives MPI_ERR_COMM");
  check(skipring_last_stats(MPI_COMM_WORLD, nullptr) == MPI_ERR_ARG,
        "skipring_last_stats with a NULL result gives MPI_ERR_ARG");
  check(skipring_pending_messages(MPI_COMM_WORLD, nullptr) == MPI_ERR_ARG,
        "skipring_pending_messages with a NULL result gives MPI_ERR_ARG");
  check(skipring_set_inject("rank=x") == MPI_ERR_ARG, "a bad injection spec gives MPI_ERR_ARG");
  check(skipring_get_totals(nullptr) == MPI_ERR_ARG, "skipring_get_totals(NULL) gives MPI_ERR_ARG");
  // NULL buffers with count 0 are fine.
  check(skipring_allreduce(nullptr, nullptr, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS,
        "count 0 with NULL buffers succeeds");
  // A user-defined op falls back to PMPI_Allreduce and is still right.
  skipring_totals_t before, after;
  skipring_get_totals(&before);
  MPI_Op user;
  MPI_Op_create(
      [](void* in, void* inout, int* len, MPI_Datatype*) {
        for (int i = 0; i < *len; ++i) static_cast<int*>(inout)[i] += static_cast<int*>(in)[i];
      },
      1, &user);
  int one = 1, total = 0;
  check(skipring_allreduce(&one, &total, 1, MPI_INT, user, MPI_COMM_WORLD) == MPI_SUCCESS &&
            total == g_size,
        "user op falls back and sums");
  skipring_get_totals(&after);
  check(after.fallbacks == before.fallbacks + 1, "fallback counted");
  MPI_Op_free(&user);
  // Fallbacks by reason (issue 40): the user op is an op fallback, a derived type a datatype
  // one; the reasons add up to the fallbacks.
  const char* const reasons[] = {"fallback_datatype", "fallback_op",       "fallback_comm",
                                 "fallback_memory",   "fallback_disabled", "fallback_other",
                                 "fallback_thread"};
  uint64_t by[7] = {0, 0, 0, 0, 0, 0, 0};
  for (int r = 0; r < 7; ++r) {
    check(skipring_get_counter(reasons[r], &by[r]) == MPI_SUCCESS,
          std::string("counter ") + reasons[r]);
  }
  check(by[1] >= 1, "the user op counted as an op fallback");
  // A derived type (two ints), with a user op (Open MPI rejects predefined ops on derived types).
  MPI_Datatype two_ints;
  MPI_Type_contiguous(2, MPI_INT, &two_ints);
  MPI_Type_commit(&two_ints);
  MPI_Op pair_sum;
  MPI_Op_create(
      [](void* in, void* inout, int* len, MPI_Datatype*) {
        for (int i = 0; i < 2 * *len; ++i) static_cast<int*>(inout)[i] += static_cast<int*>(in)[i];
      },
      1, &pair_sum);
  int pair[2] = {g_rank, 1}, sums[2] = {-1, -1};
  check(skipring_allreduce(pair, sums, 1, two_ints, pair_sum, MPI_COMM_WORLD) == MPI_SUCCESS &&
            sums[0] == g_size * (g_size - 1) / 2 && sums[1] == g_size,
        "a derived type falls back and is right");
  MPI_Op_free(&pair_sum);
  MPI_Type_free(&two_ints);
  uint64_t datatype_after = 0, op_after = 0, sum = 0, v = 0;
  skipring_get_counter("fallback_datatype", &datatype_after);
  skipring_get_counter("fallback_op", &op_after);
  check(datatype_after == by[0] + 1 && op_after == by[1], "a derived type: a datatype fallback");
  for (const char* r : reasons) sum += skipring_get_counter(r, &v) == MPI_SUCCESS ? v : 0;
  skipring_get_totals(&after);
  check(sum == after.fallbacks, "the reasons add up to the fallbacks");
  check(skipring_get_counter("no_such_counter", &v) == MPI_ERR_ARG, "unknown counter: MPI_ERR_ARG");
  check(skipring_get_counter(nullptr, &v) == MPI_ERR_ARG, "NULL counter name: MPI_ERR_ARG");
  check(skipring_get_counter("mpi", nullptr) == MPI_ERR_ARG, "NULL counter value: MPI_ERR_ARG");
  // Overlapping buffers (issue 40): MPI_ERR_BUFFER as for the same buffer, nothing written.
  int v5[5] = {1, 2, 3, 4, 5};
  check(skipring_allreduce(v5, v5 + 1, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_ERR_BUFFER &&
            v5[1] == 2 && v5[4] == 5,
        "overlapping buffers (recvbuf inside sendbuf) give MPI_ERR_BUFFER");
  check(skipring_allreduce(v5 + 1, v5, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_ERR_BUFFER &&
            v5[0] == 1,
        "overlapping buffers (sendbuf inside recvbuf) give MPI_ERR_BUFFER");
  int w[4] = {0, 0, 0, 0};
  check(skipring_allreduce(v5, w, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS &&
            w[3] == 4 * g_size,
        "separate buffers are fine");
}

void stats_check() {
  // The ring, whatever auto would pick for this size: 2(n-1) steps.
  skipring_set_algo("skipring");
  const int count = 100000;
  std::vector<float> a(count, 1.0f), b(count);
  check(skipring_allreduce(a.data(), b.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) ==
            MPI_SUCCESS,
        "stats allreduce");
  skipring_stats_t st;
  check(skipring_last_stats(MPI_COMM_WORLD, &st) == MPI_SUCCESS, "last_stats");
  check(st.bytes == 4u * count, "stats bytes");
  check(st.steps == static_cast<uint32_t>(g_size > 1 ? 2 * (g_size - 1) : 0), "stats steps");
  check(std::string(st.algo) == "skipring", "stats algo");
  check(skipring_set_algo("no-such-algorithm") == MPI_ERR_ARG, "unknown algorithm rejected");
  check(skipring_set_algo(nullptr) == MPI_SUCCESS, "algorithm back to SKIPRING_ALGO");
  check(st.time_s > 0 || g_size == 1, "stats time");
  const char* skip_env = std::getenv("SKIPRING_SKIP");
  if (skip_env != nullptr && std::string(skip_env) == "0") {
    check(st.skips == 0, "no skips with SKIPRING_SKIP=0");
  }
  check(b[count - 1] == static_cast<float>(g_size), "stats allreduce result");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  bool large = false, quick = false, expect_config_error = false;
  for (int i = 1; i < argc; ++i) {
    large = large || std::string(argv[i]) == "--large";
    quick = quick || std::string(argv[i]) == "--quick";
    expect_config_error = expect_config_error || std::string(argv[i]) == "--expect-config-error";
    if (std::string(argv[i]) == "--expect-algo" && i + 1 < argc) g_expect_algo = argv[++i];
  }
  if (expect_config_error) {
    // The message naming the variable goes to stderr; ctest checks the code here.
    const int rc = skipring_init();
    int x = 1, y = 0;
    const int rc2 = skipring_allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check(rc == MPI_ERR_ARG, "bad SKIPRING_* value fails init with MPI_ERR_ARG");
    check(rc2 == MPI_ERR_ARG, "and every later call too");
  } else {
    const TypeCase types[] = {
        {MPI_SIGNED_CHAR, "signed_char", 1, 0},
        {MPI_UNSIGNED_CHAR, "unsigned_char", 1, 1},
        {MPI_SHORT, "short", 2, 0},
        {MPI_UNSIGNED_SHORT, "unsigned_short", 2, 1},
        {MPI_INT, "int", 4, 0},
        {MPI_UNSIGNED, "unsigned", 4, 1},
        {MPI_LONG, "long", sizeof(long), 0},
        {MPI_UNSIGNED_LONG, "unsigned_long", sizeof(long), 1},
        {MPI_LONG_LONG, "long_long", 8, 0},
        {MPI_UNSIGNED_LONG_LONG, "unsigned_long_long", 8, 1},
        {MPI_INT8_T, "int8", 1, 0},
        {MPI_UINT8_T, "uint8", 1, 1},
        {MPI_INT16_T, "int16", 2, 0},
        {MPI_UINT16_T, "uint16", 2, 1},
        {MPI_INT32_T, "int32", 4, 0},
        {MPI_UINT32_T, "uint32", 4, 1},
        {MPI_INT64_T, "int64", 8, 0},
        {MPI_UINT64_T, "uint64", 8, 1},
        {MPI_FLOAT, "float", 4, 2},
        {MPI_DOUBLE, "double", 8, 2},
        {MPI_LONG_DOUBLE, "long_double", sizeof(long double), 2},
        {MPI_C_BOOL, "c_bool", 1, 3},
        {MPI_BYTE, "byte", 1, 4},
    };
    const OpCase ops[] = {{MPI_SUM, "sum"},   {MPI_PROD, "prod"}, {MPI_MIN, "min"},
                          {MPI_MAX, "max"},   {MPI_LAND, "land"}, {MPI_LOR, "lor"},
                          {MPI_LXOR, "lxor"}, {MPI_BAND, "band"}, {MPI_BOR, "bor"},
                          {MPI_BXOR, "bxor"}};
    std::vector<int> counts = {0, 1, g_size - 1, g_size, g_size + 1, 1009, 100003};
    if (quick) counts = {1, g_size + 1, 100003};
    uint64_t seed = 1;
    if (!large) {
      for (const auto& t : types) {
        for (const auto& o : ops) {
          if (!defined(t.kind, o.op)) continue;
          for (int count : counts) {
            if (count < 0) continue;
            for (bool in_place : {false, true}) run_case(t, o, count, in_place, seed++);
          }
        }
      }
      bad_input();
      stats_check();
    } else {
      // 64 MiB float sum, 16 MiB double max, odd count int64, with the leak check per call.
      run_case(types[18], ops[0], 16 << 20, false, 1);
      run_case(types[19], ops[3], (2 << 20) + 3, true, 2);
      run_case(types[16], ops[0], (1 << 20) + 7, false, 3);
    }
    check(no_leftovers(), "no message left on the internal communicator");
  }
  long totals[2] = {g_passed, g_failed}, sums[2];
  PMPI_Allreduce(totals, sums, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%ld passed, %ld failed\n", sums[0], sums[1]);
  MPI_Finalize();
  return sums[1] == 0 ? 0 : 1;
}
