/* Bad input from C gets its error code and a message, never a crash; run
 * by tests/c_api.rs under `taskfold run -n 2`. */
#include <stdint.h>
#include "check.h"

static int fail_fold(void *inout, const void *in, size_t len, void *ctx) {
  (void)inout;
  (void)in;
  (void)len;
  (void)ctx;
  return 42;
}

static int rank, size;

/* Members that disagree: every member's request fails with `code`. */
static void disagree(const char *id, int dtype, size_t count, int code,
                     const char *part) {
  double send[8] = {1, 2, 3, 4, 5, 6, 7, 8}, recv[8];
  tf_options o = {0};
  o.id = id;
  tf_request req;
  OK(tf_ireduce(send, recv, count, dtype, TF_SUM, 0, &o, &req));
  tf_status st;
  FAILS(tf_wait(&req, &st), code, part);
  CHECK(st.error == code && req == TF_REQUEST_NULL);
}

int main(void) {
  float x[4] = {1, 2, 3, 4}, y[4];
  tf_request req = TF_REQUEST_NULL;
  int32_t r32;

  /* Before init. */
  FAILS(tf_rank(&r32), TF_ERR_NOT_INITIALIZED, "tf_init first");
  FAILS(tf_ireduce(x, y, 4, TF_F32, TF_SUM, 0, NULL, &req),
        TF_ERR_NOT_INITIALIZED, "tf_init");
  FAILS(tf_barrier(), TF_ERR_NOT_INITIALIZED, "tf_init");
  FAILS(tf_finalize(), TF_ERR_NOT_INITIALIZED, "before tf_init");

  OK(tf_init());
  FAILS(tf_init(), TF_ERR_ALREADY_INITIALIZED, "already called");
  OK(tf_rank(&rank));
  OK(tf_size(&size));
  tf_test_rank = rank;
  CHECK(size == 2);

  /* Null pointers. */
  FAILS(tf_rank(NULL), TF_ERR_NULL_POINTER, "rank is a null pointer");
  FAILS(tf_ireduce(NULL, y, 4, TF_F32, TF_SUM, 0, NULL, &req),
        TF_ERR_NULL_POINTER, "sendbuf");
  FAILS(tf_ireduce(x, y, 4, TF_F32, TF_SUM, 0, NULL, NULL),
        TF_ERR_NULL_POINTER, "req");
  FAILS(tf_ireduce(x, NULL, 4, TF_F32, TF_SUM, rank, NULL, &req),
        TF_ERR_NULL_POINTER, "recvbuf (at the root)");
  FAILS(tf_wait(NULL, NULL), TF_ERR_NULL_POINTER, "request");
  FAILS(tf_op_create(NULL, fail_fold, NULL, NULL), TF_ERR_NULL_POINTER,
        "name");
  tf_options nogroup = {0};
  nogroup.group_len = 2;
  FAILS(tf_ireduce(x, y, 4, TF_F32, TF_SUM, 0, &nogroup, &req),
        TF_ERR_NULL_POINTER, "options.group");

  /* Out of range. */
  FAILS(tf_ireduce(x, y, 4, 99, TF_SUM, 0, NULL, &req), TF_ERR_ARGUMENT,
        "unknown datatype 99");
  FAILS(tf_ireduce(x, y, 4, TF_F32, 7, 0, NULL, &req), TF_ERR_ARGUMENT,
        "unknown operation 7");
  FAILS(tf_ireduce(x, y, SIZE_MAX / 2, TF_F64, TF_SUM, 0, NULL, &req),
        TF_ERR_ARGUMENT, "exceed the 2 GiB");
  FAILS(tf_ireduce(x, y, 4, TF_F32, TF_SUM, -1, NULL, &req), TF_ERR_ARGUMENT,
        "root -1 is negative");
  FAILS(tf_ireduce(x, y, 4, TF_F32, TF_SUM, 5, NULL, &req),
        TF_ERR_INVALID_OPTIONS, "root 5 is not in the group");
  FAILS(tf_wait_timeout(&req, -1.0, NULL), TF_ERR_ARGUMENT, "seconds");

  /* Wrong handles: already waited (a copy of it), foreign, another kind. */
  tf_options o = {0};
  o.id = "handles";
  OK(tf_ireduce(x, y, 4, TF_F32, TF_SUM, 0, &o, &req));
  tf_request copy = req;
  OK(tf_wait(&req, NULL));
  CHECK(req == TF_REQUEST_NULL);
  FAILS(tf_wait(&copy, NULL), TF_ERR_HANDLE, "already completed");
  int flag;
  FAILS(tf_test(&copy, &flag, NULL), TF_ERR_HANDLE, "already completed");
  tf_request foreign = 0x1234567887654321ull;
  FAILS(tf_wait(&foreign, NULL), TF_ERR_HANDLE, "not a request handle");
  tf_buf buf;
  OK(tf_buf_alloc(4, TF_F32, &buf, NULL));
  tf_request not_a_request = buf;
  FAILS(tf_wait(&not_a_request, NULL), TF_ERR_HANDLE,
        "is a buffer handle, not a request");
  FAILS(tf_ireduce_buf(foreign, TF_SUM, 0, NULL, &req), TF_ERR_HANDLE,
        "not a buffer handle");
  OK(tf_buf_free(&buf));
  tf_buf freed = 0;
  OK(tf_buf_alloc(4, TF_F32, &freed, NULL));
  tf_buf freed_copy = freed;
  OK(tf_buf_free(&freed));
  FAILS(tf_buf_data(freed_copy, NULL, NULL), TF_ERR_HANDLE, "already");
  tf_request statuses_reqs[2] = {TF_REQUEST_NULL, copy};
  tf_status statuses[2];
  FAILS(tf_wait_all(2, statuses_reqs, statuses), TF_ERR_IN_STATUS,
        "already completed");
  CHECK(statuses[0].error == TF_SUCCESS && statuses[1].error == TF_ERR_HANDLE);

  /* The same id twice while live. */
  o.id = "twice";
  OK(tf_ireduce(x, y, 4, TF_F32, TF_SUM, 0, &o, &req));
  tf_request second;
  FAILS(tf_ireduce(x, y, 4, TF_F32, TF_SUM, 0, &o, &second),
        TF_ERR_DUPLICATE_ID, "twice");
  OK(tf_wait(&req, NULL));

  /* Members that disagree: a length, a type. */
  disagree("length", TF_F64, rank == 0 ? 4 : 5, TF_ERR_MISMATCH,
           "mismatched lengths");
  disagree("type", rank == 0 ? TF_F64 : TF_F32, 4, TF_ERR_MISMATCH,
           "different type");
  /* A custom fold that fails ends the reduction with TF_ERR_FOLD. */
  tf_op op;
  OK(tf_op_create("fails", fail_fold, NULL, &op));
  FAILS(tf_op_create("fails", fail_fold, NULL, &op), TF_ERR_ARGUMENT,
        "already exists");
  o.id = "fold-fails";
  OK(tf_ireduce_custom(x, y, sizeof(float), 4, op, 0, &o, &req));
  FAILS(tf_wait(&req, NULL), TF_ERR_FOLD, "returned 42");
  OK(tf_op_free(&op));
  FAILS(tf_ireduce_custom(x, y, 4, 1, op, 0, &o, &req), TF_ERR_HANDLE,
        "null");

  /* A panic inside the library is an error code; the process goes on. */
  FAILS(tf_selftest_panic(), TF_ERR_INTERNAL, "on purpose");
  OK(tf_barrier());

  OK(tf_finalize());
  /* After finalize. */
  FAILS(tf_rank(&r32), TF_ERR_FINALIZED, "finalised");
  FAILS(tf_ireduce(x, y, 4, TF_F32, TF_SUM, 0, NULL, &req), TF_ERR_FINALIZED,
        "finalised");
  FAILS(tf_init(), TF_ERR_FINALIZED, "cannot be initialised again");
  FAILS(tf_finalize(), TF_ERR_FINALIZED, "already called");
  printf("rank %d: errors ok\n", rank);
  return 0;
}
