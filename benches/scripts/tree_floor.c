/*
 * The floor of a small reduction over N processes on this machine: what
 * any implementation pays when every rank is a process that must wake up
 * once to contribute and once to learn that the next reduction may start.
 *
 * N processes in a binomial tree joined by pipes; no runtime, no
 * scheduler, no copies, no polling: a process sleeps in read(2) until its
 * children's partial sums arrive, adds them to its own 8 bytes, writes the
 * sum to its parent, and sleeps again until the parent passes the "go" of
 * the next repetition down. Rank 0 times each repetition (go down the
 * tree, sums up it) and prints the median and the minimum in ms.
 *
 *   gcc -O2 benches/scripts/tree_floor.c -o /tmp/tree_floor
 *   /tmp/tree_floor 16 200; /tmp/tree_floor 256 200
 *
 * Used in benches/RESULTS.md ("256 ranks on two cores: the floor").
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXN 4096

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* up[r]: r writes its sum to its parent; down[r]: r reads its go. */
static int up[MAXN][2], down[MAXN][2];

static void full(int fd, void *buf, size_t len, int write_it) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = write_it ? write(fd, (char *)buf + done, len - done)
                             : read(fd, (char *)buf + done, len - done);
        if (n <= 0) {
            perror(write_it ? "write" : "read");
            exit(1);
        }
        done += (size_t)n;
    }
}

/* One process of the tree: children of r are r + 2^k for 2^k > r's low
 * bits (the binomial tree of MPI's reduce rooted at 0). */
static void run(int r, int n, int reps, size_t lanes, double *times) {
    float *sum = malloc(lanes * sizeof *sum), *part = malloc(lanes * sizeof *part);
    for (int rep = 0; rep < reps; rep++) {
        uint64_t go = 0;
        double t0 = now_s();
        if (r != 0) full(down[r][0], &go, sizeof go, 0);
        for (int k = 1; k < n; k <<= 1) {
            if (r & k) break;
            if (r + k < n) full(down[r + k][1], &go, sizeof go, 1);
        }
        for (size_t i = 0; i < lanes; i++) sum[i] = (float)r;
        for (int k = 1; k < n; k <<= 1) {
            if (r & k) break;
            if (r + k < n) {
                full(up[r + k][0], part, lanes * sizeof *part, 0);
                for (size_t i = 0; i < lanes; i++) sum[i] += part[i];
            }
        }
        if (r != 0) {
            full(up[r][1], sum, lanes * sizeof *sum, 1);
        } else {
            times[rep] = now_s() - t0;
            if (sum[0] != (float)n * (float)(n - 1) / 2) {
                fprintf(stderr, "wrong sum %f\n", (double)sum[0]);
                exit(1);
            }
        }
    }
    free(sum);
    free(part);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 16;
    int reps = argc > 2 ? atoi(argv[2]) : 200;
    long bytes = argc > 3 ? atol(argv[3]) : 8;
    if (n < 2 || n > MAXN || reps < 1 || bytes < 4 || bytes % 4 != 0) {
        fprintf(stderr, "usage: tree_floor N(2..%d) REPS [BYTES, a multiple of 4]\n", MAXN);
        return 2;
    }
    size_t lanes = (size_t)bytes / 4;
    for (int r = 0; r < n; r++) {
        if (pipe(up[r]) || pipe(down[r])) {
            perror("pipe");
            return 1;
        }
    }
    for (int r = 1; r < n; r++) {
        if (fork() == 0) {
            run(r, n, reps, lanes, NULL);
            _exit(0);
        }
    }
    double *times = calloc((size_t)reps, sizeof *times);
    run(0, n, reps, lanes, times);
    for (int r = 1; r < n; r++) wait(NULL);
    /* The first tenth warms up. */
    int skip = reps / 10;
    qsort(times + skip, (size_t)(reps - skip), sizeof *times, cmp);
    printf("{\"np\":%d,\"bytes\":%ld,\"reps\":%d,\"median_s\":%.9f,\"min_s\":%.9f}\n", n, bytes,
           reps - skip, times[skip + (reps - skip) / 2], times[skip]);
    return 0;
}
