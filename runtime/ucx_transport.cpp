// UCX (UCP tag API) transport; see ucx_transport.h.
#include "runtime/ucx_transport.h"

#include "runtime/log.h"

#ifdef SKIPRING_HAVE_UCX

#include <sched.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

namespace skipring {
namespace {

constexpr uint64_t kSourceMask = 0xffffffffull;
constexpr uint64_t kAnySourceMask = ~kSourceMask;

// Bits 63..33: the transport tag; bit 32: the part (0: a whole message or the header of a split
// one, 1: the payload of a split one); bits 31..0: the sending rank.
uint64_t wire_tag(int tag, int part, int source) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(tag)) << 33) |
         (static_cast<uint64_t>(part) << 32) | static_cast<uint32_t>(source);
}
// Payloads above this travel as a part of their own (Impl::Op).
constexpr size_t kSplit = 16 * 1024;
int source_of(uint64_t wire) { return static_cast<int>(wire & kSourceMask); }

bool contiguous(const void* header, size_t header_bytes, const void* payload) {
  return static_cast<const uint8_t*>(header) + header_bytes == payload;
}

// The process's UCP context: created once, on the first UCX communicator, kept until exit
// (communicators come and go often; ucp_init reads the configuration and loads every transport).
struct ProcessContext {
  std::mutex mutex;
  bool tried = false;
  ucp_context_h context = nullptr;
  std::string error;       // why there is no context
  std::string net_device;  // what NET_DEVICES was set to ("" when left to UCX or the user)
};
ProcessContext& process_context() {
  static ProcessContext* pc = new ProcessContext();  // never destroyed: used up to exit
  return *pc;
}

ucp_context_h get_context(const std::string& net_device, std::string* error) {
  ProcessContext& pc = process_context();
  std::lock_guard<std::mutex> lock(pc.mutex);
  if (!pc.tried) {
    pc.tried = true;
    ucp_config_t* config = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
    if (st == UCS_OK) {
      // Rendezvous where the sender writes (put) rather than the receiver reads (get): with a
      // get, the sender's request completes only on the receiver's acknowledgement, which
      // UCX sends from the receiver's progress after its receive completed; a receiver whose
      // collective is then over does not progress this worker again until its next
      // collective, and the sender waits (mpi_soak_np3 hung that way). With a put every
      // completion depends on a message to a rank still waiting for something. The price: a
      // put lands in the receiver's buffer with no further step of the receiver, so a failed
      // collective must not return while one may still come (UcxTransport::abandon).
      if (std::getenv("UCX_RNDV_SCHEME") == nullptr) {
        (void)ucp_config_modify(config, "RNDV_SCHEME", "put_zcopy");
      }
      if (!net_device.empty() && std::getenv("UCX_NET_DEVICES") == nullptr) {
        if (ucp_config_modify(config, "NET_DEVICES", net_device.c_str()) == UCS_OK) {
          pc.net_device = net_device;
        }
      }
      ucp_params_t params;
      std::memset(&params, 0, sizeof(params));
      params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
      params.features = UCP_FEATURE_TAG;
      params.mt_workers_shared = 1;  // communicators (workers) may live on different threads
      st = ucp_init(&params, config, &pc.context);
      ucp_config_release(config);
    }
    if (st != UCS_OK) {
      pc.context = nullptr;
      pc.error = ucs_status_string(st);
    }
  }
  if (pc.context == nullptr) *error = "ucp_init: " + pc.error;
  return pc.context;
}

// Progresses the worker until a pass does nothing, at most 64 passes.
void progress_some(ucp_worker_h worker) {
  for (int i = 0; i < 64 && ucp_worker_progress(worker) != 0; ++i) {
  }
}

// Completes a UCX request by progressing the worker: true when it finished in time.
bool progress_until_done(ucp_worker_h worker, void* req, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int i = 0; ucp_request_check_status(req) == UCS_INPROGRESS; ++i) {
    if (ucp_worker_progress(worker) == 0 && (i & 63) == 63) {
      if (std::chrono::steady_clock::now() > end) return false;
      sched_yield();
    }
  }
  return true;
}

}  // namespace

bool ucx_transport_built() { return true; }

struct UcxTransport::Impl {
  // The background progress thread (`bg`). A request's completion only means its buffer may
  // be reused: part of the protocol can still wait in this worker for this rank's progress
  // (with the put rendezvous, the completion notice the receiver needs). A rank that has left
  // the collective and blocks in MPI (a barrier, SKIPRING_CHECK's leftover check) then never
  // sends it, and the receiver waits forever: mpi_allreduce_large_np4 over UCX hung about once
  // in 30 runs on the loaded 2-core machine that way (the receivers' cancelled receives were
  // "still receiving"; the sender's message log had the send complete). A worker flush at the
  // end of each collective did not help (UCX's flush covers RMA, not the tag protocol). So
  // while the caller has not used the worker for kIdleProgress and no receive is posted, `bg`
  // progresses it; `mu` serialises the two (the worker is UCS_THREAD_MODE_SERIALIZED).
  static constexpr std::chrono::microseconds kIdleProgress{1000};
  std::mutex mu;
  std::thread bg;
  std::mutex bg_mu;  // guards stop_bg (with bg_cv)
  std::condition_variable bg_cv;
  bool stop_bg = false;
  std::atomic<int64_t> last_use{0};  // steady_clock ticks of the caller's last call

  static int64_t ticks() { return std::chrono::steady_clock::now().time_since_epoch().count(); }
  void touch() { last_use.store(ticks(), std::memory_order_relaxed); }
  void background() {
    std::unique_lock<std::mutex> lk(bg_mu);
    while (!stop_bg) {
      bg_cv.wait_for(lk, kIdleProgress);
      if (stop_bg) continue;
      const auto idle = std::chrono::steady_clock::duration(ticks() - last_use.load());
      if (idle < kIdleProgress) continue;  // the caller is progressing it
      std::unique_lock<std::mutex> w(mu, std::try_to_lock);
      if (!w.owns_lock() || receiving()) continue;
      progress_some(worker);
    }
  }
  // A receive is posted (a collective is under way): its buffer is the caller's, so only the
  // caller progresses the worker. (`posted` is empty outside poll, which holds `mu` while it
  // fills and empties it.) After a failed collective `bg` is stopped for good (abandon).
  bool receiving() const {
    for (const Part& x : active) {
      if (ops[x.op].is_recv) return true;
    }
    return false;
  }
  // The caller's hold on the worker for one transport call: `mu`, and the time of use.
  struct Use {
    explicit Use(Impl& m) : lock(m.mu) { m.touch(); }
    std::lock_guard<std::mutex> lock;
  };
  void start_background() {
    bg = std::thread([this] { background(); });
  }
  void stop_background() {
    if (!bg.joinable()) return;
    {
      std::lock_guard<std::mutex> lk(bg_mu);
      stop_bg = true;
    }
    bg_cv.notify_all();
    bg.join();
  }

  // One transport message: one UCP message, or two (header, then payload) when the payload is
  // larger than kSplit: a contiguous payload then moves zero-copy (UCX's rendezvous takes
  // contiguous buffers only; an iov of header and payload went through bounce buffers, 1.5x
  // slower at 16 MiB and 2-7x at 64 KiB to 1 MiB). Both sides derive the form from the payload
  // size, as MpiTransport does.
  struct Op {
    Token token = 0;
    bool is_recv = false;
    bool in_use = false;
    bool split = false;
    bool deferred = false;  // any-source split receive: payload posted once the header is in
    int parts_left = 0;
    void* req[2] = {nullptr, nullptr};
    ucp_dt_iov_t iov[2] = {};
    ucp_tag_recv_info_t info[2] = {};
    void* payload = nullptr;
    size_t header_bytes = 0;
    size_t payload_capacity = 0;
    size_t payload_bytes = 0;  // received
    int tag = 0;
    int peer = -1;
    int source = -1;  // split receive: the rank the first part came from
  };
  struct Part {
    int op;
    int part;  // 0: the message or its header part, 1: the payload part
  };

  ucp_worker_h worker = nullptr;
  // A collective failed (abandon): the worker is never progressed again, every call fails.
  bool abandoned = false;
  std::vector<ucp_ep_h> eps;
  std::deque<Op> ops;  // stable addresses: UCX writes receive info and reads iovs in place
  std::vector<int> free_ops;
  size_t in_flight = 0;         // ops posted and not yet reported or released
  std::vector<Part> active;     // parts with a request in flight
  std::vector<Part> immediate;  // send parts UCX completed at once: reported by the next poll
  std::vector<Part> posted;     // payload parts posted during poll, added to active after it

  int new_op() {
    int id;
    if (!free_ops.empty()) {
      id = free_ops.back();
      free_ops.pop_back();
      ops[id] = Op();
    } else {
      id = static_cast<int>(ops.size());
      ops.emplace_back();
    }
    ops[id].in_use = true;
    ++in_flight;
    return id;
  }
  void release_op(int id) {
    ops[id].in_use = false;
    --in_flight;
    free_ops.push_back(id);
  }
  // Queues part `part` of op `id` by what UCX returned for it.
  Status track(int id, int part, ucs_status_ptr_t r, std::vector<Part>* into) {
    Op& op = ops[id];
    if (UCS_PTR_IS_ERR(r)) {
      const ucs_status_t st = UCS_PTR_STATUS(r);
      SKIPRING_LOG_ERROR("UCX {} rank {} with tag {} failed: {}",
                         op.is_recv ? "receive from" : "send to", op.peer, op.tag,
                         ucs_status_string(st));
      return st == UCS_ERR_MESSAGE_TRUNCATED ? Status::kErrProtocol : Status::kErrTransport;
    }
    if (r == nullptr) {
      immediate.push_back(Part{id, part});
    } else {
      op.req[part] = r;
      into->push_back(Part{id, part});
    }
    return Status::kOk;
  }
  Status post_send_part(int id, int part, int peer, int rank, const void* buf, size_t count,
                        bool iov) {
    ucp_request_param_t p;
    std::memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    p.datatype = iov ? ucp_dt_make_iov() : ucp_dt_make_contig(1);
    return track(id, part,
                 ucp_tag_send_nbx(eps[peer], buf, count, wire_tag(ops[id].tag, part, rank), &p),
                 &active);
  }
  Status post_recv_part(int id, int part, int from, void* buf, size_t count, bool iov) {
    Op& op = ops[id];
    ucp_request_param_t p;
    std::memset(&p, 0, sizeof(p));
    // Always a request (UCP_OP_ATTR_FLAG_NO_IMM_CMPL): UCX 1.13 left the receive info of an
    // immediately completed receive unwritten (a 0-byte length: a false size mismatch).
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_MEMORY_TYPE |
                     UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    p.recv_info.tag_info = &op.info[part];
    p.datatype = iov ? ucp_dt_make_iov() : ucp_dt_make_contig(1);
    const uint64_t mask = from >= 0 ? ~0ull : kAnySourceMask;
    return track(id, part,
                 ucp_tag_recv_nbx(worker, buf, count, wire_tag(op.tag, part, from >= 0 ? from : 0),
                                  mask, &p),
                 part == 1 && op.deferred ? &posted : &active);
  }
  // Part `part` of op `id` finished with `st`: checks it; when the op is complete, reports it
  // into *done and releases it.
  Status finish(int id, int part, ucs_status_t st, std::vector<Completion>* done) {
    Op& op = ops[id];
    const ucp_tag_recv_info_t& info = op.info[part];
    const int from = op.is_recv ? source_of(info.sender_tag) : op.peer;
    const char* what = !op.split ? "message" : part == 1 ? "payload part" : "header part";
    const size_t lo = op.split && part == 1 ? 0 : op.header_bytes;
    const size_t hi = !op.split   ? op.header_bytes + op.payload_capacity
                      : part == 1 ? op.payload_capacity
                                  : op.header_bytes;
    if (st == UCS_ERR_MESSAGE_TRUNCATED) {
      return report_size_mismatch(what, op.peer >= 0 ? op.peer : from, op.tag, lo, hi, -1);
    }
    if (st != UCS_OK) {
      SKIPRING_LOG_ERROR("UCX {} rank {} with tag {} failed: {}",
                         op.is_recv ? "receive from" : "send to", op.peer, op.tag,
                         ucs_status_string(st));
      return Status::kErrTransport;
    }
    if (op.is_recv) {
      if (info.length < lo || info.length > hi) {
        return report_size_mismatch(what, from, op.tag, lo, hi,
                                    static_cast<long long>(info.length));
      }
      if (op.split) SKIPRING_RETURN_IF_ERROR(check_same_sender(op.tag, from, &op.source));
      if (!op.split) {
        op.payload_bytes = info.length - op.header_bytes;
      } else if (part == 1) {
        op.payload_bytes = info.length;
      } else if (op.deferred) {
        // The header of an any-source split message: now its payload, from that sender.
        SKIPRING_RETURN_IF_ERROR(
            post_recv_part(id, 1, from, op.payload, op.payload_capacity, false));
      }
    }
    if (--op.parts_left > 0) return Status::kOk;
    if (done != nullptr) done->push_back(Completion{op.token, op.is_recv, op.payload_bytes});
    release_op(id);
    return Status::kOk;
  }

  // This rank's worker and its address (*address null, *why set: none).
  void make_worker(const std::string& net_device, ucp_address_t** address, size_t* address_bytes,
                   std::string* why) {
    if (ucp_context_h ctx = get_context(net_device, why); ctx != nullptr) {
      ucp_worker_params_t wp;
      std::memset(&wp, 0, sizeof(wp));
      wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
      wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // one thread at a time: the caller's
      ucs_status_t st = ucp_worker_create(ctx, &wp, &worker);
      if (st == UCS_OK) st = ucp_worker_get_address(worker, address, address_bytes);
      if (st != UCS_OK) *why = std::string("UCP worker: ") + ucs_status_string(st);
    }
  }

  // Endpoints to every rank (itself included) from the all-gathered addresses; connections are
  // made on first use. False (logged) when one could not be created.
  bool connect_all(const std::vector<uint8_t>& all, const std::vector<int>& displs, int rank,
                   int size) {
    eps.assign(static_cast<size_t>(size), nullptr);
    for (int r = 0; r < size; ++r) {
      ucp_ep_params_t ep;
      std::memset(&ep, 0, sizeof(ep));
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
      ep.address = reinterpret_cast<const ucp_address_t*>(all.data() + displs[r]);
      ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      if (const ucs_status_t st = ucp_ep_create(worker, &ep, &eps[r]); st != UCS_OK) {
        SKIPRING_LOG_ERROR("SKIPRING_TRANSPORT=ucx: no UCX endpoint from rank {} to rank {}: {}",
                           rank, r, ucs_status_string(st));
        eps[r] = nullptr;
        return false;
      }
    }
    return true;
  }
};

UcxTransport::UcxTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Status UcxTransport::create(MPI_Comm comm, const WaitPolicy& wait, const std::string& net_device,
                            std::unique_ptr<UcxTransport>* out) {
  auto impl = std::make_unique<Impl>();
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::string why;
  ucp_address_t* address = nullptr;
  size_t address_bytes = 0;
  impl->make_worker(net_device, &address, &address_bytes, &why);
  // Every rank's address (length 0: that rank has none, and everyone fails).
  std::vector<int> lengths(static_cast<size_t>(size) + 1, 0);
  lengths[size] = address != nullptr ? static_cast<int>(address_bytes) : 0;
  WaitWhat w;
  w.what = "communicator setup: exchanging UCX worker addresses";
  MPI_Request req;
  SKIPRING_RETURN_IF_ERROR(wait_collectives(
      MPI_Iallgather(&lengths[size], 1, MPI_INT, lengths.data(), 1, MPI_INT, comm, &req), &req, 1,
      wait, w, nullptr, &lengths));
  std::string missing;
  for (int r = 0; r < size; ++r) {
    if (lengths[r] <= 0) missing += (missing.empty() ? "" : ",") + std::to_string(r);
  }
  auto release_address = [&] {
    if (address != nullptr) ucp_worker_release_address(impl->worker, address);
    address = nullptr;
  };
  if (!missing.empty()) {
    release_address();
    SKIPRING_LOG_ERROR("SKIPRING_TRANSPORT=ucx: no UCX worker on rank(s) {}{}", missing,
                       why.empty() ? "" : " (here: " + why + ")");
    if (impl->worker != nullptr) ucp_worker_destroy(impl->worker);
    return Status::kErrTransport;
  }
  std::vector<int> displs(static_cast<size_t>(size), 0);
  for (int r = 1; r < size; ++r) displs[r] = displs[r - 1] + lengths[r - 1];
  std::vector<uint8_t> mine(
      static_cast<const uint8_t*>(static_cast<const void*>(address)),
      static_cast<const uint8_t*>(static_cast<const void*>(address)) + address_bytes);
  release_address();
  std::vector<uint8_t> all(static_cast<size_t>(displs[size - 1]) + lengths[size - 1]);
  SKIPRING_RETURN_IF_ERROR(wait_collectives(
      MPI_Iallgatherv(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(),
                      lengths.data(), displs.data(), MPI_BYTE, comm, &req),
      &req, 1, wait, w, nullptr, &mine, &all, &lengths, &displs));
  std::vector<int> ep_ok(2, 1);
  ep_ok[0] = impl->connect_all(all, displs, rank, size) ? 1 : 0;
  w.what = "communicator setup: agreeing on the UCX endpoints";
  const Status agreed =
      wait_collectives(PMPI_Iallreduce(&ep_ok[0], &ep_ok[1], 1, MPI_INT, MPI_MIN, comm, &req), &req,
                       1, wait, w, nullptr, &ep_ok);
  out->reset(new UcxTransport(std::move(impl)));
  (*out)->rank_ = rank;
  (*out)->size_ = size;
  if (!ok(agreed) || ep_ok[1] == 0) {
    if (ok(agreed) && ep_ok[0] == 1)
      SKIPRING_LOG_ERROR("SKIPRING_TRANSPORT=ucx: another rank could not connect over UCX");
    out->reset();
    return ok(agreed) ? Status::kErrTransport : agreed;
  }
  static std::once_flag logged;
  std::call_once(logged, [&] {
    if (rank == 0) SKIPRING_LOG_INFO("SKIPRING_TRANSPORT=ucx: {}", describe());
  });
  (*out)->impl_->touch();
  (*out)->impl_->start_background();
  return Status::kOk;
}

UcxTransport::~UcxTransport() {
  Impl& m = *impl_;
  m.stop_background();
  if (m.worker == nullptr) return;
  // Only after an error are operations still in flight here, and the buffers of that call
  // (the caller's, the communicator's scratch) may be gone already: nothing may land in them
  // any more, so with anything in flight the worker is never progressed again. Receives not
  // matched yet are cancelled (no progress needed). A matched receive (its rendezvous data is
  // put by the sender, with no step of ours) or a send still under way (progress would act on
  // its peer's request to send: a put into the peer's buffer, which may be gone too) leaves
  // the worker as it is (leaked). abandon() gave them their bounded chance while the buffers
  // were still there; before it, this destructor progressed sends for up to 2 s, which put
  // into a peer's freed receive buffer (mpi_count_mismatch_np2 over UCX: heap corruption,
  // docs/reliability.md), and progressed a worker with a matched receive
  // (mpi_watchdog_counts_differ_np4: "malloc(): unaligned tcache chunk detected").
  for (size_t i = m.active.size(); i-- > 0;) {
    const Impl::Part x = m.active[i];
    if (!m.ops[x.op].is_recv) continue;
    void* req = m.ops[x.op].req[x.part];
    ucp_request_cancel(m.worker, req);
    if (ucp_request_check_status(req) == UCS_INPROGRESS) continue;
    ucp_request_free(req);
    m.active[i] = m.active.back();
    m.active.pop_back();
  }
  if (!m.active.empty()) {
    SKIPRING_LOG_WARN(
        "UCX: {} operation(s) still under way as the communicator goes (a matched receive or a "
        "send); its worker is left unfreed and never progressed again (progress could write "
        "into freed memory)",
        m.active.size());
    return;
  }
  ucp_request_param_t p;
  std::memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  for (ucp_ep_h ep : m.eps) {
    if (ep == nullptr) continue;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
      progress_until_done(m.worker, r, 1.0);
      ucp_request_free(r);
    }
  }
  ucp_worker_destroy(m.worker);
}

void UcxTransport::abandon(double seconds) {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lk(m.mu);
    if (m.abandoned || m.active.empty()) return;  // nothing in flight: nothing can land
  }
  m.stop_background();  // `bg` must not progress the worker from now on either
  const Impl::Use use(m);
  m.abandoned = true;
  // Receives not matched yet: cancelled at once. Matched ones cannot be: their data comes
  // (a rendezvous put by the sender, or eager fragments), so the worker is progressed until
  // each has finished, while the caller's buffers are still there. Sends get a short chance
  // too (a peer still in the collective then sees its message, and its own error, sooner);
  // one its peer never matches does not hold the call longer.
  for (const Impl::Part& x : m.active) {
    if (m.ops[x.op].is_recv) ucp_request_cancel(m.worker, m.ops[x.op].req[x.part]);
  }
  constexpr double kSendGrace = 0.25;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  const Clock::time_point sends_end =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(std::min(seconds, kSendGrace)));
  for (;;) {
    bool recv_left = false, send_left = false;
    for (const Impl::Part& x : m.active) {
      if (ucp_request_check_status(m.ops[x.op].req[x.part]) != UCS_INPROGRESS) continue;
      (m.ops[x.op].is_recv ? recv_left : send_left) = true;
    }
    if (!recv_left && !send_left) break;
    const Clock::time_point now = Clock::now();
    if (now > end || (!recv_left && now > sends_end)) break;
    if (ucp_worker_progress(m.worker) == 0) sched_yield();
  }
  // Finished requests are released; what is left stays in `active` for the destructor, which
  // then leaves the worker unfreed.
  int left_from = -1, left_tag = -1;
  size_t recv_left = 0;
  for (size_t i = m.active.size(); i-- > 0;) {
    const Impl::Part x = m.active[i];
    Impl::Op& op = m.ops[x.op];
    if (ucp_request_check_status(op.req[x.part]) == UCS_INPROGRESS) {
      if (op.is_recv) {
        ++recv_left;
        left_from = op.peer;
        left_tag = op.tag;
      }
      continue;
    }
    ucp_request_free(op.req[x.part]);
    op.req[x.part] = nullptr;
    m.active[i] = m.active.back();
    m.active.pop_back();
  }
  if (recv_left > 0) {
    // Its sender stopped (its own collective failed: it never progresses its worker again)
    // or did not run for that long. The worker is never progressed again either way.
    SKIPRING_LOG_WARN(
        "UCX: after the failed collective, {} matched receive(s) (from rank {} with tag {}) "
        "did not finish within {:.1f} s; this communicator's UCX worker stops here",
        recv_left, left_from, left_tag, seconds);
  }
}

size_t UcxTransport::outstanding() const { return impl_->in_flight; }

Status UcxTransport::post_send(int peer, int tag, const void* header, size_t header_bytes,
                               const void* payload, size_t payload_bytes, Token token) {
  Impl& m = *impl_;
  const Impl::Use use(m);
  if (m.abandoned) return Status::kErrTransport;
  if (peer < 0 || peer >= size_ || tag < 0 || tag >= tag_span()) return Status::kErrArg;
  const int id = m.new_op();
  Impl::Op& op = m.ops[id];
  op.token = token;
  op.peer = peer;
  op.tag = tag;
  op.split = payload_bytes > kSplit;
  op.parts_left = op.split ? 2 : 1;
  Status st;
  if (op.split) {
    st = m.post_send_part(id, 0, peer, rank_, header, header_bytes, false);
    if (ok(st)) st = m.post_send_part(id, 1, peer, rank_, payload, payload_bytes, false);
  } else if (header_bytes == 0 || payload_bytes == 0 || contiguous(header, header_bytes, payload)) {
    st = m.post_send_part(id, 0, peer, rank_, header_bytes == 0 ? payload : header,
                          header_bytes + payload_bytes, false);
  } else {
    op.iov[0] = {const_cast<void*>(header), header_bytes};
    op.iov[1] = {const_cast<void*>(payload), payload_bytes};
    st = m.post_send_part(id, 0, peer, rank_, op.iov, 2, true);
  }
  return st;  // after an error the communicator is broken: the op stays until destruction
}

Status UcxTransport::post_recv(int peer, int tag, void* header, size_t header_bytes, void* payload,
                               size_t payload_bytes, Token token) {
  Impl& m = *impl_;
  const Impl::Use use(m);
  if (m.abandoned) return Status::kErrTransport;
  if (peer >= size_ || (peer < 0 && peer != kAnySource && peer != kAnySourceOneSender) || tag < 0 ||
      tag >= tag_span()) {
    return Status::kErrArg;
  }
  const int id = m.new_op();
  Impl::Op& op = m.ops[id];
  op.token = token;
  op.is_recv = true;
  op.peer = peer;
  op.tag = tag;
  op.header_bytes = header_bytes;
  op.payload_capacity = payload_bytes;
  op.payload = payload;
  op.split = payload_bytes > kSplit;
  op.parts_left = op.split ? 2 : 1;
  const int from = peer >= 0 ? peer : -1;
  if (op.split) {
    // From one rank, or from the one rank that sends this tag (kAnySourceOneSender): both parts
    // at once; from any rank, the payload once the header names its sender.
    op.deferred = peer == kAnySource;
    SKIPRING_RETURN_IF_ERROR(m.post_recv_part(id, 0, from, header, header_bytes, false));
    if (op.deferred) return Status::kOk;
    return m.post_recv_part(id, 1, from, payload, payload_bytes, false);
  }
  if (header_bytes == 0 || payload_bytes == 0 || contiguous(header, header_bytes, payload)) {
    return m.post_recv_part(id, 0, from, header_bytes == 0 ? payload : header,
                            header_bytes + payload_bytes, false);
  }
  op.iov[0] = {header, header_bytes};
  op.iov[1] = {payload, payload_bytes};
  return m.post_recv_part(id, 0, from, op.iov, 2, true);
}

Status UcxTransport::poll(std::vector<Completion>* done) {
  Impl& m = *impl_;
  const Impl::Use use(m);
  if (m.abandoned) return Status::kErrTransport;
  progress_some(m.worker);
  Status out = Status::kOk;
  for (const Impl::Part& x : m.immediate) {
    const Status st = m.finish(x.op, x.part, UCS_OK, done);
    if (ok(out)) out = st;
  }
  m.immediate.clear();
  for (size_t i = 0; i < m.active.size();) {
    const Impl::Part x = m.active[i];
    Impl::Op& op = m.ops[x.op];
    void* req = op.req[x.part];
    const ucs_status_t st = op.is_recv ? ucp_tag_recv_request_test(req, &op.info[x.part])
                                       : ucp_request_check_status(req);
    if (st == UCS_INPROGRESS) {
      ++i;
      continue;
    }
    ucp_request_free(req);
    op.req[x.part] = nullptr;
    m.active[i] = m.active.back();
    m.active.pop_back();
    const Status fs = m.finish(x.op, x.part, st, done);
    if (ok(out)) out = fs;
  }
  m.active.insert(m.active.end(), m.posted.begin(), m.posted.end());
  m.posted.clear();
  return out;
}

Status UcxTransport::cancel(Token token) {
  Impl& m = *impl_;
  const Impl::Use use(m);
  if (m.abandoned) return Status::kErrTransport;
  int id = -1;
  for (size_t i = 0; i < m.ops.size(); ++i) {
    if (m.ops[i].in_use && m.ops[i].is_recv && m.ops[i].token == token) id = static_cast<int>(i);
  }
  if (id < 0) return Status::kErrArg;
  Impl::Op& op = m.ops[id];
  bool received = false;
  for (size_t i = m.active.size(); i-- > 0;) {
    if (m.active[i].op != id) continue;
    void* req = op.req[m.active[i].part];
    ucp_request_cancel(m.worker, req);
    if (!progress_until_done(m.worker, req, 0.2)) {
      // Matched, and its data still coming (a rendezvous from a sender that stopped): not
      // cancellable. Left in `active`: the collective fails, and abandon waits for it.
      SKIPRING_LOG_ERROR("UCX: a cancelled receive from rank {} with tag {} is still receiving",
                         op.peer, op.tag);
      return Status::kErrProtocol;
    }
    received = received || ucp_request_check_status(req) != UCS_ERR_CANCELED;
    ucp_request_free(req);
    m.active[i] = m.active.back();
    m.active.pop_back();
  }
  // A part that has already come counts as received (a split message's header, say).
  received = received || (op.split && op.parts_left < 2);
  m.release_op(id);
  // The protocol cancels only receives nothing can match any more: data here is a bug.
  return received ? Status::kErrProtocol : Status::kOk;
}

Status UcxTransport::unmatched_message_waiting(bool* waiting) {
  Impl& m = *impl_;
  const Impl::Use use(m);
  if (m.abandoned) return Status::kErrTransport;
  progress_some(m.worker);
  ucp_tag_recv_info_t info;
  *waiting = ucp_tag_probe_nb(m.worker, 0, 0, 0, &info) != nullptr;
  return Status::kOk;
}

std::string UcxTransport::describe() {
  std::string out = std::string("UCX ") + ucp_get_version_string();
  ProcessContext& pc = process_context();
  std::lock_guard<std::mutex> lock(pc.mutex);
  if (!pc.tried) return out + " (no UCX communicator yet)";
  if (pc.context == nullptr) return out + " (ucp_init failed: " + pc.error + ")";
  if (!pc.net_device.empty()) out += ", NET_DEVICES=" + pc.net_device + " (from the topology)";
  if (const char* env = std::getenv("UCX_NET_DEVICES"))
    out += std::string(", UCX_NET_DEVICES=") + env;
  if (const char* env = std::getenv("UCX_TLS")) out += std::string(", UCX_TLS=") + env;
  return out;
}

}  // namespace skipring

#else  // !SKIPRING_HAVE_UCX

namespace skipring {

bool ucx_transport_built() { return false; }

struct UcxTransport::Impl {};

UcxTransport::UcxTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UcxTransport::~UcxTransport() = default;

Status UcxTransport::create(MPI_Comm, const WaitPolicy&, const std::string&,
                            std::unique_ptr<UcxTransport>*) {
  SKIPRING_LOG_ERROR("SKIPRING_TRANSPORT=ucx: this build has no UCX (libucx-dev not found)");
  return Status::kErrConfig;
}
size_t UcxTransport::outstanding() const { return 0; }
Status UcxTransport::post_send(int, int, const void*, size_t, const void*, size_t, Token) {
  return Status::kErrInternal;
}
Status UcxTransport::post_recv(int, int, void*, size_t, void*, size_t, Token) {
  return Status::kErrInternal;
}
Status UcxTransport::poll(std::vector<Completion>*) { return Status::kErrInternal; }
Status UcxTransport::cancel(Token) { return Status::kErrInternal; }
Status UcxTransport::unmatched_message_waiting(bool*) { return Status::kErrInternal; }
void UcxTransport::abandon(double) {}
std::string UcxTransport::describe() { return "not built (no UCX found at configure time)"; }

}  // namespace skipring

#endif
