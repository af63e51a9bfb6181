// Topology without MPI: SKIPRING_HOST_MAP parsing, grouping into hosts, the node-aware ring
// order (properties over many random host assignments), the rank record's encoding, and
// build_topology on hand-made records. The hwloc discovery of this machine is checked for
// internal consistency only (it differs from machine to machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "topology/discovery.h"
#include "topology/ring_order.h"

namespace skipring {
namespace {

// The ring visits each host's ranks as one contiguous run.
bool hosts_contiguous(const std::vector<int>& ring, const std::vector<int>& host_of_rank) {
  std::set<int> closed;
  const size_t n = ring.size();
  // Start at a position where the host changes (or anywhere with one host).
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    if (host_of_rank[ring[i]] != host_of_rank[ring[(i + n - 1) % n]]) {
      start = i;
      break;
    }
  }
  int current = -1;
  for (size_t k = 0; k < n; ++k) {
    const int h = host_of_rank[ring[(start + k) % n]];
    if (h != current) {
      if (closed.count(h)) return false;
      if (current >= 0) closed.insert(current);
      current = h;
    }
  }
  return true;
}

TEST(TopologyHostMap, BlockGivesConsecutiveHosts) {
  std::vector<int> hosts;
  std::vector<std::string> names;
  std::string err;
  ASSERT_TRUE(parse_host_map("block:3", 8, &hosts, &names, &err)) << err;
  EXPECT_EQ(hosts, (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2}));
  EXPECT_EQ(names, (std::vector<std::string>{"block0", "block1", "block2"}));
  ASSERT_TRUE(parse_host_map("block:1", 3, &hosts, nullptr, &err)) << err;
  EXPECT_EQ(hosts, (std::vector<int>{0, 1, 2}));
  // K larger than the communicator: one host.
  ASSERT_TRUE(parse_host_map("block:16", 4, &hosts, &names, &err)) << err;
  EXPECT_EQ(hosts, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(names.size(), 1u);
}

TEST(TopologyHostMap, LabelsNumberedByLowestRank) {
  std::vector<int> hosts;
  std::vector<std::string> names;
  std::string err;
  ASSERT_TRUE(parse_host_map("b,a,b,c,a", 5, &hosts, &names, &err)) << err;
  EXPECT_EQ(hosts, (std::vector<int>{0, 1, 0, 2, 1}));
  EXPECT_EQ(names, (std::vector<std::string>{"b", "a", "c"}));
  ASSERT_TRUE(parse_host_map("only", 1, &hosts, &names, &err)) << err;
  EXPECT_EQ(hosts, (std::vector<int>{0}));
  ASSERT_TRUE(parse_host_map("x,y,x,y", 4, &hosts, &names, &err)) << err;
  EXPECT_EQ(hosts, (std::vector<int>{0, 1, 0, 1}));
}

TEST(TopologyHostMap, WrongLengthNamesTheVariable) {
  std::vector<int> hosts;
  std::string err;
  EXPECT_FALSE(parse_host_map("a,b,a", 4, &hosts, nullptr, &err));
  EXPECT_NE(err.find("SKIPRING_HOST_MAP"), std::string::npos) << err;
  EXPECT_NE(err.find("3 host labels"), std::string::npos) << err;
  EXPECT_NE(err.find("4 ranks"), std::string::npos) << err;
  err.clear();
  EXPECT_FALSE(parse_host_map("a,b,a,b,c", 4, &hosts, nullptr, &err));
  EXPECT_NE(err.find("SKIPRING_HOST_MAP"), std::string::npos) << err;
}

TEST(TopologyHostMap, BadInputRejected) {
  std::vector<int> hosts;
  std::string err;
  for (const char* bad : {"", "block:", "block:0", "block:-2", "block:x", "block:2x", "block: 2",
                          "a,,b,c", ",a,b,c", "a,b,c,", "block:99999999999"}) {
    err.clear();
    EXPECT_FALSE(parse_host_map(bad, 4, &hosts, nullptr, &err)) << "accepted '" << bad << "'";
    EXPECT_NE(err.find("SKIPRING_HOST_MAP"), std::string::npos) << bad << ": " << err;
  }
}

TEST(TopologyGrouping, DenseIdsAndRanksPerHost) {
  std::vector<std::string> names;
  const std::vector<int> ids = dense_ids({"n3", "n1", "n3", "n2", "n1", "n2"}, &names);
  EXPECT_EQ(ids, (std::vector<int>{0, 1, 0, 2, 1, 2}));
  EXPECT_EQ(names, (std::vector<std::string>{"n3", "n1", "n2"}));
  const auto per_host = ranks_per_host(ids);
  ASSERT_EQ(per_host.size(), 3u);
  EXPECT_EQ(per_host[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(per_host[1], (std::vector<int>{1, 4}));
  EXPECT_EQ(per_host[2], (std::vector<int>{3, 5}));
}

TEST(TopologyRing, AlternatingHostsExample) {
  // SKIPRING_HOST_MAP=a,b,a,b (the mpirun test): ring 0,2,1,3 with two inter-host hops.
  const std::vector<int> hosts = {0, 1, 0, 1};
  const std::vector<int> ring = node_aware_ring(hosts);
  EXPECT_EQ(ring, (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(inter_host_hops(ring, hosts), 2);
  EXPECT_EQ(inter_host_hops(identity_ring(4), hosts), 4);
}

TEST(TopologyRing, OneHostIsIdentity) {
  for (int n : {1, 2, 5, 64}) {
    const std::vector<int> hosts(n, 0);
    EXPECT_EQ(node_aware_ring(hosts), identity_ring(n));
    EXPECT_EQ(inter_host_hops(node_aware_ring(hosts), hosts), 0);
  }
  // Already grouped blocks keep rank order too.
  EXPECT_EQ(node_aware_ring(std::vector<int>{0, 0, 1, 1, 2}), identity_ring(5));
}

TEST(TopologyRing, RandomHostAssignmentsGiveMinimalRings) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    const int max_hosts = 1 + static_cast<int>(rng() % n);
    std::vector<std::string> labels(n);
    for (int r = 0; r < n; ++r) labels[r] = "h" + std::to_string(rng() % max_hosts);
    const std::vector<int> hosts = dense_ids(labels);
    const int H = *std::max_element(hosts.begin(), hosts.end()) + 1;
    const std::vector<int> ring = node_aware_ring(hosts);
    std::string why;
    ASSERT_TRUE(ring_is_valid(ring, n, &why)) << why;
    EXPECT_TRUE(hosts_contiguous(ring, hosts)) << "trial " << trial;
    EXPECT_EQ(inter_host_hops(ring, hosts), H > 1 ? H : 0) << "trial " << trial;
    // Hosts are visited in order of their lowest rank, ranks of a host ascending.
    std::vector<int> expected;
    for (const auto& rs : ranks_per_host(hosts))
      expected.insert(expected.end(), rs.begin(), rs.end());
    EXPECT_EQ(ring, expected) << "trial " << trial;
    EXPECT_EQ(ring[0], 0);
    if (H == 1) {
      EXPECT_EQ(ring, identity_ring(n));
    }
  }
}

TEST(TopologyRing, PackagesAndNumaAdjacentInsideHosts) {
  std::mt19937 rng(777);
  for (int trial = 0; trial < 500; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 32);
    std::vector<RankPlace> places(n);
    std::vector<int> hosts(n);
    for (int r = 0; r < n; ++r) {
      places[r].host = hosts[r] = static_cast<int>(rng() % 3);
      places[r].package = static_cast<int>(rng() % 3) - 2;  // -2, -1 (several, unknown), 0
      places[r].numa = static_cast<int>(rng() % 2);
    }
    // Dense host ids by lowest rank, as the parser makes them.
    std::vector<std::string> labels(n);
    for (int r = 0; r < n; ++r) labels[r] = std::to_string(hosts[r]);
    hosts = dense_ids(labels);
    for (int r = 0; r < n; ++r) places[r].host = hosts[r];
    const std::vector<int> ring = node_aware_ring(places);
    std::string why;
    ASSERT_TRUE(ring_is_valid(ring, n, &why)) << why;
    const int H = *std::max_element(hosts.begin(), hosts.end()) + 1;
    EXPECT_EQ(inter_host_hops(ring, hosts), H > 1 ? H : 0);
    // (host, package) and (host, package, numa) groups are contiguous too: use them as hosts.
    std::vector<std::string> pkg_key(n), numa_key(n);
    for (int r = 0; r < n; ++r) {
      pkg_key[r] = std::to_string(places[r].host) + "/" + std::to_string(places[r].package);
      numa_key[r] = pkg_key[r] + "/" + std::to_string(places[r].numa);
    }
    EXPECT_TRUE(hosts_contiguous(ring, dense_ids(pkg_key))) << "trial " << trial;
    EXPECT_TRUE(hosts_contiguous(ring, dense_ids(numa_key))) << "trial " << trial;
    EXPECT_EQ(ring[0], 0);
  }
}

TEST(TopologyRing, PackageOrderByLowestRank) {
  // One host, ranks 0,1 on package 1 and ranks 2,3 on package 0 interleaved with 4 on 1.
  std::vector<RankPlace> places = {{0, 1, 1}, {0, 0, 0}, {0, 1, 1}, {0, 0, 0}, {0, 1, 1}};
  EXPECT_EQ(node_aware_ring(places), (std::vector<int>{0, 2, 4, 1, 3}));
}

TEST(TopologyRing, ValidityCheckCatchesBadRings) {
  std::string why;
  EXPECT_TRUE(ring_is_valid({2, 0, 1}, 3, &why));
  EXPECT_FALSE(ring_is_valid({0, 1}, 3, &why));
  EXPECT_FALSE(ring_is_valid({0, 1, 1}, 3, &why));
  EXPECT_FALSE(ring_is_valid({0, 1, 3}, 3, &why));
  EXPECT_FALSE(ring_is_valid({0, -1, 2}, 3, &why));
}

RankRecord sample_record(int rank, const std::string& host) {
  RankRecord rec;
  rec.rank = rank;
  rec.host_hash = fnv1a64(host);
  copy_fixed(host, rec.host, RankRecord::kHostChars);
  rec.host_map_hash = fnv1a64("");
  rec.kernel_hash = fnv1a64("5ec619bf-113f-4edc-965f-2b6b0cbba83d");
  rec.package = 1;
  rec.numa = kTopoSeveral;
  rec.num_cores = 3;
  rec.first_core = 4;
  rec.num_pus = 6;
  rec.machine_cores = 300;
  rec.core_mask[0] = (uint64_t{1} << 4) | (uint64_t{1} << 5);
  rec.core_mask[3] = uint64_t{1} << 63;  // core 255
  rec.num_devices = 2;
  rec.devices_dropped = 1;
  rec.devices[0].kind = static_cast<int32_t>(TopoDeviceKind::kGpu);
  rec.devices[0].package = 0;
  rec.devices[0].numa = 1;
  copy_fixed("card0/cuda0", rec.devices[0].name, TopoDevice::kNameChars);
  copy_fixed("0000:3b:00.0", rec.devices[0].pci_bus, TopoDevice::kBusChars);
  rec.devices[1].kind = static_cast<int32_t>(TopoDeviceKind::kNic);
  copy_fixed("mlx5_0/ib0", rec.devices[1].name, TopoDevice::kNameChars);
  return rec;
}

TEST(TopologyRecord, EncodeDecodeRoundTrip) {
  const RankRecord in = sample_record(7, "node-017.cluster.example");
  std::vector<uint8_t> buf(kRecordBytes + 8, 0xAB);
  ASSERT_EQ(encode_record(in, buf.data()), kRecordBytes);
  EXPECT_EQ(buf[kRecordBytes], 0xAB);  // nothing written past the record
  RankRecord out;
  std::string why;
  ASSERT_TRUE(decode_record(buf.data(), kRecordBytes, &out, &why)) << why;
  EXPECT_EQ(out.rank, 7);
  EXPECT_EQ(out.host_name(), "node-017.cluster.example");
  EXPECT_EQ(out.host_hash, in.host_hash);
  EXPECT_EQ(out.host_map_hash, in.host_map_hash);
  EXPECT_EQ(out.kernel_hash, in.kernel_hash);
  EXPECT_NE(out.kernel_hash, 0u);
  EXPECT_EQ(out.package, 1);
  EXPECT_EQ(out.numa, kTopoSeveral);
  EXPECT_EQ(out.num_cores, 3);
  EXPECT_EQ(out.first_core, 4);
  EXPECT_EQ(out.num_pus, 6);
  EXPECT_EQ(out.machine_cores, 300);
  EXPECT_EQ(std::memcmp(out.core_mask, in.core_mask, sizeof in.core_mask), 0);
  EXPECT_TRUE(out.bound_to_core(255));
  EXPECT_FALSE(out.bound_to_core(6));
  EXPECT_EQ(core_list(out), "4-5,255");
  EXPECT_EQ(out.num_devices, 2);
  EXPECT_EQ(out.devices_dropped, 1);
  EXPECT_STREQ(out.devices[0].name, "card0/cuda0");
  EXPECT_STREQ(out.devices[0].pci_bus, "0000:3b:00.0");
  EXPECT_EQ(out.devices[0].numa, 1);
  EXPECT_EQ(device_string(out.devices[0]), "gpu card0/cuda0@0000:3b:00.0(pkg 0, numa 1)");
  EXPECT_EQ(device_string(out.devices[1]), "nic mlx5_0/ib0(pkg ?, numa ?)");
}

// Network namespaces or containers with their own hostnames on one machine: separate hosts to
// MPI and to the ring order, one kernel (and one set of cores) to the oversubscription check.
TEST(TopologyRecord, RanksSharingAKernel) {
  std::vector<RankRecord> recs;
  for (int r = 0; r < 6; ++r) {
    RankRecord rec = sample_record(r, "ns" + std::to_string(r / 2));  // 3 hosts x 2 ranks
    rec.kernel_hash = r < 4 ? 0x1111 : 0x2222;  // hosts 0 and 1 share a kernel, host 2 its own
    recs.push_back(rec);
  }
  Topology t;
  std::string err;
  ASSERT_EQ(build_topology(recs, "", &t, &err), Status::kOk) << err;
  EXPECT_EQ(t.num_hosts(), 3);
  EXPECT_EQ(ranks_sharing_kernel(t, 0), 4);
  EXPECT_EQ(ranks_sharing_kernel(t, 3), 4);
  EXPECT_EQ(ranks_sharing_kernel(t, 5), 2);
  EXPECT_EQ(ranks_sharing_kernel(t, 6), 0);  // no such rank
  // Unknown boot ids count the host's ranks only.
  for (RankRecord& rec : recs) rec.kernel_hash = 0;
  ASSERT_EQ(build_topology(recs, "", &t, &err), Status::kOk) << err;
  EXPECT_EQ(ranks_sharing_kernel(t, 0), 2);
  // A host map that splits one machine's ranks into two "hosts" does not hide the kernel.
  for (RankRecord& rec : recs) {
    rec.kernel_hash = 0x1111;
    rec.host_map_hash = fnv1a64("m0,m0,m0,m1,m1,m1");
  }
  ASSERT_EQ(build_topology(recs, "m0,m0,m0,m1,m1,m1", &t, &err), Status::kOk) << err;
  EXPECT_EQ(t.num_hosts(), 2);
  EXPECT_EQ(ranks_sharing_kernel(t, 4), 6);
}

TEST(TopologyRecord, LongHostnameTruncatedButHashed) {
  const std::string a(100, 'x');
  const std::string b = a + "y";
  RankRecord ra = sample_record(0, a), rb = sample_record(1, b);
  EXPECT_EQ(ra.host_name().size(), RankRecord::kHostChars - 1);
  EXPECT_EQ(ra.host_name(), rb.host_name());
  EXPECT_NE(ra.host_hash, rb.host_hash);
  // Same 63-character prefix, different hosts: grouped apart.
  Topology t;
  std::string err;
  ASSERT_EQ(build_topology({ra, rb}, "", &t, &err), Status::kOk) << err;
  EXPECT_EQ(t.num_hosts(), 2);
}

TEST(TopologyRecord, CorruptRecordsRejected) {
  std::vector<uint8_t> buf(kRecordBytes);
  encode_record(sample_record(0, "h"), buf.data());
  RankRecord out;
  std::string why;
  EXPECT_FALSE(decode_record(buf.data(), kRecordBytes - 1, &out, &why));
  auto bad_magic = buf;
  bad_magic[0] ^= 0xFF;
  EXPECT_FALSE(decode_record(bad_magic.data(), kRecordBytes, &out, &why));
  auto unterminated = buf;
  std::memset(unterminated.data() + 16, 'z', RankRecord::kHostChars);  // the hostname field
  EXPECT_FALSE(decode_record(unterminated.data(), kRecordBytes, &out, &why));
  RankRecord many = sample_record(0, "h");
  many.num_devices = 9;
  encode_record(many, buf.data());
  EXPECT_FALSE(decode_record(buf.data(), kRecordBytes, &out, &why));
}

TEST(TopologyBuild, GroupsByHostnameAndOrdersRing) {
  std::vector<RankRecord> recs;
  const char* hosts[] = {"nodeA", "nodeB", "nodeA", "nodeC", "nodeB", "nodeA"};
  for (int r = 0; r < 6; ++r) recs.push_back(sample_record(r, hosts[r]));
  Topology t;
  std::string err;
  ASSERT_EQ(build_topology(recs, "", &t, &err), Status::kOk) << err;
  EXPECT_FALSE(t.from_host_map);
  EXPECT_EQ(t.host_of_rank, (std::vector<int>{0, 1, 0, 2, 1, 0}));
  EXPECT_EQ(t.host_names, (std::vector<std::string>{"nodeA", "nodeB", "nodeC"}));
  ASSERT_EQ(t.num_hosts(), 3);
  EXPECT_EQ(t.host_ranks[0], (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(t.ring, (std::vector<int>{0, 2, 5, 1, 4, 3}));
  EXPECT_EQ(t.inter_host_hops, 3);
  EXPECT_EQ(t.ring_position(4), 4);
  EXPECT_EQ(t.size(), 6);
}

TEST(TopologyBuild, HostMapOverridesHostnames) {
  std::vector<RankRecord> recs;
  for (int r = 0; r < 4; ++r) recs.push_back(sample_record(r, "samehost"));
  for (auto& rec : recs) rec.host_map_hash = fnv1a64("a,b,a,b");
  Topology t;
  std::string err;
  ASSERT_EQ(build_topology(recs, "a,b,a,b", &t, &err), Status::kOk) << err;
  EXPECT_TRUE(t.from_host_map);
  EXPECT_EQ(t.ring, (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(t.host_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(t.inter_host_hops, 2);
  // Wrong length: a config error naming the variable.
  for (auto& rec : recs) rec.host_map_hash = fnv1a64("a,b,a");
  EXPECT_EQ(build_topology(recs, "a,b,a", &t, &err), Status::kErrConfig);
  EXPECT_NE(err.find("SKIPRING_HOST_MAP"), std::string::npos) << err;
}

TEST(TopologyBuild, RanksMustAgreeOnTheMap) {
  std::vector<RankRecord> recs;
  for (int r = 0; r < 3; ++r) recs.push_back(sample_record(r, "h"));
  recs[2].host_map_hash = fnv1a64("block:2");
  Topology t;
  std::string err;
  EXPECT_EQ(build_topology(recs, "", &t, &err), Status::kErrConfig);
  EXPECT_NE(err.find("SKIPRING_HOST_MAP differs"), std::string::npos) << err;
  recs[2].host_map_hash = recs[0].host_map_hash;
  recs[2].rank = 1;
  EXPECT_EQ(build_topology(recs, "", &t, &err), Status::kErrInternal);
}

TEST(TopologyDiscovery, LocalRecordIsConsistent) {
  const RankRecord rec = local_record("unit-test-host");
  EXPECT_EQ(rec.host_name(), "unit-test-host");
  EXPECT_EQ(rec.host_hash, fnv1a64("unit-test-host"));
#ifndef SKIPRING_SIMGRID
  // hwloc always finds the bound cores of a process.
  ASSERT_GE(rec.num_cores, 1);
  EXPECT_GE(rec.num_pus, rec.num_cores);
  EXPECT_LE(rec.num_cores, rec.machine_cores);
  EXPECT_TRUE(rec.bound_to_core(rec.first_core) || rec.first_core >= 256);
  EXPECT_NE(rec.package, kTopoUnknown);
  EXPECT_GE(rec.num_devices, 0);
  EXPECT_LE(rec.num_devices, static_cast<int>(RankRecord::kMaxDevices));
  for (int i = 0; i < rec.num_devices; ++i) {
    const TopoDevice& d = rec.devices[i];
    EXPECT_TRUE(d.kind == static_cast<int32_t>(TopoDeviceKind::kGpu) ||
                d.kind == static_cast<int32_t>(TopoDeviceKind::kNic));
    EXPECT_GT(std::strlen(d.name), 0u);
  }
  // The record survives the encoding used for the gather.
  std::vector<uint8_t> buf(kRecordBytes);
  encode_record(rec, buf.data());
  RankRecord back;
  std::string why;
  ASSERT_TRUE(decode_record(buf.data(), kRecordBytes, &back, &why)) << why;
  EXPECT_EQ(core_list(back), core_list(rec));
#endif
}

}  // namespace
}  // namespace skipring
