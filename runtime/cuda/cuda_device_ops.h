// The CUDA implementation of DeviceOps (runtime/device_ops.h). Only compiled with
// SKIPRING_HAVE_CUDA; the CUDA runtime is linked statically and loads the driver itself.
#pragma once

#include <string>

#include "runtime/device_ops.h"

namespace skipring {

// The CUDA DeviceOps, or nullptr when the CUDA runtime finds no usable device (no driver, no
// device, driver too old). Probed once per process, on first use. *status, when given: "CUDA
// (N devices, runtime R, driver D)" or why there is none.
DeviceOps* cuda_device_ops(std::string* status);

}  // namespace skipring
