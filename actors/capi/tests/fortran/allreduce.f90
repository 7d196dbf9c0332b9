! tf_iallreduce and tf_ibcast from Fortran, results checked on every rank;
! run by tests/c_api.rs under `taskfold run -n 3`.
program allreduce
  use, intrinsic :: iso_c_binding
  use taskfold
  implicit none

  integer, parameter :: n = 100
  real(c_double), target :: mine(n), total(n), model(n)
  integer(c_int64_t) :: req
  integer(c_int32_t) :: rank, size
  integer :: i

  call check(tf_init(), 'tf_init')
  call check(tf_rank(rank), 'tf_rank')
  call check(tf_size(size), 'tf_size')
  do i = 1, n
    mine(i) = rank + i
    model(i) = merge(0.5d0 * i, -1d0, rank == 1)
  end do
  call check(tf_iallreduce(c_loc(mine), c_loc(total), int(n, c_size_t), TF_F64, TF_SUM, &
                           req=req), 'tf_iallreduce')
  call check(tf_wait(req), 'tf_wait')
  do i = 1, n
    if (total(i) /= size * i + size * (size - 1) / 2) then
      print '(a,i0)', 'WRONG sum at ', i
      error stop 3
    end if
  end do
  call check(tf_ibcast(c_loc(model), int(n, c_size_t), TF_F64, 1_c_int32_t, req=req), &
             'tf_ibcast')
  call check(tf_wait(req), 'tf_wait')
  do i = 1, n
    if (model(i) /= 0.5d0 * i) then
      print '(a,i0)', 'WRONG broadcast at ', i
      error stop 3
    end if
  end do
  call check(tf_finalize(), 'tf_finalize')
  print '(a,i0,a)', 'rank ', rank, ': fortran allreduce ok'

contains

  subroutine check(code, what)
    integer(c_int), intent(in) :: code
    character(len=*), intent(in) :: what
    if (code /= TF_SUCCESS) then
      print '(a,a,a,a)', what, ' failed: ', tf_message(code)
      error stop 2
    end if
  end subroutine check
end program allreduce
