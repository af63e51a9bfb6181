// skipring as a torch.distributed backend (PyTorch 1.13's c10d::ProcessGroup API).
//
// One ProcessGroupSkipring per torch.distributed group, on its own duplicate of the MPI
// communicator of its ranks. Every collective is checked on the calling thread (bad arguments
// raise at once, before any communication), then queued to the group's worker thread, which
// runs the queued collectives one after another in issue order through skipring's C API and
// completes their Work objects and futures. MPI is called from that worker thread, so MPI
// must provide MPI_THREAD_MULTIPLE, or MPI_THREAD_SERIALIZED (then every MPI call of this
// module takes one process-wide lock, and the application must not call MPI itself while
// works are outstanding).
#include <ATen/ATen.h>
#include <mpi.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <skipring/skipring.h>
#include <torch/csrc/utils/pybind.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace skipring_torch {
namespace {

// ---- MPI state of the process -----------------------------------------------------------

std::mutex g_state_mutex;           // guards the fields below
bool g_we_initialized = false;      // this module called MPI_Init_thread (and will finalize)
int g_thread_level = -1;            // what MPI provides
std::recursive_mutex g_mpi_serial;  // held around MPI calls when only SERIALIZED is provided

bool mpi_active() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

// Initialises MPI (MPI_THREAD_MULTIPLE requested) unless someone did already; checks the
// thread level either way. Raises a Python RuntimeError with the reason.
void ensure_mpi() {
  std::lock_guard<std::mutex> lock(g_state_mutex);
  int fin = 0;
  MPI_Finalized(&fin);
  TORCH_CHECK(!fin, "skipring backend: MPI is already finalized");
  int init = 0;
  MPI_Initialized(&init);
  if (!init) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    TORCH_CHECK(rc == MPI_SUCCESS, "skipring backend: MPI_Init_thread failed (code ", rc, ")");
    g_we_initialized = true;
  }
  if (g_thread_level < 0) {
    int provided = 0;
    MPI_Query_thread(&provided);
    g_thread_level = provided;
  }
  TORCH_CHECK(g_thread_level >= MPI_THREAD_SERIALIZED,
              "skipring backend: the MPI library provides thread level ",
              g_thread_level == MPI_THREAD_SINGLE ? "MPI_THREAD_SINGLE" : "MPI_THREAD_FUNNELED",
              "; collectives run on a worker thread and need MPI_THREAD_SERIALIZED or "
              "MPI_THREAD_MULTIPLE (initialise MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE), "
              "e.g. import skipring_torch before mpi4py, or set mpi4py.rc.thread_level = "
              "\"multiple\")");
}

// Held around every MPI call of this module when MPI is only SERIALIZED.
class MpiGuard {
 public:
  MpiGuard() : serial_(g_thread_level < MPI_THREAD_MULTIPLE) {
    if (serial_) g_mpi_serial.lock();
  }
  ~MpiGuard() {
    if (serial_) g_mpi_serial.unlock();
  }
  MpiGuard(const MpiGuard&) = delete;
  MpiGuard& operator=(const MpiGuard&) = delete;

 private:
  bool serial_;
};

std::string error_text(const char* what, int rc) {
  const char* s = skipring_error_string(rc);
  return std::string("skipring backend: ") + what + " failed: " + (s ? s : "unknown error") +
         " (MPI error " + std::to_string(rc) + ")";
}

// ---- Work --------------------------------------------------------------------------------

class WorkSkipring : public c10d::Work {
 public:
  WorkSkipring(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  void complete(std::exception_ptr error) {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
    finish(error);
  }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// ---- datatypes and ops -------------------------------------------------------------------

// torch's Python names of the dtypes.
const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "torch.float32";
    case at::kDouble:
      return "torch.float64";
    case at::kHalf:
      return "torch.float16";
    case at::kBFloat16:
      return "torch.bfloat16";
    case at::kChar:
      return "torch.int8";
    case at::kByte:
      return "torch.uint8";
    case at::kShort:
      return "torch.int16";
    case at::kInt:
      return "torch.int32";
    case at::kLong:
      return "torch.int64";
    case at::kBool:
      return "torch.bool";
    case at::kComplexFloat:
      return "torch.complex64";
    case at::kComplexDouble:
      return "torch.complex128";
    default:
      return c10::toString(t);
  }
}

bool is_float_like(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

// The MPI datatype of a tensor's elements (complex tensors are passed as their real view).
MPI_Datatype mpi_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kHalf:
      return skipring_type_float16();
    case at::kBFloat16:
      return skipring_type_bfloat16();
    case at::kChar:
      return MPI_INT8_T;
    case at::kByte:
      return MPI_UINT8_T;
    case at::kShort:
      return MPI_INT16_T;
    case at::kInt:
      return MPI_INT32_T;
    case at::kLong:
      return MPI_INT64_T;
    case at::kBool:
      return MPI_C_BOOL;
    default:
      break;
  }
  TORCH_CHECK(false, "skipring backend: unsupported tensor dtype ", dtype_name(t),
              " (supported: float32, float64, float16, bfloat16, int8, uint8, int16, int32, "
              "int64, bool; complex64/128 for SUM and AVG)");
}

const char* op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNKNOWN";
  }
}

// A reduction, resolved for one dtype: the MPI op to run, and what to do before and after.
struct Reduction {
  MPI_Op op = MPI_SUM;
  bool average = false;  // divide by the group size afterwards
  bool premul = false;   // multiply the input by `factor` (a scalar or a 1-element tensor) first
  double factor = 1.0;
  at::Tensor factor_tensor;
};

Reduction resolve_op(const c10d::ReduceOp& rop, at::ScalarType t) {
  const auto op = rop.op_;
  Reduction r;
  const bool is_complex = at::isComplexType(t);
  const bool is_bool = t == at::kBool;
  const bool is_int = !is_float_like(t) && !is_complex && !is_bool;
  auto reject = [&](const char* why) {
    TORCH_CHECK(false, "skipring backend: ReduceOp.", op_name(op), " is not supported on ",
                dtype_name(t), " tensors (", why, ")");
  };
  if (is_complex && op != c10d::ReduceOp::SUM && op != c10d::ReduceOp::AVG &&
      op != c10d::ReduceOp::PREMUL_SUM) {
    reject("complex tensors take SUM, AVG and PREMUL_SUM");
  }
  switch (op) {
    case c10d::ReduceOp::SUM:
      r.op = is_bool ? MPI_LOR : MPI_SUM;
      break;  // bool as NCCL: any
    case c10d::ReduceOp::PRODUCT:
      r.op = is_bool ? MPI_LAND : MPI_PROD;
      break;
    case c10d::ReduceOp::MIN:
      r.op = is_bool ? MPI_LAND : MPI_MIN;
      break;
    case c10d::ReduceOp::MAX:
      r.op = is_bool ? MPI_LOR : MPI_MAX;
      break;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      if (!is_int && !is_bool) reject("bitwise ops need integer or bool tensors");
      if (is_bool) {
        r.op = op == c10d::ReduceOp::BAND  ? MPI_LAND
               : op == c10d::ReduceOp::BOR ? MPI_LOR
                                           : MPI_LXOR;
      } else {
        r.op = op == c10d::ReduceOp::BAND  ? MPI_BAND
               : op == c10d::ReduceOp::BOR ? MPI_BOR
                                           : MPI_BXOR;
      }
      break;
    case c10d::ReduceOp::AVG:
      if (!is_float_like(t) && !is_complex) reject("AVG needs a floating-point tensor");
      r.op = MPI_SUM;
      r.average = true;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      if (!is_float_like(t) && !is_complex) reject("PREMUL_SUM needs a floating-point tensor");
      auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(rop.supplement_.get());
      TORCH_CHECK(sup != nullptr, "skipring backend: PREMUL_SUM without its factor");
      r.op = MPI_SUM;
      r.premul = true;
      if (!sup->tensor_factors.empty()) {
        TORCH_CHECK(sup->tensor_factors.size() == 1,
                    "skipring backend: PREMUL_SUM takes one factor tensor per process, got ",
                    sup->tensor_factors.size());
        r.factor_tensor = sup->tensor_factors[0];
        TORCH_CHECK(r.factor_tensor.numel() == 1,
                    "skipring backend: PREMUL_SUM's factor tensor must have one element");
      } else {
        r.factor = sup->double_factor;
      }
      break;
    }
    default:
      reject("unknown op");
  }
  return r;
}

void premultiply(at::Tensor& t, const Reduction& r) {
  if (!r.premul) return;
  if (r.factor_tensor.defined()) {
    t.mul_(r.factor_tensor.to(t.device()));
  } else {
    t.mul_(r.factor);
  }
}

// Element count and MPI datatype of a (complex: real-viewed) contiguous tensor.
struct Buf {
  void* data;
  int count;
  MPI_Datatype type;
};

Buf buf_of(const at::Tensor& t) {
  at::Tensor v = at::isComplexType(t.scalar_type()) ? at::view_as_real(t) : t;
  const int64_t n = v.numel();
  TORCH_CHECK(n <= INT_MAX, "skipring backend: tensors of more than ", INT_MAX,
              " elements are not supported (got ", n, ")");
  return Buf{v.data_ptr(), static_cast<int>(n), mpi_type(v.scalar_type())};
}

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "skipring backend: ", what, ": undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "skipring backend: ", what, ": tensors must be on the CPU (got ",
              t.device().str(),
              "; this build has no device path for PyTorch tensors: move them with .cpu())");
  TORCH_CHECK(t.layout() == at::kStrided, "skipring backend: ", what,
              ": only dense (strided) tensors are supported, got a sparse tensor");
  TORCH_CHECK(t.is_contiguous(), "skipring backend: ", what,
              ": the tensor must be contiguous (call .contiguous() first)");
  if (!at::isComplexType(t.scalar_type()))
    (void)mpi_type(t.scalar_type());  // raises if unsupported
}

at::Tensor single_tensor(std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "skipring backend: ", what,
              " takes exactly one tensor per process, got ", tensors.size());
  check_tensor(tensors[0], what);
  return tensors[0];
}

void check_same(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "skipring backend: ", what,
              ": mismatched dtypes (", dtype_name(a.scalar_type()), " and ",
              dtype_name(b.scalar_type()), ")");
  TORCH_CHECK(a.numel() == b.numel(), "skipring backend: ", what, ": mismatched sizes (", a.numel(),
              " and ", b.numel(), " elements)");
}

void check_root(int64_t root, int size, const char* what) {
  TORCH_CHECK(root >= 0 && root < size, "skipring backend: ", what, ": root rank ", root,
              " is outside the group (size ", size, ")");
}

// ---- cross-rank consistency check ------------------------------------------------------
// With the check on (TORCH_DISTRIBUTED_DEBUG=DETAIL, as torch does for gloo and NCCL, or
// skipring_torch.set_check(True) on every rank), each collective first all-gathers its
// signature over the group's communicator; when the ranks disagree (another collective, dtype,
// element count, op or root), every rank raises the same error, naming each rank's call, and
// the group stays usable: no data moved.
std::atomic<bool> g_check{false};

// What the check throws (a RuntimeError in Python, like every other error of the backend).
class MismatchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Sig {
  int64_t type = 0, dtype = -1, numel = 0, op = -1, root = -1;
};

Sig make_sig(c10d::OpType type, const at::Tensor& t, int64_t numel, int op = -1,
             int64_t root = -1) {
  Sig s;
  s.type = static_cast<int64_t>(type);
  s.dtype = t.defined() ? static_cast<int64_t>(t.scalar_type()) : -1;
  s.numel = numel;
  s.op = op;
  s.root = root;
  return s;
}

std::string describe(const Sig& s) {
  std::string d = c10d::opTypeToString(static_cast<c10d::OpType>(s.type));
  if (s.dtype >= 0) {
    d += std::string(" ") + dtype_name(static_cast<at::ScalarType>(s.dtype)) + " x " +
         std::to_string(s.numel);
  }
  if (s.op >= 0) d += std::string(" ") + op_name(static_cast<c10d::ReduceOp::RedOpType>(s.op));
  if (s.root >= 0) d += " root " + std::to_string(s.root);
  return d;
}

// Throws (the same message on every rank) when the ranks' signatures differ.
void check_signatures(const Sig& mine, MPI_Comm comm, int size) {
  int64_t buf[5] = {mine.type, mine.dtype, mine.numel, mine.op, mine.root};
  std::vector<int64_t> all(5 * static_cast<size_t>(size));
  const int rc = MPI_Allgather(buf, 5, MPI_INT64_T, all.data(), 5, MPI_INT64_T, comm);
  if (rc != MPI_SUCCESS) throw std::runtime_error(error_text("consistency check", rc));
  bool same = true;
  for (int r = 1; r < size && same; ++r) {
    same = std::equal(all.begin(), all.begin() + 5, all.begin() + 5 * r);
  }
  if (same) return;
  std::string msg = "skipring backend: the ranks called different collectives:";
  for (int r = 0; r < size; ++r) {
    const int64_t* a = &all[5 * static_cast<size_t>(r)];
    msg += " rank " + std::to_string(r) + ": " + describe(Sig{a[0], a[1], a[2], a[3], a[4]}) +
           (r + 1 < size ? ";" : "");
  }
  throw MismatchError(msg);
}

// ---- the process group -------------------------------------------------------------------

class ProcessGroupSkipring;
std::mutex g_groups_mutex;
std::set<ProcessGroupSkipring*> g_groups;

class ProcessGroupSkipring : public c10d::ProcessGroup {
 public:
  ProcessGroupSkipring(MPI_Comm comm, int rank, int size)
      : c10d::ProcessGroup(rank, size), comm_(comm) {
    worker_ = std::thread([this] { run(); });
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    g_groups.insert(this);
  }

  ~ProcessGroupSkipring() override {
    {
      std::lock_guard<std::mutex> lock(g_groups_mutex);
      g_groups.erase(this);
    }
    shutdown();
  }

  // Finishes the queued works, stops the worker and frees the communicator (idempotent).
  void shutdown() {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (stopped_) return;
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) {
      // The worker may need the GIL to finish (dropping the last reference to a tensor that
      // Python owns, a future's Python callback): never join while holding it.
      if (Py_IsInitialized() && PyGILState_Check()) {
        py::gil_scoped_release nogil;
        worker_.join();
      } else {
        worker_.join();
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
    if (comm_ != MPI_COMM_NULL && mpi_active()) {
      MpiGuard g;
      MPI_Comm_free(&comm_);
    }
    comm_ = MPI_COMM_NULL;
  }

  // Creates the group of `global_ranks` (ranks of MPI_COMM_WORLD; empty: all of them). Only
  // the members call it (MPI_Comm_create_group is collective over the group only).
  static c10::intrusive_ptr<ProcessGroupSkipring> create(const std::vector<int>& global_ranks) {
    ensure_mpi();
    MPI_Comm comm = MPI_COMM_NULL;
    {
      MpiGuard g;
      if (global_ranks.empty()) {
        TORCH_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm) == MPI_SUCCESS,
                    "skipring backend: MPI_Comm_dup failed");
      } else {
        MPI_Group world_group, group;
        MPI_Comm_group(MPI_COMM_WORLD, &world_group);
        int wsize = 0;
        MPI_Comm_size(MPI_COMM_WORLD, &wsize);
        for (int r : global_ranks) {
          TORCH_CHECK(r >= 0 && r < wsize, "skipring backend: rank ", r,
                      " is outside MPI_COMM_WORLD (size ", wsize, ")");
        }
        MPI_Group_incl(world_group, static_cast<int>(global_ranks.size()), global_ranks.data(),
                       &group);
        const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, /*tag=*/0x5175, &comm);
        MPI_Group_free(&group);
        MPI_Group_free(&world_group);
        TORCH_CHECK(rc == MPI_SUCCESS && comm != MPI_COMM_NULL,
                    "skipring backend: MPI_Comm_create_group failed (is this rank a member?)");
      }
    }
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    return c10::make_intrusive<ProcessGroupSkipring>(comm, rank, size);
  }

  const std::string getBackendName() const override { return "skipring"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    at::Tensor t = single_tensor(tensors, "allreduce");
    const Reduction red = resolve_op(opts.reduceOp, t.scalar_type());
    const int size = size_;
    return enqueue(
        c10d::OpType::ALLREDUCE, make_sig(c10d::OpType::ALLREDUCE, t, t.numel(), opts.reduceOp.op_),
        {t}, [t, red, size](MPI_Comm comm) mutable {
          premultiply(t, red);
          const Buf b = buf_of(t);
          const int rc = skipring_allreduce(MPI_IN_PLACE, b.data, b.count, b.type, red.op, comm);
          if (rc != MPI_SUCCESS) throw std::runtime_error(error_text("allreduce", rc));
          if (red.average) t.div_(size);
        });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    TORCH_CHECK(!tensors.empty(), "skipring backend: allreduce_coalesced: no tensors");
    for (const auto& t : tensors) {
      check_tensor(t, "allreduce_coalesced");
      TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                  "skipring backend: allreduce_coalesced: all tensors must have the same dtype (",
                  dtype_name(tensors[0].scalar_type()), " and ", dtype_name(t.scalar_type()), ")");
    }
    const Reduction red = resolve_op(opts.reduceOp, tensors[0].scalar_type());
    const int size = size_;
    std::vector<at::Tensor> ts = tensors;
    int64_t total = 0;
    for (const auto& t : ts) total += t.numel();
    return enqueue(c10d::OpType::ALLREDUCE_COALESCED,
                   make_sig(c10d::OpType::ALLREDUCE_COALESCED, ts[0], total, opts.reduceOp.op_), ts,
                   [ts, red, size](MPI_Comm comm) {
                     std::vector<at::Tensor> flat_parts;
                     for (const auto& t : ts) flat_parts.push_back(t.reshape(-1));
                     at::Tensor flat = at::cat(flat_parts);
                     premultiply(flat, red);
                     const Buf b = buf_of(flat);
                     const int rc =
                         skipring_allreduce(MPI_IN_PLACE, b.data, b.count, b.type, red.op, comm);
                     if (rc != MPI_SUCCESS)
                       throw std::runtime_error(error_text("allreduce_coalesced", rc));
                     if (red.average) flat.div_(size);
                     int64_t o = 0;
                     for (const auto& t : ts) {
                       t.view(-1).copy_(flat.narrow(0, o, t.numel()));
                       o += t.numel();
                     }
                   });
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    at::Tensor t = single_tensor(tensors, "broadcast");
    check_root(opts.rootRank, size_, "broadcast");
    TORCH_CHECK(opts.rootTensor == 0, "skipring backend: broadcast: rootTensor must be 0");
    const int root = static_cast<int>(opts.rootRank);
    return enqueue(c10d::OpType::BROADCAST,
                   make_sig(c10d::OpType::BROADCAST, t, t.numel(), -1, root), {t},
                   [t, root](MPI_Comm comm) {
                     const Buf b = buf_of(t);
                     const int rc = skipring_bcast(b.data, b.count, b.type, root, comm);
                     if (rc != MPI_SUCCESS) throw std::runtime_error(error_text("broadcast", rc));
                   });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    at::Tensor t = single_tensor(tensors, "reduce");
    check_root(opts.rootRank, size_, "reduce");
    TORCH_CHECK(opts.rootTensor == 0, "skipring backend: reduce: rootTensor must be 0");
    const Reduction red = resolve_op(opts.reduceOp, t.scalar_type());
    const int root = static_cast<int>(opts.rootRank);
    const int size = size_;
    const bool is_root = rank_ == root;
    return enqueue(
        c10d::OpType::REDUCE, make_sig(c10d::OpType::REDUCE, t, t.numel(), opts.reduceOp.op_, root),
        {t}, [t, red, root, size, is_root](MPI_Comm comm) mutable {
          // Non-roots keep their tensor unchanged (a premultiplied copy is what they send).
          at::Tensor in = (red.premul && !is_root) ? t.clone() : t;
          premultiply(in, red);
          const Buf b = buf_of(in);
          const int rc =
              is_root ? skipring_reduce(MPI_IN_PLACE, b.data, b.count, b.type, red.op, root, comm)
                      : skipring_reduce(b.data, nullptr, b.count, b.type, red.op, root, comm);
          if (rc != MPI_SUCCESS) throw std::runtime_error(error_text("reduce", rc));
          if (is_root && red.average) t.div_(size);
        });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& /*opts*/) override {
    at::Tensor in = single_tensor(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1,
                "skipring backend: allgather takes one output list per "
                "process, got ",
                outputs.size());
    std::vector<at::Tensor> outs = outputs[0];
    TORCH_CHECK(static_cast<int>(outs.size()) == size_,
                "skipring backend: allgather: the output "
                "list has ",
                outs.size(), " tensors, the group has ", size_, " ranks");
    for (const auto& o : outs) {
      check_tensor(o, "allgather");
      check_same(o, in, "allgather (output vs input)");
    }
    const int64_t n = in.numel();
    return enqueue(
        c10d::OpType::ALLGATHER, make_sig(c10d::OpType::ALLGATHER, in, n), outs,
        [in, outs, n](MPI_Comm comm) {
          at::Tensor flat = at::empty({static_cast<int64_t>(outs.size()) * n}, in.options());
          const Buf b = buf_of(in);
          const Buf f = buf_of(flat);
          const int rc = skipring_allgather(b.data, b.count, b.type, f.data, b.count, b.type, comm);
          if (rc != MPI_SUCCESS) throw std::runtime_error(error_text("allgather", rc));
          for (size_t i = 0; i < outs.size(); ++i) {
            outs[i].view(-1).copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n));
          }
        });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& /*opts*/) override {
    check_tensor(input, "_allgather_base");
    check_tensor(output, "_allgather_base");
    TORCH_CHECK(output.scalar_type() == input.scalar_type(),
                "skipring backend: _allgather_base: "
                "mismatched dtypes (",
                dtype_name(output.scalar_type()), " and ", dtype_name(input.scalar_type()), ")");
    TORCH_CHECK(output.numel() == input.numel() * size_,
                "skipring backend: _allgather_base: "
                "mismatched sizes: the output has ",
                output.numel(), " elements, the input ", input.numel(), " x ", size_, " ranks");
    at::Tensor out = output, in = input;
    return enqueue(
        c10d::OpType::_ALLGATHER_BASE, make_sig(c10d::OpType::_ALLGATHER_BASE, in, in.numel()),
        {out}, [in, out](MPI_Comm comm) {
          const Buf b = buf_of(in);
          const Buf f = buf_of(out);
          const int rc = skipring_allgather(b.data, b.count, b.type, f.data, b.count, b.type, comm);
          if (rc != MPI_SUCCESS) throw std::runtime_error(error_text("_allgather_base", rc));
        });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    at::Tensor out = single_tensor(outputs, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1,
                "skipring backend: reduce_scatter takes one input list per "
                "process, got ",
                inputs.size());
    std::vector<at::Tensor> ins = inputs[0];
    TORCH_CHECK(static_cast<int>(ins.size()) == size_,
                "skipring backend: reduce_scatter: the "
                "input list has ",
                ins.size(), " tensors, the group has ", size_, " ranks");
    for (const auto& i : ins) {
      check_tensor(i, "reduce_scatter");
      check_same(i, out, "reduce_scatter (input vs output)");
    }
    const Reduction red = resolve_op(opts.reduceOp, out.scalar_type());
    const int size = size_;
    return enqueue(c10d::OpType::REDUCE_SCATTER,
                   make_sig(c10d::OpType::REDUCE_SCATTER, out, out.numel(), opts.reduceOp.op_),
                   {out}, [ins, out, red, size](MPI_Comm comm) mutable {
                     std::vector<at::Tensor> parts;
                     for (const auto& i : ins) parts.push_back(i.reshape(-1));
                     at::Tensor flat = at::cat(parts);
                     premultiply(flat, red);
                     const Buf f = buf_of(flat);
                     const Buf o = buf_of(out);
                     const int rc = skipring_reduce_scatter_block(f.data, o.data, o.count, o.type,
                                                                  red.op, comm);
                     if (rc != MPI_SUCCESS)
                       throw std::runtime_error(error_text("reduce_scatter", rc));
                     if (red.average) out.div_(size);
                   });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    check_tensor(input, "_reduce_scatter_base");
    check_tensor(output, "_reduce_scatter_base");
    TORCH_CHECK(output.scalar_type() == input.scalar_type(),
                "skipring backend: "
                "_reduce_scatter_base: mismatched dtypes (",
                dtype_name(output.scalar_type()), " and ", dtype_name(input.scalar_type()), ")");
    TORCH_CHECK(input.numel() == output.numel() * size_,
                "skipring backend: _reduce_scatter_base: "
                "mismatched sizes: the input has ",
                input.numel(), " elements, the output ", output.numel(), " x ", size_, " ranks");
    const Reduction red = resolve_op(opts.reduceOp, output.scalar_type());
    const int size = size_;
    at::Tensor out = output, in = input;
    return enqueue(
        c10d::OpType::_REDUCE_SCATTER_BASE,
        make_sig(c10d::OpType::_REDUCE_SCATTER_BASE, out, out.numel(), opts.reduceOp.op_), {out},
        [in, out, red, size](MPI_Comm comm) mutable {
          at::Tensor src = red.premul ? in.clone() : in;
          premultiply(src, red);
          const Buf f = buf_of(src);
          const Buf o = buf_of(out);
          const int rc =
              skipring_reduce_scatter_block(f.data, o.data, o.count, o.type, red.op, comm);
          if (rc != MPI_SUCCESS) throw std::runtime_error(error_text("_reduce_scatter_base", rc));
          if (red.average) out.div_(size);
        });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& /*opts*/) override {
    return enqueue(c10d::OpType::BARRIER, make_sig(c10d::OpType::BARRIER, at::Tensor(), 0), {},
                   [](MPI_Comm comm) {
                     MpiGuard g;
                     const int rc = MPI_Barrier(comm);
                     if (rc != MPI_SUCCESS) throw std::runtime_error(error_text("barrier", rc));
                   });
  }

  // Works queued and not yet finished (a test aid).
  size_t pending() {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.size() + (busy_ ? 1 : 0);
  }

 private:
  using Fn = std::function<void(MPI_Comm)>;
  struct Item {
    c10::intrusive_ptr<WorkSkipring> work;
    Fn fn;
    Sig sig;
    bool check = false;
  };

  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const Sig& sig,
                                         std::vector<at::Tensor> outputs, Fn fn) {
    auto work = c10::make_intrusive<WorkSkipring>(rank_, type, std::move(outputs));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      TORCH_CHECK(!stop_, "skipring backend: the process group has been shut down");
      queue_.push_back(Item{work, std::move(fn), sig, g_check.load()});
    }
    cv_.notify_all();
    return work;
  }

  void run() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and nothing left
        item = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      std::exception_ptr error;
      if (failed_) {
        // After a failed collective the communicator may be unusable (skipring marks it
        // broken): fail fast instead of risking a hang.
        error = std::make_exception_ptr(std::runtime_error(
            "skipring backend: an earlier collective on this process group failed (" +
            first_error_ + "); the group cannot be used any more"));
      } else if (!mpi_active()) {
        error = std::make_exception_ptr(
            std::runtime_error("skipring backend: MPI is not active (finalized?)"));
      } else {
        try {
          MpiGuard g;
          if (item.check) check_signatures(item.sig, comm_, size_);
          item.fn(comm_);
        } catch (const MismatchError&) {
          // The consistency check: every rank raises it and no data moved, so the group
          // stays usable.
          error = std::current_exception();
        } catch (const std::exception& e) {
          failed_ = true;
          first_error_ = e.what();
          error = std::current_exception();
        } catch (...) {
          failed_ = true;
          first_error_ = "unknown error";
          error = std::current_exception();
        }
      }
      item.work->complete(error);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        busy_ = false;
      }
    }
  }

  MPI_Comm comm_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  bool stopped_ = false;
  bool busy_ = false;
  bool failed_ = false;  // worker thread only
  std::string first_error_;
  std::thread worker_;
};

// Stops every group's worker, then finalizes MPI if this module initialised it. Called at
// interpreter exit (atexit in skipring_torch/__init__.py).
void finalize() {
  std::vector<ProcessGroupSkipring*> groups;
  {
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    groups.assign(g_groups.begin(), g_groups.end());
  }
  for (auto* g : groups) g->shutdown();
  std::lock_guard<std::mutex> lock(g_state_mutex);
  if (g_we_initialized && mpi_active()) MPI_Finalize();
}

py::dict totals() {
  skipring_totals_t t{};
  skipring_get_totals(&t);
  py::dict d;
  d["calls"] = t.calls;
  d["fallbacks"] = t.fallbacks;
  d["skips"] = t.skips;
  d["late"] = t.late;
  d["bytes"] = t.bytes;
  d["time_s"] = t.time_s;
  return d;
}

}  // namespace
}  // namespace skipring_torch

PYBIND11_MODULE(_C, m) {
  using skipring_torch::ProcessGroupSkipring;
  m.doc() = "skipring's torch.distributed backend (C++ part; use `import skipring_torch`)";
  py::object base = py::module::import("torch.distributed").attr("ProcessGroup");
  py::class_<ProcessGroupSkipring, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupSkipring>>(
      m, "ProcessGroupSkipring")
      .def_static("create", &ProcessGroupSkipring::create, py::arg("global_ranks"),
                  py::call_guard<py::gil_scoped_release>(),
                  "Creates the group of these MPI_COMM_WORLD ranks (empty: all); members only.")
      .def("pending", &ProcessGroupSkipring::pending, "works queued or running")
      .def("shutdown", &ProcessGroupSkipring::shutdown, py::call_guard<py::gil_scoped_release>());
  (void)base;
  m.def("ensure_mpi", &skipring_torch::ensure_mpi, "initialises MPI (THREAD_MULTIPLE) if needed");
  m.def("world", []() {
    skipring_torch::ensure_mpi();
    skipring_torch::MpiGuard g;
    int r = 0, s = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return py::make_tuple(r, s);
  });
  m.def("thread_level", []() {
    skipring_torch::ensure_mpi();
    return skipring_torch::g_thread_level;
  });
  m.def(
      "bcast_str",
      [](const std::string& s, int root) {
        skipring_torch::ensure_mpi();
        skipring_torch::MpiGuard g;
        int n = static_cast<int>(s.size());
        MPI_Bcast(&n, 1, MPI_INT, root, MPI_COMM_WORLD);
        std::string out = s;
        out.resize(static_cast<size_t>(n));
        MPI_Bcast(out.data(), n, MPI_CHAR, root, MPI_COMM_WORLD);
        return out;
      },
      "MPI_Bcast of a string over MPI_COMM_WORLD (the rendezvous address)");
  m.def("finalize", &skipring_torch::finalize, py::call_guard<py::gil_scoped_release>());
  m.def("totals", &skipring_torch::totals, "skipring's process-wide counters (the report line)");
  m.def("set_algo", [](const std::string& name) {
    const int rc = skipring_set_algo(name.empty() ? nullptr : name.c_str());
    TORCH_CHECK(rc == MPI_SUCCESS, "skipring backend: set_algo('", name, "') failed");
  });
  m.def(
      "set_check", [](bool on) { skipring_torch::g_check = on; },
      "cross-rank consistency check of every collective (same on every rank)");
  m.def("get_check", []() { return skipring_torch::g_check.load(); });
  m.def("set_skip", [](bool on) { skipring_set_skip(on ? 1 : 0); });
  m.def("set_inject", [](const std::string& spec) {
    const int rc = skipring_set_inject(spec.c_str());
    TORCH_CHECK(rc == MPI_SUCCESS, "skipring backend: bad injection spec '", spec, "'");
  });
}
