// Topology discovery: each rank describes where it runs (host, package, NUMA node, bound
// cores, GPUs and NICs with their PCI locality, from hwloc) in a fixed-size record; one
// MPI_Allgather at communicator setup (runtime/topology_gather.h, the only MPI part) gives every
// rank all records; the ranks are then grouped into hosts (by hostname, or SKIPRING_HOST_MAP)
// and put in the node-aware ring order (topology/ring_order.h). docs/topology.md describes the
// record and the rules.
//
// The SimGrid SMPI build has no hwloc: its records carry the (simulated) host name only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/hash.h"  // fnv1a64 of host names and of SKIPRING_HOST_MAP
#include "common/status.h"

namespace skipring {

// Values of RankRecord / TopoDevice package and numa fields besides ids >= 0.
constexpr int32_t kTopoUnknown = -1;  // not discovered (no hwloc, no such object)
constexpr int32_t kTopoSeveral = -2;  // the cpuset spans several packages / NUMA nodes

enum class TopoDeviceKind : int32_t { kGpu = 1, kNic = 2 };

// TopoDevice::flags bits.
constexpr int32_t kTopoDevRdma = 1;     // NIC with an OpenFabrics (verbs) device: IB / RoCE
constexpr int32_t kTopoDevDisplay = 2;  // GPU that is a display adapter only (BMC / virtual VGA)

// RankRecord::gpu_request besides GPU indices >= 0.
constexpr int32_t kGpuNotRequested = -1;  // SKIPRING_GPU unset or empty
constexpr int32_t kGpuRequestBad = -2;    // SKIPRING_GPU is not a GPU index

// One GPU or NIC (hwloc OS devices; those of one PCI device are merged, names joined by '/').
// PCI locality (docs/topology.md): two devices with the same non-empty pci_switch sit below
// one PCIe root port, i.e. behind one PCIe switch (peer traffic stays off the host bridge);
// with the same non-empty pci_root they hang off one host bridge (root complex).
struct TopoDevice {
  static constexpr size_t kNameChars = 24;  // NUL included
  static constexpr size_t kBusChars = 16;   // "dddd:bb:dd.f" + NUL
  int32_t kind = 0;                         // TopoDeviceKind
  int32_t package = kTopoUnknown;           // package its PCI bus hangs off
  int32_t numa = kTopoUnknown;              // NUMA node local to it
  int32_t flags = 0;                        // kTopoDev* bits
  int32_t port = 0;                         // RDMA NIC: first active port (1..), 0 unknown
  char name[kNameChars] = {};               // OS device names, e.g. "eth0", "mlx5_0", "card0/cuda0"
  char pci_bus[kBusChars] = {};             // PCI bus id; empty when not on PCI
  // Bus id of the topmost PCI bridge above the device below the host bridge (the root port
  // that leads to its switch); empty when the device hangs straight off the host bridge.
  char pci_switch[kBusChars] = {};
  char pci_root[kBusChars] = {};  // host bridge: "dddd:bb" (its secondary bus); empty: none
  char fabric[kNameChars] = {};   // RDMA NIC: the OpenFabrics name ("mlx5_0"); else empty

  bool is(TopoDeviceKind k) const { return kind == static_cast<int32_t>(k); }
};

// What one rank knows about itself: a fixed-size POD, encoded to kRecordBytes bytes for the
// MPI_Allgather. Strings are NUL-terminated and truncated to fit.
struct RankRecord {
  static constexpr size_t kHostChars = 64;  // first 63 characters of the hostname + NUL
  static constexpr size_t kMaxDevices = 8;
  static constexpr size_t kCoreMaskWords = 4;  // cores 0..255 listed; more are only counted
  int32_t rank = 0;
  uint64_t host_hash = 0;  // FNV-1a of the whole hostname (names longer than 63 chars)
  char host[kHostChars] = {};
  uint64_t host_map_hash = 0;  // hash of SKIPRING_HOST_MAP: all ranks must use the same map
  // FNV-1a of the kernel's boot id (/proc/sys/kernel/random/boot_id); 0 unknown. Ranks with the
  // same one share a kernel and its cores whatever their hostnames say (containers, network
  // namespaces with their own UTS name): ranks_sharing_kernel.
  uint64_t kernel_hash = 0;
  int32_t package = kTopoUnknown;  // package (socket) holding the bound cpuset (os index)
  int32_t numa = kTopoUnknown;     // NUMA node holding the bound cpuset (os index)
  int32_t num_cores = -1;          // cores the rank is bound to (any of their PUs); -1 unknown
  int32_t first_core = -1;         // lowest of them (hwloc logical index)
  int32_t num_pus = -1;            // hardware threads in the binding
  int32_t machine_cores = -1;      // cores on the host
  uint64_t core_mask[kCoreMaskWords] = {};  // bit c: bound to core c (logical index < 256)
  // SKIPRING_GPU of this rank: the index of its GPU among the host's GPUs (display-only ones
  // excluded, PCI bus order), kGpuNotRequested or kGpuRequestBad (topology/affinity.h).
  int32_t gpu_request = kGpuNotRequested;
  int32_t num_devices = 0;      // entries used in devices[]
  int32_t devices_dropped = 0;  // GPUs/NICs beyond kMaxDevices, not listed
  TopoDevice devices[kMaxDevices];

  std::string host_name() const;  // host[] as a string
  bool bound_to_core(int core) const;
};

// Encoded size of a RankRecord (native byte order: all ranks of one job share it).
constexpr size_t kRecordBytes =
    4 /*magic*/ + 4 /*rank*/ + 8 + RankRecord::kHostChars + 8 + 8 + 4 * 6 +
    8 * RankRecord::kCoreMaskWords + 4 /*gpu_request*/ + 4 * 2 +
    RankRecord::kMaxDevices * (4 * 5 + TopoDevice::kNameChars * 2 + TopoDevice::kBusChars * 3);

// Writes kRecordBytes bytes; returns the number written.
size_t encode_record(const RankRecord& rec, uint8_t* out);
// Checks the magic word, string termination and counts; false with *why on a bad record.
bool decode_record(const uint8_t* in, size_t bytes, RankRecord* out, std::string* why);

// Copies `text` into a fixed char field, truncated, NUL-terminated and zero-padded.
void copy_fixed(const std::string& text, char* field, size_t chars);

// The topology of one communicator, identical on every rank.
struct Topology {
  std::vector<RankRecord> records;           // by rank
  std::vector<int> host_of_rank;             // dense host ids 0..H-1, by lowest rank
  std::vector<std::vector<int>> host_ranks;  // per host its ranks, ascending
  std::vector<std::string> host_names;       // hostname, or the SKIPRING_HOST_MAP label
  std::vector<int> ring;                     // node-aware ring order (rank at each position)
  int inter_host_hops = 0;                   // ring edges between hosts (H when H > 1)
  bool from_host_map = false;                // hosts come from SKIPRING_HOST_MAP
  // Per host its ranks in the hierarchical all-reduce's local order: the inter-host leaders
  // (ranks whose GPU shares a PCI switch with their NIC, topology/affinity.h) first, then the
  // others, each in rank order; host_ranks when no rank qualifies.
  std::vector<std::vector<int>> hier_groups;

  int size() const { return static_cast<int>(records.size()); }
  int num_hosts() const { return static_cast<int>(host_ranks.size()); }
  int host_of(int rank) const { return host_of_rank[rank]; }
  // Position of `rank` in ring; -1 when absent.
  int ring_position(int rank) const;
};

// Pure: groups `records` (one per rank, records[r].rank == r) into hosts by hostname, or by
// `host_map` (SKIPRING_HOST_MAP syntax) when it is not empty, and computes the ring. Fails with
// kErrConfig and a message naming SKIPRING_HOST_MAP on a bad map (wrong length, syntax, ranks
// that disagree on it) or SKIPRING_GPU on a GPU index the rank's host does not have,
// kErrInternal on inconsistent records.
Status build_topology(std::vector<RankRecord> records, const std::string& host_map, Topology* out,
                      std::string* error);

// How many ranks of `topo` share `rank`'s kernel (the same kernel_hash), at least the ranks of
// its host; its host's ranks when the boot id is unknown. 4 ranks in 4 network namespaces of one
// 2-core machine are 4 hosts to MPI but 4 ranks on 2 cores to the scheduler.
int ranks_sharing_kernel(const Topology& topo, int rank);

// This process's record (rank 0, no map hash): hwloc discovery, run once per process and
// cached (SimGrid build: the host name only, every call).
RankRecord local_record(const std::string& hostname);

// "0-3,8" style list of the cores in rec.core_mask (with "+N" when cores >= 256 are bound),
// "?" when unknown.
std::string core_list(const RankRecord& rec);
// "3", "?" (unknown) or "*" (several) for package / NUMA fields.
std::string place_string(int32_t id);
// "gpu card0/cuda0@0000:3b:00.0(pkg 0, numa 0, sw 0000:3a:00.0)"-style, one per device
// ("sw" only when the device is behind a root port; "display" for a display-only GPU, "rdma
// mlx5_0:1" for an RDMA NIC).
std::string device_string(const TopoDevice& dev);

}  // namespace skipring
