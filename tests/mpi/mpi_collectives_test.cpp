// skipring_reduce_scatter_block, skipring_allgather, skipring_bcast and skipring_reduce under
// mpirun: several types, ops, counts (0, 1, < n, uneven, large), roots, in place and not;
// reductions against the host's (mpi_test_util.h: integers over their full range, high bit
// set, except signed sums; floats with MIN/MAX), float sums against MPI's own (PMPI_) with
// values that are small multiples of 1/4 so that every summation order gives exact results and
// float results can be compared bit for bit; allgather and bcast against PMPI_; nothing left
// unmatched on the internal communicator; bad arguments give MPI error codes.
// Prints "N passed, M failed" and exits non-zero on any failure.
#include <mpi.h>
#include <skipring/skipring.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/mpi/mpi_test_util.h"

namespace {
using mpitest::check;
using mpitest::g_rank;
using mpitest::g_size;
using mpitest::no_leftovers;

struct TypeCase {
  MPI_Datatype type;
  const char* name;
  size_t size;
  bool floating;
};

const TypeCase kTypes[] = {
    {MPI_INT, "int", sizeof(int), false},
    {MPI_LONG_LONG, "long long", sizeof(long long), false},
    {MPI_UNSIGNED_CHAR, "unsigned char", 1, false},
    {MPI_UNSIGNED_LONG, "unsigned long", sizeof(unsigned long), false},
    {MPI_FLOAT, "float", sizeof(float), true},
    {MPI_DOUBLE, "double", sizeof(double), true},
};

struct OpCase {
  MPI_Op op;
  const char* name;
};
const OpCase kOps[] = {{MPI_SUM, "sum"}, {MPI_MAX, "max"}, {MPI_MIN, "min"}, {MPI_BXOR, "bxor"}};

bool defined(const TypeCase& t, MPI_Op op) { return !(t.floating && op == MPI_BXOR); }

bool is_unsigned(const TypeCase& t) {
  return t.type == MPI_UNSIGNED_CHAR || t.type == MPI_UNSIGNED_LONG;
}

// Values for `op`: integers over their full range (high bit set) for unsigned types and for
// signed MIN/MAX/BXOR; small values where a signed sum must not overflow; floats in quarters.
void fill(const TypeCase& t, void* buf, size_t count, std::mt19937_64& rng, MPI_Op op) {
  if (!t.floating && (is_unsigned(t) || op != MPI_SUM)) {
    return mpitest::fill_full_range(static_cast<uint8_t*>(buf), count, t.size, rng);
  }
  for (size_t i = 0; i < count; ++i) {
    const long v = static_cast<long>(rng() % 64) - 16;
    auto* p = static_cast<uint8_t*>(buf) + i * t.size;
    if (t.type == MPI_INT) {
      const int x = static_cast<int>(v);
      std::memcpy(p, &x, sizeof x);
    } else if (t.type == MPI_LONG_LONG) {
      const long long x = v * 1000003LL;
      std::memcpy(p, &x, sizeof x);
    } else if (t.type == MPI_FLOAT) {
      const float x = static_cast<float>(v) / 4;
      std::memcpy(p, &x, sizeof x);
    } else {
      const double x = static_cast<double>(v) / 4;
      std::memcpy(p, &x, sizeof x);
    }
  }
}

std::string label(const char* coll, const TypeCase& t, const char* op, int count, int root,
                  bool in_place) {
  return std::string(coll) + " " + t.name + " " + op + " count " + std::to_string(count) +
         " root " + std::to_string(root) + (in_place ? " in place" : "");
}

void test_reduce_scatter(const TypeCase& t, const OpCase& o, int count, bool in_place,
                         std::mt19937_64& rng) {
  const size_t n = static_cast<size_t>(g_size), es = t.size, c = static_cast<size_t>(count);
  std::vector<uint8_t> in(n * c * es + 1), got(in_place ? n * c * es + 1 : c * es + 1, 0x5A),
      want(c * es + 1, 0x5A);
  fill(t, in.data(), n * c, rng, o.op);
  int rc;
  if (in_place) {
    std::memcpy(got.data(), in.data(), n * c * es);
    rc = skipring_reduce_scatter_block(MPI_IN_PLACE, got.data(), count, t.type, o.op,
                                       MPI_COMM_WORLD);
  } else {
    rc = skipring_reduce_scatter_block(in.data(), got.data(), count, t.type, o.op, MPI_COMM_WORLD);
  }
  // The host's reduction of the whole vector, this rank's block of it; MPI's for float sums.
  std::vector<uint8_t> full(n * c * es + 1);
  const bool host = mpitest::host_reduce(t.type, o.op, in.data(), n * c, full.data());
  if (host) {
    std::memcpy(want.data(), full.data() + g_rank * c * es, c * es);
  } else {
    mpitest::politely([&](MPI_Request* r) {
      return PMPI_Ireduce_scatter_block(in.data(), want.data(), count, t.type, o.op, MPI_COMM_WORLD,
                                        r);
    });
  }
  const std::string what = label("reduce_scatter_block", t, o.name, count, -1, in_place);
  check(rc == MPI_SUCCESS, what + ": rc " + std::to_string(rc));
  check(std::memcmp(got.data(), want.data(), c * es) == 0,
        what + (host ? ": differs from the host reference" : ": differs from MPI"));
  if (!in_place) check(got[c * es] == 0x5A, what + ": wrote past the block");
  check(no_leftovers(), what + ": message left unmatched");
}

void test_allgather(const TypeCase& t, int count, bool in_place, std::mt19937_64& rng) {
  const size_t n = static_cast<size_t>(g_size), es = t.size, c = static_cast<size_t>(count);
  std::vector<uint8_t> mine(c * es + 1), got(n * c * es + 1, 0x5A), want(n * c * es + 1, 0x5A);
  fill(t, mine.data(), c, rng, MPI_BXOR);
  int rc;
  if (in_place) {
    std::memcpy(got.data() + g_rank * c * es, mine.data(), c * es);
    rc = skipring_allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, got.data(), count, t.type,
                            MPI_COMM_WORLD);
  } else {
    rc = skipring_allgather(mine.data(), count, t.type, got.data(), count, t.type, MPI_COMM_WORLD);
  }
  mpitest::politely([&](MPI_Request* r) {
    return PMPI_Iallgather(mine.data(), count, t.type, want.data(), count, t.type, MPI_COMM_WORLD,
                           r);
  });
  const std::string what = label("allgather", t, "-", count, -1, in_place);
  check(rc == MPI_SUCCESS, what + ": rc " + std::to_string(rc));
  check(std::memcmp(got.data(), want.data(), n * c * es + 1) == 0, what + ": differs from MPI");
  check(no_leftovers(), what + ": message left unmatched");
}

void test_bcast(const TypeCase& t, int count, int root, std::mt19937_64& rng) {
  const size_t es = t.size, c = static_cast<size_t>(count);
  std::vector<uint8_t> got(c * es + 1, 0x5A), want(c * es + 1, 0x5A);
  if (g_rank == root) {
    fill(t, got.data(), c, rng, MPI_BXOR);
    want = got;
  }
  const int rc = skipring_bcast(got.data(), count, t.type, root, MPI_COMM_WORLD);
  mpitest::bcast(want.data(), count, t.type, root);
  const std::string what = label("bcast", t, "-", count, root, false);
  check(rc == MPI_SUCCESS, what + ": rc " + std::to_string(rc));
  check(got == want, what + ": differs from MPI");
  check(no_leftovers(), what + ": message left unmatched");
}

void test_reduce(const TypeCase& t, const OpCase& o, int count, int root, bool in_place,
                 std::mt19937_64& rng) {
  const size_t es = t.size, c = static_cast<size_t>(count);
  std::vector<uint8_t> in(c * es + 1), got(c * es + 1, 0x5A), want(c * es + 1, 0x5A);
  fill(t, in.data(), c, rng, o.op);
  int rc;
  if (in_place && g_rank == root) {
    std::memcpy(got.data(), in.data(), c * es);
    rc = skipring_reduce(MPI_IN_PLACE, got.data(), count, t.type, o.op, root, MPI_COMM_WORLD);
  } else {
    // Non-roots pass a NULL recvbuf (only significant at the root).
    rc = skipring_reduce(in.data(), g_rank == root ? got.data() : nullptr, count, t.type, o.op,
                         root, MPI_COMM_WORLD);
  }
  const bool host = mpitest::host_reduce(t.type, o.op, in.data(), c, want.data());
  if (!host) {
    mpitest::politely([&](MPI_Request* r) {
      return PMPI_Ireduce(in.data(), want.data(), count, t.type, o.op, root, MPI_COMM_WORLD, r);
    });
  }
  const std::string what = label("reduce", t, o.name, count, root, in_place);
  check(rc == MPI_SUCCESS, what + ": rc " + std::to_string(rc));
  if (g_rank == root) {
    check(std::memcmp(got.data(), want.data(), c * es + 1) == 0,
          what + (host ? ": differs from the host reference" : ": differs from MPI"));
  } else {
    check(got[0] == 0x5A, what + ": non-root recvbuf written");
  }
  check(no_leftovers(), what + ": message left unmatched");
}

void test_bad_arguments() {
  // Every rank passes the same bad argument, as MPI requires for collective errors.
  int x[8] = {0};
  std::vector<int> big(8 * static_cast<size_t>(g_size));
  check(skipring_reduce_scatter_block(x, x, -1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_ERR_COUNT,
        "reduce_scatter_block count -1");
  check(skipring_reduce_scatter_block(nullptr, x, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD) ==
            MPI_ERR_BUFFER,
        "reduce_scatter_block NULL sendbuf");
  check(skipring_reduce_scatter_block(big.data(), x, 2, MPI_DOUBLE, MPI_BXOR, MPI_COMM_WORLD) ==
            MPI_ERR_OP,
        "reduce_scatter_block BXOR on double");
  check(skipring_reduce_scatter_block(big.data(), x, 2, MPI_INT, MPI_SUM, MPI_COMM_NULL) ==
            MPI_ERR_COMM,
        "reduce_scatter_block MPI_COMM_NULL");
  check(
      skipring_allgather(x, -1, MPI_INT, big.data(), -1, MPI_INT, MPI_COMM_WORLD) == MPI_ERR_COUNT,
      "allgather count -1");
  check(skipring_allgather(x, 2, MPI_INT, nullptr, 2, MPI_INT, MPI_COMM_WORLD) == MPI_ERR_BUFFER,
        "allgather NULL recvbuf");
  check(skipring_allgather(x, 2, MPI_INT, big.data(), 2, MPI_INT, MPI_COMM_NULL) == MPI_ERR_COMM,
        "allgather MPI_COMM_NULL");
  check(skipring_bcast(x, -3, MPI_INT, 0, MPI_COMM_WORLD) == MPI_ERR_COUNT, "bcast count -3");
  check(skipring_bcast(x, 2, MPI_INT, g_size, MPI_COMM_WORLD) == MPI_ERR_ROOT, "bcast root n");
  check(skipring_bcast(x, 2, MPI_INT, -1, MPI_COMM_WORLD) == MPI_ERR_ROOT, "bcast root -1");
  check(skipring_bcast(nullptr, 2, MPI_INT, 0, MPI_COMM_WORLD) == MPI_ERR_BUFFER,
        "bcast NULL buffer");
  check(skipring_bcast(x, 2, MPI_INT, 0, MPI_COMM_NULL) == MPI_ERR_COMM, "bcast MPI_COMM_NULL");
  check(skipring_reduce(x, x, -1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD) == MPI_ERR_COUNT,
        "reduce count -1");
  check(skipring_reduce(x, x, 2, MPI_INT, MPI_SUM, g_size, MPI_COMM_WORLD) == MPI_ERR_ROOT,
        "reduce root n");
  check(skipring_reduce(x, x, 2, MPI_FLOAT, MPI_BAND, 0, MPI_COMM_WORLD) == MPI_ERR_OP,
        "reduce BAND on float");
  check(skipring_reduce(nullptr, x, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD) == MPI_ERR_BUFFER,
        "reduce NULL sendbuf");
  check(skipring_reduce(x, x, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_NULL) == MPI_ERR_COMM,
        "reduce MPI_COMM_NULL");
  check(no_leftovers(), "bad arguments: message left unmatched");
  // Still usable afterwards.
  int v = g_rank + 1, sum = 0;
  check(skipring_reduce(&v, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD) == MPI_SUCCESS &&
            (g_rank != 0 || sum == g_size * (g_size + 1) / 2),
        "reduce after bad arguments");
}

void test_fallbacks() {
  // Different send and receive signatures: handed to PMPI_Allgather.
  const size_t n = static_cast<size_t>(g_size);
  int mine[2] = {g_rank, -g_rank};
  std::vector<long long> got(n, -1);
  long long want_one = 0;
  std::memcpy(&want_one, mine, sizeof want_one);
  check(skipring_allgather(mine, 2, MPI_INT, got.data(), 1, MPI_LONG_LONG, MPI_COMM_WORLD) ==
            MPI_SUCCESS,
        "allgather with different types: rc");
  check(std::memcmp(&got[g_rank], &want_one, sizeof want_one) == 0,
        "allgather with different types: result");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (skipring_init() != MPI_SUCCESS) {
    std::fprintf(stderr, "skipring_init failed\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  std::mt19937_64 rng(1234 + g_rank);
  const int n = g_size;
  const int counts[] = {0, 1, n > 1 ? n - 1 : 2, n + 1, 1000, 70001};
  const int roots[] = {0, n - 1, n / 2};
  for (const TypeCase& t : kTypes) {
    for (int count : counts) {
      for (const OpCase& o : kOps) {
        if (!defined(t, o.op)) continue;
        test_reduce_scatter(t, o, count, false, rng);
        test_reduce(t, o, count, roots[(count + static_cast<int>(o.op == MPI_MAX)) % 3],
                    o.op == MPI_MIN, rng);
      }
      test_reduce_scatter(t, kOps[0], count, true, rng);
      test_allgather(t, count, false, rng);
      test_allgather(t, count, true, rng);
      for (int root : roots) test_bcast(t, count, root, rng);
    }
  }
  skipring_totals_t before{};
  skipring_get_totals(&before);
  check(before.calls > 100 && before.fallbacks == 0,
        "skipring ran the collectives itself: " + std::to_string(before.calls) + " calls, " +
            std::to_string(before.fallbacks) + " fallbacks");
  test_bad_arguments();
  test_fallbacks();
  skipring_totals_t after{};
  skipring_get_totals(&after);
  check(after.fallbacks == 1, "one fallback (allgather with different signatures)");
  const int rc = mpitest::finish();
  MPI_Finalize();
  return rc;
}
