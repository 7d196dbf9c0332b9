! field_stats: every rank measures its part of a synthetic field, step by
! step, and the per-channel statistics (a derived type: count, sum, sum of
! squares, minimum, maximum) are reduced to rank 0 through a custom fold
! while the ranks go on with the next steps. Rank 0 checks every step's
! statistics against the ones it computes alone for the whole field.
!
! Run: taskfold run -n 4 -- ./field_stats [steps]
module field_stats_fold
  use, intrinsic :: iso_c_binding
  implicit none

  integer, parameter :: channels = 8
  integer, parameter :: samples = 5000

  !> Statistics of one channel: the layout C sees, 40 bytes.
  type, bind(C) :: stats
    integer(c_int64_t) :: count
    real(c_double) :: sum, sumsq, minv, maxv
  end type stats

contains

  !> The custom fold: inout(i) takes in(i) in. Returns 0 (success).
  integer(c_int) function fold(inout, in, len, ctx) bind(C)
    type(c_ptr), value :: inout, in, ctx
    integer(c_size_t), value :: len
    type(stats), pointer :: a(:), b(:)
    integer :: i
    call c_f_pointer(inout, a, [len])
    call c_f_pointer(in, b, [len])
    do i = 1, int(len)
      a(i)%count = a(i)%count + b(i)%count
      a(i)%sum = a(i)%sum + b(i)%sum
      a(i)%sumsq = a(i)%sumsq + b(i)%sumsq
      a(i)%minv = min(a(i)%minv, b(i)%minv)
      a(i)%maxv = max(a(i)%maxv, b(i)%maxv)
    end do
    if (c_associated(ctx)) continue
    fold = 0
  end function fold

  !> The field's value at sample k of channel c, step s, on rank r.
  pure real(c_double) function field(r, s, c, k)
    integer, intent(in) :: r, s, c, k
    field = sin(0.001d0 * k * c + 0.1d0 * s) * (1 + r) + 0.25d0 * c
  end function field

  !> Rank r's statistics at step s.
  subroutine measure(r, s, out)
    integer, intent(in) :: r, s
    type(stats), intent(out) :: out(channels)
    integer :: c, k
    real(c_double) :: v
    do c = 1, channels
      out(c) = stats(0, 0d0, 0d0, huge(1d0), -huge(1d0))
      do k = 1, samples
        v = field(r, s, c, k)
        out(c)%count = out(c)%count + 1
        out(c)%sum = out(c)%sum + v
        out(c)%sumsq = out(c)%sumsq + v * v
        out(c)%minv = min(out(c)%minv, v)
        out(c)%maxv = max(out(c)%maxv, v)
      end do
    end do
  end subroutine measure
end module field_stats_fold

program field_stats
  use, intrinsic :: iso_c_binding
  use taskfold
  use field_stats_fold
  implicit none

  integer, parameter :: max_steps = 64
  type(stats), allocatable, target :: mine(:, :), total(:, :)
  type(stats) :: want(channels), part(channels)
  integer(c_int64_t), allocatable :: reqs(:)
  integer(c_int64_t) :: op
  integer(c_int32_t) :: rank, size
  type(tf_options) :: opts
  character(kind=c_char, len=32), allocatable, target :: ids(:)
  character(len=16) :: arg
  integer :: steps, s, r, c

  steps = 12
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) steps
  end if
  steps = max(1, min(steps, max_steps))

  call check(tf_init(), 'tf_init')
  call check(tf_rank(rank), 'tf_rank')
  call check(tf_size(size), 'tf_size')
  call check(tf_op_create(tf_c_string('field-stats'), c_funloc(fold), c_null_ptr, op), 'tf_op_create')

  allocate (mine(channels, steps), total(channels, steps), reqs(steps), ids(steps))
  ! Every step's reduction starts at once and runs while the rank
  ! measures the next steps.
  do s = 1, steps
    call measure(int(rank), s, mine(:, s))
    write (ids(s), '(a,i0,a)') 'field-stats-', s, c_null_char
    opts%id = c_loc(ids(s))
    call check(tf_ireduce_custom(c_loc(mine(1, s)), c_loc(total(1, s)), &
        int(c_sizeof(mine(1, s)), c_size_t), int(channels, c_size_t), op, 0_c_int32_t, opts, reqs(s)), &
        'tf_ireduce_custom')
  end do
  call check(tf_wait_all(int(steps, c_size_t), reqs), 'tf_wait_all')

  if (rank == 0) then
    do s = 1, steps
      want = stats(0, 0d0, 0d0, huge(1d0), -huge(1d0))
      do r = 0, size - 1
        call measure(r, s, part)
        do c = 1, channels
          want(c)%count = want(c)%count + part(c)%count
          want(c)%sum = want(c)%sum + part(c)%sum
          want(c)%sumsq = want(c)%sumsq + part(c)%sumsq
          want(c)%minv = min(want(c)%minv, part(c)%minv)
          want(c)%maxv = max(want(c)%maxv, part(c)%maxv)
        end do
      end do
      do c = 1, channels
        if (total(c, s)%count /= want(c)%count .or. &
            abs(total(c, s)%sum - want(c)%sum) > 1d-9 * (1 + abs(want(c)%sum)) .or. &
            abs(total(c, s)%sumsq - want(c)%sumsq) > 1d-9 * want(c)%sumsq .or. &
            total(c, s)%minv /= want(c)%minv .or. total(c, s)%maxv /= want(c)%maxv) then
          print '(a,i0,a,i0)', 'WRONG statistics at step ', s, ' channel ', c
          error stop 1
        end if
      end do
    end do
    print '(a,i0,a,i0,a,f0.6)', 'field_stats: ', steps, ' steps over ', size, &
        ' ranks; step 1 channel 1 mean ', total(1, 1)%sum / real(total(1, 1)%count, c_double)
  end if
  call check(tf_op_free(op), 'tf_op_free')
  call check(tf_finalize(), 'tf_finalize')
  print '(a,i0,a)', 'rank ', rank, ': fortran stats ok'

contains

  subroutine check(code, what)
    integer(c_int), intent(in) :: code
    character(len=*), intent(in) :: what
    if (code /= TF_SUCCESS) then
      print '(a,a,a,a)', what, ' failed: ', tf_message(code)
      error stop 2
    end if
  end subroutine check
end program field_stats
