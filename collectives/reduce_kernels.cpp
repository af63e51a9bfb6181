// Element-wise reduction kernels (dst = a op b) for every (op, type) pair MPI defines.
//
// Design:
//  - One functor per ROp, one storage type per DType (bool and byte are stored as uint8_t).
//    Loops are plain C++ that GCC/Clang auto-vectorise at -O3; no -ffast-math is needed,
//    because every operation below maps to exact IEEE/integer vector instructions.
//  - Each loop exists in four aliasing variants (distinct, dst == a, dst == b,
//    dst == a == b) so that `__restrict` is only ever applied when it is true.
//  - On x86-64 with GCC/Clang every kernel is compiled twice, for the baseline ISA and for
//    AVX2 (without FMA, so results are bit-identical); the variant is picked once at run
//    time with __builtin_cpu_supports.
//  - Integer SUM/PROD wrap modulo 2^bits (computed in unsigned arithmetic: no UB).
//  - Floating SUM/PROD return the default quiet NaN for any NaN result: the payload x86
//    propagates depends on operand order, which the compiler may swap, so without this the
//    bits of a NaN result could depend on the aliasing variant or the reduction order.
//  - Floating MIN/MAX are commutative and associative bit for bit, so every rank gets the
//    same bits whatever the reduction order: a NaN operand gives the default quiet NaN,
//    MIN(+0, -0) = -0 and MAX(+0, -0) = +0.
//  - Logical ops give 0 or 1 with C semantics (any non-zero value is true).
//  - Very large outputs (at least half the last-level cache; glibc's memcpy switches to
//    non-temporal stores at a similar size) that do not alias an input are written with
//    non-temporal stores, which saves the write-allocate read of dst. Smaller results stay
//    in cache for whoever consumes them next.
//  - x87 long double (80-bit value in 16-byte storage): the padding bytes of dst are
//    written as zeros, so the output bits never depend on what dst held before.
//  - Complex SUM/PROD (ComplexOf<R>): per part, each part's NaN made the default quiet NaN;
//    PROD is (ac - bd) + (ad + bc)i, the textbook formula MPI libraries use (no C99 Annex G
//    infinity recovery), commutative bit for bit. No FMA: baseline x86-64 has none and the
//    AVX2 variant is built without it.
//  - MINLOC/MAXLOC (LocPair<V, I>, MPI-3.1 5.9.4): the smaller (larger) value, and on equal
//    values the smaller index. Floating values order -0 below +0 as MIN/MAX do (a -0 and a +0
//    tie: MINLOC gives -0, MAXLOC +0, the smaller index either way); a NaN value wins over any
//    number (the default quiet NaN, with the smaller index among the NaN operands'), so both
//    are commutative and associative bit for bit. The struct's padding is written as zeros.
#include "collectives/reduce_kernels.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "collectives/elem_types.h"
#include "collectives/half.h"

#if defined(__GNUC__) || defined(__clang__)
#define SKIPRING_INLINE inline __attribute__((always_inline))
#define SKIPRING_RESTRICT __restrict__
#else
#define SKIPRING_INLINE inline
#define SKIPRING_RESTRICT
#endif

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define SKIPRING_KERNELS_X86_DISPATCH 1
#include <immintrin.h>
#else
#define SKIPRING_KERNELS_X86_DISPATCH 0
#endif

namespace skipring {
namespace {

// ---- Element types -------------------------------------------------------------------------

template <DType kT>
struct StorageOf;
template <>
struct StorageOf<DType::kInt8> {
  using type = int8_t;
};
template <>
struct StorageOf<DType::kUint8> {
  using type = uint8_t;
};
template <>
struct StorageOf<DType::kInt16> {
  using type = int16_t;
};
template <>
struct StorageOf<DType::kUint16> {
  using type = uint16_t;
};
template <>
struct StorageOf<DType::kInt32> {
  using type = int32_t;
};
template <>
struct StorageOf<DType::kUint32> {
  using type = uint32_t;
};
template <>
struct StorageOf<DType::kInt64> {
  using type = int64_t;
};
template <>
struct StorageOf<DType::kUint64> {
  using type = uint64_t;
};
template <>
struct StorageOf<DType::kFloat> {
  using type = float;
};
template <>
struct StorageOf<DType::kDouble> {
  using type = double;
};
template <>
struct StorageOf<DType::kLongDouble> {
  using type = long double;
};
// C bool is read as a byte so that values other than 0/1 are "true" instead of UB.
template <>
struct StorageOf<DType::kBool> {
  using type = uint8_t;
};
template <>
struct StorageOf<DType::kByte> {
  using type = uint8_t;
};
template <>
struct StorageOf<DType::kFloat16> {
  using type = Float16Bits;
};
template <>
struct StorageOf<DType::kBfloat16> {
  using type = Bfloat16Bits;
};

template <>
struct StorageOf<DType::kComplexFloat> {
  using type = ComplexOf<float>;
};
template <>
struct StorageOf<DType::kComplexDouble> {
  using type = ComplexOf<double>;
};
template <>
struct StorageOf<DType::kComplexLongDouble> {
  using type = ComplexOf<long double>;
};
template <>
struct StorageOf<DType::kFloatInt> {
  using type = LocPair<float, int>;
};
template <>
struct StorageOf<DType::kDoubleInt> {
  using type = LocPair<double, int>;
};
template <>
struct StorageOf<DType::kLongInt> {
  using type = LocPair<long, int>;
};
template <>
struct StorageOf<DType::kIntInt> {
  using type = LocPair<int, int>;
};
template <>
struct StorageOf<DType::kShortInt> {
  using type = LocPair<short, int>;
};
template <>
struct StorageOf<DType::kLongDoubleInt> {
  using type = LocPair<long double, int>;
};
template <>
struct StorageOf<DType::kFloatFloat> {
  using type = LocPair<float, float>;
};
template <>
struct StorageOf<DType::kDoubleDouble> {
  using type = LocPair<double, double>;
};

// 16-bit floats: operands widened to float, the float operation applied, the result rounded
// back (collectives/half.h).
template <typename T>
struct Half {
  static constexpr bool value = false;
};
template <>
struct Half<Float16Bits> {
  static constexpr bool value = true;
  static SKIPRING_INLINE float widen(Float16Bits x) { return float16_to_float(x.bits); }
  static SKIPRING_INLINE Float16Bits narrow(float f) { return {float_to_float16(f)}; }
};
template <>
struct Half<Bfloat16Bits> {
  static constexpr bool value = true;
  static SKIPRING_INLINE float widen(Bfloat16Bits x) { return bfloat16_to_float(x.bits); }
  static SKIPRING_INLINE Bfloat16Bits narrow(float f) { return {float_to_bfloat16(f)}; }
};

// Unsigned type wide enough that arithmetic on it neither overflows into UB nor promotes
// to signed int (uint16_t * uint16_t would be signed int multiplication).
template <typename T>
using WrapT = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T>
struct BitsOf;
template <>
struct BitsOf<float> {
  using type = uint32_t;
};
template <>
struct BitsOf<double> {
  using type = uint64_t;
};

template <typename To, typename From>
SKIPRING_INLINE To bits_cast(From from) {
  static_assert(sizeof(To) == sizeof(From), "size mismatch");
  To to;
  std::memcpy(&to, &from, sizeof(to));
  return to;
}

// x87 extended precision: 64-bit significand, 10 value bytes in sizeof(long double) bytes.
constexpr size_t kLongDoubleValueBytes =
    std::numeric_limits<long double>::digits == 64 ? 10 : sizeof(long double);
constexpr bool kLongDoubleHasPadding = kLongDoubleValueBytes < sizeof(long double);

// Bytes of a V that carry its value (the rest of an x87 long double is padding).
template <typename V>
constexpr size_t value_bytes = std::is_same_v<V, long double> ? kLongDoubleValueBytes : sizeof(V);

// Writes v to *p with every padding byte zero (long double's, and the pair structs').
template <typename T>
SKIPRING_INLINE void store(T* p, T v) {
  if constexpr (std::is_same_v<T, long double> && kLongDoubleHasPadding) {
    unsigned char buf[sizeof(long double)] = {};
    std::memcpy(buf, &v, kLongDoubleValueBytes);
    std::memcpy(p, buf, sizeof(buf));
  } else if constexpr (IsComplex<T>::value) {
    store(&p->re, v.re);
    store(&p->im, v.im);
  } else if constexpr (IsLocPair<T>::value) {
    using V = decltype(v.value);
    unsigned char buf[sizeof(T)] = {};
    std::memcpy(buf + offsetof(T, value), &v.value, value_bytes<V>);
    std::memcpy(buf + offsetof(T, index), &v.index, sizeof(v.index));
    std::memcpy(p, buf, sizeof(buf));
  } else {
    *p = v;
  }
}

// ---- Floating-point helpers --------------------------------------------------------------------

template <typename T>
SKIPRING_INLINE T canonical_nan(T r) {
  return r != r ? std::numeric_limits<T>::quiet_NaN() : r;
}

// Branch-free so that the float/double loops vectorise (compare + blend + and/or).
template <typename T>
SKIPRING_INLINE T float_min(T a, T b) {
  if constexpr (std::is_same_v<T, long double>) {
    if (a != a || b != b) return std::numeric_limits<T>::quiet_NaN();
    if (a == b) return std::signbit(a) ? a : b;
    return b < a ? b : a;
  } else {
    using B = typename BitsOf<T>::type;
    T r = b < a ? b : a;
    // Equal values have equal bits except +0 / -0, where OR-ing the bits selects -0.
    r = (a == b) ? bits_cast<T>(static_cast<B>(bits_cast<B>(a) | bits_cast<B>(b))) : r;
    return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : r;
  }
}

template <typename T>
SKIPRING_INLINE T float_max(T a, T b) {
  if constexpr (std::is_same_v<T, long double>) {
    if (a != a || b != b) return std::numeric_limits<T>::quiet_NaN();
    if (a == b) return std::signbit(a) ? b : a;
    return a < b ? b : a;
  } else {
    using B = typename BitsOf<T>::type;
    T r = a < b ? b : a;
    // AND-ing the bits of +0 and -0 selects +0.
    r = (a == b) ? bits_cast<T>(static_cast<B>(bits_cast<B>(a) & bits_cast<B>(b))) : r;
    return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : r;
  }
}

// ---- Op functors ---------------------------------------------------------------------------
// `defined<T>` says whether the kernel is instantiated for storage type T; whether MPI allows
// the (op, DType) pair is decided by op_valid() (e.g. SUM is instantiated for uint8_t, which
// also stores bool, but op_valid rejects SUM on bool).

// SUM and PROD are defined on numbers and complex numbers; MIN and MAX on numbers only.
template <typename T>
constexpr bool kArithmetic = std::is_arithmetic_v<T> || Half<T>::value;

struct OpSum {
  template <typename T>
  static constexpr bool defined = kArithmetic<T> || IsComplex<T>::value;
  template <typename T>
  static SKIPRING_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = WrapT<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else if constexpr (IsComplex<T>::value) {
      return {canonical_nan(a.re + b.re), canonical_nan(a.im + b.im)};
    } else {
      return canonical_nan(a + b);
    }
  }
};

struct OpProd {
  template <typename T>
  static constexpr bool defined = kArithmetic<T> || IsComplex<T>::value;
  template <typename T>
  static SKIPRING_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = WrapT<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else if constexpr (IsComplex<T>::value) {
      return {canonical_nan(a.re * b.re - a.im * b.im), canonical_nan(a.re * b.im + a.im * b.re)};
    } else {
      return canonical_nan(a * b);
    }
  }
};

struct OpMin {
  template <typename T>
  static constexpr bool defined = kArithmetic<T>;
  template <typename T>
  static SKIPRING_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return b < a ? b : a;
    } else {
      return float_min(a, b);
    }
  }
};

struct OpMax {
  template <typename T>
  static constexpr bool defined = kArithmetic<T>;
  template <typename T>
  static SKIPRING_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? b : a;
    } else {
      return float_max(a, b);
    }
  }
};

struct OpLand {
  template <typename T>
  static constexpr bool defined = std::is_integral_v<T>;
  template <typename T>
  static SKIPRING_INLINE T apply(T a, T b) {
    return static_cast<T>((a != 0) & (b != 0));
  }
};

struct OpLor {
  template <typename T>
  static constexpr bool defined = std::is_integral_v<T>;
  template <typename T>
  static SKIPRING_INLINE T apply(T a, T b) {
    return static_cast<T>((a != 0) | (b != 0));
  }
};

struct OpLxor {
  template <typename T>
  static constexpr bool defined = std::is_integral_v<T>;
  template <typename T>
  static SKIPRING_INLINE T apply(T a, T b) {
    return static_cast<T>((a != 0) != (b != 0));
  }
};

struct OpBand {
  template <typename T>
  static constexpr bool defined = std::is_integral_v<T>;
  template <typename T>
  static SKIPRING_INLINE T apply(T a, T b) {
    return static_cast<T>(a & b);
  }
};

struct OpBor {
  template <typename T>
  static constexpr bool defined = std::is_integral_v<T>;
  template <typename T>
  static SKIPRING_INLINE T apply(T a, T b) {
    return static_cast<T>(a | b);
  }
};

struct OpBxor {
  template <typename T>
  static constexpr bool defined = std::is_integral_v<T>;
  template <typename T>
  static SKIPRING_INLINE T apply(T a, T b) {
    return static_cast<T>(a ^ b);
  }
};

// MINLOC (kMax false) and MAXLOC (kMax true) on a value-index pair.
template <bool kMax>
struct OpLoc {
  template <typename T>
  static constexpr bool defined = IsLocPair<T>::value;
  template <typename T>
  static SKIPRING_INLINE T apply(T a, T b) {
    using V = decltype(a.value);
    const auto min_index = b.index < a.index ? b.index : a.index;
    if constexpr (std::is_floating_point_v<V>) {
      const bool a_nan = a.value != a.value;
      const bool b_nan = b.value != b.value;
      if (a_nan || b_nan) {
        return {std::numeric_limits<V>::quiet_NaN(),
                a_nan && b_nan ? min_index : (a_nan ? a.index : b.index)};
      }
      // Equal values (+0 and -0 included): MIN's / MAX's bits, the smaller index.
      if (a.value == b.value) {
        return {kMax ? float_max(a.value, b.value) : float_min(a.value, b.value), min_index};
      }
    } else {
      if (a.value == b.value) return {a.value, min_index};
    }
    return (kMax ? a.value < b.value : b.value < a.value) ? b : a;
  }
};

// A 16-bit float type through a float functor: both operands widened, Op's float operation
// applied, the result rounded back; defined where Op is defined on float.
template <typename Op>
struct WidenHalf {
  template <typename T>
  static constexpr bool defined = Op::template defined<float>;
  template <typename T>
  static SKIPRING_INLINE T apply(T a, T b) {
    return Half<T>::narrow(Op::template apply<float>(Half<T>::widen(a), Half<T>::widen(b)));
  }
};

template <ROp kOp>
struct FunctorOf;
template <>
struct FunctorOf<ROp::kSum> {
  using type = OpSum;
};
template <>
struct FunctorOf<ROp::kProd> {
  using type = OpProd;
};
template <>
struct FunctorOf<ROp::kMin> {
  using type = OpMin;
};
template <>
struct FunctorOf<ROp::kMax> {
  using type = OpMax;
};
template <>
struct FunctorOf<ROp::kLand> {
  using type = OpLand;
};
template <>
struct FunctorOf<ROp::kLor> {
  using type = OpLor;
};
template <>
struct FunctorOf<ROp::kLxor> {
  using type = OpLxor;
};
template <>
struct FunctorOf<ROp::kBand> {
  using type = OpBand;
};
template <>
struct FunctorOf<ROp::kBor> {
  using type = OpBor;
};
template <>
struct FunctorOf<ROp::kBxor> {
  using type = OpBxor;
};
template <>
struct FunctorOf<ROp::kMinloc> {
  using type = OpLoc<false>;
};
template <>
struct FunctorOf<ROp::kMaxloc> {
  using type = OpLoc<true>;
};

// ---- Loops ---------------------------------------------------------------------------------
// Same operand order (a, b) in every variant, so the result bits do not depend on aliasing.
// a and b may be equal in loop_distinct: restrict only forbids aliasing with a written object.

template <typename T, typename Op>
SKIPRING_INLINE void loop_distinct(T* SKIPRING_RESTRICT d, const T* SKIPRING_RESTRICT a,
                                   const T* SKIPRING_RESTRICT b, size_t n) {
  for (size_t i = 0; i < n; ++i) store(d + i, Op::apply(a[i], b[i]));
}

template <typename T, typename Op>
SKIPRING_INLINE void loop_into_a(T* SKIPRING_RESTRICT d, const T* SKIPRING_RESTRICT b, size_t n) {
  for (size_t i = 0; i < n; ++i) store(d + i, Op::apply(d[i], b[i]));
}

template <typename T, typename Op>
SKIPRING_INLINE void loop_into_b(T* SKIPRING_RESTRICT d, const T* SKIPRING_RESTRICT a, size_t n) {
  for (size_t i = 0; i < n; ++i) store(d + i, Op::apply(a[i], d[i]));
}

template <typename T, typename Op>
SKIPRING_INLINE void loop_self(T* SKIPRING_RESTRICT d, size_t n) {
  for (size_t i = 0; i < n; ++i) store(d + i, Op::apply(d[i], d[i]));
}

#if SKIPRING_KERNELS_X86_DISPATCH
constexpr size_t kStreamChunkBytes = 512;

// Distinct buffers, dst written with non-temporal stores. d must be 64-byte aligned and n a
// multiple of the elements per chunk. Each chunk is computed into an L1-resident temporary
// by the ordinary vectorised loop, then streamed out line by line.
template <typename T, typename Op>
SKIPRING_INLINE void loop_stream(T* SKIPRING_RESTRICT d, const T* SKIPRING_RESTRICT a,
                                 const T* SKIPRING_RESTRICT b, size_t n) {
  constexpr size_t kPerChunk = kStreamChunkBytes / sizeof(T);
  alignas(64) T chunk[kPerChunk];
  for (size_t i = 0; i < n; i += kPerChunk) {
    loop_distinct<T, Op>(chunk, a + i, b + i, kPerChunk);
    const auto* src = reinterpret_cast<const __m128i*>(chunk);
    auto* out = reinterpret_cast<__m128i*>(d + i);
    for (size_t v = 0; v < kStreamChunkBytes / sizeof(__m128i); ++v) {
      _mm_stream_si128(out + v, _mm_load_si128(src + v));
    }
  }
}
#endif

// `stream`: use non-temporal stores where dst does not alias an input (the caller issues the
// store fence afterwards).
template <typename T, typename Op>
SKIPRING_INLINE void run_loops(void* dv, const void* av, const void* bv, size_t n, bool stream) {
  T* d = static_cast<T*>(dv);
  const T* a = static_cast<const T*>(av);
  const T* b = static_cast<const T*>(bv);
  if (d == a) {
    if (a == b) {
      loop_self<T, Op>(d, n);
    } else {
      loop_into_a<T, Op>(d, b, n);
    }
  } else if (d == b) {
    loop_into_b<T, Op>(d, a, n);
  } else {
#if SKIPRING_KERNELS_X86_DISPATCH
    if (stream) {
      // Head up to 64-byte alignment of d: sizeof(T) is a power of two (8, 16 or 32 for the
      // composite types), so d + head is 64-byte aligned, or at least 16-byte aligned (all
      // _mm_stream_si128 needs) for a 32-byte T at a 16-byte aligned d.
      constexpr size_t kPerChunk = kStreamChunkBytes / sizeof(T);
      const size_t misalign = reinterpret_cast<uintptr_t>(d) % 64;
      size_t head = misalign == 0 ? 0 : (64 - misalign) / sizeof(T);
      if (head > n) head = n;
      loop_distinct<T, Op>(d, a, b, head);
      const size_t body = (n - head) / kPerChunk * kPerChunk;
      loop_stream<T, Op>(d + head, a + head, b + head, body);
      const size_t done = head + body;
      loop_distinct<T, Op>(d + done, a + done, b + done, n - done);
      return;
    }
#else
    (void)stream;
#endif
    loop_distinct<T, Op>(d, a, b, n);
  }
}

// ---- Per-ISA entry points and dispatch tables ----------------------------------------------

using KernelFn = void (*)(void* dst, const void* a, const void* b, size_t count, bool stream);

enum class Isa : int { kBaseline = 0, kAvx2 = 1, kCount = 2 };
constexpr int kNumIsas = static_cast<int>(Isa::kCount);

template <typename T, typename Op>
void kernel_baseline(void* d, const void* a, const void* b, size_t n, bool stream) {
  run_loops<T, Op>(d, a, b, n, stream);
}

#if SKIPRING_KERNELS_X86_DISPATCH
// AVX2 only (no FMA: a contracted multiply-add would change results between ISAs).
template <typename T, typename Op>
__attribute__((target("avx2"))) void kernel_avx2(void* d, const void* a, const void* b, size_t n,
                                                 bool stream) {
  run_loops<T, Op>(d, a, b, n, stream);
}
#endif

template <Isa kIsa, ROp kOp, DType kT>
constexpr KernelFn table_entry() {
  using T = typename StorageOf<kT>::type;
  using F = typename FunctorOf<kOp>::type;
  using Op = std::conditional_t<Half<T>::value, WidenHalf<F>, F>;
  if constexpr (!Op::template defined<T>) {
    return nullptr;
  } else if constexpr (kIsa == Isa::kBaseline) {
    return &kernel_baseline<T, Op>;
  } else {
#if SKIPRING_KERNELS_X86_DISPATCH
    return &kernel_avx2<T, Op>;
#else
    return nullptr;
#endif
  }
}

constexpr size_t kTableSize = static_cast<size_t>(kNumROps) * kNumDTypes;
using KernelTable = std::array<KernelFn, kTableSize>;

constexpr size_t table_index(ROp op, DType t) {
  return static_cast<size_t>(op) * kNumDTypes + static_cast<size_t>(t);
}

template <Isa kIsa, size_t... kIs>
constexpr KernelTable make_table(std::index_sequence<kIs...>) {
  return {{table_entry<kIsa, static_cast<ROp>(kIs / kNumDTypes),
                       static_cast<DType>(kIs % kNumDTypes)>()...}};
}

constexpr KernelTable kTables[kNumIsas] = {
    make_table<Isa::kBaseline>(std::make_index_sequence<kTableSize>{}),
    make_table<Isa::kAvx2>(std::make_index_sequence<kTableSize>{}),
};

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kBaseline:
      return true;
    case Isa::kAvx2:
#if SKIPRING_KERNELS_X86_DISPATCH
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2");
#else
      return false;
#endif
    case Isa::kCount:
      break;
  }
  return false;
}

Isa best_isa() {
  static const Isa best = isa_supported(Isa::kAvx2) ? Isa::kAvx2 : Isa::kBaseline;
  return best;
}

// Buffers that are not aligned to their element type (legal for MPI buffers, UB to
// dereference as T*) go through aligned bounce buffers, one block at a time. Reading a and b
// before writing dst keeps exact aliasing correct.
void reduce_misaligned(KernelFn fn, size_t elem, void* dst, const void* a, const void* b,
                       size_t count) {
  constexpr size_t kBlockBytes = 4096;
  alignas(64) unsigned char ba[kBlockBytes];
  alignas(64) unsigned char bb[kBlockBytes];
  alignas(64) unsigned char bd[kBlockBytes];
  const size_t per_block = kBlockBytes / elem;
  auto* d8 = static_cast<unsigned char*>(dst);
  const auto* a8 = static_cast<const unsigned char*>(a);
  const auto* b8 = static_cast<const unsigned char*>(b);
  for (size_t done = 0; done < count;) {
    const size_t n = count - done < per_block ? count - done : per_block;
    const size_t bytes = n * elem;
    const size_t off = done * elem;
    std::memcpy(ba, a8 + off, bytes);
    std::memcpy(bb, b8 + off, bytes);
    fn(bd, ba, bb, n, false);
    std::memcpy(d8 + off, bd, bytes);
    done += n;
  }
}

// ---- Non-temporal output for very large arrays ---------------------------------------------

size_t default_streaming_threshold() {
#if SKIPRING_KERNELS_X86_DISPATCH && defined(_SC_LEVEL3_CACHE_SIZE)
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc > 0) return static_cast<size_t>(llc) / 2;
  return size_t{64} << 20;
#elif SKIPRING_KERNELS_X86_DISPATCH
  return size_t{64} << 20;
#else
  return SIZE_MAX;
#endif
}

std::atomic<size_t>& streaming_threshold() {
  static std::atomic<size_t> threshold{default_streaming_threshold()};
  return threshold;
}

Status reduce_with(Isa isa, ROp op, DType t, void* dst, const void* a, const void* b,
                   size_t count) {
  if (static_cast<int>(t) >= kNumDTypes) return Status::kErrType;
  if (static_cast<int>(op) >= kNumROps) return Status::kErrOp;
  if (!op_valid(op, t)) return Status::kErrOp;
  const KernelFn fn = kTables[static_cast<int>(isa)][table_index(op, t)];
  if (fn == nullptr) return Status::kErrInternal;  // op_valid and the table disagree
  if (count == 0) return Status::kOk;
  if (dst == nullptr || a == nullptr || b == nullptr) return Status::kErrBuffer;
  const size_t elem = dtype_size(t);
  const uintptr_t any = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(a) |
                        reinterpret_cast<uintptr_t>(b);
  // alignof(T) divides sizeof(T), so size alignment is always enough (and is exactly the
  // natural alignment for every scalar storage type on x86-64); capped at 16 bytes, which
  // every type's alignof and the non-temporal stores' 16-byte vectors need (the 32-byte
  // complex long double and long double-int pairs are 16-byte aligned).
  const size_t align = elem < 16 ? elem : 16;
  if (any % align != 0) {
    reduce_misaligned(fn, elem, dst, a, b, count);
    return Status::kOk;
  }
  // In place (dst == a or b), dst is read anyway: the kernel ignores `stream` then.
  const bool stream = count * elem >= streaming_threshold().load(std::memory_order_relaxed);
  fn(dst, a, b, count, stream);
#if SKIPRING_KERNELS_X86_DISPATCH
  // Non-temporal stores are weakly ordered: make them visible before anyone is told that the
  // result is ready.
  if (stream) _mm_sfence();
#endif
  return Status::kOk;
}

}  // namespace

Status reduce(ROp op, DType t, void* dst, const void* a, const void* b, size_t count) {
  return reduce_with(best_isa(), op, t, dst, a, b, count);
}

// Test and diagnostics hooks, deliberately not in the public header (the unit tests declare
// them themselves): run one specific ISA variant so that the tests can check that every
// variant gives the same bits. ISA ids are 0 .. num_isas() - 1; 0 is the portable baseline.
namespace kernels_internal {

int num_isas();
const char* isa_name(int isa);
bool isa_available(int isa);
int selected_isa();
size_t set_streaming_threshold(size_t bytes);
Status reduce_isa(int isa, ROp op, DType t, void* dst, const void* a, const void* b, size_t count);

int num_isas() { return kNumIsas; }

const char* isa_name(int isa) {
  switch (static_cast<Isa>(isa)) {
    case Isa::kBaseline:
      return "baseline";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kCount:
      break;
  }
  return "unknown";
}

bool isa_available(int isa) {
  return isa >= 0 && isa < kNumIsas && isa_supported(static_cast<Isa>(isa)) &&
         kTables[isa][table_index(ROp::kSum, DType::kFloat)] != nullptr;
}

int selected_isa() { return static_cast<int>(best_isa()); }

// Outputs of at least `bytes` bytes that do not alias an input use non-temporal stores
// (SIZE_MAX: never). Returns the previous value.
size_t set_streaming_threshold(size_t bytes) {
  return streaming_threshold().exchange(bytes, std::memory_order_relaxed);
}

Status reduce_isa(int isa, ROp op, DType t, void* dst, const void* a, const void* b, size_t count) {
  if (!isa_available(isa)) return Status::kErrArg;
  return reduce_with(static_cast<Isa>(isa), op, t, dst, a, b, count);
}

}  // namespace kernels_internal
}  // namespace skipring
