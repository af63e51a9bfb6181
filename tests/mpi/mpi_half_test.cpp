// skipring's 16-bit float datatypes (skipring_type_float16 / skipring_type_bfloat16) through
// the C API under mpirun: all-reduce, reduce-scatter and reduce with SUM / PROD / MIN / MAX,
// results checked against host references on inputs where every reduction order gives the same
// value (small integers for SUM, powers of two for PROD, any finite values for MIN / MAX), the
// same bits on every rank, nothing left in flight; LAND on them is MPI_ERR_OP.
// --expect-skips: some rank skipped ahead (run with a straggler injected).
// --expect-type-error: run with SKIPRING_ENABLE=0, where a reduction on them would go to
// PMPI, which cannot reduce them: every call must return MPI_ERR_TYPE.
#include <mpi.h>
#include <skipring/skipring.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "collectives/half.h"
#include "mpi_test_util.h"

using mpitest::check;
using mpitest::g_rank;
using mpitest::g_size;

namespace {

struct Format {
  const char* name;
  MPI_Datatype type;
  float (*decode)(uint16_t);
  uint16_t (*encode)(float);
};

uint16_t input_bits(const Format& f, MPI_Op op, int rank, size_t i, std::mt19937& rng) {
  if (op == MPI_SUM)
    return f.encode(static_cast<float>(static_cast<int>((i * 7 + rank * 3) % 17) - 8));
  if (op == MPI_PROD) {
    const int k = static_cast<int>((i + rank) % 5) - 2;
    return f.encode(((i + rank) % 3 == 0 ? -1.0f : 1.0f) * std::ldexp(1.0f, k));
  }
  // MIN / MAX: any finite value (no NaN: its bits are defined, but compare unequal).
  for (;;) {
    const auto b = static_cast<uint16_t>(rng() & 0xFFFF);
    if (std::isfinite(f.decode(b))) return b;
  }
}

float host_op(MPI_Op op, float a, float b) {
  if (op == MPI_SUM) return a + b;
  if (op == MPI_PROD) return a * b;
  if (a == b) return (op == MPI_MIN) == static_cast<bool>(std::signbit(a)) ? a : b;
  if (op == MPI_MIN) return b < a ? b : a;
  return a < b ? b : a;
}

// Every rank's input gathered by PMPI_Allgather (reduces nothing), reduced here element by
// element in rank order. Exact for the inputs above, so any order gives the same bits.
std::vector<uint16_t> reference(const Format& f, MPI_Op op, const std::vector<uint16_t>& in) {
  const size_t n = in.size();
  std::vector<uint16_t> all(n * g_size);
  PMPI_Allgather(in.data(), static_cast<int>(n * 2), MPI_BYTE, all.data(), static_cast<int>(n * 2),
                 MPI_BYTE, MPI_COMM_WORLD);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    float acc = f.decode(all[i]);
    for (int r = 1; r < g_size; ++r) acc = host_op(op, acc, f.decode(all[r * n + i]));
    out[i] = f.encode(acc);
  }
  return out;
}

bool same_everywhere(const std::vector<uint16_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (uint16_t x : v) h = (h ^ x) * 1099511628211ull;
  uint64_t lo = h, hi = h;
  PMPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  PMPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

const char* op_name(MPI_Op op) {
  return op == MPI_SUM ? "sum" : op == MPI_PROD ? "prod" : op == MPI_MIN ? "min" : "max";
}

void run_checks(const Format& f) {
  std::mt19937 rng(1234 + g_rank);
  for (MPI_Op op : {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{100003}}) {
      const std::string what = std::string(f.name) + " " + op_name(op) + " n=" + std::to_string(n);
      std::vector<uint16_t> in(n);
      for (size_t i = 0; i < n; ++i) in[i] = input_bits(f, op, g_rank, i, rng);
      const std::vector<uint16_t> want = reference(f, op, in);
      std::vector<uint16_t> got(n, 0xDEAD);
      int rc = skipring_allreduce(in.data(), got.data(), static_cast<int>(n), f.type, op,
                                  MPI_COMM_WORLD);
      check(rc == MPI_SUCCESS, what + ": allreduce returns MPI_SUCCESS");
      check(got == want, what + ": allreduce equals the host reference");
      check(same_everywhere(got), what + ": allreduce bits equal on every rank");
      std::vector<uint16_t> inplace = in;
      rc = skipring_allreduce(MPI_IN_PLACE, inplace.data(), static_cast<int>(n), f.type, op,
                              MPI_COMM_WORLD);
      check(rc == MPI_SUCCESS && inplace == want, what + ": in-place allreduce");
      // Reduce to the last rank.
      std::vector<uint16_t> root_out(n, 0xDEAD);
      rc = skipring_reduce(in.data(), root_out.data(), static_cast<int>(n), f.type, op, g_size - 1,
                           MPI_COMM_WORLD);
      check(rc == MPI_SUCCESS && (g_rank != g_size - 1 || root_out == want),
            what + ": reduce to the last rank");
      // Reduce-scatter: each rank's block of n / size elements.
      const size_t per = n / static_cast<size_t>(g_size);
      std::vector<uint16_t> block(per, 0xDEAD);
      rc = skipring_reduce_scatter_block(in.data(), block.data(), static_cast<int>(per), f.type, op,
                                         MPI_COMM_WORLD);
      const std::vector<uint16_t> want_block(want.begin() + static_cast<long>(per * g_rank),
                                             want.begin() + static_cast<long>(per * (g_rank + 1)));
      check(rc == MPI_SUCCESS && block == want_block, what + ": reduce_scatter_block");
      check(mpitest::no_leftovers(), what + ": nothing left in flight");
    }
  }
  uint16_t one = f.encode(1.0f), out = 0;
  check(skipring_allreduce(&one, &out, 1, f.type, MPI_LAND, MPI_COMM_WORLD) == MPI_ERR_OP,
        std::string(f.name) + ": LAND is MPI_ERR_OP");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  const bool expect_type_error = argc > 1 && std::strcmp(argv[1], "--expect-type-error") == 0;
  const bool expect_skips = argc > 1 && std::strcmp(argv[1], "--expect-skips") == 0;
  check(skipring_type_float16() != MPI_DATATYPE_NULL, "skipring_type_float16() exists");
  check(skipring_type_bfloat16() != MPI_DATATYPE_NULL, "skipring_type_bfloat16() exists");
  check(skipring_type_float16() != skipring_type_bfloat16(), "two distinct types");
  int size = 0;
  MPI_Type_size(skipring_type_float16(), &size);
  check(size == 2, "float16 is 2 bytes to MPI");
  const Format formats[] = {
      {"float16", skipring_type_float16(), skipring::float16_to_float, skipring::float_to_float16},
      {"bfloat16", skipring_type_bfloat16(), skipring::bfloat16_to_float,
       skipring::float_to_bfloat16}};
  for (const Format& f : formats) {
    if (expect_type_error) {
      std::vector<uint16_t> in(8, f.encode(1.0f)), out(8);
      check(skipring_allreduce(in.data(), out.data(), 8, f.type, MPI_SUM, MPI_COMM_WORLD) ==
                MPI_ERR_TYPE,
            std::string(f.name) + ": allreduce that would fall back is MPI_ERR_TYPE");
      check(skipring_reduce(in.data(), out.data(), 8, f.type, MPI_SUM, 0, MPI_COMM_WORLD) ==
                MPI_ERR_TYPE,
            std::string(f.name) + ": reduce that would fall back is MPI_ERR_TYPE");
      check(skipring_reduce_scatter_block(in.data(), out.data(), 1, f.type, MPI_MAX,
                                          MPI_COMM_WORLD) == MPI_ERR_TYPE,
            std::string(f.name) + ": reduce_scatter_block that would fall back is MPI_ERR_TYPE");
      // Broadcast moves bytes: PMPI handles the type.
      check(skipring_bcast(in.data(), 8, f.type, 0, MPI_COMM_WORLD) == MPI_SUCCESS,
            std::string(f.name) + ": bcast still works (bytes)");
    } else {
      run_checks(f);
    }
  }
  if (expect_skips) {
    skipring_totals_t t{};
    skipring_get_totals(&t);
    uint64_t skips = t.skips;
    PMPI_Allreduce(MPI_IN_PLACE, &skips, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    check(skips > 0, "the straggler made ranks skip ahead on 16-bit data");
    if (g_rank == 0) std::printf("skips=%llu\n", static_cast<unsigned long long>(skips));
  }
  std::printf("rank %d: %ld passed, %ld failed\n", g_rank, mpitest::g_passed, mpitest::g_failed);
  long failed = mpitest::g_failed;
  PMPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%ld passed, %ld failed\n", mpitest::g_passed, failed);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}
