// Event-driven idle waiting under SimGrid SMPI (see smpi_wait.h).
#include "sim/smpi_wait.h"

#include <smpi/smpi.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>
#include <string>
#include <vector>

namespace skipring {
namespace smpi_wait {
namespace {

// Timer messages stay below SMPI's eager limit (smpi/send-is-detached-thresh, 64 KiB), so
// their send completes at once and only the receive is waited for.
constexpr int kTimerBytesMax = 60 * 1024;
constexpr double kEnvelope = 16;  // bytes SMPI adds to every message
constexpr int kTimerTag = 1;

struct Timer {
  MPI_Request recv;
  double start;
  double expiry;
};

// One per rank: SMPI loads a private copy of the executable's data for every rank.
struct State {
  bool tried = false;
  bool usable = false;
  std::string reason;
  double lb_lat = 0;  // loopback latency, seconds
  double lb_bw = 0;   // loopback bandwidth, bytes per second
  MPI_Comm comm = MPI_COMM_NULL;
  bool armed = false;
  bool consumed = false;
  double deadline = 0;
  std::vector<Timer> timers;
  std::vector<char> send_buf, recv_buf;
  std::vector<MPI_Request> all;
};

State& state() {
  static State s;
  return s;
}

bool init(State& s) {
  if (s.tried) return s.usable;
  s.tried = true;
  simgrid::s4u::Host* host = simgrid::s4u::Host::current();
  std::vector<simgrid::s4u::Link*> links;
  double lat = 0;
  host->route_to(host, links, &lat);
  if (links.size() != 1) {
    s.reason = "host " + std::string(host->get_cname()) +
               " has no loopback link (sim/make_platform.py platforms have one)";
    return false;
  }
  if (links[0]->get_sharing_policy() != simgrid::s4u::Link::SharingPolicy::FATPIPE) {
    s.reason = "the loopback link " + std::string(links[0]->get_cname()) + " is not FATPIPE";
    return false;
  }
  s.lb_lat = lat;
  s.lb_bw = links[0]->get_bandwidth();
  if (!(s.lb_bw > 0) || !std::isfinite(s.lb_bw) || !(s.lb_lat >= 0)) {
    s.reason = "the loopback link has no usable bandwidth";
    return false;
  }
  if (MPI_Comm_dup(MPI_COMM_SELF, &s.comm) != MPI_SUCCESS) {
    s.reason = "MPI_Comm_dup(MPI_COMM_SELF) failed";
    return false;
  }
  s.send_buf.assign(kTimerBytesMax, 0);
  s.recv_buf.assign(kTimerBytesMax, 0);
  s.usable = true;
  return true;
}

void disable(State& s, std::string why) {
  s.usable = false;
  s.reason = std::move(why);
}

// Starts a timer that fires `d` seconds from `now`, or after one message's worth of loopback
// time if that is shorter (the waiter then wakes early and waits again). False when `d` is
// shorter than the shortest message.
bool start_timer(State& s, double now, double d) {
  double bytes = std::ceil((d - s.lb_lat) * s.lb_bw - kEnvelope);
  if (bytes < 0) return false;
  bytes = std::min<double>(bytes, kTimerBytesMax);
  Timer t;
  t.start = now;
  t.expiry = now + s.lb_lat + (bytes + kEnvelope) / s.lb_bw;
  MPI_Request send;
  if (MPI_Irecv(s.recv_buf.data(), kTimerBytesMax, MPI_BYTE, 0, kTimerTag, s.comm, &t.recv) !=
          MPI_SUCCESS ||
      MPI_Isend(s.send_buf.data(), static_cast<int>(bytes), MPI_BYTE, 0, kTimerTag, s.comm,
                &send) != MPI_SUCCESS) {
    return false;
  }
  MPI_Wait(&send, MPI_STATUS_IGNORE);  // eager: already complete
  s.timers.push_back(t);
  return true;
}

void sleep_for(double seconds) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(seconds);
  ts.tv_nsec = static_cast<long>(std::ceil((seconds - static_cast<double>(ts.tv_sec)) * 1e9));
  if (ts.tv_sec == 0 && ts.tv_nsec == 0) ts.tv_nsec = 1;
  smpi_nanosleep(&ts, nullptr);
}

}  // namespace

bool arm(double deadline) {
  State& s = state();
  if (!init(s)) return false;
  s.armed = true;
  s.consumed = false;
  s.deadline = deadline;
  return true;
}

bool take_consumed() {
  State& s = state();
  const bool c = s.consumed;
  s.consumed = false;
  s.armed = false;
  return c;
}

const char* unavailable_reason() { return state().reason.c_str(); }

}  // namespace smpi_wait
}  // namespace skipring

extern "C" int skipring_smpi_testsome(int incount, MPI_Request requests[], int* outcount,
                                      int indices[], MPI_Status statuses[]) {
  using namespace skipring::smpi_wait;
  State& s = state();
  if (!s.armed || !s.usable) return MPI_Testsome(incount, requests, outcount, indices, statuses);
  s.armed = false;
  s.consumed = true;
  const double now = MPI_Wtime();
  if (s.deadline <= now) return MPI_Testsome(incount, requests, outcount, indices, statuses);
  if (std::isfinite(s.deadline)) {
    double earliest = std::numeric_limits<double>::infinity();
    for (const Timer& t : s.timers) earliest = std::min(earliest, t.expiry);
    // A pending timer that fires by the deadline (within one byte of loopback time) will do.
    if (earliest > s.deadline + 1.0 / s.lb_bw && !start_timer(s, now, s.deadline - now)) {
      // Too close for a timer message: sleep the rest (less than a few nanoseconds).
      sleep_for(s.deadline - now);
      return MPI_Testsome(incount, requests, outcount, indices, statuses);
    }
  }
  s.all.assign(requests, requests + incount);
  for (const Timer& t : s.timers) s.all.push_back(t.recv);
  int k = MPI_UNDEFINED;
  MPI_Status st;
  // SimGrid 3.32's waitany tests each activity before it blocks, and that test
  // (ActivityImpl::test) dynamic_casts the actor's *previous* simcall observer, which may be
  // gone by now (after an execution, for instance): a crash that depends on what memory holds.
  // A yield (a simcall without observer, no simulated time) leaves a null observer behind.
  simgrid::s4u::this_actor::yield();
  const int rc = MPI_Waitany(static_cast<int>(s.all.size()), s.all.data(), &k, &st);
  std::copy(s.all.begin(), s.all.begin() + incount, requests);
  if (rc != MPI_SUCCESS) return rc;
  if (k == MPI_UNDEFINED) return MPI_Testsome(incount, requests, outcount, indices, statuses);
  if (k >= incount) {
    // A timer: check it fired when planned (a network model with correction factors would
    // make every timer wrong). Nothing of the caller's completed yet.
    const Timer t = s.timers[k - incount];
    s.timers.erase(s.timers.begin() + (k - incount));
    // Only a timer started in this call was waited for all along (an older one may have fired
    // while the rank was busy).
    const double off = MPI_Wtime() - t.expiry;
    if (t.start == now && std::fabs(off) > 2e-9 + 1e-6 * (t.expiry - t.start)) {
      disable(s, "a loopback timer fired " + std::to_string(off * 1e9) +
                     " ns off its time (a network model with correction factors? use "
                     "network/model:CM02)");
    }
    *outcount = 0;
    return MPI_SUCCESS;
  }
  // One of the caller's requests completed (MPI_Waitany freed it): report it with whatever
  // else is complete now, in index order, as one MPI_Testsome would (the engine handles a batch
  // in that order; one completion per call would reorder its sends after a burst of arrivals).
  int more = 0;
  const int rc2 =
      MPI_Testsome(incount, requests, &more, indices + 1,
                   statuses == MPI_STATUSES_IGNORE ? MPI_STATUSES_IGNORE : statuses + 1);
  if (more == MPI_UNDEFINED) more = 0;
  int pos = 0;  // k's place among the others (MPI_Testsome lists them in index order)
  while (pos < more && indices[pos + 1] < k) {
    indices[pos] = indices[pos + 1];
    if (statuses != MPI_STATUSES_IGNORE) statuses[pos] = statuses[pos + 1];
    ++pos;
  }
  indices[pos] = k;
  if (statuses != MPI_STATUSES_IGNORE) statuses[pos] = st;
  *outcount = 1 + more;
  return rc2;
}
