// What scientific codes reduce besides plain numbers (issue 40), through skipring_allreduce (the
// drop-in calls it): complex types (C float/double/long double complex, Fortran COMPLEX and
// DOUBLE COMPLEX) with SUM and PROD, and MINLOC/MAXLOC on the pair types (C and Fortran). skipring
// reduces them itself: skipring_handles says so, every call counts as a call skipring ran, none as
// a fallback (of any reason); at small sizes a call may go to the MPI library's own all-reduce
// (the `mpi` row, as doubles do) unless --own-kernels is given (run with
// SKIPRING_ALGO=skipring: then no call may); results must be
// bit-exact against a reduction computed here on the host, identical on every rank, in place and
// not, for counts 1, n + 1 and a large one; a NaN value wins MINLOC/MAXLOC at every size.
//
// Exactness whatever the MPI's order: complex values are small Gaussian integers (real and
// imaginary parts in -2..2), so every partial sum and product is an exact integer in float;
// MINLOC/MAXLOC values come from a small set, so ties happen and the index rule (the smallest
// index among equal values) is exercised.
//
// Prints "N passed, M failed" and exits non-zero on any failure.
#include <mpi.h>
#include <skipring/skipring.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/mpi/mpi_test_util.h"

namespace {
using mpitest::check;
using mpitest::g_rank;
using mpitest::g_size;

// Element i of rank r's input: a Gaussian integer in [-2, 2] + [-2, 2] i, never 0 + 0 i for PROD.
template <typename R>
std::complex<R> gaussian(int r, int i, bool prod) {
  const int a = (r * 7 + i * 3) % 5 - 2, b = (r * 3 + i * 11 + 1) % 5 - 2;
  if (prod && a == 0 && b == 0) return {R(1), R(0)};
  return {R(a), R(b)};
}

// What skipring's counters say of the calls so far.
struct Counts {
  uint64_t calls = 0;      // all-reduces skipring ran
  uint64_t fallbacks = 0;  // handed to PMPI_Allreduce, any reason
  uint64_t mpi = 0;        // run by handing them to the MPI library's all-reduce
};

Counts counts() {
  Counts c;
  skipring_totals_t t;
  check(skipring_get_totals(&t) == MPI_SUCCESS, "skipring_get_totals");
  c.calls = t.calls;
  c.fallbacks = t.fallbacks;
  skipring_get_counter("mpi", &c.mpi);
  return c;
}

// --own-kernels: no call may go to the MPI library's all-reduce (the `mpi` row).
bool g_own_kernels = false;

// The call between `before` and now ran in skipring: by skipring's own kernels, or for a complex
// type (`mpi_row_ok`) without --own-kernels possibly by the `mpi` row.
void check_ran_in_skipring(const Counts& before, MPI_Datatype type, MPI_Op op,
                           const std::string& what, bool mpi_row_ok) {
  const Counts now = counts();
  int handled = 0;
  check(skipring_handles(type, op, MPI_COMM_WORLD, &handled) == MPI_SUCCESS && handled == 1,
        what + ": skipring_handles says skipring does not reduce it");
  check(
      now.fallbacks == before.fallbacks,
      what + ": counted as a fallback (" + std::to_string(now.fallbacks - before.fallbacks) + ")");
  check(now.calls == before.calls + 1, what + ": not counted as a call skipring ran");
  if (g_own_kernels || !mpi_row_ok) {
    check(now.mpi == before.mpi, what + ": handed to the MPI library's all-reduce");
  }
}

// skipring_allreduce of `in` into *out (in place: *out starts as a copy of `in`), rc checked.
template <typename T>
void reduce_checked(const std::vector<T>& in, std::vector<T>* out, int count, MPI_Datatype type,
                    MPI_Op op, bool in_place, const std::string& what) {
  int rc;
  if (in_place) {
    *out = in;
    rc = skipring_allreduce(MPI_IN_PLACE, out->data(), count, type, op, MPI_COMM_WORLD);
  } else {
    rc = skipring_allreduce(in.data(), out->data(), count, type, op, MPI_COMM_WORLD);
  }
  check(rc == MPI_SUCCESS, what + ": rc " + std::to_string(rc));
}

template <typename R>
void complex_case(MPI_Datatype type, const char* name, MPI_Op op, int count, bool in_place) {
  if (type == MPI_DATATYPE_NULL) return;  // an MPI built without Fortran
  const bool prod = op == MPI_PROD;
  using C = std::complex<R>;
  std::vector<C> in(count), out(count), ref(count);
  for (int i = 0; i < count; ++i) {
    in[i] = gaussian<R>(g_rank, i, prod);
    C acc = gaussian<R>(0, i, prod);
    for (int r = 1; r < g_size; ++r)
      acc = prod ? acc * gaussian<R>(r, i, prod) : acc + gaussian<R>(r, i, prod);
    ref[i] = acc;
  }
  const std::string what = std::string(name) + (prod ? " PROD" : " SUM") +
                           " count=" + std::to_string(count) + (in_place ? " in place" : "");
  const Counts before = counts();
  reduce_checked(in, &out, count, type, op, in_place, what);
  bool same = true;
  for (int i = 0; i < count; ++i)
    same = same && out[i].real() == ref[i].real() && out[i].imag() == ref[i].imag();
  check(same, what + ": differs from the host reference");
  check_ran_in_skipring(before, type, op, what, /*mpi_row_ok=*/true);
  // Identical on every rank (as bytes of the values).
  std::vector<R> parts(2 * static_cast<size_t>(count)), root(parts.size());
  for (int i = 0; i < count; ++i) {
    parts[2 * i] = out[i].real();
    parts[2 * i + 1] = out[i].imag();
  }
  root = parts;
  mpitest::bcast(root.data(), static_cast<int>(root.size() * sizeof(R)), MPI_BYTE, 0);
  int mine = root == parts ? 1 : 0, all = 0;
  mpitest::allreduce(&mine, &all, 1, MPI_INT, MPI_LAND);
  check(all == 1, what + ": ranks disagree");
}

// The C pair types' layouts (MPI-3.1 5.9.4).
template <typename V, typename I = int>
struct Pair {
  V value;
  I index;
};

// Rank r's value at element i: from a small set, so ranks tie.
template <typename V>
V loc_value(int r, int i) {
  return static_cast<V>((r * 5 + i * 3) % 4 - 1);
}

template <typename V, typename I = int>
void loc_case(MPI_Datatype type, const char* name, MPI_Op op, int count, bool in_place) {
  if (type == MPI_DATATYPE_NULL) return;  // an MPI built without Fortran
  const bool is_max = op == MPI_MAXLOC;
  std::vector<Pair<V, I>> in(count), out(count), ref(count);
  for (int i = 0; i < count; ++i) {
    in[i] = {loc_value<V>(g_rank, i), static_cast<I>(g_rank)};
    Pair<V, I> best{loc_value<V>(0, i), 0};
    for (int r = 1; r < g_size; ++r) {
      const V v = loc_value<V>(r, i);
      if (is_max ? v > best.value : v < best.value) best = {v, static_cast<I>(r)};
      // Equal values keep the smaller index (r only grows here).
    }
    ref[i] = best;
  }
  const std::string what = std::string(name) + (is_max ? " MAXLOC" : " MINLOC") +
                           " count=" + std::to_string(count) + (in_place ? " in place" : "");
  const Counts before = counts();
  reduce_checked(in, &out, count, type, op, in_place, what);
  bool same = true;
  for (int i = 0; i < count; ++i)
    same = same && out[i].value == ref[i].value && out[i].index == ref[i].index;
  check(same, what + ": differs from the host reference");
  check_ran_in_skipring(before, type, op, what, /*mpi_row_ok=*/true);
  // The same on every rank: the maximum and minimum of (value, index) over the ranks agree.
  long long mine[2] = {0, 0};
  for (int i = 0; i < count; ++i) {
    mine[0] += static_cast<long long>(out[i].value) * 1000003 +
               static_cast<long long>(out[i].index) * (i + 1);
  }
  mine[1] = -mine[0];
  long long all[2];
  mpitest::allreduce(mine, all, 2, MPI_LONG_LONG, MPI_MAX);
  check(all[0] == -all[1], what + ": ranks disagree");
}

// A NaN value wins MINLOC and MAXLOC on skipring's kernels, with the smallest index among the
// NaNs, at every size (--own-kernels only: on the `mpi` row the MPI's rule decides, and Open
// MPI 4.1.4's lets it lose). The last rank holds NaN, the others 1.0.
void nan_case(MPI_Op op, int count) {
  std::vector<Pair<double>> in(count), out(count);
  for (int i = 0; i < count; ++i) {
    in[i] = {g_rank == g_size - 1 ? std::nan("") : 1.0, g_rank};
  }
  const std::string what = std::string("MPI_DOUBLE_INT ") +
                           (op == MPI_MAXLOC ? "MAXLOC" : "MINLOC") +
                           " with a NaN count=" + std::to_string(count);
  const Counts before = counts();
  reduce_checked(in, &out, count, MPI_DOUBLE_INT, op, false, what);
  bool nan_won = true;
  for (int i = 0; i < count; ++i) {
    nan_won = nan_won && std::isnan(out[i].value) && out[i].index == g_size - 1;
  }
  check(nan_won, what + ": the NaN value (rank " + std::to_string(g_size - 1) + ") did not win");
  check_ran_in_skipring(before, MPI_DOUBLE_INT, op, what, /*mpi_row_ok=*/false);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  for (int i = 1; i < argc; ++i)
    g_own_kernels = g_own_kernels || std::strcmp(argv[i], "--own-kernels") == 0;
  for (int count : {1, g_size + 1, 4099}) {
    for (bool in_place : {false, true}) {
      for (MPI_Op op : {MPI_SUM, MPI_PROD}) {
        complex_case<float>(MPI_C_FLOAT_COMPLEX, "MPI_C_FLOAT_COMPLEX", op, count, in_place);
        complex_case<double>(MPI_C_DOUBLE_COMPLEX, "MPI_C_DOUBLE_COMPLEX", op, count, in_place);
        complex_case<long double>(MPI_C_LONG_DOUBLE_COMPLEX, "MPI_C_LONG_DOUBLE_COMPLEX", op, count,
                                  in_place);
        // Fortran COMPLEX and DOUBLE COMPLEX: two REALs / DOUBLE PRECISIONs.
        complex_case<float>(MPI_COMPLEX, "MPI_COMPLEX", op, count, in_place);
        complex_case<double>(MPI_DOUBLE_COMPLEX, "MPI_DOUBLE_COMPLEX", op, count, in_place);
      }
      for (MPI_Op op : {MPI_MINLOC, MPI_MAXLOC}) {
        loc_case<float>(MPI_FLOAT_INT, "MPI_FLOAT_INT", op, count, in_place);
        loc_case<double>(MPI_DOUBLE_INT, "MPI_DOUBLE_INT", op, count, in_place);
        loc_case<long>(MPI_LONG_INT, "MPI_LONG_INT", op, count, in_place);
        loc_case<int>(MPI_2INT, "MPI_2INT", op, count, in_place);
        loc_case<short>(MPI_SHORT_INT, "MPI_SHORT_INT", op, count, in_place);
        loc_case<long double>(MPI_LONG_DOUBLE_INT, "MPI_LONG_DOUBLE_INT", op, count, in_place);
        // Fortran pairs: both members of the Fortran type (REAL, DOUBLE PRECISION, INTEGER).
        loc_case<float, float>(MPI_2REAL, "MPI_2REAL", op, count, in_place);
        loc_case<double, double>(MPI_2DOUBLE_PRECISION, "MPI_2DOUBLE_PRECISION", op, count,
                                 in_place);
        loc_case<int, int>(MPI_2INTEGER, "MPI_2INTEGER", op, count, in_place);
      }
    }
  }
  for (int count : {1, 4099}) {
    for (MPI_Op op : {MPI_MINLOC, MPI_MAXLOC}) {
      if (g_own_kernels) nan_case(op, count);
    }
  }
  const int rc = mpitest::finish();
  MPI_Finalize();
  return rc;
}
