// The C++ API under mpirun: typed allreduce, in-place vector form, stats, and an error
// surfacing as skipring::Error with the MPI code.
#include <cstdio>
#include <skipring/skipring.hpp>
#include <string>
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

  // Algorithm choice and the other collectives.
  skipring::set_algo("rabenseifner");
  std::vector<int32_t> r(10, rank + 1);
  skipring::allreduce(r);
  expect(r[9] == size * (size + 1) / 2, "rabenseifner sum");
  expect(std::string(skipring::last_stats().algo) == "rabenseifner", "stats name rabenseifner");
  try {
    skipring::set_algo("quickest");
    expect(false, "unknown algorithm throws");
  } catch (const skipring::Error& e) {
    expect(e.code() == MPI_ERR_ARG, "unknown algorithm is MPI_ERR_ARG");
  }
  skipring::set_algo("");
  std::vector<int64_t> rs_in(3 * size), rs_out(3);
  for (int i = 0; i < 3 * size; ++i) rs_in[i] = i + rank;
  skipring::reduce_scatter_block(rs_in.data(), rs_out.data(), 3);
  // Block of this rank: elements 3 * rank + j, summed over ranks r of (3 * rank + j + r).
  expect(rs_out[2] == size * (3 * rank + 2) + size * (size - 1) / 2, "reduce_scatter_block");
  std::vector<int16_t> mine(2, static_cast<int16_t>(rank)), every(2 * size);
  skipring::allgather(mine.data(), 2, every.data());
  expect(every[2 * (size - 1) + 1] == size - 1, "allgather rank order");
  std::vector<double> bc(5, rank == 0 ? 2.5 : 0.0);
  skipring::bcast(bc, 0);
  expect(bc[4] == 2.5, "bcast");
  std::vector<uint32_t> rin(4, 1u), rout(4, 0u);
  skipring::reduce(rin.data(), rout.data(), 4, size - 1);
  expect(rank != size - 1 || rout[3] == static_cast<uint32_t>(size), "reduce at the last rank");
  int sums[2] = {passed, failed}, all[2];
  PMPI_Allreduce(sums, all, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%d passed, %d failed\n", all[0], all[1]);
  MPI_Finalize();
  return all[1] == 0 ? 0 : 1;
}
