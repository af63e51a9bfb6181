// Fuzz targets (fuzz_targets.h).
#include "tests/fuzz/fuzz_targets.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/contribution_set.h"
#include "collectives/wire_header.h"
#include "common/size_parse.h"
#include "straggler/injection.h"
#include "topology/multitree.h"
#include "topology/ring_order.h"

namespace skipring {
namespace fuzz {
namespace {

[[noreturn]] void fail(const char* target, const std::string& what) {
  std::fprintf(stderr, "fuzz target %s: %s\n", target, what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Reads fixed-width values off the front of the input (zeros once it runs out).
struct Reader {
  const uint8_t* p;
  size_t n;
  uint64_t take(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) {
      v |= static_cast<uint64_t>(n > 0 ? *p : 0) << (8 * i);
      if (n > 0) ++p, --n;
    }
    return v;
  }
};

// Largest n the header targets use: 3 set words (inline and heap-allocated sets both).
constexpr int kMaxRanks = 190;

// Arbitrary bytes as a header for n ranks: never crashes, and an accepted header re-encodes
// to the same bytes (so nothing in it was ignored).
bool wire_decode(const uint8_t* data, size_t size) {
  Reader r{data, size};
  const int n = 1 + static_cast<int>(r.take(1) % kMaxRanks);
  std::vector<uint8_t> hdr(wire_header_bytes(n), 0);
  std::memcpy(hdr.data(), r.p, std::min(r.n, hdr.size()));
  WireHeader fixed;
  std::memcpy(&fixed, hdr.data(), sizeof(fixed));
  // Expect what the header says (so the deeper checks run) or the input's next bytes.
  const WireExpect own{fixed.seq, fixed.phase, fixed.chunk, fixed.segment};
  ContributionSet set;
  const std::string why = decode_wire_header(hdr.data(), n, own, &set);
  WireHeader ctrl;
  const std::string why_ctrl = decode_wire_control(hdr.data(), n, fixed.seq, &ctrl);
  // A control decode checks less (not the set's contents): it accepts every header the data
  // decode accepts, and more only when the set's contents are at fault.
  if (why.empty() && !why_ctrl.empty()) {
    fail("wire_decode", "control decode rejected an accepted header: " + why_ctrl);
  }
  if (!why.empty() && why_ctrl.empty() && why.find("contribution set") == std::string::npos) {
    fail("wire_decode", "control decode accepted a header the data decode rejected: " + why);
  }
  if (!why.empty()) return false;
  std::vector<uint8_t> again(hdr.size(), 0);
  encode_wire_header(again.data(), own, set, fixed.flags, fixed.route);
  if (again != hdr) fail("wire_decode", "accepted header does not re-encode to the same bytes");
  if (set.count() > n) fail("wire_decode", "set larger than n");
  return true;
}

// A header encoded from the input's fields decodes to the same fields and set, and with any
// one bit flipped it is rejected (never a different set: a flipped bit is never a wrong sum).
bool wire_bitflip(const uint8_t* data, size_t size) {
  Reader r{data, size};
  const int n = 1 + static_cast<int>(r.take(1) % kMaxRanks);
  const WireExpect id{static_cast<uint32_t>(r.take(4)), static_cast<uint8_t>(r.take(1)),
                      static_cast<uint32_t>(r.take(4)), static_cast<uint32_t>(r.take(4))};
  const uint8_t flags = static_cast<uint8_t>(r.take(1));
  const uint32_t route = static_cast<uint32_t>(r.take(4));
  const size_t bit = static_cast<size_t>(r.take(2));
  ContributionSet set(n);
  while (r.n > 0) set.add(static_cast<int>(r.take(1) % n));
  std::vector<uint8_t> hdr(wire_header_bytes(n));
  encode_wire_header(hdr.data(), id, set, flags, route);
  ContributionSet back;
  std::string why = decode_wire_header(hdr.data(), n, id, &back);
  if (!why.empty()) fail("wire_bitflip", "a freshly encoded header is rejected: " + why);
  if (back != set) fail("wire_bitflip", "the set changed in a round trip");
  if (wire_route(hdr.data()) != route) fail("wire_bitflip", "the route changed");
  hdr[(bit / 8) % hdr.size()] ^= static_cast<uint8_t>(1u << (bit % 8));
  why = decode_wire_header(hdr.data(), n, id, &back);
  if (why.empty()) {
    fail("wire_bitflip", "header with bit " + std::to_string(bit % (8 * hdr.size())) +
                             " flipped accepted, set " + back.to_string() + " for " +
                             set.to_string());
  }
  WireHeader ctrl;
  if (decode_wire_control(hdr.data(), n, id.seq, &ctrl).empty()) {
    fail("wire_bitflip", "control header with a flipped bit accepted");
  }
  return true;
}

std::string as_text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

bool size_parse(const uint8_t* data, size_t size) {
  const std::string text = as_text(data, size);
  const auto v = parse_size(text);
  if (v && parse_size(std::to_string(*v)) != v) fail("size_parse", "decimal value not parsed back");
  const std::string_view t = trim_blanks(text);
  if (t.size() > text.size()) fail("size_parse", "trim grew the text");
  return v.has_value();
}

bool inject_spec(const uint8_t* data, size_t size) {
  const std::string spec = as_text(data, size);
  InjectPlan plan;
  std::string error;
  if (!ok(InjectPlan::parse(spec, &plan, &error))) {
    if (error.empty()) fail("inject_spec", "rejected without a message");
    return false;
  }
  // The canonical text parses back to a plan of as many rules with the same canonical text.
  const std::string canon = plan.to_string();
  InjectPlan again;
  if (!ok(InjectPlan::parse(canon, &again, &error))) {
    fail("inject_spec", "canonical text '" + canon + "' does not parse: " + error);
  }
  if (again.rules().size() != plan.rules().size()) fail("inject_spec", "rule count changed");
  for (int rank = 0; rank < 3; ++rank) {
    for (uint64_t seq = 0; seq < 3; ++seq) {
      (void)plan.delay(rank, seq, InjectPoint::kArrive, 0);
      (void)plan.delay(rank, seq, InjectPoint::kReduceScatter, static_cast<int>(seq));
    }
  }
  return true;
}

bool host_map(const uint8_t* data, size_t size) {
  Reader r{data, size};
  const int nranks = 1 + static_cast<int>(r.take(1));
  const std::string map = as_text(r.p, r.n);
  std::vector<int> host_of_rank;
  std::vector<std::string> names;
  std::string error;
  if (!parse_host_map(map, nranks, &host_of_rank, &names, &error)) {
    if (error.empty()) fail("host_map", "rejected without a message");
    return false;
  }
  if (static_cast<int>(host_of_rank.size()) != nranks) fail("host_map", "wrong number of ranks");
  std::vector<bool> seen(names.size(), false);
  for (int h : host_of_rank) {
    if (h < 0 || h >= static_cast<int>(names.size())) fail("host_map", "host id out of range");
    seen[h] = true;
  }
  for (bool s : seen) {
    if (!s) fail("host_map", "host ids not dense");
  }
  return true;
}

bool link_graph(const uint8_t* data, size_t size) {
  const std::string text = as_text(data, size);
  LinkGraph g;
  std::string why;
  if (!ok(LinkGraph::parse(text, &g, &why))) {
    if (why.empty()) fail("link_graph", "rejected without a message");
    return false;
  }
  const std::string canon = g.to_text();
  LinkGraph again;
  if (!ok(LinkGraph::parse(canon, &again, &why))) {
    fail("link_graph", "to_text output does not parse: " + why);
  }
  if (again.nodes() != g.nodes() || again.links().size() != g.links().size()) {
    fail("link_graph", "round trip changed the graph's shape");
  }
  for (const Link& l : g.links()) {
    if (!(l.latency_s >= 0) || !(l.bandwidth_Bps > 0) || !std::isfinite(l.latency_s) ||
        !std::isfinite(l.bandwidth_Bps)) {
      fail("link_graph", "accepted a link with a non-finite or non-positive value");
    }
  }
  (void)g.connected();
  return true;
}

using Target = bool (*)(const uint8_t*, size_t);
constexpr Target kRun[kTargets] = {wire_decode, wire_bitflip, size_parse,
                                   inject_spec, host_map,     link_graph};
constexpr const char* kNames[kTargets] = {"wire_decode", "wire_bitflip", "size_parse",
                                          "inject_spec", "host_map",     "link_graph"};

// Seeds: valid (or nearly valid) inputs for the mutating driver. The header targets take
// raw bytes, so they need none beyond what the drivers encode themselves.
const char* const kSizeSeeds[] = {"8", "64K", "4MiB", "1gb", "2t", "16KiB", "18446744073709551615"};
const char* const kInjectSeeds[] = {
    "rank=1,delay=5ms",
    "rank=0,at=rs,step=2,dist=exp:1ms,prob=0.5,seed=7",
    "rank=2,at=arrive,every=3,dist=uniform:1ms:2ms;rank=*,dist=lognormal:1ms:0.5",
    "rank=1,delay=2.5us,at=step;",
};
// First byte: nranks - 1.
const char* const kHostMapSeeds[] = {
    "\x03"
    "block:2",
    "\x02"
    "a,b,a",
    "\x01"
    "h0,h1",
    "\x07"
    "block:3"};
const char* const kGraphSeeds[] = {"nodes 3\n0 1 1.5 100\n1 2 2 25 # slow\n",
                                   "# c\nnodes 2\n0 1 0 1e3\n", "nodes 1\n"};

template <size_t N>
const char* pick(const char* const (&seeds)[N], size_t i) {
  return seeds[i % N];
}

}  // namespace

const char* target_name(int target) { return kNames[target]; }

bool run_target(int target, const uint8_t* data, size_t size) { return kRun[target](data, size); }

void run_one(const uint8_t* data, size_t size) {
  if (size == 0) return;
  (void)run_target(data[0] % kTargets, data + 1, size - 1);
}

const char* seed_input(int target, size_t i) {
  switch (target) {
    case 2:
      return pick(kSizeSeeds, i);
    case 3:
      return pick(kInjectSeeds, i);
    case 4:
      return pick(kHostMapSeeds, i);
    case 5:
      return pick(kGraphSeeds, i);
    default:
      return "";
  }
}

}  // namespace fuzz
}  // namespace skipring
