// Memory-type detection through the CUDA driver loaded at run time (see memtype.h).
#include "runtime/memtype.h"

#include <dlfcn.h>
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "runtime/device_ops.h"

namespace skipring {
namespace {

// The few driver API values used here (CUDA's cuda.h, stable since CUDA 4).
constexpr int kCudaSuccess = 0;
constexpr unsigned kAttrMemoryType = 2;  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr unsigned kAttrIsManaged = 8;   // CU_POINTER_ATTRIBUTE_IS_MANAGED
constexpr unsigned kMemHost = 1;         // CU_MEMORYTYPE_HOST
constexpr unsigned kMemDevice = 2;       // CU_MEMORYTYPE_DEVICE
constexpr unsigned kMemArray = 3;        // CU_MEMORYTYPE_ARRAY
constexpr unsigned kMemUnified = 4;      // CU_MEMORYTYPE_UNIFIED

// CUresult cuPointerGetAttributes(unsigned n, CUpointer_attribute* attrs, void** data,
//                                 CUdeviceptr ptr): unlike cuPointerGetAttribute it returns
// success with zeroed attributes for memory CUDA does not know (plain malloc).
using GetAttributes = int (*)(unsigned, unsigned*, void**, unsigned long long);

std::atomic<MemTypeHook> g_hook{nullptr};
std::mutex g_load_mutex;
std::atomic<bool> g_looked_up{false};  // g_get and g_status are final once this is true
GetAttributes g_get = nullptr;
std::string g_status = "not looked up yet";

void load_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    g_status = std::string("absent (") + (err != nullptr ? err : "libcuda.so.1 not found") + ")";
    return;
  }
  g_get = reinterpret_cast<GetAttributes>(dlsym(lib, "cuPointerGetAttributes"));
  g_status = g_get != nullptr ? "loaded (libcuda.so.1)"
                              : "unusable (libcuda.so.1 has no cuPointerGetAttributes)";
}

// One acquire load on the per-call path (std::call_once costs a call into libc each time).
GetAttributes driver() {
  if (!g_looked_up.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(g_load_mutex);
    if (!g_looked_up.load(std::memory_order_relaxed)) {
      load_driver();
      g_looked_up.store(true, std::memory_order_release);
      g_front.memory_host_only.store(
          g_get == nullptr && g_hook.load(std::memory_order_acquire) == nullptr,
          std::memory_order_release);
    }
  }
  return g_get;
}

}  // namespace

const char* memtype_name(MemType t) {
  switch (t) {
    case MemType::kHost:
      return "host";
    case MemType::kPinnedHost:
      return "pinned host";
    case MemType::kDevice:
      return "CUDA device";
    case MemType::kManaged:
      return "CUDA managed";
  }
  return "?";
}

MemType classify_memory(const void* p) {
  if (MemTypeHook hook = g_hook.load(std::memory_order_acquire)) return hook(p);
  if (p == nullptr || p == MPI_IN_PLACE) return MemType::kHost;
  const GetAttributes get = driver();
  if (get == nullptr) return MemType::kHost;
  unsigned attrs[2] = {kAttrMemoryType, kAttrIsManaged};
  unsigned type = 0, managed = 0;
  void* data[2] = {&type, &managed};
  // CUDA_ERROR_NOT_INITIALIZED and the like: CUDA is not in use, so no device memory exists.
  if (get(2, attrs, data, reinterpret_cast<uintptr_t>(p)) != kCudaSuccess) return MemType::kHost;
  if (managed != 0 || type == kMemUnified) return MemType::kManaged;
  if (type == kMemDevice || type == kMemArray) return MemType::kDevice;
  return type == kMemHost ? MemType::kPinnedHost : MemType::kHost;
}

std::string cuda_driver_status() {
  driver();
  return g_status;
}

std::string gpu_support_summary() {
  std::string out = "cuda: ";
#ifdef SKIPRING_HAVE_CUDA
  out += "SKIPRING_WITH_CUDA=ON (reduce kernels and CUDA staging built, cudart static)";
#else
  out += "SKIPRING_WITH_CUDA=OFF (no device code)";
#endif
  out += "; driver " + cuda_driver_status();
  // Probes the CUDA runtime (once) when built with CUDA.
  const std::string path = device_path_status();
  out += "; device path " + path;
  out += device_ops() != nullptr
             ? "; device and managed buffers are staged through pinned host buffers (whole "
               "buffers, no segment pipelining) and reduced by skipring's host collectives"
             : "; device and managed buffers go to the MPI library (counted as fallbacks)";
  out += "\nucx: ";
#ifdef SKIPRING_HAVE_UCX
  out +=
      "found at build time; the UCX transport runs with SKIPRING_TRANSPORT=ucx (host "
      "buffers: device buffers are staged or fall back before any transport)";
#else
  out += "not found at build time (SKIPRING_TRANSPORT=ucx unavailable)";
#endif
  return out;
}

void set_memtype_hook(MemTypeHook hook) {
  g_hook.store(hook, std::memory_order_release);
  // A hook may answer anything; without one, only the driver's absence makes every buffer host.
  std::lock_guard<std::mutex> lock(g_load_mutex);
  g_front.memory_host_only.store(
      hook == nullptr && g_looked_up.load(std::memory_order_acquire) && g_get == nullptr,
      std::memory_order_release);
}

}  // namespace skipring
