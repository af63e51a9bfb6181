// CUDA element-wise reduce kernels (see cuda_reduce.h for the semantics).
//
// Design:
//  - One kernel per (storage type, op) pair: bool and byte share uint8_t, as on the host, so
//    there are 96 kernels (12 storage types x 10 ops minus the 24 logical/bitwise float ones),
//    each compiled for CMAKE_CUDA_ARCHITECTURES.
//  - float16 / bfloat16 (kept as their bits) are widened to float, the float operation below is
//    applied and the result rounded to nearest even (__float2half_rn / __float2bfloat16_rn), a
//    NaN becoming 0x7E00 / 0x7FC0: the same bits as the host kernels (collectives/half.h).
//  - The kernel has three modes, picked on the host from the pointers' alignment: 16-byte
//    vectors (every pointer 16-byte aligned; each thread loads one uint4 of a and of b, reduces
//    the 16 / sizeof(T) elements in registers, stores one uint4; the < 16-byte tail is done by
//    the first threads), element-aligned scalars, and byte-wise loads for buffers not aligned
//    to their element type (legal for MPI buffers).
//  - Grid-stride loops, 256 threads a block, at most kMaxBlocks blocks.
//  - Every element is read (a[i] and b[i]) before dst[i] is written by the same thread and no
//    other thread touches index i, so dst may alias a or b exactly; nothing is __restrict__.
//  - Floating SUM/PROD use __fadd_rn/__fmul_rn (__dadd_rn/__dmul_rn): one IEEE operation,
//    never contracted into an FMA. Denormals are kept (no -ftz; the build sets no fast-math).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "runtime/cuda/cuda_reduce.h"

namespace skipring {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 8192;

enum Mode : int { kVector = 0, kAligned = 1, kBytes = 2 };

// Unsigned type wide enough that SUM/PROD wrap without UB and without promotion to signed int.
template <typename T>
using WrapT = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

__device__ __forceinline__ float quiet_nan(float) { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double quiet_nan(double) {
  return __longlong_as_double(0x7ff8000000000000LL);
}
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ unsigned to_bits(float x) { return __float_as_uint(x); }
__device__ __forceinline__ unsigned long long to_bits(double x) {
  return static_cast<unsigned long long>(__double_as_longlong(x));
}
__device__ __forceinline__ float from_bits(unsigned x) { return __uint_as_float(x); }
__device__ __forceinline__ double from_bits(unsigned long long x) {
  return __longlong_as_double(static_cast<long long>(x));
}

template <typename T>
__device__ __forceinline__ T nan_to_default(T r) {
  return r != r ? quiet_nan(r) : r;
}

// 16-bit floats as their bits (the storage of DType::kFloat16 / kBfloat16).
struct Half16 {
  unsigned short bits;
};
struct Bf16 {
  unsigned short bits;
};
template <typename T>
struct IsHalf : std::false_type {};
template <>
struct IsHalf<Half16> : std::true_type {};
template <>
struct IsHalf<Bf16> : std::true_type {};

__device__ __forceinline__ float widen(Half16 x) { return __half2float(__ushort_as_half(x.bits)); }
__device__ __forceinline__ float widen(Bf16 x) {
  return __bfloat162float(__ushort_as_bfloat16(x.bits));
}
__device__ __forceinline__ Half16 narrow(float f, Half16) {
  return {f != f ? static_cast<unsigned short>(0x7E00) : __half_as_ushort(__float2half_rn(f))};
}
__device__ __forceinline__ Bf16 narrow(float f, Bf16) {
  return {f != f ? static_cast<unsigned short>(0x7FC0)
                 : __bfloat16_as_ushort(__float2bfloat16_rn(f))};
}

struct OpSum {
  template <typename T>
  static constexpr bool defined = true;
  template <typename T>
  __device__ static __forceinline__ T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = WrapT<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return nan_to_default(add_rn(a, b));
    }
  }
};

struct OpProd {
  template <typename T>
  static constexpr bool defined = true;
  template <typename T>
  __device__ static __forceinline__ T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = WrapT<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return nan_to_default(mul_rn(a, b));
    }
  }
};

struct OpMin {
  template <typename T>
  static constexpr bool defined = true;
  template <typename T>
  __device__ static __forceinline__ T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return b < a ? b : a;
    } else {
      T r = b < a ? b : a;
      // Equal values have equal bits except +0 / -0, where OR-ing the bits selects -0.
      if (a == b) r = from_bits(to_bits(a) | to_bits(b));
      return (a != a || b != b) ? quiet_nan(a) : r;
    }
  }
};

struct OpMax {
  template <typename T>
  static constexpr bool defined = true;
  template <typename T>
  __device__ static __forceinline__ T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? b : a;
    } else {
      T r = a < b ? b : a;
      if (a == b) r = from_bits(to_bits(a) & to_bits(b));  // +0 and -0 give +0
      return (a != a || b != b) ? quiet_nan(a) : r;
    }
  }
};

struct OpLand {
  template <typename T>
  static constexpr bool defined = std::is_integral_v<T>;
  template <typename T>
  __device__ static __forceinline__ T apply(T a, T b) {
    return static_cast<T>((a != 0) & (b != 0));
  }
};

struct OpLor {
  template <typename T>
  static constexpr bool defined = std::is_integral_v<T>;
  template <typename T>
  __device__ static __forceinline__ T apply(T a, T b) {
    return static_cast<T>((a != 0) | (b != 0));
  }
};

struct OpLxor {
  template <typename T>
  static constexpr bool defined = std::is_integral_v<T>;
  template <typename T>
  __device__ static __forceinline__ T apply(T a, T b) {
    return static_cast<T>((a != 0) != (b != 0));
  }
};

struct OpBand {
  template <typename T>
  static constexpr bool defined = std::is_integral_v<T>;
  template <typename T>
  __device__ static __forceinline__ T apply(T a, T b) {
    return static_cast<T>(a & b);
  }
};

struct OpBor {
  template <typename T>
  static constexpr bool defined = std::is_integral_v<T>;
  template <typename T>
  __device__ static __forceinline__ T apply(T a, T b) {
    return static_cast<T>(a | b);
  }
};

struct OpBxor {
  template <typename T>
  static constexpr bool defined = std::is_integral_v<T>;
  template <typename T>
  __device__ static __forceinline__ T apply(T a, T b) {
    return static_cast<T>(a ^ b);
  }
};

// A 16-bit float type through a float functor: both operands widened, Op's float operation
// applied, the result rounded back; defined where Op is defined on float.
template <typename Op>
struct WidenHalf {
  template <typename T>
  static constexpr bool defined = Op::template defined<float>;
  template <typename T>
  __device__ static __forceinline__ T apply(T a, T b) {
    return narrow(Op::template apply<float>(widen(a), widen(b)), a);
  }
};

template <typename T>
__device__ __forceinline__ T load_bytes(const unsigned char* p) {
  T v;
  unsigned char* out = reinterpret_cast<unsigned char*>(&v);
#pragma unroll
  for (size_t k = 0; k < sizeof(T); ++k) out[k] = p[k];
  return v;
}

template <typename T>
__device__ __forceinline__ void store_bytes(unsigned char* p, T v) {
  const unsigned char* in = reinterpret_cast<const unsigned char*>(&v);
#pragma unroll
  for (size_t k = 0; k < sizeof(T); ++k) p[k] = in[k];
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kThreads)
    reduce_kernel(void* dv, const void* av, const void* bv, size_t n, int mode) {
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  if (mode == kVector) {
    constexpr int kPer = 16 / sizeof(T);
    union Vec {
      uint4 raw;
      T e[kPer];
    };
    const size_t nvec = n / kPer;
    const uint4* a4 = static_cast<const uint4*>(av);
    const uint4* b4 = static_cast<const uint4*>(bv);
    uint4* d4 = static_cast<uint4*>(dv);
    for (size_t v = tid; v < nvec; v += stride) {
      Vec x, y;
      x.raw = a4[v];
      y.raw = b4[v];
#pragma unroll
      for (int k = 0; k < kPer; ++k) x.e[k] = Op::apply(x.e[k], y.e[k]);
      d4[v] = x.raw;
    }
    const size_t i = nvec * kPer + tid;  // the tail: fewer than kPer elements
    if (i < n) {
      static_cast<T*>(dv)[i] =
          Op::apply(static_cast<const T*>(av)[i], static_cast<const T*>(bv)[i]);
    }
  } else if (mode == kAligned) {
    const T* a = static_cast<const T*>(av);
    const T* b = static_cast<const T*>(bv);
    T* d = static_cast<T*>(dv);
    for (size_t i = tid; i < n; i += stride) d[i] = Op::apply(a[i], b[i]);
  } else {
    const auto* a = static_cast<const unsigned char*>(av);
    const auto* b = static_cast<const unsigned char*>(bv);
    auto* d = static_cast<unsigned char*>(dv);
    for (size_t i = tid; i < n; i += stride) {
      const size_t off = i * sizeof(T);
      store_bytes<T>(d + off, Op::apply(load_bytes<T>(a + off), load_bytes<T>(b + off)));
    }
  }
}

struct Launch {
  void* dst;
  const void* a;
  const void* b;
  size_t count;
  cudaStream_t stream;
};

template <typename T, typename F>
Status launch_one(const Launch& l) {
  using Op = std::conditional_t<IsHalf<T>::value, WidenHalf<F>, F>;
  if constexpr (!Op::template defined<T>) {
    return Status::kErrOp;
  } else {
    const uintptr_t any = reinterpret_cast<uintptr_t>(l.dst) | reinterpret_cast<uintptr_t>(l.a) |
                          reinterpret_cast<uintptr_t>(l.b);
    int mode = kBytes;
    size_t items = l.count;
    if (any % 16 == 0) {
      mode = kVector;
      constexpr size_t kPer = 16 / sizeof(T);
      const size_t nvec = l.count / kPer;
      items = nvec > l.count % kPer ? nvec : l.count % kPer;
    } else if (any % sizeof(T) == 0) {
      mode = kAligned;
    }
    size_t blocks = (items + kThreads - 1) / kThreads;
    if (blocks > kMaxBlocks) blocks = kMaxBlocks;
    if (blocks == 0) blocks = 1;
    reduce_kernel<T, Op>
        <<<static_cast<unsigned>(blocks), kThreads, 0, l.stream>>>(l.dst, l.a, l.b, l.count, mode);
    return Status::kOk;
  }
}

template <typename T>
Status launch_type(ROp op, const Launch& l) {
  switch (op) {
    case ROp::kSum:
      return launch_one<T, OpSum>(l);
    case ROp::kProd:
      return launch_one<T, OpProd>(l);
    case ROp::kMin:
      return launch_one<T, OpMin>(l);
    case ROp::kMax:
      return launch_one<T, OpMax>(l);
    case ROp::kLand:
      return launch_one<T, OpLand>(l);
    case ROp::kLor:
      return launch_one<T, OpLor>(l);
    case ROp::kLxor:
      return launch_one<T, OpLxor>(l);
    case ROp::kBand:
      return launch_one<T, OpBand>(l);
    case ROp::kBor:
      return launch_one<T, OpBor>(l);
    case ROp::kBxor:
      return launch_one<T, OpBxor>(l);
    case ROp::kMinloc:  // pair types only: host kernels
    case ROp::kMaxloc:
    case ROp::kCount:
      break;
  }
  return Status::kErrOp;
}

Status launch(DType t, ROp op, const Launch& l) {
  switch (t) {
    case DType::kInt8:
      return launch_type<int8_t>(op, l);
    case DType::kUint8:
    case DType::kBool:
    case DType::kByte:
      return launch_type<uint8_t>(op, l);
    case DType::kInt16:
      return launch_type<int16_t>(op, l);
    case DType::kUint16:
      return launch_type<uint16_t>(op, l);
    case DType::kInt32:
      return launch_type<int32_t>(op, l);
    case DType::kUint32:
      return launch_type<uint32_t>(op, l);
    case DType::kInt64:
      return launch_type<int64_t>(op, l);
    case DType::kUint64:
      return launch_type<uint64_t>(op, l);
    case DType::kFloat:
      return launch_type<float>(op, l);
    case DType::kDouble:
      return launch_type<double>(op, l);
    case DType::kFloat16:
      return launch_type<Half16>(op, l);
    case DType::kBfloat16:
      return launch_type<Bf16>(op, l);
    default:
      break;  // long double, the complex and pair types: host kernels only (dtype_on_device)
  }
  return Status::kErrType;
}

}  // namespace

bool reduce_supported(ROp op, DType t) {
  return static_cast<int>(t) < kNumDTypes && static_cast<int>(op) < kNumROps &&
         dtype_on_device(t) && op_valid(op, t);
}

Status reduce_async(ROp op, DType t, void* dst, const void* a, const void* b, size_t count,
                    void* stream, int* cuda_error) {
  if (cuda_error != nullptr) *cuda_error = 0;
  if (static_cast<int>(t) >= kNumDTypes || !dtype_on_device(t)) return Status::kErrType;
  if (static_cast<int>(op) >= kNumROps || !op_valid(op, t)) return Status::kErrOp;
  if (count == 0) return Status::kOk;
  if (dst == nullptr || a == nullptr || b == nullptr) return Status::kErrBuffer;
  const Launch l{dst, a, b, count, static_cast<cudaStream_t>(stream)};
  const Status st = launch(t, op, l);
  if (st != Status::kOk) return st;
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    if (cuda_error != nullptr) *cuda_error = static_cast<int>(err);
    return Status::kErrDevice;
  }
  return Status::kOk;
}

}  // namespace cuda
}  // namespace skipring
