/*
 * bench_reduce: the C variant of `taskfold bench reduce`, through the C
 * API. It does what the Rust benchmark's ranks do, step by step, so that
 * `taskfold bench capi` can put the two side by side in one run: for
 * each size, an f32 sum reduction per repetition to rank 1 (rank 0 alone),
 * its contribution filled in a tf_buf before the clock starts (the Rust
 * ranks build their InPlace contribution there too), timed from the call
 * to the outcome known after a barrier, the root copying the result into
 * a fresh allocation inside the timed region (as the Rust ranks' `to_vec`
 * does). Each
 * repetition's time is the maximum over ranks; rank 0 writes the figures
 * (median, min, max, and a memcpy of the same bytes) as JSON.
 *
 *   taskfold run -n 8 -- ./bench_reduce --sizes 2097152,8388608 \
 *       --reps 10 --warmup 2 --out figures.json [--fresh-pages 1]
 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "taskfold.h"

static void check(int rc, const char *what) {
  if (rc != TF_SUCCESS) {
    fprintf(stderr, "bench_reduce: %s: %s: %s\n", what, tf_strerror(rc),
            tf_last_error());
    exit(1);
  }
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of `n` values (sorted in place), as the Rust harness's. */
static double median(double *v, size_t n) {
  qsort(v, n, sizeof(double), by_value);
  if (n == 0) return 0.0 / 0.0;
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double memcpy_median(size_t bytes, unsigned reps) {
  char *a = malloc(bytes), *b = malloc(bytes);
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double *t = calloc(reps, sizeof(double));
  for (unsigned r = 0; r < reps; r++) {
    double t0 = now();
    memcpy(b, a, bytes);
    __asm__ volatile("" : : "r"(b) : "memory");
    t[r] = now() - t0;
  }
  double m = median(t, reps);
  free(a);
  free(b);
  free(t);
  return m;
}

int main(int argc, char **argv) {
  const char *sizes_arg = "2097152", *out = NULL;
  unsigned reps = 10, warmup = 2;
  int fresh_pages = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--sizes")) sizes_arg = argv[i + 1];
    else if (!strcmp(argv[i], "--reps")) reps = (unsigned)atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--warmup")) warmup = (unsigned)atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--out")) out = argv[i + 1];
    else if (!strcmp(argv[i], "--fresh-pages")) fresh_pages = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "bench_reduce: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (!out || reps == 0) {
    fprintf(stderr, "bench_reduce: --out PATH and --reps N (N > 0) are needed\n");
    return 2;
  }
  /* --fresh-pages 1: the copy of the result faults fresh pages in every
   * repetition, as the Rust ranks' copy does (it comes from the shared
   * heap, which gives a freed block's pages back at once); by default
   * glibc keeps them after the first free (its mmap threshold grows), as
   * in any C program. */
  if (fresh_pages) mallopt(M_MMAP_THRESHOLD, 128 << 10);
  check(tf_init(), "tf_init");
  int32_t rank, size;
  check(tf_rank(&rank), "tf_rank");
  check(tf_size(&size), "tf_size");
  int32_t root = size > 1 ? 1 : 0;
  FILE *json = NULL;
  if (rank == 0) {
    json = fopen(out, "w");
    if (!json) {
      perror(out);
      return 1;
    }
    fputc('[', json);
  }
  int code = 0, first = 1;
  char *list = strdup(sizes_arg);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    size_t bytes = strtoull(tok, NULL, 10);
    size_t n = bytes / 4 ? bytes / 4 : 1;
    float *data = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) data[i] = 1.0f;
    double *times = calloc(reps, sizeof(double)), *maxed = calloc(reps, sizeof(double));
    tf_buf buf;
    check(tf_buf_alloc(n, TF_F32, &buf, NULL), "tf_buf_alloc");
    for (unsigned rep = 0; rep < warmup + reps; rep++) {
      float *mine;
      check(tf_buf_data(buf, (void **)&mine, NULL), "tf_buf_data");
      memcpy(mine, data, n * sizeof(float)); /* before the clock */
      check(tf_barrier(), "tf_barrier");
      double t0 = now();
      char id[64];
      snprintf(id, sizeof id, "bench-%zu-%u", bytes, rep);
      tf_options o = {0};
      o.id = id;
      tf_request req;
      tf_status st;
      check(tf_ireduce_buf(buf, TF_SUM, root, &o, &req), "tf_ireduce_buf");
      check(tf_wait(&req, &st), "tf_wait");
      float *result = NULL;
      if (st.is_result) {
        float *sum;
        check(tf_buf_data(buf, (void **)&sum, NULL), "tf_buf_data");
        result = malloc(n * sizeof(float)); /* a fresh copy, as `to_vec` */
        memcpy(result, sum, n * sizeof(float));
      }
      double dt = now() - t0;
      if (st.is_result)
        for (size_t i = 0; i < n; i++)
          if (result[i] != (float)size) {
            fprintf(stderr, "WRONG RESULT for %zu bytes\n", bytes);
            code = 1;
            break;
          }
      free(result);
      if (rep >= warmup) times[rep - warmup] = dt;
    }
    check(tf_buf_free(&buf), "tf_buf_free");
    char id[64];
    snprintf(id, sizeof id, "bench-times-%zu", bytes);
    tf_options o = {0};
    o.id = id;
    tf_request req;
    check(tf_ireduce(times, maxed, reps, TF_F64, TF_MAX, 0, &o, &req), "tf_ireduce");
    check(tf_wait(&req, NULL), "tf_wait");
    if (rank == 0) {
      double med = median(maxed, reps), mc = memcpy_median(bytes, reps);
      fprintf(json,
              "%s{\"np\":%d,\"size\":%zu,\"median_s\":%.9e,\"min_s\":%.9e,"
              "\"max_s\":%.9e,\"memcpy_median_s\":%.9e,\"ratio_to_memcpy\":%.9e,"
              "\"reps\":%u}",
              first ? "" : ",", size, bytes, med, maxed[0], maxed[reps - 1], mc,
              med / mc, reps);
      first = 0;
    }
    free(data);
    free(times);
    free(maxed);
  }
  free(list);
  if (json) {
    fputs("]\n", json);
    fclose(json);
  }
  check(tf_finalize(), "tf_finalize");
  return code;
}
