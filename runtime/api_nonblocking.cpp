// The C API's nonblocking all-reduce (skipring_iallreduce) and the progress thread that runs
// it.
#include <mpi.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "runtime/api_common.h"
#include "runtime/api_device.h"
#include "runtime/log.h"

namespace skipring::api {

namespace {

// --- Nonblocking all-reduce (issue 40): the progress thread ------------------------------
// One worker thread per process runs the nonblocking all-reduces skipring runs itself, in
// submission order, each exactly as the blocking call would (Communicator::allreduce:
// skip-ahead, late arrivals, the cost model), and completes the generalized request the caller
// holds (MPI_Grequest_start): MPI_Wait, MPI_Test and their families work on it unchanged, and
// the program computes meanwhile. Only under MPI_THREAD_MULTIPLE (the worker calls MPI while the
// program may). A communicator with pending nonblocking calls is drained before any other
// skipring call runs on it (comm_state), before it is freed, and the worker is stopped at
// MPI_Finalize; calls on other communicators go on meanwhile (MPI orders collectives per
// communicator only: draining every communicator could deadlock a legal program).
struct NbJob {
  Communicator* c = nullptr;
  const void* src = nullptr;
  void* recv = nullptr;
  bool in_place = false;  // the caller passed MPI_IN_PLACE (src == recv)
  size_t count = 0;
  DType dt = DType::kInt8;
  ROp rop = ROp::kSum;
  MPI_Request greq = MPI_REQUEST_NULL;
  int rc = MPI_SUCCESS;
};
void run_nb_job(NbJob* job);  // runs it, sets job->rc (below); the worker completes the request

class NbWorker {
 public:
  void submit(NbJob* job) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) {
      stop_ = false;
      thread_ = std::thread([this] { loop(); });
    }
    queue_.push_back(job);
    running_.insert(job->greq);
    ++pending_[job->c];
    g_front.nb_pending.fetch_add(1, std::memory_order_release);
    work_.notify_one();
  }
  // Returns once none of `requests` is a job still queued or running, sleeping meanwhile (the
  // caller's MPI_Wait would poll on the core this thread may need); the request is completed
  // right after (MPI_Grequest_complete), so the caller's wait then returns at once.
  void block_on(int count, const MPI_Request* requests) {
    if (g_front.nb_pending.load(std::memory_order_acquire) == 0) return;
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] {
      for (int i = 0; i < count; ++i) {
        if (running_.count(requests[i]) != 0) return false;
      }
      return true;
    });
  }
  // Returns once no job of `c` is queued or running.
  void drain(Communicator* c) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_.find(c) == pending_.end(); });
  }
  // Runs what is queued, then ends the thread (MPI_Finalize).
  void stop() {
    std::thread t;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [&] { return pending_.empty(); });
      stop_ = true;
      work_.notify_one();
      t = std::move(thread_);
    }
    if (t.joinable()) t.join();
  }

 private:
  void loop() {
    for (;;) {
      NbJob* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_
        job = queue_.front();
        queue_.pop_front();
      }
      Communicator* c = job->c;
      const MPI_Request greq = job->greq;
      run_nb_job(job);
      // Complete first, then wake a caller asleep in block_on: woken earlier, it would poll in
      // MPI_Wait on the core this thread needs to complete the request. From here on the caller
      // may free job (a caller that tests may even reuse the handle: running_ counts entries).
      MPI_Grequest_complete(greq);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        running_.erase(running_.find(greq));
        if (--pending_[c] == 0) pending_.erase(c);
        g_front.nb_pending.fetch_sub(1, std::memory_order_release);
      }
      done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable work_, done_;
  std::deque<NbJob*> queue_;
  std::map<Communicator*, int> pending_;
  std::unordered_multiset<MPI_Request> running_;  // requests not yet completed
  std::thread thread_;
  bool stop_ = false;
};

NbWorker& nb_worker() {
  static NbWorker* w = new NbWorker();  // never destroyed: stopped at MPI_Finalize
  return *w;
}

// The generalized request's callbacks (MPI-3.1 12.2): the status of a finished all-reduce (no
// elements, not cancelled; its error class if it failed), the job freed with the request, and no
// cancelling (a collective cannot be cancelled: the call is a no-op, as MPI allows).
int nb_query(void* extra, MPI_Status* status) {
  const auto* job = static_cast<const NbJob*>(extra);
  MPI_Status_set_elements(status, MPI_BYTE, 0);
  MPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  status->MPI_ERROR = job->rc;
  return job->rc;
}
int nb_free(void* extra) {
  delete static_cast<NbJob*>(extra);
  return MPI_SUCCESS;
}
int nb_cancel(void*, int) { return MPI_SUCCESS; }

// The `mpi` row's small sizes as the nonblocking call issues them when the worker is idle
// (iallreduce below): PMPI_Iallreduce on skipring's duplicate of the communicator. The worker
// runs a job of such a size the same way (and waits for it), so that every rank issues the same
// MPI operation for the call whichever thread does: with the worker busy on one rank and idle on
// another (g_front.nb_pending is this process's alone), the idle one called PMPI_Iallreduce on the
// application's communicator while the busy one's worker ran the blocking PMPI_Allreduce of the
// `mpi` row on the duplicate, and both hung (pmpi_iallreduce_mpi4py_np2, ~3 % of runs under
// load). Whether a size is that row's is read from state every rank shares at the same call:
// the caller reads it only with the worker idle, the worker after every earlier job.
int mpi_row_iallreduce(Communicator* c, const void* sendbuf, void* recvbuf, size_t count, DType dt,
                       ROp rop, MPI_Request* request) {
  const int rc = PMPI_Iallreduce(sendbuf, recvbuf, static_cast<int>(count), mpi_datatype(dt),
                                 mpi_op(rop), c->internal_comm(), request);
  if (rc == MPI_SUCCESS) c->count_mpi_call(count * dtype_size(dt));
  return rc;
}

void run_nb_job(NbJob* job) {
  int rc = MPI_ERR_OTHER;
  try {
    if (job->c->mpi_cached(job->count * dtype_size(job->dt), job->dt, job->rop)) {
      MPI_Request r = MPI_REQUEST_NULL;
      rc = mpi_row_iallreduce(job->c, job->in_place ? MPI_IN_PLACE : job->src, job->recv,
                              job->count, job->dt, job->rop, &r);
      if (rc == MPI_SUCCESS) rc = PMPI_Wait(&r, MPI_STATUS_IGNORE);
      job->rc = rc;
      return;
    }
    const Status st = job->c->allreduce(job->src, job->recv, job->count, job->dt, job->rop);
    if (ok(st)) account(job->c->last_stats());
    rc = to_mpi_error(st);
  } catch (const std::bad_alloc&) {
    rc = MPI_ERR_NO_MEM;
  } catch (...) {
    rc = MPI_ERR_OTHER;
  }
  job->rc = rc;
}

// The MPI library's own nonblocking all-reduce, counted as a fallback with `reason` (-1: not a
// fallback, the `mpi` row's small sizes).
int pmpi_iallreduce(int reason, const void* sendbuf, void* recvbuf, int count,
                    MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  if (int rc = extension_fallback_error("skipring_iallreduce", datatype, op); rc != MPI_SUCCESS) {
    return rc;
  }
  if (reason >= 0) count_fallback(reason, "skipring_iallreduce", datatype, op);
  return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
}

int iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               MPI_Comm comm, MPI_Request* request) {
  if (request == nullptr) return MPI_ERR_REQUEST;
  *request = MPI_REQUEST_NULL;
  AllreduceArgs a;
  if (int rc = check_allreduce_args("skipring_iallreduce", sendbuf, recvbuf, count, datatype, op,
                                    comm, false, &a);
      rc != MPI_SUCCESS) {
    return rc;
  }
  const DType dt = a.dt;
  const ROp rop = a.rop;
  const MpiReduction kind = a.kind;
  Communicator* c = a.c;
  const unsigned dev = count > 0 ? device_buffers({sendbuf, recvbuf}) : 0;
  if (dev != 0) {
    return pmpi_iallreduce(SKIPRING_FALLBACK_MEMORY, sendbuf, recvbuf, count, datatype, op, comm,
                           request);
  }
  if (kind != MpiReduction::kNative) {
    return pmpi_iallreduce(reduction_fallback_reason(datatype), sendbuf, recvbuf, count, datatype,
                           op, comm, request);
  }
  if (c == nullptr && !native_comm(comm)) {
    return pmpi_iallreduce(SKIPRING_FALLBACK_COMM, sendbuf, recvbuf, count, datatype, op, comm,
                           request);
  }
  if (count > 0 && (recvbuf == nullptr || sendbuf == nullptr)) return MPI_ERR_BUFFER;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    return pmpi_iallreduce(SKIPRING_FALLBACK_THREAD, sendbuf, recvbuf, count, datatype, op, comm,
                           request);
  }
  if (c == nullptr) {
    // Collective setup, in the caller's thread and call order (nothing is pending on it).
    if (int rc = comm_state(comm, true, &c, false); rc != MPI_SUCCESS) return rc;
  }
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dt);
  if (g_front.nb_pending.load(std::memory_order_acquire) == 0 && c->mpi_cached(bytes, dt, rop)) {
    // The small sizes auto hands to the MPI library: its own nonblocking all-reduce (only with
    // the worker idle: the communicator's state is then this thread's alone; a busy worker runs
    // the call the same way, mpi_row_iallreduce).
    return mpi_row_iallreduce(c, sendbuf, recvbuf, static_cast<size_t>(count), dt, rop, request);
  }
  auto job = std::make_unique<NbJob>();
  job->c = c;
  job->src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  job->in_place = sendbuf == MPI_IN_PLACE;
  job->recv = recvbuf;
  job->count = static_cast<size_t>(count);
  job->dt = dt;
  job->rop = rop;
  if (int rc = MPI_Grequest_start(nb_query, nb_free, nb_cancel, job.get(), &job->greq);
      rc != MPI_SUCCESS) {
    return rc;
  }
  *request = job->greq;
  nb_worker().submit(job.release());  // freed by nb_free when the request is
  return MPI_SUCCESS;
}

}  // namespace

void wait_nonblocking(Communicator* c) { nb_worker().drain(c); }

void block_on_requests(int count, const MPI_Request* requests) {
  nb_worker().block_on(count, requests);
}

void stop_nonblocking() { nb_worker().stop(); }

}  // namespace skipring::api

using namespace skipring;
using namespace skipring::api;

extern "C" {

int skipring_iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                        MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  return guarded(
      [&]() -> int { return iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request); });
}

int skipring_block_on_requests(int count, const MPI_Request* requests) {
  if (count < 0) return MPI_ERR_COUNT;
  if (count > 0 && requests == nullptr) return MPI_ERR_REQUEST;
  return guarded([&]() -> int {
    block_on_requests(count, requests);
    return MPI_SUCCESS;
  });
}

}  // extern "C"
