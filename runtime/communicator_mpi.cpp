// The `mpi` algorithm row (collectives/algorithms.h): the all-reduce handed to the MPI library's
// own PMPI_Allreduce on skipring's duplicate of the communicator, and the probe that measures it
// for the cost model (CostParams::mpi_offset_s).
//
// Why: at small sizes an all-reduce is a few hundred nanoseconds on shared memory, and the MPI
// library's own (hand-tuned for its transport) can beat skipring's direct recursive doubling
// there; skip-ahead has nothing to add at those sizes (a late rank cannot be worked around in
// one round). auto then hands the call over, so the preload is never slower than the MPI it
// replaces where it measures so (issue 40). The choice is the cost model's, made from
// parameters agreed across ranks, so every rank calls PMPI_Allreduce for the same call.
//
// What the `mpi` row does not do: the watchdog (SKIPRING_TIMEOUT) does not cover it (the MPI
// library's all-reduce waits as MPI waits; SKIPRING_AUTO_MPI=0 keeps auto off it); 8-bit
// types (Open MPI 4.1's op/avx component sums them wrongly), unsigned MIN/MAX (MPICH 4.0.2
// compares them as signed) and skipring's 16-bit float types (MPI cannot reduce them) run the
// direct recursive doubling instead (mpi_runs).
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "collectives/recursive_doubling.h"
#include "collectives/select.h"
#include "runtime/communicator.h"
#include "runtime/log.h"
#include "runtime/mpi_types.h"
#include "runtime/mpi_wait.h"
#include "runtime/rd_direct.h"

namespace skipring {

// The MPI datatype of a DType the `mpi` row runs (MPI_DATATYPE_NULL: it does not). Always the
// fixed-width type: Open MPI 4.1.4 reduces MPI_UNSIGNED_LONG with MIN/MAX as signed (values
// with the high bit set come out wrong), MPI_UINT64_T right.
namespace {

// `t` when the MPI maps it to `want` (a Fortran pair whose size fits), else MPI_DATATYPE_NULL.
MPI_Datatype fortran_pair(MPI_Datatype t, DType want) {
  DType d = DType::kCount;
  return dtype_from_mpi(t, &d) && d == want ? t : MPI_DATATYPE_NULL;
}

}  // namespace

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::kInt16:
      return MPI_INT16_T;
    case DType::kUint16:
      return MPI_UINT16_T;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kUint32:
      return MPI_UINT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kUint64:
      return MPI_UINT64_T;
    case DType::kFloat:
      return MPI_FLOAT;
    case DType::kDouble:
      return MPI_DOUBLE;
    case DType::kLongDouble:
      return MPI_LONG_DOUBLE;
    // Complex SUM / PROD and the MINLOC / MAXLOC pairs: the small sizes go to the MPI library
    // as for doubles (one element: complex 0.36 us against Open MPI's 0.35-0.37 and skipring's
    // own 0.42; MPI_DOUBLE_INT MAXLOC 0.37 against 0.35, np 2). There the MPI's own rule
    // decides a NaN value (Open MPI 4.1.4's MAXLOC lets it lose, skipring's kernel lets it win;
    // every rank gets the same answer either way: checked at np 2-5).
    case DType::kComplexFloat:
      return MPI_C_FLOAT_COMPLEX;
    case DType::kComplexDouble:
      return MPI_C_DOUBLE_COMPLEX;
    case DType::kComplexLongDouble:
      return MPI_C_LONG_DOUBLE_COMPLEX;
    case DType::kFloatInt:
      return MPI_FLOAT_INT;
    case DType::kDoubleInt:
      return MPI_DOUBLE_INT;
    case DType::kLongInt:
      return MPI_LONG_INT;
    case DType::kIntInt:
      return MPI_2INT;
    case DType::kShortInt:
      return MPI_SHORT_INT;
    case DType::kLongDoubleInt:
      return MPI_LONG_DOUBLE_INT;
    case DType::kFloatFloat: {  // Fortran's, where its sizes are the DType's
      static const MPI_Datatype two_real = fortran_pair(MPI_2REAL, DType::kFloatFloat);
      return two_real;
    }
    case DType::kDoubleDouble: {
      static const MPI_Datatype two_double =
          fortran_pair(MPI_2DOUBLE_PRECISION, DType::kDoubleDouble);
      return two_double;
    }
    default:
      // 8-bit types (kInt8, kUint8, kBool, kByte): Open MPI 4.1's op/avx sums them wrongly;
      // kFloat16 / kBfloat16: MPI has no reduction for them.
      return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(ROp op) {
  switch (op) {
    case ROp::kSum:
      return MPI_SUM;
    case ROp::kProd:
      return MPI_PROD;
    case ROp::kMin:
      return MPI_MIN;
    case ROp::kMax:
      return MPI_MAX;
    case ROp::kLand:
      return MPI_LAND;
    case ROp::kLor:
      return MPI_LOR;
    case ROp::kLxor:
      return MPI_LXOR;
    case ROp::kBand:
      return MPI_BAND;
    case ROp::kBor:
      return MPI_BOR;
    case ROp::kBxor:
      return MPI_BXOR;
    case ROp::kMinloc:
      return MPI_MINLOC;
    case ROp::kMaxloc:
      return MPI_MAXLOC;
    default:
      return MPI_OP_NULL;
  }
}

bool mpi_runs(DType dtype, ROp op) {
  // Unsigned MIN/MAX: MPICH 4.0.2 compares every unsigned width as signed (MPI_UINT64_T
  // included: 0x8000000000000001 comes out as the minimum of it and 5), Open MPI 4.1.4
  // MPI_UNSIGNED_LONG; skipring's own kernels are exact (mpi_allreduce_np4 under MPICH caught it).
  const bool is_unsigned =
      dtype == DType::kUint16 || dtype == DType::kUint32 || dtype == DType::kUint64;
  if (is_unsigned && (op == ROp::kMin || op == ROp::kMax)) return false;
  return mpi_datatype(dtype) != MPI_DATATYPE_NULL && mpi_op(op) != MPI_OP_NULL;
}

Status Communicator::mpi_allreduce(const void* sendbuf, void* recvbuf, size_t count, DType dtype,
                                   ROp op) {
  // Timed and counted like the direct recursive doubling (the totals, skipring_last_stats and
  // the report line cover this path too); no per-step records.
  CollectiveStats& s = begin_stats(count * dtype_size(dtype), Algo::kMpi);
  ++front_.seq;
  if (count > static_cast<size_t>(INT_MAX)) {
    // Local: every rank with this count stops here before calling MPI.
    SKIPRING_LOG_ERROR(
        "allreduce #{}: {} elements exceed what MPI_Allreduce takes (an int count); use another "
        "SKIPRING_ALGO for this size",
        s.seq, count);
    return Status::kErrCount;
  }
  s.start = clock_->now();
  const int rc =
      PMPI_Allreduce(sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf, recvbuf, static_cast<int>(count),
                     mpi_datatype(dtype), mpi_op(op), internal_.comm);
  s.end = clock_->now();
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING] = {0};
    int len = 0;
    PMPI_Error_string(rc, text, &len);
    const std::string why =
        fmt::format("allreduce seq {} failed: the MPI library's all-reduce returned {} ({})", s.seq,
                    rc, std::string(text, static_cast<size_t>(std::max(len, 0))));
    SKIPRING_LOG_ERROR("{}; this communicator is unusable from now on", why);
    note_error(Status::kErrTransport, s.seq, why);
    return Status::kErrTransport;
  }
  s.messages_sent = s.messages_received = 0;  // MPI's own, not counted
  return Status::kOk;
}

Status Communicator::measure_mpi_offsets() {
  for (double& o : model_.cost.mpi_offset_s) o = std::numeric_limits<double>::infinity();
  if (size_ < 2 || !cfg_.auto_mpi) return Status::kOk;
  // Per probe size the fastest block of back-to-back calls of each (noise only lengthens a run),
  // summed over the ranks before the difference: a rank that leaves a collective early waits in
  // the next one, which moves time between ranks but not out of the sum (measure_engine_sigma's
  // reasoning). The probe sequence numbers are no real collective's; the closing all-reduce and
  // barrier end it on every rank together.
  constexpr int k = CostParams::kMpiProbes;
  constexpr uint32_t kProbeSeq = 0xffffe000u;
  // The recursive doubling is timed as a call runs it: through allreduce() (SKIPRING_ALGO=rd
  // for the probe), with its per-call bookkeeping (two clock reads, the stats), which the `mpi`
  // fast path does not pay (api_allreduce.cpp) and which is a third of an 8-byte all-reduce on
  // shared memory. This runs inside a call's choose_algo: the call's parameters, sequence number
  // and stats are put back afterwards, so the probe leaves no trace (its messages carry no sequence
  // number and are all received before it returns). Where the call would not take the direct
  // path (records, injection, SKIPRING_CHECK) the probe times rd_direct_allreduce alone.
  const bool through_allreduce = !any_records_ && inject_.empty() && !cfg_.check;
  const RingParams saved_params = params_;
  const uint64_t saved_seq = front_.seq;
  const CollectiveStats saved_stats = last_stats();  // a pending front call's settled
  const Algo saved_algo = cfg_.algo;
  cfg_.algo = Algo::kRd;
  bump_front();
  const size_t largest = kMpiProbeBytes[k - 1];
  std::vector<uint64_t> in(largest / sizeof(uint64_t), 1), out(in.size(), 0);
  std::vector<double> mine(2 * k + 1, 0.0), all(2 * k + 1, 0.0);
  bool failed = false;
  // A block of kBlock back-to-back calls of one kind (rd, or MPI) of `count` words: its time per
  // call. Back to back, as an application's loop issues them: single calls timed in turn, their
  // fastest, read the direct rd as up to 0.15 us faster than MPI at 8 B on 2 ranks in half of the
  // runs, where a loop of them took 580-730 ns against MPI's 400-460. 336 calls in all (the
  // single-call probe made 144): with 512, MPICH's tests at 5-8 ranks on 2 cores, where every
  // all-reduce costs scheduler time slices, took 2-9 s longer each; with blocks of 4 and 2 of
  // them at 8 KiB (160 calls) the 8 KiB probe read MPI as faster in half of the runs at 2 ranks,
  // where the direct rd takes half MPI's time.
  constexpr int kBlock = 8;
  auto block = [&](bool rd, size_t count, uint32_t seq) {
    const double t0 = clock_->now();
    for (int j = 0; j < kBlock && !failed; ++j) {
      if (rd) {
        failed = !ok(through_allreduce
                         ? allreduce(in.data(), out.data(), count, DType::kUint64, ROp::kSum)
                         : rd_direct_allreduce(internal_.comm, ring_, pos_, in.data(), out.data(),
                                               count, DType::kUint64, ROp::kSum, &scratch_, wait_,
                                               seq + static_cast<uint32_t>(j), nullptr));
      } else {
        failed = PMPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_UINT64_T,
                                MPI_SUM, internal_.comm) != MPI_SUCCESS;
      }
    }
    return (clock_->now() - t0) / kBlock;
  };
  // Untimed first: the first all-reduces of each kind on this communicator cost more than the
  // later ones (timed, they went into the 8-byte probe alone).
  block(true, kMpiProbeBytes[0] / sizeof(uint64_t), kProbeSeq + static_cast<uint32_t>(k * 64));
  block(false, kMpiProbeBytes[0] / sizeof(uint64_t), 0);
  for (int i = 0; i < k && !failed; ++i) {
    const size_t count = kMpiProbeBytes[i] / sizeof(uint64_t);
    const int reps = kMpiProbeBytes[i] <= 8192 ? 3 : 2;
    double rd_min = std::numeric_limits<double>::infinity(), mpi_min = rd_min;
    for (int r = 0; r < reps && !failed; ++r) {
      // Which kind goes first alternates, so that both see the same machine.
      const uint32_t seq = kProbeSeq + static_cast<uint32_t>(i * 64 + r * kBlock);
      if (r % 2 == 0) {
        rd_min = std::min(rd_min, block(true, count, seq));
        mpi_min = std::min(mpi_min, block(false, count, 0));
      } else {
        mpi_min = std::min(mpi_min, block(false, count, 0));
        rd_min = std::min(rd_min, block(true, count, seq));
      }
    }
    if (!failed) {
      mine[2 * i] = rd_min;
      mine[2 * i + 1] = mpi_min;
    }
  }
  cfg_.algo = saved_algo;
  bump_front();
  params_ = saved_params;
  front_.seq = saved_seq;
  set_stats(saved_stats);
  mine[2 * k] = failed ? 1.0 : 0.0;
  MPI_Request reqs[2];
  WaitWhat w;
  w.what = "communicator setup: the MPI all-reduce probe's closing all-reduce";
  Status st = wait_collectives(PMPI_Iallreduce(mine.data(), all.data(), 2 * k + 1, MPI_DOUBLE,
                                               MPI_SUM, internal_.comm, &reqs[0]),
                               &reqs[0], 1, wait_, w, nullptr, &mine, &all);
  if (ok(st)) {
    st = wait_collectives(PMPI_Ibarrier(internal_.comm, &reqs[1]), &reqs[1], 1, wait_, w, nullptr);
  }
  if (!ok(st)) return st;
  if (all[2 * k] != 0) return Status::kErrTransport;
  for (int i = 0; i < k; ++i) {
    model_.cost.mpi_offset_s[i] = (all[2 * i + 1] - all[2 * i]) / size_;
  }
  return Status::kOk;
}

}  // namespace skipring
