// Where a buffer lives: host memory, CUDA device memory, CUDA managed memory or page-locked
// (pinned) host memory. skipring's collectives run on the CPU; a device or managed buffer must
// never reach them (a CUDA-aware MPI's users pass cudaMalloc'd buffers to MPI_Allreduce). Until
// a device path exists, such calls go to PMPI (counted as fallbacks): runtime/api_device.cpp asks
// host_accessible() of every buffer of every collective.
//
// Detection goes through the CUDA driver loaded at run time (dlopen("libcuda.so.1") once, then
// cuPointerGetAttributes), so the library needs no CUDA to build or run. Without a driver, or
// before the application initialised CUDA (no device memory can exist then), every buffer is
// host memory, and the check is one atomic load.
#pragma once

#include <atomic>
#include <string>

#include "runtime/front_flags.h"

namespace skipring {

enum class MemType { kHost, kPinnedHost, kDevice, kManaged };

const char* memtype_name(MemType t);

// The memory type of the buffer at `p` (nullptr and MPI_IN_PLACE: host).
MemType classify_memory(const void* p);

// Whether CPU code may read and write the buffer (host or pinned host).
inline bool host_accessible(MemType t) { return t == MemType::kHost || t == MemType::kPinnedHost; }

// The CUDA driver as found at run time: "absent (libcuda.so.1: ...)" or "loaded".
std::string cuda_driver_status();

// What this build holds for GPUs and UCX, in words, for skipring_info: the CMake options that
// were on (SKIPRING_WITH_CUDA, UCX found), what exists in code (no device path, no UCX
// transport yet), the CUDA driver found at run time, and where device buffers go.
std::string gpu_support_summary();

// g_front.memory_host_only (runtime/front_flags.h): true once classify_memory can only answer
// kHost; a per-call check can skip classify_memory on this one load (api_allreduce.cpp's front
// path).
// Tests only: classify through `hook` instead of the driver (nullptr restores the driver).
using MemTypeHook = MemType (*)(const void* p);
void set_memtype_hook(MemTypeHook hook);

}  // namespace skipring
