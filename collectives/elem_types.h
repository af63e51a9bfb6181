// Storage layouts of the composite element types (complex numbers and the MINLOC/MAXLOC
// value-index pairs), shared by dtype.cpp (their sizes) and the kernels.
#pragma once

#include <type_traits>

namespace skipring {

// A complex number as C's _Complex and Fortran's COMPLEX store it: real part, imaginary part.
template <typename R>
struct ComplexOf {
  R re;
  R im;
};

// A MINLOC/MAXLOC pair as MPI's C pair types are laid out (MPI-3.1 5.9.4): the struct
// { value; index; } with the C compiler's padding.
template <typename V, typename I>
struct LocPair {
  V value;
  I index;
};

template <typename T>
struct IsComplex : std::false_type {};
template <typename R>
struct IsComplex<ComplexOf<R>> : std::true_type {};
template <typename T>
struct IsLocPair : std::false_type {};
template <typename V, typename I>
struct IsLocPair<LocPair<V, I>> : std::true_type {};

}  // namespace skipring
