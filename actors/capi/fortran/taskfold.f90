! taskfold: the Fortran module of libtaskfold's C API (iso_c_binding).
!
! The same calls as taskfold.h, with the same names and error codes: each
! function returns TF_SUCCESS or a TF_ERR_* code, and tf_message(code)
! gives the code's description with the last failure's message. Requests,
! buffers and operations are integer(c_int64_t) handles. Optional
! arguments stand for C's null pointers (options, statuses).
!
! Compile it with the program (gfortran -std=f2018: optional arguments of
! interoperable procedures are Fortran 2018), or use the taskfold.mod the
! install script makes.
module taskfold
  use, intrinsic :: iso_c_binding
  implicit none

  integer(c_int), parameter :: TF_SUCCESS = 0
  integer(c_int), parameter :: TF_ERR_NULL_POINTER = 1
  integer(c_int), parameter :: TF_ERR_ARGUMENT = 2
  integer(c_int), parameter :: TF_ERR_NOT_INITIALIZED = 3
  integer(c_int), parameter :: TF_ERR_FINALIZED = 4
  integer(c_int), parameter :: TF_ERR_ALREADY_INITIALIZED = 5
  integer(c_int), parameter :: TF_ERR_START = 6
  integer(c_int), parameter :: TF_ERR_HANDLE = 7
  integer(c_int), parameter :: TF_ERR_BUSY = 8
  integer(c_int), parameter :: TF_ERR_INVALID_OPTIONS = 9
  integer(c_int), parameter :: TF_ERR_DUPLICATE_ID = 10
  integer(c_int), parameter :: TF_ERR_MISMATCH = 11
  integer(c_int), parameter :: TF_ERR_FOLD = 12
  integer(c_int), parameter :: TF_ERR_RANKS_LOST = 13
  integer(c_int), parameter :: TF_ERR_ROOT_LOST = 14
  integer(c_int), parameter :: TF_ERR_MASTER_LOST = 15
  integer(c_int), parameter :: TF_ERR_TIMEOUT = 16
  integer(c_int), parameter :: TF_ERR_FENCED = 17
  integer(c_int), parameter :: TF_ERR_SHUTDOWN = 18
  integer(c_int), parameter :: TF_ERR_TRANSPORT = 19
  integer(c_int), parameter :: TF_ERR_DECODE = 20
  integer(c_int), parameter :: TF_ERR_TOO_MANY = 21
  integer(c_int), parameter :: TF_ERR_REINIT = 22
  integer(c_int), parameter :: TF_ERR_CHECKPOINT = 23
  integer(c_int), parameter :: TF_ERR_TRUNCATED = 24
  integer(c_int), parameter :: TF_ERR_INTERNAL = 25
  integer(c_int), parameter :: TF_ERR_IN_STATUS = 26
  integer(c_int), parameter :: TF_ERR_RANK_FINISHED = 27
  integer(c_int), parameter :: TF_ERR_RESULT_LOST = 28
  integer(c_int), parameter :: TF_LIFECYCLE_NEW = 0
  integer(c_int), parameter :: TF_LIFECYCLE_RESTARTED = 1
  integer(c_int), parameter :: TF_LIFECYCLE_REINITED = 2
  integer(c_int), parameter :: TF_DURABILITY_DEFAULT = 0
  integer(c_int), parameter :: TF_DURABILITY_ASYNC = 1
  integer(c_int), parameter :: TF_DURABILITY_SYNC = 2
  integer(c_int), parameter :: TF_DURABILITY_OFF = 3
  integer(c_int), parameter :: TF_COMPLETION_DEFAULT = 0
  integer(c_int), parameter :: TF_COMPLETION_RESULT = 1
  integer(c_int), parameter :: TF_COMPLETION_CONTRIBUTED = 2
  integer(c_int), parameter :: TF_F32 = 1
  integer(c_int), parameter :: TF_F64 = 2
  integer(c_int), parameter :: TF_I32 = 3
  integer(c_int), parameter :: TF_I64 = 4
  integer(c_int), parameter :: TF_U32 = 5
  integer(c_int), parameter :: TF_U64 = 6
  integer(c_int), parameter :: TF_SUM = 1
  integer(c_int), parameter :: TF_MIN = 2
  integer(c_int), parameter :: TF_MAX = 3
  integer(c_int), parameter :: TF_PROD = 4
  integer(c_int64_t), parameter :: TF_BUF_NULL = 0_c_int64_t
  integer(c_int64_t), parameter :: TF_OP_NULL = 0_c_int64_t
  integer(c_int64_t), parameter :: TF_REQUEST_NULL = 0_c_int64_t

  !> Options of one reduction beside its root (see tf_options in taskfold.h).
  type, bind(C) :: tf_options
    type(c_ptr) :: id = c_null_ptr
    type(c_ptr) :: group = c_null_ptr
    integer(c_size_t) :: group_len = 0
    integer(c_int) :: durability = TF_DURABILITY_DEFAULT
    integer(c_int) :: completion = TF_COMPLETION_DEFAULT
  end type tf_options

  !> How a completed request ended.
  type, bind(C) :: tf_status
    integer(c_int) :: error
    integer(c_int) :: is_result
    integer(c_int32_t) :: levels
    integer(c_int64_t) :: version
  end type tf_status

  !> What the re-init entry point is called with.
  type, bind(C) :: tf_entry
    integer(c_int) :: lifecycle
    integer(c_int32_t) :: count
    integer(c_int) :: has_resume
    integer(c_int64_t) :: resume
  end type tf_entry

  interface
    integer(c_int) function tf_init() bind(C, name="tf_init")
      import :: c_int
    end function
    integer(c_int) function tf_finalize() bind(C, name="tf_finalize")
      import :: c_int
    end function
    integer(c_int) function tf_initialized(flag) bind(C, name="tf_initialized")
      import :: c_int
      integer(c_int), intent(out) :: flag
    end function
    integer(c_int) function tf_finalized(flag) bind(C, name="tf_finalized")
      import :: c_int
      integer(c_int), intent(out) :: flag
    end function
    integer(c_int) function tf_rank(rank) bind(C, name="tf_rank")
      import :: c_int, c_int32_t
      integer(c_int32_t), intent(out) :: rank
    end function
    integer(c_int) function tf_size(size) bind(C, name="tf_size")
      import :: c_int, c_int32_t
      integer(c_int32_t), intent(out) :: size
    end function
    integer(c_int) function tf_barrier() bind(C, name="tf_barrier")
      import :: c_int
    end function

    integer(c_int) function tf_ireduce(sendbuf, recvbuf, count, datatype, op, root, opts, req) &
        bind(C, name="tf_ireduce")
      import :: c_int, c_int32_t, c_int64_t, c_size_t, c_ptr, tf_options
      type(c_ptr), value :: sendbuf, recvbuf
      integer(c_size_t), value :: count
      integer(c_int), value :: datatype, op
      integer(c_int32_t), value :: root
      type(tf_options), intent(in), optional :: opts
      integer(c_int64_t), intent(out) :: req
    end function
    ! The result on every member (MPI_Iallreduce); see tf_iallreduce in
    ! taskfold.h.
    integer(c_int) function tf_iallreduce(sendbuf, recvbuf, count, datatype, op, opts, req) &
        bind(C, name="tf_iallreduce")
      import :: c_int, c_int64_t, c_size_t, c_ptr, tf_options
      type(c_ptr), value :: sendbuf, recvbuf
      integer(c_size_t), value :: count
      integer(c_int), value :: datatype, op
      type(tf_options), intent(in), optional :: opts
      integer(c_int64_t), intent(out) :: req
    end function
    ! The root's buffer on every member (MPI_Ibcast); see tf_ibcast in
    ! taskfold.h.
    integer(c_int) function tf_ibcast(buf, count, datatype, root, opts, req) &
        bind(C, name="tf_ibcast")
      import :: c_int, c_int32_t, c_int64_t, c_size_t, c_ptr, tf_options
      type(c_ptr), value :: buf
      integer(c_size_t), value :: count
      integer(c_int), value :: datatype
      integer(c_int32_t), value :: root
      type(tf_options), intent(in), optional :: opts
      integer(c_int64_t), intent(out) :: req
    end function
    integer(c_int) function tf_buf_alloc(count, datatype, buf, data) bind(C, name="tf_buf_alloc")
      import :: c_int, c_int64_t, c_size_t, c_ptr
      integer(c_size_t), value :: count
      integer(c_int), value :: datatype
      integer(c_int64_t), intent(out) :: buf
      type(c_ptr), intent(out), optional :: data
    end function
    integer(c_int) function tf_buf_data(buf, data, count) bind(C, name="tf_buf_data")
      import :: c_int, c_int64_t, c_size_t, c_ptr
      integer(c_int64_t), value :: buf
      type(c_ptr), intent(out), optional :: data
      integer(c_size_t), intent(out), optional :: count
    end function
    integer(c_int) function tf_buf_free(buf) bind(C, name="tf_buf_free")
      import :: c_int, c_int64_t
      integer(c_int64_t), intent(inout) :: buf
    end function
    integer(c_int) function tf_ireduce_buf(buf, op, root, opts, req) bind(C, name="tf_ireduce_buf")
      import :: c_int, c_int32_t, c_int64_t, tf_options
      integer(c_int64_t), value :: buf
      integer(c_int), value :: op
      integer(c_int32_t), value :: root
      type(tf_options), intent(in), optional :: opts
      integer(c_int64_t), intent(out) :: req
    end function

    integer(c_int) function tf_op_create(name, fn, ctx, op) bind(C, name="tf_op_create")
      import :: c_int, c_int64_t, c_char, c_funptr, c_ptr
      character(kind=c_char), dimension(*), intent(in) :: name
      type(c_funptr), value :: fn
      type(c_ptr), value :: ctx
      integer(c_int64_t), intent(out) :: op
    end function
    integer(c_int) function tf_op_free(op) bind(C, name="tf_op_free")
      import :: c_int, c_int64_t
      integer(c_int64_t), intent(inout) :: op
    end function
    integer(c_int) function tf_ireduce_custom(sendbuf, recvbuf, elem_size, count, op, root, opts, req) &
        bind(C, name="tf_ireduce_custom")
      import :: c_int, c_int32_t, c_int64_t, c_size_t, c_ptr, tf_options
      type(c_ptr), value :: sendbuf, recvbuf
      integer(c_size_t), value :: elem_size, count
      integer(c_int64_t), value :: op
      integer(c_int32_t), value :: root
      type(tf_options), intent(in), optional :: opts
      integer(c_int64_t), intent(out) :: req
    end function
    integer(c_int) function tf_ireduce_blob(sendbuf, recvbuf, len, op, root, opts, req) &
        bind(C, name="tf_ireduce_blob")
      import :: c_int, c_int32_t, c_int64_t, c_size_t, c_ptr, tf_options
      type(c_ptr), value :: sendbuf, recvbuf
      integer(c_size_t), value :: len
      integer(c_int64_t), value :: op
      integer(c_int32_t), value :: root
      type(tf_options), intent(in), optional :: opts
      integer(c_int64_t), intent(out) :: req
    end function

    integer(c_int) function tf_test(req, flag, status) bind(C, name="tf_test")
      import :: c_int, c_int64_t, tf_status
      integer(c_int64_t), intent(inout) :: req
      integer(c_int), intent(out) :: flag
      type(tf_status), intent(out), optional :: status
    end function
    integer(c_int) function tf_wait(req, status) bind(C, name="tf_wait")
      import :: c_int, c_int64_t, tf_status
      integer(c_int64_t), intent(inout) :: req
      type(tf_status), intent(out), optional :: status
    end function
    integer(c_int) function tf_wait_timeout(req, seconds, status) bind(C, name="tf_wait_timeout")
      import :: c_int, c_int64_t, c_double, tf_status
      integer(c_int64_t), intent(inout) :: req
      real(c_double), value :: seconds
      type(tf_status), intent(out), optional :: status
    end function
    integer(c_int) function tf_wait_all(count, reqs, statuses) bind(C, name="tf_wait_all")
      import :: c_int, c_int64_t, c_size_t, tf_status
      integer(c_size_t), value :: count
      integer(c_int64_t), dimension(*), intent(inout) :: reqs
      type(tf_status), dimension(*), intent(out), optional :: statuses
    end function
    integer(c_int) function tf_requests_live(count) bind(C, name="tf_requests_live")
      import :: c_int, c_size_t
      integer(c_size_t), intent(out) :: count
    end function

    integer(c_int) function tf_checkpoint(version, buf, len, req) bind(C, name="tf_checkpoint")
      import :: c_int, c_int64_t, c_size_t, c_ptr
      integer(c_int64_t), value :: version
      type(c_ptr), value :: buf
      integer(c_size_t), value :: len
      integer(c_int64_t), intent(out) :: req
    end function
    integer(c_int) function tf_restore(max_version, buf, cap, len, version, found) bind(C, name="tf_restore")
      import :: c_int, c_int64_t, c_size_t, c_ptr
      integer(c_int64_t), value :: max_version
      type(c_ptr), value :: buf
      integer(c_size_t), value :: cap
      integer(c_size_t), intent(out) :: len
      integer(c_int64_t), intent(out) :: version
      integer(c_int), intent(out) :: found
    end function

    integer(c_int) function tf_lifecycle(lifecycle, count) bind(C, name="tf_lifecycle")
      import :: c_int, c_int32_t
      integer(c_int), intent(out), optional :: lifecycle
      integer(c_int32_t), intent(out), optional :: count
    end function
    integer(c_int) function tf_check_reinit() bind(C, name="tf_check_reinit")
      import :: c_int
    end function
    integer(c_int) function tf_run_reinit(body, ctx) bind(C, name="tf_run_reinit")
      import :: c_int, c_funptr, c_ptr
      type(c_funptr), value :: body
      type(c_ptr), value :: ctx
    end function

    type(c_ptr) function tf_strerror(code) bind(C, name="tf_strerror")
      import :: c_ptr, c_int
      integer(c_int), value :: code
    end function
    type(c_ptr) function tf_last_error() bind(C, name="tf_last_error")
      import :: c_ptr
    end function
    integer(c_int) function tf_selftest_panic() bind(C, name="tf_selftest_panic")
      import :: c_int
    end function
  end interface

  interface
    function c_strlen(s) bind(C, name="strlen") result(n)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: n
    end function
  end interface

contains

  !> A NUL-terminated copy of `s`, for names and ids.
  function tf_c_string(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=len(s) + 1) :: c
    c = s // c_null_char
  end function tf_c_string

  !> A C string as a Fortran one.
  function from_c(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    n = int(c_strlen(p))
    allocate(character(len=n) :: s)
    call c_f_pointer(p, chars, [n])
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function from_c

  !> The description of `code`, and the message of the calling thread's
  !> last failure: "description: message".
  function tf_message(code) result(s)
    integer(c_int), intent(in) :: code
    character(len=:), allocatable :: s
    s = from_c(tf_strerror(code)) // ': ' // from_c(tf_last_error())
  end function tf_message
end module taskfold
