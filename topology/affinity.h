// GPU-NIC affinity (issue 14, part 4): pure functions of the gathered Topology (no MPI, no
// hwloc), identical on every rank. Per rank: the GPU it uses (SKIPRING_GPU, else local rank
// modulo the host's GPUs), the NIC closest to that GPU by PCI distance (else to the rank's
// NUMA node / package), the UCX device string of that NIC, and the hierarchical all-reduce's
// inter-host leaders (ranks whose GPU shares a PCI switch with their NIC). docs/topology.md
// describes the rules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/discovery.h"

namespace skipring {

// The environment variable that picks a rank's GPU (read by gather_topology, per rank).
constexpr const char* kGpuEnvVar = "SKIPRING_GPU";

// SKIPRING_GPU's text: "" -> kGpuNotRequested; a decimal index 0..1023 -> the index;
// anything else -> kGpuRequestBad.
int32_t parse_gpu_request(const std::string& text);

// Positions in rec.devices of the host's GPUs (display-only ones excluded), in PCI bus id
// order (devices without a bus id last, then by name): SKIPRING_GPU's index space, which is
// CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID and all GPUs visible.
std::vector<int> host_gpus(const RankRecord& rec);
// Positions in rec.devices of the NICs a rank may use, in PCI bus id order: the RDMA NICs
// (InfiniBand / RoCE, an OpenFabrics device) when the host has any, else every NIC.
std::vector<int> candidate_nics(const RankRecord& rec);

// How far apart two devices (or a rank's CPUs and a device) are, nearest first.
enum class PciDistance : int {
  kSwitch = 0,      // below one PCIe root port: behind one switch (same non-empty pci_switch)
  kHostBridge = 1,  // on one host bridge / root complex (same non-empty pci_root)
  kNuma = 2,        // same NUMA node (known)
  kPackage = 3,     // same package (known)
  kSystem = 4,      // anything else: across the inter-socket link, or unknown
};
// "same PCI switch", "same host bridge", "same NUMA node", "same package", "system".
const char* pci_distance_name(PciDistance d);
PciDistance pci_distance(const TopoDevice& a, const TopoDevice& b);
// From a rank's bound CPUs (its record's NUMA node and package) to a device: kNuma, kPackage
// or kSystem.
PciDistance cpu_distance(const RankRecord& rec, const TopoDevice& dev);

struct GpuChoice {
  int index = -1;          // among host_gpus(); -1: no GPU
  int device = -1;         // position in the rank's record's devices; -1: no GPU
  bool requested = false;  // from SKIPRING_GPU (else local rank modulo the GPU count)
};
// The rank's GPU: SKIPRING_GPU when it set it (check_gpu_request validates it), else its local
// rank on the host (position in host_ranks) modulo the host's GPU count; none when the host
// has no GPU.
GpuChoice rank_gpu(const Topology& t, int rank);
// False, with a message naming SKIPRING_GPU, when the rank asked for a GPU its host lacks or
// its value is not an index.
bool check_gpu_request(const Topology& t, int rank, std::string* error);

struct NicChoice {
  int device = -1;  // position in the rank's record's devices; -1: the host lists no NIC
  PciDistance distance = PciDistance::kSystem;  // to the GPU (from_gpu) or to the rank's CPUs
  bool from_gpu = false;
  int tied = 0;  // candidates at that distance (the tie is broken by spreading, see .cpp)
};
// The NIC for the rank: among candidate_nics, the nearest to its GPU by pci_distance; without
// a GPU the nearest to its CPUs by cpu_distance. Ties (several NICs at the best distance) are
// broken deterministically by spreading: the k-th GPU of the host (k-th GPU-less rank) with
// the same tied set takes the (k mod tied)-th of them in PCI bus order.
NicChoice rank_nic(const Topology& t, int rank);

// UCX_NET_DEVICES syntax for a NIC: "<ibdev>:<port>" for an RDMA NIC ("mlx5_0:1"; port 1 when
// unknown), else its network interface name ("eth0").
std::string ucx_device_name(const TopoDevice& nic);
// The UCX device of rank_nic(t, rank); "" when the host lists no NIC (leave UCX's default).
std::string preferred_ucx_net_device(const Topology& t, int rank);

// More than one host, and some host lists no RDMA NIC (kTopoDevRdma): the MPI library's traffic
// between hosts goes over TCP sockets (kernel TCP, a rendezvous round trip per large message).
// Hosts the records say nothing about (no hwloc) count as without one.
bool hosts_joined_by_sockets(const Topology& t);

// The rank has a GPU and its NIC is behind the same PCI switch.
bool is_hier_leader(const Topology& t, int rank);
// Per host its ranks with the leaders first, then the others, each in rank order: the
// hierarchical all-reduce's local order (Topology::hier_groups). Equals host_ranks when no
// rank of a host is a leader (in particular without GPUs).
std::vector<std::vector<int>> hier_local_groups(const Topology& t);

}  // namespace skipring
