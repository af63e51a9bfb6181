! A plain Fortran MPI program using the mpi_f08 module (no skipring API; starts with
! MPI_Init_thread): MPI_Allreduce with and without MPI_IN_PLACE at counts 0, 1 and 100003,
! each result checked. ctest runs it with libskipring_pmpi.so preloaded; exits with
! status 1 on any wrong result.
program allreduce_check_f08
  use mpi_f08
  implicit none
  integer, parameter :: ncounts = 3
  integer, parameter :: counts(ncounts) = (/ 0, 1, 100003 /)
  integer :: rank, nprocs, ic, n, i, r, failures, any_failure, ierr, provided
  integer, allocatable :: isend(:), irecv(:), want(:)
  double precision, allocatable :: drecv(:)

  failures = 0
  call MPI_Init_thread(MPI_THREAD_FUNNELED, provided, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs)
  do ic = 1, ncounts
    n = counts(ic)
    allocate(isend(max(n, 1)), irecv(max(n, 1)), want(max(n, 1)), drecv(max(n, 1)))
    do i = 1, n
      isend(i) = mod(rank * 5 + i, 13)
      want(i) = 0
      do r = 0, nprocs - 1
        want(i) = want(i) + mod(r * 5 + i, 13)
      end do
    end do
    call MPI_Allreduce(isend, irecv, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (ierr /= MPI_SUCCESS) failures = failures + 1
    do i = 1, n
      if (irecv(i) /= want(i)) then
        failures = failures + 1
        exit
      end if
    end do
    do i = 1, n
      drecv(i) = dble(isend(i))
    end do
    call MPI_Allreduce(MPI_IN_PLACE, drecv, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, &
                       ierr)
    if (ierr /= MPI_SUCCESS) failures = failures + 1
    do i = 1, n
      if (drecv(i) /= dble(want(i))) then
        failures = failures + 1
        exit
      end if
    end do
    if (failures /= 0) write(0, '(a,i0,a,i0)') 'pmpi_allreduce_f08: rank ', rank, &
        ': FAILED at count ', n
    deallocate(isend, irecv, want, drecv)
  end do
  ! PMPI, so that the verdict does not depend on the library under test.
  call PMPI_Allreduce(failures, any_failure, 1, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (any_failure == 0) then
      write(*, '(a)') 'pmpi_allreduce_f08: all checks passed'
    else
      write(*, '(a)') 'pmpi_allreduce_f08: FAILED'
    end if
  end if
  call MPI_Finalize(ierr)
  if (failures /= 0) stop 1
end program allreduce_check_f08
