! A plain Fortran MPI program (no skipring API) calling MPI_REDUCE, MPI_BCAST, MPI_ALLGATHER,
! MPI_REDUCE_SCATTER_BLOCK and MPI_REDUCE_SCATTER at a small and a large size (below and above
! the drop-in's size thresholds), in place where MPI allows it, and checking every result
! exactly against values computed here. Built twice: with `use mpi` and (PMPI_F08 defined) with
! `use mpi_f08`; ctest runs it with libskipring_pmpi.so preloaded. Exits with status 1 on any
! wrong result.
program pmpi_collectives_f
#ifdef PMPI_F08
  use mpi_f08
#else
  use mpi
#endif
  implicit none
  integer :: rank, nranks, ierr, failures, total, s, n, root, i, r
  integer, parameter :: sizes(2) = (/ 7, 400000 /)
  double precision, allocatable :: a(:), b(:)
  integer, allocatable :: ibuf(:), counts(:)
  real, allocatable :: rg(:)
  double precision :: want

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  failures = 0

  do s = 1, 2
    n = sizes(s) * nranks
    allocate(a(n), b(n), ibuf(n), rg(n), counts(nranks))

    ! MPI_REDUCE, SUM on DOUBLE PRECISION, to the last rank; then in place at rank 0.
    root = nranks - 1
    do i = 1, n
      a(i) = contribution(rank, i)
    end do
    b = -99d0
    call MPI_Reduce(a, b, n, MPI_DOUBLE_PRECISION, MPI_SUM, root, MPI_COMM_WORLD, ierr)
    if (ierr /= MPI_SUCCESS) failures = failures + 1
    if (rank == root) then
      do i = 1, n
        if (b(i) /= summed(i)) failures = failures + 1
      end do
    end if
    if (rank == 0) then
      call MPI_Reduce(MPI_IN_PLACE, a, n, MPI_DOUBLE_PRECISION, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
      do i = 1, n
        if (a(i) /= summed(i)) failures = failures + 1
      end do
    else
      call MPI_Reduce(a, b, n, MPI_DOUBLE_PRECISION, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
    end if
    if (ierr /= MPI_SUCCESS) failures = failures + 1

    ! MPI_BCAST of INTEGER from rank 1 (0 on one rank).
    root = mod(1, nranks)
    ibuf = -1
    if (rank == root) then
      do i = 1, n
        ibuf(i) = i * 3 + 11
      end do
    end if
    call MPI_Bcast(ibuf, n, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
    if (ierr /= MPI_SUCCESS) failures = failures + 1
    do i = 1, n
      if (ibuf(i) /= i * 3 + 11) failures = failures + 1
    end do

    ! MPI_ALLGATHER of REAL, then in place.
    rg = -1.0
    do i = 1, sizes(s)
      rg(i) = real(contribution(rank, i))
    end do
    a(1:sizes(s)) = 0d0
    block
      real, allocatable :: gathered(:)
      allocate(gathered(n))
      call MPI_Allgather(rg, sizes(s), MPI_REAL, gathered, sizes(s), MPI_REAL, MPI_COMM_WORLD, ierr)
      if (ierr /= MPI_SUCCESS) failures = failures + 1
      do r = 0, nranks - 1
        do i = 1, sizes(s)
          if (gathered(r * sizes(s) + i) /= real(contribution(r, i))) failures = failures + 1
        end do
      end do
      gathered = -5.0
      do i = 1, sizes(s)
        gathered(rank * sizes(s) + i) = real(contribution(rank, i) + 1)
      end do
      call MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, gathered, sizes(s), MPI_REAL, &
                         MPI_COMM_WORLD, ierr)
      if (ierr /= MPI_SUCCESS) failures = failures + 1
      do r = 0, nranks - 1
        do i = 1, sizes(s)
          if (gathered(r * sizes(s) + i) /= real(contribution(r, i) + 1)) failures = failures + 1
        end do
      end do
      deallocate(gathered)
    end block

    ! MPI_REDUCE_SCATTER_BLOCK and MPI_REDUCE_SCATTER (equal counts), SUM on DOUBLE PRECISION.
    do i = 1, n
      a(i) = contribution(rank, i)
    end do
    b = -7d0
    call MPI_Reduce_scatter_block(a, b, sizes(s), MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, &
                                  ierr)
    if (ierr /= MPI_SUCCESS) failures = failures + 1
    do i = 1, sizes(s)
      if (b(i) /= summed(rank * sizes(s) + i)) failures = failures + 1
    end do
    counts = sizes(s)
    b = -7d0
    call MPI_Reduce_scatter(a, b, counts, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (ierr /= MPI_SUCCESS) failures = failures + 1
    do i = 1, sizes(s)
      if (b(i) /= summed(rank * sizes(s) + i)) failures = failures + 1
    end do

    deallocate(a, b, ibuf, rg, counts)
  end do

  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) write(*, '(a,i0,a)') 'pmpi_collectives_f: ', total, ' failures'
  call MPI_Finalize(ierr)
  if (total /= 0) stop 1

contains
  ! Small integers: exact sums in any order.
  integer function contribution(r, i)
    integer, intent(in) :: r, i
    contribution = mod(r * 7 + i * 3, 11) - 3
  end function contribution

  double precision function summed(i)
    integer, intent(in) :: i
    integer :: q
    summed = 0d0
    do q = 0, nranks - 1
      summed = summed + dble(contribution(q, i))
    end do
  end function summed
end program pmpi_collectives_f
