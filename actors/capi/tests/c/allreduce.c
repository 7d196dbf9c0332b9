/* tf_iallreduce and tf_ibcast used as documented, results checked on every
 * rank, and their bad input; run by tests/c_api.rs under
 * `taskfold run -n 3`. */
#include <stdint.h>
#include "check.h"

static int rank, size;

/* Every op over doubles and int64s: the result on every rank. */
static void allreduce(void) {
  enum { N = 1000 };
  static double d[N], dsum[N], dmax[N];
  static int64_t l[N], lmin[N];
  for (int i = 0; i < N; i++) {
    d[i] = rank + 1 + i;
    l[i] = (int64_t)(rank + 1) * 1000 + i;
  }
  tf_request req[3];
  tf_options o = {0};
  o.id = "ar-sum";
  OK(tf_iallreduce(d, dsum, N, TF_F64, TF_SUM, &o, &req[0]));
  o.id = "ar-max";
  OK(tf_iallreduce(d, dmax, N, TF_F64, TF_MAX, &o, &req[1]));
  o.id = "ar-min";
  OK(tf_iallreduce(l, lmin, N, TF_I64, TF_MIN, &o, &req[2]));
  tf_status st[3];
  OK(tf_wait_all(3, req, st));
  for (int k = 0; k < 3; k++) CHECK(st[k].error == TF_SUCCESS && st[k].is_result == 1);
  for (int i = 0; i < N; i++) {
    double sum = 0;
    for (int r = 0; r < size; r++) sum += r + 1 + i;
    CHECK(dsum[i] == sum && dmax[i] == size + i && lmin[i] == 1000 + i);
  }
  /* In place (recvbuf == sendbuf), over a group, ids reused at once. */
  int32_t group[2] = {2, 1};
  for (int round = 0; round < 2; round++) {
    int32_t v[3] = {rank, rank * 2, 7};
    tf_options g = {0};
    g.id = "ar-group";
    g.group = group;
    g.group_len = 2;
    tf_request r;
    if (rank == 0) {
      FAILS(tf_iallreduce(v, v, 3, TF_I32, TF_SUM, &g, &r), TF_ERR_INVALID_OPTIONS,
            "not a member");
      continue;
    }
    OK(tf_iallreduce(v, v, 3, TF_I32, TF_SUM, &g, &r));
    OK(tf_wait(&r, NULL));
    CHECK(v[0] == 3 && v[1] == 6 && v[2] == 14);
  }
}

static void bcast(void) {
  enum { N = 4096 };
  static float v[N];
  for (int i = 0; i < N; i++) v[i] = rank == 2 ? (float)i * 0.5f : -1.0f;
  tf_request req;
  tf_options o = {0};
  o.id = "bc";
  OK(tf_ibcast(v, N, TF_F32, 2, &o, &req));
  tf_status st;
  OK(tf_wait(&req, &st));
  CHECK(st.error == TF_SUCCESS);
  for (int i = 0; i < N; i++) CHECK(v[i] == (float)i * 0.5f);
  /* A member asking for another count is told so; the others get it. */
  uint64_t w[2] = {rank == 0 ? 11u : 0u, rank == 0 ? 22u : 0u};
  o.id = "bc-count";
  OK(tf_ibcast(w, rank == 1 ? 1 : 2, TF_U64, 0, &o, &req));
  if (rank == 1) {
    FAILS(tf_wait(&req, NULL), TF_ERR_MISMATCH, "bytes");
  } else {
    OK(tf_wait(&req, NULL));
    CHECK(w[0] == 11 && w[1] == 22);
  }
  /* A member asking for another datatype of the same byte count is told
   * so, once the others have the value (or before: its own check). */
  uint64_t u[2] = {rank == 0 ? 33u : 0u, 0};
  float f[4] = {0, 0, 0, 0};
  o.id = "bc-type";
  if (rank == 2) {
    OK(tf_barrier());
    OK(tf_ibcast(f, 4, TF_F32, 0, &o, &req));
    FAILS(tf_wait(&req, NULL), TF_ERR_MISMATCH, "datatype");
    for (int i = 0; i < 4; i++) CHECK(f[i] == 0);
  } else {
    OK(tf_ibcast(u, 2, TF_U64, 0, &o, &req));
    OK(tf_wait(&req, NULL));
    CHECK(u[0] == 33 && u[1] == 0);
    OK(tf_barrier());
  }
}

static void bad_input(void) {
  double x = 1;
  tf_request req;
  tf_options c = {0};
  c.completion = TF_COMPLETION_CONTRIBUTED;
  FAILS(tf_iallreduce(&x, &x, 1, TF_F64, TF_SUM, &c, &req), TF_ERR_INVALID_OPTIONS,
        "Contributed");
  FAILS(tf_iallreduce(&x, NULL, 1, TF_F64, TF_SUM, NULL, &req), TF_ERR_NULL_POINTER,
        "recvbuf");
  FAILS(tf_iallreduce(&x, &x, 1, 99, TF_SUM, NULL, &req), TF_ERR_ARGUMENT, "datatype");
  FAILS(tf_ibcast(&x, 1, TF_F64, -1, NULL, &req), TF_ERR_ARGUMENT, "negative");
  FAILS(tf_ibcast(&x, 1, TF_F64, 0, NULL, NULL), TF_ERR_NULL_POINTER, "req");
}

int main(void) {
  OK(tf_init());
  OK(tf_rank(&rank));
  OK(tf_size(&size));
  tf_test_rank = rank;
  CHECK(size == 3);
  bad_input();
  allreduce();
  bcast();
  OK(tf_barrier());
  OK(tf_finalize());
  printf("rank %d: allreduce ok\n", rank);
  return 0;
}
