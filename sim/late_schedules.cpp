// late_schedules: what an all-reduce could take after one late rank arrives, under SimGrid, for
// omniscient schedules (docs/history/skip_ahead_rounds.md, "What any schedule reaches in this
// model"). A yardstick for issue 11's target of about L = (n-1)/n * S/B, in the spirit of
// apps/late_bound.cpp (which times the owner schedule skipring runs today, under real MPI).
//
// Setting: every rank but the late one (rank `late`) already holds P, the reduction of all the
// other inputs (the healthy ranks have run the whole all-reduce among themselves while waiting).
// When the late rank arrives (t = 0 here, after a barrier), it only has to
//   - send its input x to every healthy rank, which adds it: result = P op x;
//   - receive P, and add its own input the same way (identical bits everywhere).
// Schedules for x (segments of --seg bytes, each link a FIFO with --inflight messages in flight,
// as skipring's per-peer allgather queues):
//   chain  late -> late+1 -> ... -> late-1 (every healthy rank forwards each segment once);
//          late-1 (the chain's end, whose uplink is otherwise idle) sends P to the late rank.
//   tree   two binary trees over the healthy ranks, even segments down one and odd ones down
//          the other; a rank is interior in at most one tree, so no uplink carries more than S;
//          every healthy rank sends the late rank an equal share of P's segments.
//   star   segment k goes to healthy index k % (n - 1) (one window for all the late rank's
//          sends), which sends it to every other healthy rank; healthy index (k + 1) % (n - 1)
//          sends P's segment k to the late rank (two hops at most, no fill).
// Sends are synchronous (MPI_Issend): a send counts as in flight until its receiver has it, also
// below SMPI's eager size (an eager MPI_Isend completes at once, so a window of them would let
// every segment share the link at the same time and complete together).
// Additions are charged as simulated time at --reduce-gbps (like SKIPRING_SIM_REDUCE_GBPS).
// Prints the time from the arrival until the last rank has its result, in ms and in units of L,
// and checks every rank's result. Not a protocol: no control messages, no headers, no agreement
// on which rank is late; it says what such a protocol could reach on the platform.
//
//   scripts/sim_late_schedules.sh   (builds this with smpicxx and runs n = 8, 16, 64, 256)
#include <mpi.h>
#include <smpi/smpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Options {
  size_t bytes = 64u << 20;
  size_t seg = 256u << 10;
  int late = 1;
  int inflight = 2;
  double reduce_gbps = 50;
  double link_gbps = 100;
  std::string schedule = "chain";
};

size_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return static_cast<size_t>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--bytes")
      o.bytes = parse_size(argv[i + 1]);
    else if (k == "--seg")
      o.seg = parse_size(argv[i + 1]);
    else if (k == "--late")
      o.late = std::atoi(argv[i + 1]);
    else if (k == "--inflight")
      o.inflight = std::atoi(argv[i + 1]);
    else if (k == "--reduce-gbps")
      o.reduce_gbps = std::atof(argv[i + 1]);
    else if (k == "--link-gbps")
      o.link_gbps = std::atof(argv[i + 1]);
    else if (k == "--schedule")
      o.schedule = argv[i + 1];
    else {
      std::fprintf(stderr, "late_schedules: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return o;
}

// One segment to send to `peer` from `buf`, queued behind the ones already going there.
struct Link {
  int peer = -1;          // < 0: segment k goes to owner[k % owners.size()] (one window for all)
  std::deque<int> queue;  // segment ids
  int in_flight = 0;
  const float* buf = nullptr;
  int kind = 0;  // 0: x, 1: P (tag kind * segments + segment)
  std::vector<int> owners;
};

class Node {
 public:
  Node(const Options& o, int rank, int n, size_t elems)
      : o_(o),
        rank_(rank),
        n_(n),
        seg_elems_(o.seg / sizeof(float)),
        segs_(static_cast<int>((elems + seg_elems_ - 1) / seg_elems_)),
        elems_(elems) {}

  size_t seg_off(int k) const { return static_cast<size_t>(k) * seg_elems_; }
  int seg_len(int k) const { return static_cast<int>(std::min(seg_elems_, elems_ - seg_off(k))); }
  int segs() const { return segs_; }

  // A FIFO link to `peer` reading from `buf`; returns its index.
  int add_link(int peer, const float* buf, int kind, std::vector<int> owners = {}) {
    links_.push_back(Link{peer, {}, 0, buf, kind, std::move(owners)});
    return static_cast<int>(links_.size()) - 1;
  }
  void enqueue(int link, int k) {
    links_[link].queue.push_back(k);
    pump(link);
  }
  // A receive of segment k of `kind` from `peer` into `dst` (any source when peer < 0).
  void post_recv(int peer, int k, float* dst, int kind) {
    MPI_Request r;
    MPI_Irecv(dst + seg_off(k), seg_len(k), MPI_FLOAT, peer < 0 ? MPI_ANY_SOURCE : peer,
              kind * segs_ + k, MPI_COMM_WORLD, &r);
    reqs_.push_back(r);
    what_.push_back({-1, k});
  }
  // Runs until every posted operation completed; `arrived(k)` is called per receive.
  template <class F>
  void run(F arrived) {
    for (;;) {
      int idx = MPI_UNDEFINED;
      MPI_Waitany(static_cast<int>(reqs_.size()), reqs_.data(), &idx, MPI_STATUS_IGNORE);
      if (idx == MPI_UNDEFINED) break;
      const Op op = what_[idx];
      if (op.link >= 0) {
        links_[op.link].in_flight--;
        pump(op.link);
      } else {
        arrived(op.seg);
      }
    }
  }
  void add(float* acc, const float* x, int k) {
    const size_t off = seg_off(k);
    const int len = seg_len(k);
    for (int i = 0; i < len; ++i) acc[off + i] += x[off + i];
    smpi_execute(len * sizeof(float) / (o_.reduce_gbps * 1e9));
  }

 private:
  struct Op {
    int link;  // a send on this link, or -1: a receive
    int seg;
  };
  void pump(int link) {
    Link& l = links_[link];
    while (l.in_flight < o_.inflight && !l.queue.empty()) {
      const int k = l.queue.front();
      l.queue.pop_front();
      MPI_Request r;
      const int to = l.peer >= 0 ? l.peer : l.owners[k % l.owners.size()];
      MPI_Issend(l.buf + seg_off(k), seg_len(k), MPI_FLOAT, to, l.kind * segs_ + k, MPI_COMM_WORLD,
                 &r);
      reqs_.push_back(r);
      what_.push_back({link, k});
      l.in_flight++;
    }
  }

  const Options& o_;
  int rank_, n_;
  size_t seg_elems_;
  int segs_;
  size_t elems_;
  std::vector<Link> links_;
  std::vector<MPI_Request> reqs_;
  std::vector<Op> what_;
};

// In-order binary tree over positions 1..m: children of position i (its lowest set bit b > 1)
// are i - b/2 and the first of i + b/2, i + b/4, ... that is <= m. The root is the largest
// power of two <= m. Leaves are the odd positions.
std::vector<int> tree_children(int i, int m) {
  std::vector<int> out;
  const int b = i & -i;
  if (b == 1) return out;
  out.push_back(i - b / 2);
  for (int h = b / 2; h >= 1; h /= 2) {
    if (i + h <= m) {
      out.push_back(i + h);
      break;
    }
  }
  return out;
}

int tree_root(int m) {
  int r = 1;
  while (r * 2 <= m) r *= 2;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const Options o = parse(argc, argv);
  if (n < 3 || o.late < 0 || o.late >= n ||
      (o.schedule != "chain" && o.schedule != "tree" && o.schedule != "star")) {
    if (rank == 0)
      std::fprintf(stderr,
                   "late_schedules: need n >= 3, a valid --late, --schedule chain|tree|star\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const size_t elems = o.bytes / sizeof(float);
  const int L = o.late;
  const int m = n - 1;
  // Healthy rank -> index 0..m-1 in ring order after the late rank, and back.
  auto hidx = [&](int r) { return (r - L - 1 + n) % n; };
  auto hrank = [&](int i) { return (L + 1 + i) % n; };

  // Inputs: rank r holds r + 1 everywhere; P = sum of the healthy ones.
  std::vector<float> x(elems, static_cast<float>(rank + 1));
  std::vector<float> p(elems, 0.0f);
  float psum = 0;
  for (int r = 0; r < n; ++r)
    if (r != L) psum += static_cast<float>(r + 1);
  if (rank != L) std::fill(p.begin(), p.end(), psum);
  std::vector<float> res = (rank == L) ? x : p;   // late: its input, P adds in; else P, x adds in
  std::vector<float> in(rank == L ? 0 : elems);   // healthy: x lands here
  std::vector<float> pin(rank == L ? elems : 0);  // late: P lands here

  Node node(o, rank, n, elems);
  const int segs = node.segs();
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();

  if (o.schedule == "chain") {
    if (rank == L) {
      const int to = node.add_link(hrank(0), x.data(), 0);
      for (int k = 0; k < segs; ++k) node.post_recv(hrank(m - 1), k, pin.data(), 1);
      for (int k = 0; k < segs; ++k) node.enqueue(to, k);
      node.run([&](int k) { node.add(res.data(), pin.data(), k); });
    } else {
      const int i = hidx(rank);
      const int fwd = (i + 1 < m) ? node.add_link(hrank(i + 1), in.data(), 0) : -1;
      if (i == m - 1) {
        const int back = node.add_link(L, p.data(), 1);
        for (int k = 0; k < segs; ++k) node.enqueue(back, k);
      }
      const int from = (i == 0) ? L : hrank(i - 1);
      for (int k = 0; k < segs; ++k) node.post_recv(from, k, in.data(), 0);
      node.run([&](int k) {
        if (fwd >= 0) node.enqueue(fwd, k);
        node.add(res.data(), in.data(), k);
      });
    }
  } else if (o.schedule == "star") {
    // Owner of segment k: healthy index k % m; it sends x's segment to every other healthy
    // rank; healthy index (k + 1) % m sends P's segment k to the late rank.
    if (rank == L) {
      std::vector<int> owners;
      for (int i = 0; i < m; ++i) owners.push_back(hrank(i));
      const int to = node.add_link(-1, x.data(), 0, owners);
      for (int k = 0; k < segs; ++k) node.post_recv(-1, k, pin.data(), 1);
      for (int k = 0; k < segs; ++k) node.enqueue(to, k);
      node.run([&](int k) { node.add(res.data(), pin.data(), k); });
    } else {
      const int i = hidx(rank);
      std::vector<int> to;
      for (int j = 1; j < m; ++j) to.push_back(node.add_link(hrank((i + j) % m), in.data(), 0));
      const int back = node.add_link(L, p.data(), 1);
      for (int k = (i + m - 1) % m; k < segs; k += m) node.enqueue(back, k);
      for (int k = 0; k < segs; ++k) node.post_recv(-1, k, in.data(), 0);
      node.run([&](int k) {
        if (k % m == i)
          for (int l : to) node.enqueue(l, k);
        node.add(res.data(), in.data(), k);
      });
    }
  } else {  // tree
    // Tree A over positions 1..m = healthy index + 1; tree B shifted by one (its position of
    // healthy index i is i + 2, wrapping m + 1 to 1), so A's interior positions are B's leaves.
    auto pos_a = [&](int i) { return i + 1; };
    auto pos_b = [&](int i) { return (i + 1) % m + 1; };
    auto idx_a = [&](int pos) { return pos - 1; };
    auto idx_b = [&](int pos) { return (pos - 2 + m) % m; };
    if (rank == L) {
      const int ta = node.add_link(hrank(idx_a(tree_root(m))), x.data(), 0);
      const int tb = node.add_link(hrank(idx_b(tree_root(m))), x.data(), 0);
      for (int k = 0; k < segs; ++k) node.post_recv(-1, k, pin.data(), 1);
      for (int k = 0; k < segs; ++k) node.enqueue(k % 2 == 0 ? ta : tb, k);
      node.run([&](int k) { node.add(res.data(), pin.data(), k); });
    } else {
      const int i = hidx(rank);
      std::vector<int> kids[2];
      for (int c : tree_children(pos_a(i), m))
        kids[0].push_back(node.add_link(hrank(idx_a(c)), in.data(), 0));
      for (int c : tree_children(pos_b(i), m))
        kids[1].push_back(node.add_link(hrank(idx_b(c)), in.data(), 0));
      // My share of P for the late rank: segments k with k % m == i.
      const int back = node.add_link(L, p.data(), 1);
      for (int k = i; k < segs; k += m) node.enqueue(back, k);
      for (int k = 0; k < segs; ++k) node.post_recv(-1, k, in.data(), 0);
      node.run([&](int k) {
        for (int l : kids[k % 2]) node.enqueue(l, k);
        node.add(res.data(), in.data(), k);
      });
    }
  }
  const double mine = MPI_Wtime() - t0;

  const float want = psum + static_cast<float>(L + 1);
  int bad = 0;
  for (size_t e = 0; e < elems; ++e)
    if (res[e] != want) {
      bad = 1;
      break;
    }
  double worst = 0;
  int any_bad = 0;
  MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    const double sb = o.bytes / (o.link_gbps / 8 * 1e9);
    const double Lt = sb * (n - 1) / n;
    std::printf(
        "schedule=%s n=%d bytes=%zu seg=%zu inflight=%d after_arrival_ms=%.3f L_ms=%.3f "
        "in_L=%.3f S_over_B_in_L=%.3f result=%s\n",
        o.schedule.c_str(), n, o.bytes, o.seg, o.inflight, worst * 1e3, Lt * 1e3, worst / Lt,
        sb / Lt, any_bad ? "WRONG" : "ok");
  }
  MPI_Finalize();
  return any_bad ? 1 : 0;
}
