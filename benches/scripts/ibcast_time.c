/*
 * tf_ibcast's time from C: the root broadcasts N bytes of floats to every
 * rank, 30 timed repetitions after 3 warm-up ones, each between barriers;
 * every rank checks a sample of the value and prints its median in ms.
 *
 *   cargo build --release -p taskfold-cli -p taskfold-capi
 *   gcc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -I actors/capi/include \
 *       benches/scripts/ibcast_time.c -L target/release \
 *       -Wl,-rpath,$PWD/target/release -ltaskfold_capi -o /tmp/ibcast_time
 *   target/release/taskfold run -n 8 -- /tmp/ibcast_time 8388608
 *
 * Used in benches/RESULTS.md ("tf_ibcast reads the root's copy in place").
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "taskfold.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: ibcast_time BYTES\n");
    return 2;
  }
  enum { WARMUP = 3, REPS = 30 };
  size_t n = (size_t)atol(argv[1]) / sizeof(float);
  if (tf_init() != TF_SUCCESS) return 1;
  int rank;
  tf_rank(&rank);
  float *v = malloc(n * sizeof(float) + 1);
  double t[REPS];
  for (int r = 0; r < WARMUP + REPS; r++) {
    for (size_t i = 0; i < n; i++) v[i] = rank == 0 ? (float)(i % 1000) : 0.f;
    tf_barrier();
    double t0 = now();
    tf_request q;
    tf_options o = {0};
    if (tf_ibcast(v, n, TF_F32, 0, &o, &q) != TF_SUCCESS) return 3;
    if (tf_wait(&q, NULL) != TF_SUCCESS) return 4;
    double dt = now() - t0;
    for (size_t i = 0; i < n; i += 997)
      if (v[i] != (float)(i % 1000)) return 5;
    if (r >= WARMUP) t[r - WARMUP] = dt;
  }
  qsort(t, REPS, sizeof(double), cmp);
  printf("rank %d median %.3f ms\n", rank, t[REPS / 2] * 1e3);
  free(v);
  tf_finalize();
  return 0;
}
