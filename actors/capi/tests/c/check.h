/* Small checking helpers for the C tests of libtaskfold. */
#ifndef TF_TEST_CHECK_H
#define TF_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "taskfold.h"

static int tf_test_rank = -1;

/* A call that must succeed. */
#define OK(call)                                                              \
  do {                                                                        \
    int rc_ = (call);                                                         \
    if (rc_ != TF_SUCCESS) {                                                  \
      fprintf(stderr, "FAILED rank %d %s:%d: %s -> %d (%s): %s\n",            \
              tf_test_rank, __FILE__, __LINE__, #call, rc_, tf_strerror(rc_), \
              tf_last_error());                                               \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

/* A call that must fail with `code`, its message containing `part`. */
#define FAILS(call, code, part)                                               \
  do {                                                                        \
    int rc_ = (call);                                                         \
    if (rc_ != (code) || strstr(tf_last_error(), (part)) == NULL) {           \
      fprintf(stderr,                                                         \
              "FAILED rank %d %s:%d: %s -> %d (%s), want %d with \"%s\": "    \
              "%s\n",                                                         \
              tf_test_rank, __FILE__, __LINE__, #call, rc_, tf_strerror(rc_), \
              (code), (part), tf_last_error());                               \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

/* A condition that must hold. */
#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "FAILED rank %d %s:%d: %s\n", tf_test_rank, __FILE__,  \
              __LINE__, #cond);                                              \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

#endif
