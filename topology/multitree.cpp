// Multi-spanning-tree planner (see multitree.h and docs/multitree.md).
#include "topology/multitree.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <queue>
#include <sstream>
#include <utility>

namespace skipring {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool height_fits(double d, double h) { return d <= h * (1 + 1e-12) + 1e-15; }

// Latency-weighted shortest distances from `src` over all links (Dijkstra).
std::vector<double> shortest(const LinkGraph& g, int src) {
  const int n = g.nodes();
  std::vector<std::vector<std::pair<int, double>>> adj(n);
  for (const Link& l : g.links()) {
    adj[l.u].push_back({l.v, l.latency_s});
    adj[l.v].push_back({l.u, l.latency_s});
  }
  std::vector<double> d(n, kInf);
  using Item = std::pair<double, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> q;
  d[src] = 0;
  q.push({0, src});
  while (!q.empty()) {
    auto [du, u] = q.top();
    q.pop();
    if (du > d[u]) continue;
    for (auto [v, w] : adj[u]) {
      if (du + w < d[v]) {
        d[v] = du + w;
        q.push({d[v], v});
      }
    }
  }
  return d;
}

// The smallest H any spanning tree can have: min over roots of the farthest shortest path.
double latency_radius(const LinkGraph& g) {
  double best = kInf;
  for (int s = 0; s < g.nodes(); ++s) {
    const std::vector<double> d = shortest(g, s);
    best = std::min(best, *std::max_element(d.begin(), d.end()));
  }
  return best;
}

struct Grown {
  bool ok = false;
  SpanningTree tree;
  std::vector<int> links;  // link indices used
  double bottleneck = kInf;
};

// Step 1 for one root: Prim-like growth by the widest residual link that keeps height <= h.
// Ties: the far end nearer the root (so also the smaller resulting height), then the lower
// link index. Lazy Prim: a max-heap of candidate links, O(E log E).
Grown grow(const LinkGraph& g, const std::vector<std::vector<int>>& adj,
           const std::vector<double>& residual, double min_rate, double h, int root) {
  const int n = g.nodes();
  const std::vector<Link>& links = g.links();
  Grown out;
  out.tree.root = root;
  out.tree.parent.assign(n, -1);
  std::vector<char> in(n, 0);
  std::vector<double> dist(n, 0);
  struct Cand {
    double bw;
    double d;
    int link;
    int to;
    // Heap order: the top is the widest, then the nearest, then the lowest link index.
    bool operator<(const Cand& o) const {
      if (bw != o.bw) return bw < o.bw;
      if (d != o.d) return d > o.d;
      return link > o.link;
    }
  };
  std::priority_queue<Cand> heap;
  auto join = [&](int u) {
    in[u] = 1;
    for (int e : adj[u]) {
      const Link& l = links[e];
      const int v = l.u == u ? l.v : l.u;
      if (in[v] || residual[e] < min_rate) continue;
      const double d = dist[u] + l.latency_s;
      if (height_fits(d, h)) heap.push(Cand{residual[e], d, e, v});
    }
  };
  join(root);
  double height = 0;
  for (int added = 1; added < n;) {
    if (heap.empty()) return out;
    const Cand c = heap.top();
    heap.pop();
    if (in[c.to]) continue;
    const Link& l = links[c.link];
    out.tree.parent[c.to] = l.u == c.to ? l.v : l.u;
    dist[c.to] = c.d;
    height = std::max(height, c.d);
    out.links.push_back(c.link);
    out.bottleneck = std::min(out.bottleneck, residual[c.link]);
    join(c.to);
    ++added;
  }
  out.tree.height_s = height;
  out.ok = true;
  return out;
}

double resolve_min_rate(const LinkGraph& g, const PlannerParams& p) {
  if (p.min_rate_Bps > 0) return p.min_rate_Bps;
  double widest = 0;
  for (const Link& l : g.links()) widest = std::max(widest, l.bandwidth_Bps);
  return widest * 0.01;
}

// Step 3: the K fastest (stable on packing order), fractions by rate.
MultiTreePlan keep_best(std::vector<SpanningTree> trees, int k, double h) {
  std::stable_sort(trees.begin(), trees.end(), [](const SpanningTree& a, const SpanningTree& b) {
    return a.rate_Bps > b.rate_Bps;
  });
  if (static_cast<int>(trees.size()) > k) trees.resize(k);
  MultiTreePlan plan;
  plan.height_bound_s = h;
  for (const SpanningTree& t : trees) plan.throughput_Bps += t.rate_Bps;
  for (const SpanningTree& t : trees) plan.fractions.push_back(t.rate_Bps / plan.throughput_Bps);
  plan.trees = std::move(trees);
  return plan;
}

}  // namespace

Status LinkGraph::add_link(int u, int v, double latency_s, double bandwidth_Bps, std::string* why) {
  if (u < 0 || v < 0 || u >= n_ || v >= n_) {
    return *why = fmt::format("link {}-{}: node outside 0..{}", u, v, n_ - 1), Status::kErrArg;
  }
  if (u == v) return *why = fmt::format("link {}-{}: self-loop", u, v), Status::kErrArg;
  if (!(latency_s >= 0) || !std::isfinite(latency_s)) {
    return *why = fmt::format("link {}-{}: bad latency", u, v), Status::kErrArg;
  }
  if (!(bandwidth_Bps > 0) || !std::isfinite(bandwidth_Bps)) {
    return *why = fmt::format("link {}-{}: bandwidth must be > 0", u, v), Status::kErrArg;
  }
  if (find(u, v) >= 0) return *why = fmt::format("link {}-{}: duplicate", u, v), Status::kErrArg;
  links_.push_back(Link{u, v, latency_s, bandwidth_Bps});
  return Status::kOk;
}

int LinkGraph::find(int u, int v) const {
  for (size_t i = 0; i < links_.size(); ++i) {
    const Link& l = links_[i];
    if ((l.u == u && l.v == v) || (l.u == v && l.v == u)) return static_cast<int>(i);
  }
  return -1;
}

bool LinkGraph::connected() const {
  if (n_ <= 0) return false;
  const std::vector<double> d = shortest(*this, 0);
  return std::all_of(d.begin(), d.end(), [](double x) { return x < kInf; });
}

Status LinkGraph::parse(const std::string& text, LinkGraph* out, std::string* why) {
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  bool have_nodes = false;
  LinkGraph g;
  while (std::getline(in, line)) {
    ++lineno;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream ls(line);
    std::string first;
    if (!(ls >> first)) continue;
    std::string rest;
    if (first == "nodes") {
      int n = 0;
      if (have_nodes || !(ls >> n) || n < 1 || n > (1 << 20) || (ls >> rest)) {
        return *why = fmt::format("line {}: expected one 'nodes N' (N >= 1) first", lineno),
               Status::kErrArg;
      }
      g = LinkGraph(n);
      have_nodes = true;
      continue;
    }
    if (!have_nodes) {
      return *why = fmt::format("line {}: 'nodes N' must come first", lineno), Status::kErrArg;
    }
    int u = 0, v = 0;
    double lat_us = 0, gbps = 0;
    std::istringstream ls2(line);
    if (!(ls2 >> u >> v >> lat_us >> gbps) || (ls2 >> rest)) {
      return *why = fmt::format("line {}: expected 'u v latency_us gbps'", lineno), Status::kErrArg;
    }
    std::string w;
    if (!ok(g.add_link(u, v, lat_us * 1e-6, gbps * 1e9 / 8, &w))) {
      return *why = fmt::format("line {}: {}", lineno, w), Status::kErrArg;
    }
  }
  if (!have_nodes) return *why = "no 'nodes N' line", Status::kErrArg;
  *out = std::move(g);
  return Status::kOk;
}

Status LinkGraph::load(const std::string& path, LinkGraph* out, std::string* why) {
  std::ifstream f(path);
  if (!f) return *why = fmt::format("cannot read link graph '{}'", path), Status::kErrArg;
  std::stringstream ss;
  ss << f.rdbuf();
  const Status st = parse(ss.str(), out, why);
  if (!ok(st)) *why = fmt::format("{}: {}", path, *why);
  return st;
}

std::string LinkGraph::to_text() const {
  std::string s = fmt::format("nodes {}\n", n_);
  for (const Link& l : links_) {
    s += fmt::format("{} {} {:g} {:g}\n", l.u, l.v, l.latency_s * 1e6, l.bandwidth_Bps * 8 / 1e9);
  }
  return s;
}

std::vector<int> tree_children(const SpanningTree& t, int node) {
  std::vector<int> c;
  for (int v = 0; v < static_cast<int>(t.parent.size()); ++v) {
    if (t.parent[v] == node && v != t.root) c.push_back(v);
  }
  return c;
}

int tree_depth(const SpanningTree& t) {
  int deepest = 0;
  const int n = static_cast<int>(t.parent.size());
  for (int v = 0; v < n; ++v) {
    int d = 0;
    for (int x = v; x != t.root && d <= n; x = t.parent[x]) ++d;
    deepest = std::max(deepest, d);
  }
  return deepest;
}

Status validate_plan(const MultiTreePlan& plan, int n, std::string* why) {
  if (plan.trees.empty()) return *why = "plan has no tree", Status::kErrArg;
  if (plan.fractions.size() != plan.trees.size()) {
    return *why = "plan: one fraction per tree expected", Status::kErrArg;
  }
  double sum = 0;
  for (size_t i = 0; i < plan.trees.size(); ++i) {
    const SpanningTree& t = plan.trees[i];
    const double f = plan.fractions[i];
    if (!(f >= 0) || !std::isfinite(f))
      return *why = fmt::format("tree {}: bad fraction", i), Status::kErrArg;
    sum += f;
    if (static_cast<int>(t.parent.size()) != n || t.root < 0 || t.root >= n ||
        t.parent[t.root] != -1) {
      return *why = fmt::format("tree {}: not a tree over {} nodes rooted in range", i, n),
             Status::kErrArg;
    }
    for (int v = 0; v < n; ++v) {
      if (v == t.root) continue;
      int x = v, hops = 0;
      while (x != t.root) {
        const int p = t.parent[x];
        if (p < 0 || p >= n || ++hops > n) {
          return *why = fmt::format("tree {}: node {} does not reach the root", i, v),
                 Status::kErrArg;
        }
        x = p;
      }
    }
  }
  if (std::fabs(sum - 1) > 1e-9) {
    return *why = fmt::format("plan: fractions sum to {}", sum), Status::kErrArg;
  }
  return Status::kOk;
}

std::vector<SpanningTree> pack_trees(const LinkGraph& g, const PlannerParams& p, double height_s) {
  const double min_rate = resolve_min_rate(g, p);
  const int n = g.nodes();
  std::vector<double> residual;
  std::vector<std::vector<int>> adj(n);
  for (size_t e = 0; e < g.links().size(); ++e) {
    const Link& l = g.links()[e];
    residual.push_back(l.bandwidth_Bps);
    adj[l.u].push_back(static_cast<int>(e));
    adj[l.v].push_back(static_cast<int>(e));
  }
  // Roots tried: all, or max_roots spread evenly over 0..n-1.
  std::vector<int> roots;
  const int nroots = p.max_roots > 0 ? std::min(n, p.max_roots) : n;
  for (int i = 0; i < nroots; ++i) {
    roots.push_back(static_cast<int>(static_cast<int64_t>(i) * n / nroots));
  }
  std::vector<SpanningTree> trees;
  for (int k = 0; k < p.max_candidates; ++k) {
    // The widest bottleneck wins, then the lower height, then the lower root (the patent
    // picks a random root; this keeps plans deterministic).
    Grown best;
    for (int root : roots) {
      Grown t = grow(g, adj, residual, min_rate, height_s, root);
      if (!t.ok) continue;
      if (!best.ok || t.bottleneck > best.bottleneck ||
          (t.bottleneck == best.bottleneck && t.tree.height_s < best.tree.height_s)) {
        best = std::move(t);
      }
    }
    if (!best.ok) break;
    double b = best.bottleneck;
    if (g.nodes() == 1) b = p.reserve_Bps > 0 ? p.reserve_Bps : 1.0;  // no links to reserve
    if (p.reserve_Bps > 0) b = std::min(b, p.reserve_Bps);
    for (int e : best.links) residual[e] = std::max(0.0, residual[e] - b);
    best.tree.rate_Bps = b;
    auto same = std::find_if(trees.begin(), trees.end(), [&](const SpanningTree& t) {
      return t.root == best.tree.root && t.parent == best.tree.parent;
    });
    if (same != trees.end()) {
      same->rate_Bps += b;
    } else {
      trees.push_back(best.tree);
    }
    if (g.nodes() == 1) break;
  }
  return trees;
}

Status plan_multitree(const LinkGraph& g, const PlannerParams& p, MultiTreePlan* out,
                      std::string* why) {
  if (g.nodes() < 1) return *why = "empty graph", Status::kErrArg;
  if (p.max_trees < 1) return *why = "at most K trees: K must be >= 1", Status::kErrArg;
  if (!(p.loss >= 0 && p.loss < 1)) return *why = "loss must be in [0, 1)", Status::kErrArg;
  if (p.min_rate_Bps < 0 || p.reserve_Bps < 0 || p.max_height_s < 0 || p.search_steps < 0 ||
      p.max_candidates < 1 || p.max_roots < 0) {
    return *why = "negative planner parameter", Status::kErrArg;
  }
  if (!g.connected()) return *why = "link graph is not connected", Status::kErrArg;
  const double h_top = p.max_height_s > 0 ? p.max_height_s : kInf;
  MultiTreePlan top = keep_best(pack_trees(g, p, h_top), p.max_trees, h_top);
  if (top.trees.empty()) {
    return *why = "no spanning tree fits (min rate or max height too strict)", Status::kErrArg;
  }
  // Step 2: the lowest H (bisection between the latency radius and the tallest kept tree)
  // whose throughput stays within the loss bound.
  const double target = (1 - p.loss) * top.throughput_Bps;
  double hi = 0;
  for (const SpanningTree& t : top.trees) hi = std::max(hi, t.height_s);
  MultiTreePlan best = top;
  best.height_bound_s = hi;
  double lo = latency_radius(g);
  auto attempt = [&](double h, MultiTreePlan* plan) {
    std::vector<SpanningTree> trees = pack_trees(g, p, h);
    if (trees.empty()) return false;
    *plan = keep_best(std::move(trees), p.max_trees, h);
    return plan->throughput_Bps >= target;
  };
  MultiTreePlan trial;
  if (lo < hi && attempt(lo, &trial)) {
    best = trial;
  } else {
    for (int s = 0; s < p.search_steps && hi - lo > 1e-12 * std::max(1.0, hi); ++s) {
      const double mid = lo + (hi - lo) / 2;
      if (attempt(mid, &trial)) {
        hi = mid;
        best = trial;
      } else {
        lo = mid;
      }
    }
  }
  *out = std::move(best);
  return validate_plan(*out, g.nodes(), why);
}

std::string plan_to_string(const MultiTreePlan& plan) {
  std::string s =
      fmt::format("H {:.3f} us, throughput {:.3f} GB/s, {} trees\n", plan.height_bound_s * 1e6,
                  plan.throughput_Bps / 1e9, plan.trees.size());
  for (size_t i = 0; i < plan.trees.size(); ++i) {
    const SpanningTree& t = plan.trees[i];
    s += fmt::format(
        "tree {}: root {} rate {:.3f} GB/s fraction {:.4f} height {:.3f} us "
        "depth {} parents [{}]\n",
        i, t.root, t.rate_Bps / 1e9, plan.fractions[i], t.height_s * 1e6, tree_depth(t),
        fmt::join(t.parent, " "));
  }
  return s;
}

double effective_tree_rate(const MultiTreePlan& plan, const std::vector<int>& host_of_rank,
                           double rank_Bps, double host_Bps) {
  if (plan.trees.empty()) return 0;
  const int n = static_cast<int>(plan.trees[0].parent.size());
  int hosts = 1;
  for (int h : host_of_rank) hosts = std::max(hosts, h + 1);
  // Per byte of data: bytes into / out of each rank and each host, per phase (reduce: children
  // to parents; the broadcast mirrors it, so the same loads in the other direction).
  std::vector<double> in(n, 0), out(n, 0), host_in(hosts, 0), host_out(hosts, 0);
  for (size_t t = 0; t < plan.trees.size(); ++t) {
    const double f = t < plan.fractions.size() ? plan.fractions[t] : 0;
    const std::vector<int>& parent = plan.trees[t].parent;
    for (int v = 0; v < n; ++v) {
      const int u = parent[v];
      if (u < 0) continue;
      out[v] += f;
      in[u] += f;
      if (!host_of_rank.empty() && host_of_rank[u] != host_of_rank[v]) {
        host_out[host_of_rank[v]] += f;
        host_in[host_of_rank[u]] += f;
      }
    }
  }
  double rate = plan.throughput_Bps;
  double node_load = 0, host_load = 0;
  for (int v = 0; v < n; ++v) node_load = std::max({node_load, in[v], out[v]});
  for (int h = 0; h < hosts; ++h) host_load = std::max({host_load, host_in[h], host_out[h]});
  if (rank_Bps > 0 && node_load > 0) rate = std::min(rate, rank_Bps / node_load);
  if (host_Bps > 0 && host_load > 0) rate = std::min(rate, host_Bps / host_load);
  return rate;
}

}  // namespace skipring
