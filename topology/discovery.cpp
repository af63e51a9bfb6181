// Topology discovery: the per-rank record (hwloc), its encoding, the gather at communicator
// setup and the grouping into hosts.
#include "topology/discovery.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

#include "topology/affinity.h"
#include "topology/ring_order.h"

#ifndef SKIPRING_SIMGRID
#include <hwloc.h>
#endif

namespace skipring {

namespace {
// "STR3" (STR2: no kernel_hash; STR1: no PCI locality, no SKIPRING_GPU)
constexpr uint32_t kRecordMagic = 0x33525453;

class Writer {
 public:
  explicit Writer(uint8_t* out) : out_(out) {}
  template <typename T>
  void put(const T& v) {
    std::memcpy(out_ + pos_, &v, sizeof(T));
    pos_ += sizeof(T);
  }
  void put_chars(const char* s, size_t n) {
    std::memcpy(out_ + pos_, s, n);
    pos_ += n;
  }
  size_t pos() const { return pos_; }

 private:
  uint8_t* out_;
  size_t pos_ = 0;
};

class Reader {
 public:
  explicit Reader(const uint8_t* in) : in_(in) {}
  template <typename T>
  void get(T* v) {
    std::memcpy(v, in_ + pos_, sizeof(T));
    pos_ += sizeof(T);
  }
  void get_chars(char* s, size_t n) {
    std::memcpy(s, in_ + pos_, n);
    pos_ += n;
  }
  size_t pos() const { return pos_; }

 private:
  const uint8_t* in_;
  size_t pos_ = 0;
};

bool terminated(const char* s, size_t n) { return std::memchr(s, '\0', n) != nullptr; }
}  // namespace

std::string RankRecord::host_name() const { return std::string(host, strnlen(host, kHostChars)); }

bool RankRecord::bound_to_core(int core) const {
  if (core < 0 || core >= static_cast<int>(kCoreMaskWords * 64)) return false;
  return (core_mask[core / 64] >> (core % 64)) & 1u;
}

void copy_fixed(const std::string& text, char* field, size_t chars) {
  std::memset(field, 0, chars);
  std::memcpy(field, text.data(), std::min(text.size(), chars - 1));
}

size_t encode_record(const RankRecord& rec, uint8_t* out) {
  Writer w(out);
  w.put(kRecordMagic);
  w.put(rec.rank);
  w.put(rec.host_hash);
  w.put_chars(rec.host, RankRecord::kHostChars);
  w.put(rec.host_map_hash);
  w.put(rec.kernel_hash);
  w.put(rec.package);
  w.put(rec.numa);
  w.put(rec.num_cores);
  w.put(rec.first_core);
  w.put(rec.num_pus);
  w.put(rec.machine_cores);
  for (uint64_t word : rec.core_mask) w.put(word);
  w.put(rec.gpu_request);
  w.put(rec.num_devices);
  w.put(rec.devices_dropped);
  for (const TopoDevice& d : rec.devices) {
    w.put(d.kind);
    w.put(d.package);
    w.put(d.numa);
    w.put(d.flags);
    w.put(d.port);
    w.put_chars(d.name, TopoDevice::kNameChars);
    w.put_chars(d.pci_bus, TopoDevice::kBusChars);
    w.put_chars(d.pci_switch, TopoDevice::kBusChars);
    w.put_chars(d.pci_root, TopoDevice::kBusChars);
    w.put_chars(d.fabric, TopoDevice::kNameChars);
  }
  return w.pos();
}

bool decode_record(const uint8_t* in, size_t bytes, RankRecord* out, std::string* why) {
  if (bytes != kRecordBytes) {
    *why = "topology record of " + std::to_string(bytes) + " bytes, expected " +
           std::to_string(kRecordBytes);
    return false;
  }
  Reader r(in);
  uint32_t magic = 0;
  r.get(&magic);
  if (magic != kRecordMagic) {
    *why = "topology record with a bad magic word (another skipring version?)";
    return false;
  }
  RankRecord rec;
  r.get(&rec.rank);
  r.get(&rec.host_hash);
  r.get_chars(rec.host, RankRecord::kHostChars);
  r.get(&rec.host_map_hash);
  r.get(&rec.kernel_hash);
  r.get(&rec.package);
  r.get(&rec.numa);
  r.get(&rec.num_cores);
  r.get(&rec.first_core);
  r.get(&rec.num_pus);
  r.get(&rec.machine_cores);
  for (uint64_t& word : rec.core_mask) r.get(&word);
  r.get(&rec.gpu_request);
  r.get(&rec.num_devices);
  r.get(&rec.devices_dropped);
  for (TopoDevice& d : rec.devices) {
    r.get(&d.kind);
    r.get(&d.package);
    r.get(&d.numa);
    r.get(&d.flags);
    r.get(&d.port);
    r.get_chars(d.name, TopoDevice::kNameChars);
    r.get_chars(d.pci_bus, TopoDevice::kBusChars);
    r.get_chars(d.pci_switch, TopoDevice::kBusChars);
    r.get_chars(d.pci_root, TopoDevice::kBusChars);
    r.get_chars(d.fabric, TopoDevice::kNameChars);
  }
  if (!terminated(rec.host, RankRecord::kHostChars)) {
    *why = "topology record: hostname not terminated";
    return false;
  }
  if (rec.gpu_request < kGpuRequestBad) {
    *why = "topology record: bad GPU request " + std::to_string(rec.gpu_request);
    return false;
  }
  if (rec.num_devices < 0 || rec.num_devices > static_cast<int32_t>(RankRecord::kMaxDevices) ||
      rec.devices_dropped < 0) {
    *why = "topology record: bad device count " + std::to_string(rec.num_devices);
    return false;
  }
  for (int i = 0; i < rec.num_devices; ++i) {
    const TopoDevice& d = rec.devices[i];
    if (!terminated(d.name, TopoDevice::kNameChars) ||
        !terminated(d.pci_bus, TopoDevice::kBusChars) ||
        !terminated(d.pci_switch, TopoDevice::kBusChars) ||
        !terminated(d.pci_root, TopoDevice::kBusChars) ||
        !terminated(d.fabric, TopoDevice::kNameChars) || d.port < 0 ||
        (d.kind != static_cast<int32_t>(TopoDeviceKind::kGpu) &&
         d.kind != static_cast<int32_t>(TopoDeviceKind::kNic))) {
      *why = "topology record: bad device " + std::to_string(i);
      return false;
    }
  }
  *out = rec;
  return true;
}

int Topology::ring_position(int rank) const {
  for (size_t i = 0; i < ring.size(); ++i) {
    if (ring[i] == rank) return static_cast<int>(i);
  }
  return -1;
}

int ranks_sharing_kernel(const Topology& topo, int rank) {
  if (rank < 0 || rank >= topo.size()) return 0;
  const int on_host = static_cast<int>(topo.host_ranks[topo.host_of(rank)].size());
  const uint64_t mine = topo.records[rank].kernel_hash;
  if (mine == 0) return on_host;
  int same = 0;
  for (const RankRecord& rec : topo.records) same += rec.kernel_hash == mine ? 1 : 0;
  return std::max(same, on_host);
}

Status build_topology(std::vector<RankRecord> records, const std::string& host_map, Topology* out,
                      std::string* error) {
  const int n = static_cast<int>(records.size());
  if (n < 1) {
    *error = "topology: no ranks";
    return Status::kErrInternal;
  }
  for (int r = 0; r < n; ++r) {
    if (records[r].rank != r) {
      *error = "topology: record " + std::to_string(r) + " claims rank " +
               std::to_string(records[r].rank);
      return Status::kErrInternal;
    }
    if (records[r].host_map_hash != records[0].host_map_hash) {
      *error = "SKIPRING_HOST_MAP differs between rank 0 and rank " + std::to_string(r) +
               " (every rank must see the same value)";
      return Status::kErrConfig;
    }
  }
  Topology t;
  if (!host_map.empty()) {
    if (!parse_host_map(host_map, n, &t.host_of_rank, &t.host_names, error)) {
      return Status::kErrConfig;
    }
    t.from_host_map = true;
  } else {
    // The hash covers names longer than the 63 characters kept.
    std::vector<std::string> keys(n);
    for (int r = 0; r < n; ++r) {
      keys[r] = std::to_string(records[r].host_hash) + '/' + records[r].host_name();
    }
    t.host_of_rank = dense_ids(keys);
    t.host_names.assign(t.host_of_rank.empty()
                            ? 0
                            : 1 + *std::max_element(t.host_of_rank.begin(), t.host_of_rank.end()),
                        std::string());
    for (int r = n - 1; r >= 0; --r) t.host_names[t.host_of_rank[r]] = records[r].host_name();
  }
  t.host_ranks = ranks_per_host(t.host_of_rank);
  std::vector<RankPlace> places(n);
  for (int r = 0; r < n; ++r) {
    places[r].host = t.host_of_rank[r];
    places[r].package = records[r].package;
    places[r].numa = records[r].numa;
  }
  t.ring = node_aware_ring(places);
  std::string why;
  if (!ring_is_valid(t.ring, n, &why)) {
    *error = "topology ring order: " + why;
    return Status::kErrInternal;
  }
  t.inter_host_hops = inter_host_hops(t.ring, t.host_of_rank);
  const int hosts = t.num_hosts();
  if (t.inter_host_hops != (hosts > 1 ? hosts : 0)) {
    *error = "topology ring order crosses between hosts " + std::to_string(t.inter_host_hops) +
             " times for " + std::to_string(hosts) + " hosts";
    return Status::kErrInternal;
  }
  t.records = std::move(records);
  // SKIPRING_GPU is checked here, on the gathered records, so a bad index fails every rank.
  for (int r = 0; r < n; ++r) {
    if (!check_gpu_request(t, r, error)) return Status::kErrConfig;
  }
  t.hier_groups = hier_local_groups(t);
  *out = std::move(t);
  return Status::kOk;
}

#ifndef SKIPRING_SIMGRID
namespace {

int32_t object_id(hwloc_obj_t obj) {
  return obj->os_index != HWLOC_UNKNOWN_INDEX ? static_cast<int32_t>(obj->os_index)
                                              : static_cast<int32_t>(obj->logical_index);
}

// The one object of `type` whose CPUs intersect `set`; kTopoSeveral when more do,
// kTopoUnknown when none does. NUMA nodes without CPUs (GPU / high-bandwidth memory) are
// skipped.
int32_t locate(hwloc_topology_t topo, hwloc_obj_type_t type, hwloc_const_cpuset_t set) {
  if (set == nullptr || hwloc_bitmap_iszero(set)) return kTopoUnknown;
  int32_t found = kTopoUnknown;
  const int count = hwloc_get_nbobjs_by_type(topo, type);
  for (int i = 0; i < count; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topo, type, i);
    if (obj == nullptr || obj->cpuset == nullptr || hwloc_bitmap_iszero(obj->cpuset)) continue;
    if (!hwloc_bitmap_intersects(obj->cpuset, set)) continue;
    if (found != kTopoUnknown) return kTopoSeveral;
    found = object_id(obj);
  }
  return found;
}

std::string bus_id(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& a) {
  char bus[TopoDevice::kBusChars] = {};
  std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.%01x", static_cast<unsigned>(a.domain),
                static_cast<unsigned>(a.bus), static_cast<unsigned>(a.dev),
                static_cast<unsigned>(a.func));
  return bus;
}

// The PCI locality of `pcidev`: the topmost PCI-to-PCI bridge below its host bridge (the root
// port its switch hangs off) and the host bridge itself.
void pci_locality(hwloc_obj_t pcidev, TopoDevice* d) {
  for (hwloc_obj_t p = pcidev->parent; p != nullptr; p = p->parent) {
    if (p->type != HWLOC_OBJ_BRIDGE) break;  // above the host bridge: CPU side
    const hwloc_obj_attr_u::hwloc_bridge_attr_s& b = p->attr->bridge;
    if (b.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
      char root[TopoDevice::kBusChars] = {};
      std::snprintf(root, sizeof root, "%04x:%02x", static_cast<unsigned>(b.downstream.pci.domain),
                    static_cast<unsigned>(b.downstream.pci.secondary_bus));
      copy_fixed(root, d->pci_root, TopoDevice::kBusChars);
      break;
    }
    copy_fixed(bus_id(b.upstream.pci), d->pci_switch, TopoDevice::kBusChars);  // keep the topmost
  }
}

// First active port of an OpenFabrics device ("Port<N>State" = 4, IBV_PORT_ACTIVE), else its
// lowest port, else 0.
int32_t fabric_port(hwloc_obj_t osdev) {
  long active = 0, lowest = 0;
  for (unsigned i = 0; i < osdev->infos_count; ++i) {
    const char* name = osdev->infos[i].name;
    if (name == nullptr || std::strncmp(name, "Port", 4) != 0) continue;
    char* end = nullptr;
    const long port = std::strtol(name + 4, &end, 10);
    if (end == name + 4 || port <= 0 || port > 255 || std::strcmp(end, "State") != 0) continue;
    if (lowest == 0 || port < lowest) lowest = port;
    const char* v = osdev->infos[i].value;
    if (v != nullptr && std::strcmp(v, "4") == 0 && (active == 0 || port < active)) active = port;
  }
  return static_cast<int32_t>(active != 0 ? active : lowest);
}

// A GPU OS device on a PCI device that only drives a display: DRM devices (card*, renderD*)
// of VGA-class PCI functions that are not NVIDIA / AMD GPUs (BMC and virtual VGA). CUDA,
// OpenCL, NVML, RSMI and Level Zero devices always compute.
bool display_only(hwloc_obj_t osdev, hwloc_obj_t pcidev) {
  if (osdev->attr->osdev.type != HWLOC_OBJ_OSDEV_GPU || osdev->name == nullptr) return false;
  const std::string name = osdev->name;
  if (name.rfind("card", 0) != 0 && name.rfind("renderD", 0) != 0 && name.rfind("controlD", 0) != 0)
    return false;
  if (pcidev == nullptr) return true;
  const unsigned vendor = pcidev->attr->pcidev.vendor_id;
  const unsigned cls = pcidev->attr->pcidev.class_id;
  if (vendor == 0x10de || vendor == 0x1002) return false;  // NVIDIA, AMD
  return cls != 0x0302;                                    // 3D controller: compute GPU
}

void add_device(hwloc_topology_t topo, hwloc_obj_t osdev, RankRecord* rec) {
  TopoDeviceKind kind;
  switch (osdev->attr->osdev.type) {
    case HWLOC_OBJ_OSDEV_GPU:
    case HWLOC_OBJ_OSDEV_COPROC:
      kind = TopoDeviceKind::kGpu;
      break;
    case HWLOC_OBJ_OSDEV_NETWORK:
    case HWLOC_OBJ_OSDEV_OPENFABRICS:
      kind = TopoDeviceKind::kNic;
      break;
    default:
      return;
  }
  hwloc_obj_t pcidev = nullptr;
  for (hwloc_obj_t p = osdev->parent; p != nullptr; p = p->parent) {
    if (p->type == HWLOC_OBJ_PCI_DEVICE) {
      pcidev = p;
      break;
    }
  }
  const std::string bus = pcidev != nullptr ? bus_id(pcidev->attr->pcidev) : std::string();
  const std::string name = osdev->name ? osdev->name : "?";
  const bool fabric = osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
  const bool display = display_only(osdev, pcidev);
  auto note = [&](TopoDevice& d) {
    if (fabric && d.fabric[0] == '\0') {
      d.flags |= kTopoDevRdma;
      copy_fixed(name, d.fabric, TopoDevice::kNameChars);
      d.port = fabric_port(osdev);
    }
    // A PCI GPU is display-only when none of its OS devices computes.
    if (kind == TopoDeviceKind::kGpu && !display) d.flags &= ~kTopoDevDisplay;
  };
  // OS devices of one PCI device (card0, renderD128, cuda0, nvml0...) make one entry.
  for (int i = 0; i < rec->num_devices; ++i) {
    TopoDevice& d = rec->devices[i];
    if (!bus.empty() && d.is(kind) && bus == d.pci_bus) {
      const std::string joined = std::string(d.name) + "/" + name;
      if (joined.size() < TopoDevice::kNameChars)
        copy_fixed(joined, d.name, TopoDevice::kNameChars);
      note(d);
      return;
    }
  }
  if (rec->num_devices >= static_cast<int32_t>(RankRecord::kMaxDevices)) {
    ++rec->devices_dropped;
    return;
  }
  TopoDevice& d = rec->devices[rec->num_devices++];
  d.kind = static_cast<int32_t>(kind);
  if (kind == TopoDeviceKind::kGpu) d.flags |= kTopoDevDisplay;  // until a computing one
  copy_fixed(name, d.name, TopoDevice::kNameChars);
  copy_fixed(bus, d.pci_bus, TopoDevice::kBusChars);
  if (pcidev != nullptr) pci_locality(pcidev, &d);
  note(d);
  hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(topo, osdev);
  if (anchor != nullptr && anchor->cpuset != nullptr) {
    d.package = locate(topo, HWLOC_OBJ_PACKAGE, anchor->cpuset);
    d.numa = locate(topo, HWLOC_OBJ_NUMANODE, anchor->cpuset);
  }
}

// FNV-1a of the running kernel's boot id; 0 when it cannot be read.
uint64_t kernel_boot_hash() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!std::getline(in, id) || id.empty()) return 0;
  return fnv1a64(id);
}

RankRecord discover_with_hwloc(const std::string& hostname) {
  RankRecord rec;
  rec.host_hash = fnv1a64(hostname);
  copy_fixed(hostname, rec.host, RankRecord::kHostChars);
  rec.kernel_hash = kernel_boot_hash();
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return rec;
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return rec;
  }
  hwloc_bitmap_t bound = hwloc_bitmap_alloc();
  if (hwloc_get_cpubind(topo, bound, HWLOC_CPUBIND_PROCESS) != 0 &&
      hwloc_get_cpubind(topo, bound, HWLOC_CPUBIND_THREAD) != 0) {
    hwloc_bitmap_copy(bound, hwloc_topology_get_topology_cpuset(topo));
  }
  hwloc_bitmap_and(bound, bound, hwloc_topology_get_topology_cpuset(topo));
  rec.package = locate(topo, HWLOC_OBJ_PACKAGE, bound);
  rec.numa = locate(topo, HWLOC_OBJ_NUMANODE, bound);
  rec.num_pus = hwloc_bitmap_weight(bound);
  // Cores with any bound PU; machines hwloc shows no cores on count PUs instead.
  const hwloc_obj_type_t core_type =
      hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  const int cores = hwloc_get_nbobjs_by_type(topo, core_type);
  rec.machine_cores = cores;
  rec.num_cores = 0;
  for (int i = 0; i < cores; ++i) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, core_type, i);
    if (core == nullptr || !hwloc_bitmap_intersects(core->cpuset, bound)) continue;
    const int idx = static_cast<int>(core->logical_index);
    if (rec.first_core < 0) rec.first_core = idx;
    ++rec.num_cores;
    if (idx < static_cast<int>(RankRecord::kCoreMaskWords * 64)) {
      rec.core_mask[idx / 64] |= uint64_t{1} << (idx % 64);
    }
  }
  hwloc_bitmap_free(bound);
  for (hwloc_obj_t dev = hwloc_get_next_osdev(topo, nullptr); dev != nullptr;
       dev = hwloc_get_next_osdev(topo, dev)) {
    add_device(topo, dev, &rec);
  }
  hwloc_topology_destroy(topo);
  return rec;
}

}  // namespace

RankRecord local_record(const std::string& hostname) {
  // hwloc with I/O discovery takes tens of milliseconds: once per process.
  static std::mutex mutex;
  static bool done = false;
  static RankRecord cached;
  std::lock_guard<std::mutex> lock(mutex);
  if (!done || cached.host_name() != hostname.substr(0, RankRecord::kHostChars - 1)) {
    cached = discover_with_hwloc(hostname);
    done = true;
  }
  return cached;
}
#else
RankRecord local_record(const std::string& hostname) {
  // SimGrid SMPI: no hwloc; the simulated host name is all there is.
  RankRecord rec;
  rec.host_hash = fnv1a64(hostname);
  copy_fixed(hostname, rec.host, RankRecord::kHostChars);
  return rec;
}
#endif

std::string core_list(const RankRecord& rec) {
  if (rec.num_cores < 0) return "?";
  std::string out;
  int listed = 0;
  const int limit = static_cast<int>(RankRecord::kCoreMaskWords * 64);
  for (int c = 0; c < limit; ++c) {
    if (!rec.bound_to_core(c)) continue;
    int last = c;
    while (last + 1 < limit && rec.bound_to_core(last + 1)) ++last;
    if (!out.empty()) out += ',';
    out += std::to_string(c);
    if (last > c) out += '-' + std::to_string(last);
    listed += last - c + 1;
    c = last;
  }
  if (rec.num_cores > listed) out += "+" + std::to_string(rec.num_cores - listed);
  return out.empty() ? "-" : out;
}

std::string place_string(int32_t id) {
  if (id == kTopoUnknown) return "?";
  if (id == kTopoSeveral) return "*";
  return std::to_string(id);
}

std::string device_string(const TopoDevice& dev) {
  std::string s = dev.is(TopoDeviceKind::kGpu) ? "gpu " : "nic ";
  s += dev.name;
  if (dev.pci_bus[0] != '\0') s += std::string("@") + dev.pci_bus;
  s += "(pkg " + place_string(dev.package) + ", numa " + place_string(dev.numa);
  if (dev.pci_switch[0] != '\0') s += std::string(", sw ") + dev.pci_switch;
  if (dev.is(TopoDeviceKind::kGpu) && (dev.flags & kTopoDevDisplay)) s += ", display";
  if (dev.is(TopoDeviceKind::kNic) && (dev.flags & kTopoDevRdma)) {
    s += ", rdma " + ucx_device_name(dev);
  }
  return s + ")";
}

}  // namespace skipring
