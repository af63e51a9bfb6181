! A plain Fortran MPI program (use mpi, no skipring API) that exercises
! MPI_Allreduce and checks every result itself; ctest runs it with libskipring_pmpi.so
! preloaded. Covers INTEGER, REAL, DOUBLE PRECISION, LOGICAL and the sized kinds INTEGER*8
! (MPI_INTEGER8) and REAL*8 (MPI_REAL8) with predefined ops, the Fortran MPI_IN_PLACE, counts
! 0, 1, 7 and 100003, and a user-defined op (a fallback).
! Exits with status 1 on any wrong result.
module pmpi_check
  implicit none
  integer :: failures = 0
  integer :: checks = 0
  integer :: world_rank = 0
contains
  subroutine check(ok, what, count, in_place)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    integer, intent(in) :: count, in_place
    checks = checks + 1
    if (.not. ok) then
      failures = failures + 1
      if (failures <= 20) then
        write(0, '(a,i0,a,a,a,i0,a,i0)') 'pmpi_allreduce_f: rank ', world_rank, ': FAILED ', &
            what, ' count=', count, ' in_place=', in_place
      end if
    end if
  end subroutine check

  ! Small integer contributions, exact in REAL and DOUBLE PRECISION in any order.
  integer function contribution(rank, i)
    integer, intent(in) :: rank, i
    contribution = mod(rank * 7 + i * 3, 11) - 3
  end function contribution

  ! Contributions for PROD: 1, 2 or -1.
  integer function prod_contribution(rank, i)
    integer, intent(in) :: rank, i
    select case (mod(rank + i, 3))
    case (0)
      prod_contribution = 1
    case (1)
      prod_contribution = 2
    case default
      prod_contribution = -1
    end select
  end function prod_contribution
end module pmpi_check

! User-defined commutative op on INTEGER: sum modulo 1000.
subroutine sum_mod_1000(invec, inoutvec, len, datatype)
  implicit none
  integer, intent(in) :: len, datatype
  integer, intent(in) :: invec(len)
  integer, intent(inout) :: inoutvec(len)
  integer :: i
  do i = 1, len
    inoutvec(i) = mod(invec(i) + inoutvec(i), 1000)
  end do
  if (datatype == -12345) inoutvec(1) = 0  ! keeps the argument used
end subroutine sum_mod_1000

program pmpi_allreduce_f
  use mpi
  use pmpi_check
  implicit none
  integer, parameter :: ncounts = 4
  integer, parameter :: counts(ncounts) = (/ 0, 1, 7, 100003 /)
  integer :: ierr, nprocs, ic, n, i, r, ip, any_failure, user_op
  integer :: want_sum, want_max, want_min, want_prod
  logical :: ok
  integer, allocatable :: isend(:), irecv(:)
  real, allocatable :: rsend(:), rrecv(:)
  double precision, allocatable :: dsend(:), drecv(:)
  logical, allocatable :: lsend(:), lrecv(:)
  integer(kind=8), allocatable :: ksend(:), krecv(:)
  integer(kind=8) :: want_k
  real(kind=8), allocatable :: esend(:), erecv(:)
  logical :: want_l
  external :: sum_mod_1000

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, world_rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)

  do ic = 1, ncounts
    n = counts(ic)
    allocate(isend(max(n, 1)), irecv(max(n, 1)), rsend(max(n, 1)), rrecv(max(n, 1)))
    allocate(dsend(max(n, 1)), drecv(max(n, 1)), lsend(max(n, 1)), lrecv(max(n, 1)))
    allocate(ksend(max(n, 1)), krecv(max(n, 1)), esend(max(n, 1)), erecv(max(n, 1)))
    do ip = 0, 1
      ! INTEGER SUM, MAX, MIN, PROD.
      call fill_int(isend, irecv, n, ip, .false.)
      if (ip == 1) then
        call MPI_Allreduce(MPI_IN_PLACE, irecv, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
      else
        call MPI_Allreduce(isend, irecv, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
      end if
      ok = ierr == MPI_SUCCESS
      do i = 1, n
        want_sum = 0
        do r = 0, nprocs - 1
          want_sum = want_sum + contribution(r, i)
        end do
        if (irecv(i) /= want_sum) ok = .false.
      end do
      call check(ok, 'INTEGER SUM', n, ip)

      call fill_int(isend, irecv, n, ip, .false.)
      if (ip == 1) then
        call MPI_Allreduce(MPI_IN_PLACE, irecv, n, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
      else
        call MPI_Allreduce(isend, irecv, n, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
      end if
      ok = ierr == MPI_SUCCESS
      do i = 1, n
        want_max = contribution(0, i)
        do r = 1, nprocs - 1
          want_max = max(want_max, contribution(r, i))
        end do
        if (irecv(i) /= want_max) ok = .false.
      end do
      call check(ok, 'INTEGER MAX', n, ip)

      call fill_int(isend, irecv, n, ip, .false.)
      if (ip == 1) then
        call MPI_Allreduce(MPI_IN_PLACE, irecv, n, MPI_INTEGER, MPI_MIN, MPI_COMM_WORLD, ierr)
      else
        call MPI_Allreduce(isend, irecv, n, MPI_INTEGER, MPI_MIN, MPI_COMM_WORLD, ierr)
      end if
      ok = ierr == MPI_SUCCESS
      do i = 1, n
        want_min = contribution(0, i)
        do r = 1, nprocs - 1
          want_min = min(want_min, contribution(r, i))
        end do
        if (irecv(i) /= want_min) ok = .false.
      end do
      call check(ok, 'INTEGER MIN', n, ip)

      call fill_int(isend, irecv, n, ip, .true.)
      if (ip == 1) then
        call MPI_Allreduce(MPI_IN_PLACE, irecv, n, MPI_INTEGER, MPI_PROD, MPI_COMM_WORLD, ierr)
      else
        call MPI_Allreduce(isend, irecv, n, MPI_INTEGER, MPI_PROD, MPI_COMM_WORLD, ierr)
      end if
      ok = ierr == MPI_SUCCESS
      do i = 1, n
        want_prod = 1
        do r = 0, nprocs - 1
          want_prod = want_prod * prod_contribution(r, i)
        end do
        if (irecv(i) /= want_prod) ok = .false.
      end do
      call check(ok, 'INTEGER PROD', n, ip)

      ! REAL SUM.
      do i = 1, n
        if (ip == 1) then
          rrecv(i) = real(contribution(world_rank, i))
        else
          rsend(i) = real(contribution(world_rank, i))
          rrecv(i) = 99.0
        end if
      end do
      if (ip == 1) then
        call MPI_Allreduce(MPI_IN_PLACE, rrecv, n, MPI_REAL, MPI_SUM, MPI_COMM_WORLD, ierr)
      else
        call MPI_Allreduce(rsend, rrecv, n, MPI_REAL, MPI_SUM, MPI_COMM_WORLD, ierr)
      end if
      ok = ierr == MPI_SUCCESS
      do i = 1, n
        want_sum = 0
        do r = 0, nprocs - 1
          want_sum = want_sum + contribution(r, i)
        end do
        if (rrecv(i) /= real(want_sum)) ok = .false.
      end do
      call check(ok, 'REAL SUM', n, ip)

      ! DOUBLE PRECISION SUM and MAX.
      do i = 1, n
        if (ip == 1) then
          drecv(i) = 0.5d0 * contribution(world_rank, i)
        else
          dsend(i) = 0.5d0 * contribution(world_rank, i)
          drecv(i) = 99.0d0
        end if
      end do
      if (ip == 1) then
        call MPI_Allreduce(MPI_IN_PLACE, drecv, n, MPI_DOUBLE_PRECISION, MPI_SUM, &
                           MPI_COMM_WORLD, ierr)
      else
        call MPI_Allreduce(dsend, drecv, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
      end if
      ok = ierr == MPI_SUCCESS
      do i = 1, n
        want_sum = 0
        do r = 0, nprocs - 1
          want_sum = want_sum + contribution(r, i)
        end do
        if (drecv(i) /= 0.5d0 * want_sum) ok = .false.
      end do
      call check(ok, 'DOUBLE PRECISION SUM', n, ip)

      do i = 1, n
        dsend(i) = 0.5d0 * contribution(world_rank, i)
        drecv(i) = 99.0d0
      end do
      if (ip == 1) then
        drecv(1:n) = dsend(1:n)
        call MPI_Allreduce(MPI_IN_PLACE, drecv, n, MPI_DOUBLE_PRECISION, MPI_MAX, &
                           MPI_COMM_WORLD, ierr)
      else
        call MPI_Allreduce(dsend, drecv, n, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)
      end if
      ok = ierr == MPI_SUCCESS
      do i = 1, n
        want_max = contribution(0, i)
        do r = 1, nprocs - 1
          want_max = max(want_max, contribution(r, i))
        end do
        if (drecv(i) /= 0.5d0 * want_max) ok = .false.
      end do
      call check(ok, 'DOUBLE PRECISION MAX', n, ip)

      ! LOGICAL LOR: true where any rank's contribution is 7.
      do i = 1, n
        if (ip == 1) then
          lrecv(i) = contribution(world_rank, i) == 7
        else
          lsend(i) = contribution(world_rank, i) == 7
          lrecv(i) = .false.
        end if
      end do
      if (ip == 1) then
        call MPI_Allreduce(MPI_IN_PLACE, lrecv, n, MPI_LOGICAL, MPI_LOR, MPI_COMM_WORLD, ierr)
      else
        call MPI_Allreduce(lsend, lrecv, n, MPI_LOGICAL, MPI_LOR, MPI_COMM_WORLD, ierr)
      end if
      ok = ierr == MPI_SUCCESS
      do i = 1, n
        want_max = 0
        do r = 0, nprocs - 1
          if (contribution(r, i) == 7) want_max = 1
        end do
        if (lrecv(i) .neqv. (want_max == 1)) ok = .false.
      end do
      call check(ok, 'LOGICAL LOR', n, ip)

      ! LOGICAL LAND: true where no rank's contribution is 7.
      do i = 1, n
        lsend(i) = contribution(world_rank, i) /= 7
        lrecv(i) = .false.
        if (ip == 1) lrecv(i) = lsend(i)
      end do
      if (ip == 1) then
        call MPI_Allreduce(MPI_IN_PLACE, lrecv, n, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD, ierr)
      else
        call MPI_Allreduce(lsend, lrecv, n, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD, ierr)
      end if
      ok = ierr == MPI_SUCCESS
      do i = 1, n
        want_l = .true.
        do r = 0, nprocs - 1
          if (contribution(r, i) == 7) want_l = .false.
        end do
        if (lrecv(i) .neqv. want_l) ok = .false.
      end do
      call check(ok, 'LOGICAL LAND', n, ip)

      ! INTEGER*8 SUM (MPI_INTEGER8), values past 32 bits.
      do i = 1, n
        ksend(i) = int(contribution(world_rank, i), 8) * 4294967311_8 + int(i, 8)
        krecv(i) = -1_8
        if (ip == 1) krecv(i) = ksend(i)
      end do
      if (ip == 1) then
        call MPI_Allreduce(MPI_IN_PLACE, krecv, n, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD, ierr)
      else
        call MPI_Allreduce(ksend, krecv, n, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD, ierr)
      end if
      ok = ierr == MPI_SUCCESS
      do i = 1, n
        want_k = 0_8
        do r = 0, nprocs - 1
          want_k = want_k + int(contribution(r, i), 8) * 4294967311_8 + int(i, 8)
        end do
        if (krecv(i) /= want_k) ok = .false.
      end do
      call check(ok, 'INTEGER*8 SUM', n, ip)

      ! REAL*8 MIN (MPI_REAL8).
      do i = 1, n
        esend(i) = 0.25d0 * contribution(world_rank, i)
        erecv(i) = 1.0d30
        if (ip == 1) erecv(i) = esend(i)
      end do
      if (ip == 1) then
        call MPI_Allreduce(MPI_IN_PLACE, erecv, n, MPI_REAL8, MPI_MIN, MPI_COMM_WORLD, ierr)
      else
        call MPI_Allreduce(esend, erecv, n, MPI_REAL8, MPI_MIN, MPI_COMM_WORLD, ierr)
      end if
      ok = ierr == MPI_SUCCESS
      do i = 1, n
        want_min = contribution(0, i)
        do r = 1, nprocs - 1
          want_min = min(want_min, contribution(r, i))
        end do
        if (erecv(i) /= 0.25d0 * want_min) ok = .false.
      end do
      call check(ok, 'REAL*8 MIN', n, ip)
    end do

    ! MPI defines only the logical ops on LOGICAL: SUM is MPI_ERR_OP, as from the MPI library
    ! (errors returned, not fatal, for this call).
    if (n > 0) then
      call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN, ierr)
      call MPI_Allreduce(lsend, lrecv, n, MPI_LOGICAL, MPI_SUM, MPI_COMM_WORLD, ierr)
      call check(ierr /= MPI_SUCCESS, 'LOGICAL SUM refused', n, 0)
      call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL, ierr)
    end if

    ! User-defined op (handled by PMPI_Allreduce as a fallback).
    call MPI_Op_create(sum_mod_1000, .true., user_op, ierr)
    do i = 1, n
      isend(i) = mod(world_rank * 311 + i * 17, 1000)
    end do
    call MPI_Allreduce(isend, irecv, n, MPI_INTEGER, user_op, MPI_COMM_WORLD, ierr)
    ok = ierr == MPI_SUCCESS
    do i = 1, n
      want_sum = 0
      do r = 0, nprocs - 1
        want_sum = mod(want_sum + mod(r * 311 + i * 17, 1000), 1000)
      end do
      if (irecv(i) /= want_sum) ok = .false.
    end do
    call check(ok, 'user op', n, 0)
    call MPI_Op_free(user_op, ierr)

    deallocate(isend, irecv, rsend, rrecv, dsend, drecv, lsend, lrecv, ksend, krecv, esend, erecv)
  end do

  ! PMPI, so that the verdict does not depend on the library under test.
  call PMPI_Allreduce(failures, any_failure, 1, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
  if (world_rank == 0) then
    if (any_failure == 0) then
      write(*, '(a,i0,a)') 'pmpi_allreduce_f: all checks passed (', checks, ' checks on rank 0)'
    else
      write(*, '(a)') 'pmpi_allreduce_f: FAILED'
    end if
  end if
  call MPI_Finalize(ierr)
  if (failures /= 0) stop 1

contains
  ! Puts this rank's contributions in isend (or in irecv when in place).
  subroutine fill_int(isend, irecv, n, in_place, for_prod)
    integer, intent(inout) :: isend(:), irecv(:)
    integer, intent(in) :: n, in_place
    logical, intent(in) :: for_prod
    integer :: i, v
    do i = 1, n
      if (for_prod) then
        v = prod_contribution(world_rank, i)
      else
        v = contribution(world_rank, i)
      end if
      if (in_place == 1) then
        irecv(i) = v
      else
        isend(i) = v
        irecv(i) = 99
      end if
    end do
  end subroutine fill_int
end program pmpi_allreduce_f
