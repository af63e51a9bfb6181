// The C++ API under mpirun: typed allreduce, in-place vector form, stats, and an error
// surfacing as skipring::Error with the MPI code.
#include <skipring/skipring.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1, failed = 0, passed = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto expect = [&](bool c, const char* what) {
    c ? ++passed : ++failed;
    if (!c) std::fprintf(stderr, "rank %d FAIL: %s\n", rank, what);
  };
  std::vector<double> v(1001, rank + 1.0);
  skipring::allreduce(v);
  expect(v[1000] == size * (size + 1) / 2.0, "vector sum");
  std::vector<int64_t> a(77, rank), b(77);
  skipring::allreduce(a.data(), b.data(), 77, MPI_MAX);
  expect(b[5] == size - 1, "int64 max");
  expect(skipring::last_stats().bytes == 77 * 8, "stats bytes");
  try {
    skipring::allreduce(a.data(), b.data(), -1);
    expect(false, "negative count throws");
  } catch (const skipring::Error& e) {
    expect(e.code() == MPI_ERR_COUNT, "negative count is MPI_ERR_COUNT");
  }
  expect(skipring::totals().calls == 2, "two calls counted");
  int sums[2] = {passed, failed}, all[2];
  PMPI_Allreduce(sums, all, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%d passed, %d failed\n", all[0], all[1]);
  MPI_Finalize();
  return all[1] == 0 ? 0 : 1;
}
