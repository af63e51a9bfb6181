// GPU-NIC affinity on synthetic topology records (this machine has one NIC and no GPU): the
// rank's GPU (SKIPRING_GPU, else local rank modulo the GPUs), the NIC by PCI distance, tie
// breaks, the UCX device string, hier's leaders, the record's new fields on the wire.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "topology/affinity.h"
#include "topology/discovery.h"

namespace skipring {
namespace {

struct Dev {
  TopoDeviceKind kind;
  const char* name;
  const char* bus;
  const char* sw;    // pci_switch ("" none)
  const char* root;  // pci_root
  int numa, package;
  const char* fabric = "";  // RDMA NIC: OpenFabrics name
  int port = 0;
  int32_t flags = 0;
};

TopoDevice make_dev(const Dev& d) {
  TopoDevice t;
  t.kind = static_cast<int32_t>(d.kind);
  copy_fixed(d.name, t.name, TopoDevice::kNameChars);
  copy_fixed(d.bus, t.pci_bus, TopoDevice::kBusChars);
  copy_fixed(d.sw, t.pci_switch, TopoDevice::kBusChars);
  copy_fixed(d.root, t.pci_root, TopoDevice::kBusChars);
  copy_fixed(d.fabric, t.fabric, TopoDevice::kNameChars);
  t.numa = d.numa;
  t.package = d.package;
  t.port = d.port;
  t.flags = d.flags | (d.fabric[0] != '\0' ? kTopoDevRdma : 0);
  return t;
}

constexpr auto kGpu = TopoDeviceKind::kGpu;
constexpr auto kNic = TopoDeviceKind::kNic;

// A two-socket GPU server: GPU0 and mlx5_0 behind switch 0000:16:00.0 (package 0), GPU1 and
// mlx5_1 behind switch 0000:ae:00.0 (package 1), the management eth0 on package 0.
std::vector<Dev> two_switch_server() {
  return {
      {kNic, "ib1/mlx5_1", "0000:b2:00.0", "0000:ae:00.0", "0000:ae", 1, 1, "mlx5_1", 1},
      {kGpu, "card1/cuda1", "0000:b1:00.0", "0000:ae:00.0", "0000:ae", 1, 1},
      {kNic, "eth0", "0000:03:00.0", "", "0000:00", 0, 0},
      {kGpu, "card0/cuda0", "0000:1b:00.0", "0000:16:00.0", "0000:16", 0, 0},
      {kNic, "ib0/mlx5_0", "0000:1c:00.0", "0000:16:00.0", "0000:16", 0, 0, "mlx5_0", 1},
  };
}

RankRecord make_record(int rank, const std::string& host, const std::vector<Dev>& devs,
                       int numa = kTopoUnknown, int package = kTopoUnknown) {
  RankRecord r;
  r.rank = rank;
  r.host_hash = fnv1a64(host);
  copy_fixed(host, r.host, RankRecord::kHostChars);
  r.numa = numa;
  r.package = package;
  for (const Dev& d : devs) r.devices[r.num_devices++] = make_dev(d);
  return r;
}

Topology build(const std::vector<RankRecord>& recs) {
  Topology t;
  std::string err;
  EXPECT_EQ(build_topology(recs, "", &t, &err), Status::kOk) << err;
  return t;
}

std::string nic_name(const Topology& t, int rank) {
  const NicChoice c = rank_nic(t, rank);
  return c.device < 0 ? "-" : t.records[rank].devices[c.device].name;
}

std::string gpu_name(const Topology& t, int rank) {
  const GpuChoice c = rank_gpu(t, rank);
  return c.device < 0 ? "-" : t.records[rank].devices[c.device].name;
}

TEST(TopologyAffinity, ParseGpuRequest) {
  EXPECT_EQ(parse_gpu_request(""), kGpuNotRequested);
  EXPECT_EQ(parse_gpu_request("0"), 0);
  EXPECT_EQ(parse_gpu_request("7"), 7);
  EXPECT_EQ(parse_gpu_request("1023"), 1023);
  for (const char* bad : {"-1", "1024", "x", "1 ", " 1", "0x1", "99999999999", "1.0"}) {
    EXPECT_EQ(parse_gpu_request(bad), kGpuRequestBad) << bad;
  }
}

TEST(TopologyAffinity, DistanceClasses) {
  const TopoDevice gpu = make_dev({kGpu, "g", "0000:1b:00.0", "0000:16:00.0", "0000:16", 0, 0});
  auto nic = [](const char* sw, const char* root, int numa, int pkg) {
    return make_dev({kNic, "n", "0000:1c:00.0", sw, root, numa, pkg});
  };
  EXPECT_EQ(pci_distance(gpu, nic("0000:16:00.0", "0000:16", 0, 0)), PciDistance::kSwitch);
  EXPECT_EQ(pci_distance(gpu, nic("0000:17:00.0", "0000:16", 0, 0)), PciDistance::kHostBridge);
  EXPECT_EQ(pci_distance(gpu, nic("", "0000:40", 0, 0)), PciDistance::kNuma);
  EXPECT_EQ(pci_distance(gpu, nic("", "0000:40", 1, 0)), PciDistance::kPackage);
  EXPECT_EQ(pci_distance(gpu, nic("", "0000:40", 1, 1)), PciDistance::kSystem);
  // Unknown (negative) places and empty PCI fields never match each other.
  const TopoDevice bare = make_dev({kGpu, "g", "", "", "", kTopoUnknown, kTopoUnknown});
  EXPECT_EQ(pci_distance(bare, make_dev({kNic, "n", "", "", "", kTopoUnknown, kTopoUnknown})),
            PciDistance::kSystem);
  EXPECT_EQ(pci_distance(bare, make_dev({kNic, "n", "", "", "", kTopoSeveral, kTopoSeveral})),
            PciDistance::kSystem);
  RankRecord rec;
  rec.numa = 0;
  rec.package = 0;
  EXPECT_EQ(cpu_distance(rec, nic("", "", 0, 0)), PciDistance::kNuma);
  EXPECT_EQ(cpu_distance(rec, nic("", "", 1, 0)), PciDistance::kPackage);
  EXPECT_EQ(cpu_distance(rec, nic("", "", 1, 1)), PciDistance::kSystem);
  EXPECT_STREQ(pci_distance_name(PciDistance::kSwitch), "same PCI switch");
  EXPECT_STREQ(pci_distance_name(PciDistance::kSystem), "system");
}

TEST(TopologyAffinity, TwoGpusTwoNicsOnTwoSwitches) {
  std::vector<RankRecord> recs;
  for (int r = 0; r < 4; ++r) recs.push_back(make_record(r, "gpunode", two_switch_server()));
  const Topology t = build(recs);
  // GPUs in PCI bus order: cuda0 (1b) is GPU 0 although listed after cuda1.
  const std::vector<int> gpus = host_gpus(t.records[0]);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_STREQ(t.records[0].devices[gpus[0]].name, "card0/cuda0");
  // Local rank modulo 2 GPUs; each rank's NIC is the one behind its GPU's switch.
  for (int r = 0; r < 4; ++r) {
    const GpuChoice g = rank_gpu(t, r);
    EXPECT_EQ(g.index, r % 2);
    EXPECT_FALSE(g.requested);
    const NicChoice n = rank_nic(t, r);
    EXPECT_TRUE(n.from_gpu);
    EXPECT_EQ(n.distance, PciDistance::kSwitch);
    EXPECT_EQ(n.tied, 1);
    EXPECT_EQ(preferred_ucx_net_device(t, r), r % 2 == 0 ? "mlx5_0:1" : "mlx5_1:1") << r;
    EXPECT_TRUE(is_hier_leader(t, r));
  }
  EXPECT_EQ(t.hier_groups, t.host_ranks) << "all lead: rank order kept";
  EXPECT_EQ(preferred_ucx_net_device(t, 4), "") << "no such rank";
}

TEST(TopologyAffinity, GpusWithoutNicsNearby) {
  // GPU 0 shares a root complex with mlx5_0 (not its switch); GPU 1 is on package 1, where the
  // only NIC is on another NUMA node; GPU 2 is on a package without a NIC.
  const std::vector<Dev> devs = {
      {kGpu, "cuda0", "0000:1b:00.0", "0000:16:00.0", "0000:16", 0, 0},
      {kNic, "mlx5_0", "0000:30:00.0", "0000:2f:00.0", "0000:16", 0, 0, "mlx5_0", 1},
      {kGpu, "cuda1", "0000:81:00.0", "0000:80:00.0", "0000:80", 2, 1},
      {kNic, "mlx5_1", "0000:c1:00.0", "0000:c0:00.0", "0000:c0", 3, 1, "mlx5_1", 2},
      {kGpu, "cuda2", "0001:01:00.0", "0001:00:01.0", "0001:00", 4, 2},
  };
  std::vector<RankRecord> recs;
  for (int r = 0; r < 3; ++r) recs.push_back(make_record(r, "h", devs));
  const Topology t = build(recs);
  NicChoice n = rank_nic(t, 0);
  EXPECT_EQ(nic_name(t, 0), "mlx5_0");
  EXPECT_EQ(n.distance, PciDistance::kHostBridge);
  n = rank_nic(t, 1);
  EXPECT_EQ(nic_name(t, 1), "mlx5_1");
  EXPECT_EQ(n.distance, PciDistance::kPackage);
  EXPECT_EQ(preferred_ucx_net_device(t, 1), "mlx5_1:2") << "the NIC's active port";
  n = rank_nic(t, 2);
  EXPECT_EQ(n.distance, PciDistance::kSystem);
  EXPECT_EQ(n.tied, 2);
  EXPECT_EQ(nic_name(t, 2), "mlx5_0") << "tie: the first by PCI bus id (first GPU in the tie)";
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(is_hier_leader(t, r)) << r;
  EXPECT_EQ(t.hier_groups, t.host_ranks);
}

TEST(TopologyAffinity, RdmaPreferredOverCloserEthernet) {
  // eth0 is behind the GPU's switch, mlx5_0 on the other socket: RDMA wins (UCX over TCP on a
  // management port would be far slower than crossing the socket link).
  const std::vector<Dev> devs = {
      {kGpu, "cuda0", "0000:1b:00.0", "0000:16:00.0", "0000:16", 0, 0},
      {kNic, "eth0", "0000:1c:00.0", "0000:16:00.0", "0000:16", 0, 0},
      {kNic, "mlx5_0", "0000:b1:00.0", "0000:ae:00.0", "0000:ae", 1, 1, "mlx5_0", 1},
  };
  const Topology t = build({make_record(0, "h", devs)});
  EXPECT_EQ(preferred_ucx_net_device(t, 0), "mlx5_0:1");
  EXPECT_EQ(rank_nic(t, 0).distance, PciDistance::kSystem);
  EXPECT_FALSE(is_hier_leader(t, 0));
  // Without the RDMA NIC, the Ethernet one behind the switch (plain interface name).
  std::vector<Dev> eth_only(devs.begin(), devs.begin() + 2);
  eth_only[1].name = "eth0/extra";
  const Topology e = build({make_record(0, "h", eth_only)});
  EXPECT_EQ(preferred_ucx_net_device(e, 0), "eth0");
  EXPECT_EQ(rank_nic(e, 0).distance, PciDistance::kSwitch);
  EXPECT_TRUE(is_hier_leader(e, 0));
}

TEST(TopologyAffinity, NoGpuUsesTheRanksNumaNode) {
  const std::vector<Dev> devs = {
      {kNic, "eth1", "0000:81:00.0", "", "0000:80", 1, 1},
      {kNic, "eth0", "0000:01:00.0", "", "0000:00", 0, 0},
      {kNic, "eth2", "0000:02:00.0", "", "0000:00", 0, 0},
  };
  std::vector<RankRecord> recs = {
      make_record(0, "h", devs, 1, 1),  // NUMA 1: eth1
      make_record(1, "h", devs, 0, 0),  // NUMA 0: eth0 and eth2 tie: the first GPU-less rank
      make_record(2, "h", devs, 0, 0),  // gets eth0, the second eth2
      make_record(3, "h", devs, 0, 0),  // the third eth0 again
      make_record(4, "h", devs, kTopoSeveral, 1),  // spans NUMA nodes of package 1: eth1
  };
  const Topology t = build(recs);
  EXPECT_EQ(rank_gpu(t, 0).device, -1);
  EXPECT_EQ(gpu_name(t, 0), "-");
  EXPECT_EQ(preferred_ucx_net_device(t, 0), "eth1");
  EXPECT_EQ(rank_nic(t, 0).distance, PciDistance::kNuma);
  EXPECT_FALSE(rank_nic(t, 0).from_gpu);
  EXPECT_EQ(preferred_ucx_net_device(t, 1), "eth0");
  EXPECT_EQ(preferred_ucx_net_device(t, 2), "eth2");
  EXPECT_EQ(preferred_ucx_net_device(t, 3), "eth0");
  EXPECT_EQ(rank_nic(t, 3).tied, 2);
  EXPECT_EQ(preferred_ucx_net_device(t, 4), "eth1");
  EXPECT_EQ(rank_nic(t, 4).distance, PciDistance::kPackage);
  EXPECT_EQ(t.hier_groups, t.host_ranks) << "no GPU: today's order";
  // A host without any NIC: no device, UCX keeps its default.
  const Topology bare = build({make_record(0, "h", {})});
  EXPECT_EQ(rank_nic(bare, 0).device, -1);
  EXPECT_EQ(preferred_ucx_net_device(bare, 0), "");
  EXPECT_FALSE(is_hier_leader(bare, 0));
}

TEST(TopologyAffinity, DisplayGpusAreNotGpus) {
  std::vector<Dev> devs = two_switch_server();
  devs.push_back({kGpu, "card9", "0000:02:00.0", "", "0000:00", 0, 0, "", 0, kTopoDevDisplay});
  std::vector<RankRecord> recs;
  for (int r = 0; r < 3; ++r) recs.push_back(make_record(r, "h", devs));
  const Topology t = build(recs);
  EXPECT_EQ(host_gpus(t.records[0]).size(), 2u) << "the BMC's VGA is no GPU";
  EXPECT_EQ(gpu_name(t, 2), "card0/cuda0") << "local rank 2 modulo 2 GPUs";
}

TEST(TopologyAffinity, SkipringGpuOverrideAndValidation) {
  // Two hosts: GPU 1 has no NIC behind its switch (mlx5_1 removed).
  std::vector<Dev> devs = two_switch_server();
  devs.erase(devs.begin());  // mlx5_1
  std::vector<RankRecord> recs;
  for (int r = 0; r < 4; ++r) recs.push_back(make_record(r, r < 2 ? "a" : "b", devs));
  // Host a: by default rank 0 has GPU 0 (leads), rank 1 GPU 1. Swapped by SKIPRING_GPU.
  recs[0].gpu_request = 1;
  recs[1].gpu_request = 0;
  Topology t = build(recs);
  EXPECT_EQ(rank_gpu(t, 0).index, 1);
  EXPECT_TRUE(rank_gpu(t, 0).requested);
  EXPECT_EQ(gpu_name(t, 1), "card0/cuda0");
  EXPECT_EQ(rank_nic(t, 0).distance, PciDistance::kSystem) << "GPU 1 (pkg 1) to mlx5_0 (pkg 0)";
  EXPECT_EQ(preferred_ucx_net_device(t, 0), "mlx5_0:1");
  EXPECT_FALSE(is_hier_leader(t, 0));
  EXPECT_TRUE(is_hier_leader(t, 1));
  EXPECT_TRUE(is_hier_leader(t, 2));
  EXPECT_FALSE(is_hier_leader(t, 3));
  EXPECT_EQ(t.hier_groups, (std::vector<std::vector<int>>{{1, 0}, {2, 3}}));
  EXPECT_EQ(t.host_ranks, (std::vector<std::vector<int>>{{0, 1}, {2, 3}})) << "unchanged";

  // Out of range, malformed, or a GPU on a host without any: configuration errors.
  std::string err;
  recs[3].gpu_request = 2;
  EXPECT_EQ(build_topology(recs, "", &t, &err), Status::kErrConfig);
  EXPECT_NE(err.find("SKIPRING_GPU=2 on rank 3 (host b): the host has 2 GPUs (0..1)"),
            std::string::npos)
      << err;
  recs[3].gpu_request = kGpuRequestBad;
  EXPECT_EQ(build_topology(recs, "", &t, &err), Status::kErrConfig);
  EXPECT_NE(err.find("SKIPRING_GPU on rank 3 (host b) is not a GPU index"), std::string::npos)
      << err;
  recs[3].gpu_request = kGpuNotRequested;
  EXPECT_EQ(build_topology(recs, "", &t, &err), Status::kOk) << err;
  const std::vector<RankRecord> cpu_only = {
      make_record(0, "c", {{kNic, "eth0", "", "", "", 0, 0}})};
  std::vector<RankRecord> asks = cpu_only;
  asks[0].gpu_request = 0;
  EXPECT_EQ(build_topology(asks, "", &t, &err), Status::kErrConfig);
  EXPECT_NE(err.find("the host has no GPU"), std::string::npos) << err;
}

TEST(TopologyAffinity, TieBreaksAreDeterministicAndSpread) {
  // Two GPUs and two NICs behind one switch: GPU 0 takes the NIC with the lower bus id, GPU 1
  // the other, whatever the order hwloc listed them in.
  std::vector<Dev> devs = {
      {kNic, "mlx5_1", "0000:1e:00.0", "0000:16:00.0", "0000:16", 0, 0, "mlx5_1", 1},
      {kGpu, "cuda1", "0000:1d:00.0", "0000:16:00.0", "0000:16", 0, 0},
      {kNic, "mlx5_0", "0000:1c:00.0", "0000:16:00.0", "0000:16", 0, 0, "mlx5_0", 1},
      {kGpu, "cuda0", "0000:1b:00.0", "0000:16:00.0", "0000:16", 0, 0},
  };
  for (int perm = 0; perm < 24; ++perm) {
    std::vector<Dev> d = devs;
    std::vector<int> idx = {0, 1, 2, 3};
    for (int k = 0; k < perm; ++k) std::next_permutation(idx.begin(), idx.end());
    for (int i = 0; i < 4; ++i) d[i] = devs[idx[i]];
    std::vector<RankRecord> recs;
    for (int r = 0; r < 4; ++r) recs.push_back(make_record(r, "h", d));
    const Topology t = build(recs);
    SCOPED_TRACE("permutation " + std::to_string(perm));
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(gpu_name(t, r), r % 2 ? "cuda1" : "cuda0");
      EXPECT_EQ(nic_name(t, r), r % 2 ? "mlx5_1" : "mlx5_0");
      EXPECT_EQ(rank_nic(t, r).tied, 2);
    }
  }
}

TEST(TopologyAffinity, UcxDeviceNames) {
  EXPECT_EQ(ucx_device_name(make_dev({kNic, "ib0/mlx5_0", "", "", "", 0, 0, "mlx5_0", 0})),
            "mlx5_0:1")
      << "unknown port: 1";
  EXPECT_EQ(ucx_device_name(make_dev({kNic, "mlx5_3/ens1f1", "", "", "", 0, 0, "mlx5_3", 2})),
            "mlx5_3:2");
  EXPECT_EQ(ucx_device_name(make_dev({kNic, "enp65s0f0", "", "", "", 0, 0})), "enp65s0f0");
  EXPECT_EQ(ucx_device_name(make_dev({kNic, "eth0/x", "", "", "", 0, 0})), "eth0");
}

// Cross-host traffic goes over sockets when some host has no RDMA NIC (its records list none);
// one host never; an RDMA NIC on every host: no.
TEST(TopologyAffinity, HostsJoinedBySockets) {
  const std::vector<Dev> eth = {{kNic, "eth0", "0000:03:00.0", "", "0000:00", 0, 0}};
  const std::vector<Dev> ib = two_switch_server();
  EXPECT_FALSE(hosts_joined_by_sockets(build({make_record(0, "a", eth), make_record(1, "a", eth)})))
      << "one host";
  EXPECT_TRUE(hosts_joined_by_sockets(build({make_record(0, "a", eth), make_record(1, "b", eth)})));
  EXPECT_TRUE(hosts_joined_by_sockets(build({make_record(0, "a", {}), make_record(1, "b", {})})))
      << "no devices known";
  EXPECT_FALSE(hosts_joined_by_sockets(build({make_record(0, "a", ib), make_record(1, "b", ib)})));
  EXPECT_TRUE(hosts_joined_by_sockets(build({make_record(0, "a", ib), make_record(1, "b", eth)})))
      << "one host without RDMA";
  // The RDMA NIC listed on one of a host's ranks is the host's.
  EXPECT_FALSE(hosts_joined_by_sockets(
      build({make_record(0, "a", ib), make_record(1, "a", {}), make_record(2, "b", ib)})));
}

TEST(TopologyAffinity, NewFieldsSurviveTheWire) {
  RankRecord in = make_record(3, "gpunode", two_switch_server(), 0, 0);
  in.gpu_request = 1;
  in.devices[0].port = 2;
  std::vector<uint8_t> buf(kRecordBytes);
  ASSERT_EQ(encode_record(in, buf.data()), kRecordBytes);
  RankRecord out;
  std::string why;
  ASSERT_TRUE(decode_record(buf.data(), kRecordBytes, &out, &why)) << why;
  EXPECT_EQ(out.gpu_request, 1);
  for (int i = 0; i < in.num_devices; ++i) {
    EXPECT_EQ(device_string(out.devices[i]), device_string(in.devices[i]));
    EXPECT_STREQ(out.devices[i].pci_root, in.devices[i].pci_root);
    EXPECT_EQ(out.devices[i].flags, in.devices[i].flags);
  }
  EXPECT_EQ(device_string(out.devices[0]),
            "nic ib1/mlx5_1@0000:b2:00.0(pkg 1, numa 1, sw 0000:ae:00.0, rdma mlx5_1:2)");
  // Every accepted record re-encodes to the same bytes.
  std::vector<uint8_t> again(kRecordBytes);
  encode_record(out, again.data());
  EXPECT_EQ(again, buf);
  // Corrupt new fields are rejected.
  RankRecord bad = in;
  bad.gpu_request = -3;
  encode_record(bad, buf.data());
  EXPECT_FALSE(decode_record(buf.data(), kRecordBytes, &out, &why));
  bad = in;
  bad.devices[1].port = -1;
  encode_record(bad, buf.data());
  EXPECT_FALSE(decode_record(buf.data(), kRecordBytes, &out, &why));
  bad = in;
  std::memset(bad.devices[2].fabric, 'x', TopoDevice::kNameChars);
  encode_record(bad, buf.data());
  EXPECT_FALSE(decode_record(buf.data(), kRecordBytes, &out, &why));
}

}  // namespace
}  // namespace skipring
