// Bounded soak: random sizes, datatypes, ops and injected stragglers for a fixed time, every
// result checked against a reference computed on the host (not by the MPI library: Open MPI
// 4.1.4's MPI_UNSIGNED_LONG MIN/MAX and MPICH 4.0.2's uint8 MIN/MAX are wrong with the high bit
// set, and the inputs here set it), and the resident set size checked to stay flat.
// CI runs it with SKIPRING_CHECK=1 (every collective also asserts no message is left over).
//
//   mpirun -np 3 mpi_soak_test [--seconds S] [--seed N] [--rss-slack-mib M]
#include <mpi.h>
#include <skipring/skipring.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/mpi/mpi_test_util.h"

namespace {

constexpr int kMaxCount = 1 << 18;

// Resident set size of this process in bytes (/proc/self/statm), 0 when unreadable.
size_t rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long size = 0, resident = 0;
  const int got = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return got == 2 ? static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

enum class Op { kSum, kProd, kMin, kMax, kBand, kBor, kBxor, kLand, kLor };
const char* const kOpNames[] = {"sum", "prod", "min", "max", "band", "bor", "bxor", "land", "lor"};
MPI_Op mpi_op(Op op) {
  static const MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN,  MPI_MAX, MPI_BAND,
                               MPI_BOR, MPI_BXOR, MPI_LAND, MPI_LOR};
  return ops[static_cast<int>(op)];
}

// Rank r's element i for a call with salt `salt`: the full range of T for MIN/MAX and the
// bitwise ops (high bits set), small values elsewhere so sums and products stay exact (floats)
// and never overflow a signed type.
template <typename T>
T input(Op op, uint64_t salt, int r, size_t i) {
  uint64_t x = (salt + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(r) + 1)) ^
               (0xbf58476d1ce4e5b9ull * (static_cast<uint64_t>(i) + 1));
  x ^= x >> 29;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 32;
  if constexpr (std::is_floating_point_v<T>) {
    if (op == Op::kProd) return static_cast<T>(static_cast<int>(x % 3) - 1);  // -1, 0, 1
    return static_cast<T>(static_cast<int64_t>(x % 2001) - 1000);
  } else {
    switch (op) {
      case Op::kSum:
        return static_cast<T>(x % 100);
      case Op::kProd:
        return static_cast<T>(x % 3);
      case Op::kLand:
      case Op::kLor:
        return static_cast<T>(x % 4 == 0 ? 0 : x % 3);
      default:
        return static_cast<T>(x);  // every bit pattern, high bit included
    }
  }
}

template <typename T>
T combine(Op op, T a, T b) {
  switch (op) {
    case Op::kSum:
      return static_cast<T>(a + b);
    case Op::kProd:
      return static_cast<T>(a * b);
    case Op::kMin:
      return std::min(a, b);
    case Op::kMax:
      return std::max(a, b);
    case Op::kLand:
      return static_cast<T>((a != 0) && (b != 0));
    case Op::kLor:
      return static_cast<T>((a != 0) || (b != 0));
    default:
      break;
  }
  if constexpr (std::is_integral_v<T>) {
    if (op == Op::kBand) return static_cast<T>(a & b);
    if (op == Op::kBor) return static_cast<T>(a | b);
    return static_cast<T>(a ^ b);
  }
  return a;
}

// One all-reduce of `count` elements of T with `op`; returns the number of wrong elements
// (or -1 when the call failed).
template <typename T>
long one_call(MPI_Datatype type, Op op, int count, uint64_t salt, MPI_Comm comm, int rank, int size,
              std::vector<uint8_t>* sbuf, std::vector<uint8_t>* rbuf) {
  T* send = reinterpret_cast<T*>(sbuf->data());
  T* recv = reinterpret_cast<T*>(rbuf->data());
  for (int i = 0; i < count; ++i) send[i] = input<T>(op, salt, rank, i);
  const int rc = skipring_allreduce(send, recv, count, type, mpi_op(op), comm);
  if (rc != MPI_SUCCESS) return -1;
  long wrong = 0;
  for (int i = 0; i < count; ++i) {
    T want = input<T>(op, salt, 0, i);
    for (int r = 1; r < size; ++r) want = combine<T>(op, want, input<T>(op, salt, r, i));
    if (std::memcmp(&want, &recv[i], sizeof(T)) != 0) ++wrong;
  }
  return wrong;
}

struct TypeCase {
  const char* name;
  MPI_Datatype type;
  bool floating;
  long (*call)(MPI_Datatype, Op, int, uint64_t, MPI_Comm, int, int, std::vector<uint8_t>*,
               std::vector<uint8_t>*);
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int& rank = mpitest::g_rank;
  int& size = mpitest::g_size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  double seconds = 20;
  uint64_t seed = 12345;
  double rss_slack_mib = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--seed") == 0) seed = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--rss-slack-mib") == 0) rss_slack_mib = std::atof(argv[i + 1]);
  }
  const TypeCase types[] = {
      {"int8", MPI_INT8_T, false, one_call<int8_t>},
      {"uint8", MPI_UINT8_T, false, one_call<uint8_t>},
      {"int16", MPI_INT16_T, false, one_call<int16_t>},
      {"uint16", MPI_UINT16_T, false, one_call<uint16_t>},
      {"int32", MPI_INT32_T, false, one_call<int32_t>},
      {"uint32", MPI_UINT32_T, false, one_call<uint32_t>},
      {"int64", MPI_INT64_T, false, one_call<int64_t>},
      {"uint64", MPI_UINT64_T, false, one_call<uint64_t>},
      {"unsigned long", MPI_UNSIGNED_LONG, false, one_call<unsigned long>},
      {"float", MPI_FLOAT, true, one_call<float>},
      {"double", MPI_DOUBLE, true, one_call<double>},
  };
  const int ntypes = static_cast<int>(sizeof types / sizeof types[0]);
  std::vector<uint8_t> sbuf(static_cast<size_t>(kMaxCount) * 8), rbuf(sbuf.size());
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);

  // Warm-up: the largest size once per element size, so skipring's scratch buffers reach their
  // final size before the baseline RSS is taken.
  for (int t : {1, 3, 5, 7}) {
    const long w =
        types[t].call(types[t].type, Op::kSum, kMaxCount, seed, comm, rank, size, &sbuf, &rbuf);
    mpitest::check(w == 0, std::string("warm-up ") + types[t].name);
  }
  PMPI_Barrier(comm);
  const size_t rss0 = rss_bytes();

  // The same random stream on every rank: every rank makes the same call.
  std::mt19937_64 rng(seed);
  const double t0 = MPI_Wtime();
  long calls = 0, failed_calls = 0, wrong_total = 0, straggled = 0;
  for (;;) {
    int go = MPI_Wtime() - t0 < seconds ? 1 : 0;
    PMPI_Bcast(&go, 1, MPI_INT, 0, comm);  // rank 0's clock decides, so all stop together
    if (!go) break;
    const TypeCase& tc = types[rng() % ntypes];
    Op op = static_cast<Op>(rng() % 9);
    // Bitwise and logical ops are not defined on floating types (MPI-3.1 5.9.2).
    if (tc.floating && op >= Op::kBand) op = Op::kSum;
    // Sizes log-uniform from 1 to kMaxCount elements.
    const int count =
        std::max(1, static_cast<int>(std::exp2(static_cast<double>(rng() % 1800) / 100.0)));
    const uint64_t salt = rng();
    // One call in four has a straggler: a random rank, 0.5-4 ms late or slow at every step.
    std::string spec;
    if (size > 1 && rng() % 4 == 0) {
      const int who = static_cast<int>(rng() % size);
      const double ms = 0.5 + static_cast<double>(rng() % 36) / 10.0;
      spec = "rank=" + std::to_string(who) + ",delay=" + std::to_string(ms) +
             "ms,at=" + (rng() % 2 ? "arrive" : "rs");
      ++straggled;
    }
    mpitest::check(skipring_set_inject(spec.c_str()) == MPI_SUCCESS, "set_inject " + spec);
    const long w =
        tc.call(tc.type, op, std::min(count, kMaxCount), salt, comm, rank, size, &sbuf, &rbuf);
    ++calls;
    if (w < 0) {
      ++failed_calls;
      std::fprintf(stderr, "rank %d FAIL: call %ld (%s %s, %d elements, '%s') returned an error\n",
                   rank, calls, tc.name, kOpNames[static_cast<int>(op)], count, spec.c_str());
    } else if (w > 0 && wrong_total++ < 5) {
      std::fprintf(stderr, "rank %d FAIL: call %ld (%s %s, %d elements, '%s'): %ld wrong\n", rank,
                   calls, tc.name, kOpNames[static_cast<int>(op)], count, spec.c_str(), w);
    }
  }
  skipring_set_inject("");
  mpitest::check(failed_calls == 0, "calls returned errors: " + std::to_string(failed_calls));
  mpitest::check(wrong_total == 0, "calls with wrong results: " + std::to_string(wrong_total));
  mpitest::check(calls >= 20, "only " + std::to_string(calls) + " calls in the soak");
  int pending = -1;
  mpitest::check(skipring_pending_messages(comm, &pending) == MPI_SUCCESS && pending == 0,
                 "messages left on the communicator");
  const size_t rss1 = rss_bytes();
  const double grew_mib =
      (static_cast<double>(rss1) - static_cast<double>(rss0)) / (1024.0 * 1024.0);
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer keeps freed blocks in its quarantine (256 MiB by default): the resident
  // set grows with every allocation whatever the program does. The plain build checks it.
  rss_slack_mib = 1e9;
#endif
  mpitest::check(rss0 > 0 && grew_mib <= rss_slack_mib, "RSS grew by " + std::to_string(grew_mib) +
                                                            " MiB (slack " +
                                                            std::to_string(rss_slack_mib) + ")");
  if (rank == 0) {
    std::printf("soak: %ld calls in %.1f s (%ld with a straggler), RSS %+.2f MiB on rank 0\n",
                calls, MPI_Wtime() - t0, straggled, grew_mib);
  }
  MPI_Comm_free(&comm);
  const int rc = mpitest::finish();
  MPI_Finalize();
  return rc;
}
