/*
 * The MPI side of `taskfold bench compare`: MPI_Reduce / MPI_Ireduce of f32
 * sums under the same scenarios, data, root and seeded delays as the
 * taskfold side (apps/src/bench/compare/rank.rs). The harness compiles this
 * file with each MPI's own compiler wrapper (mpicc.openmpi, mpicc.mpich)
 * and runs it with that MPI's launcher.
 *
 * Every repetition: MPI_Barrier, t0, [delay], contribute, result, t1. The
 * figure of a repetition is max over ranks of (t1 - t0); the root's result
 * is verified after t1, outside the timed region (an allreduce's or a
 * broadcast's on every rank, after an MPI_Barrier). The tail of a repetition
 * is the root's result time minus the latest contribution time over ranks
 * (CLOCK_MONOTONIC is shared by the processes of one node).
 *
 * Rank 0 prints one JSON object per line on stdout:
 *   {"scenario":"quiet","np":8,"size":8388608,"k":1,"times_s":[...],"tails_s":[...]}
 *
 * Arguments: --scenario quiet|slow|stagger|concurrent --sizes B1,B2,..
 *   --reps N --warmup W --root R [--slow-rank S --delay-us D1,D2,..]
 *   [--jitter-us J1,J2,.. --seed X] [--k K1,K2,..]
 *   [--collective reduce|allreduce|broadcast]
 * With `allreduce` the calls are MPI_Allreduce / MPI_Iallreduce, with
 * `broadcast` MPI_Bcast / MPI_Ibcast of the root's send buffer; either
 * result is verified on every rank.
 * (Background load is started by the harness around the `quiet` scenario.)
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXLIST 64

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The seeded delay of (seed, rep, rank), as a fraction in [0, 1): the same
 * function as taskfold's side, so both see identical arrival orders. */
static uint64_t splitmix64(uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double delay_fraction(uint64_t seed, uint64_t rep, uint64_t rank) {
    uint64_t x = splitmix64(seed + rep * 0x9E3779B97F4A7C15ull + rank * 0xBF58476D1CE4E5B9ull);
    return (double)(x >> 11) / 9007199254740992.0;
}

/* A slow rank computes: it burns the CPU, it does not sleep. */
static void busy_spin(double seconds) {
    double end = now_s() + seconds;
    volatile double acc = 0.0;
    while (now_s() < end) {
        for (int i = 0; i < 1000; i++) acc += (double)i * 1e-9;
    }
}

/* An arriving rank waits without using the CPU. */
static void sleep_s(double seconds) {
    if (seconds <= 0) return;
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

static int parse_list(const char *s, double *out) {
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t && n < MAXLIST; t = strtok_r(NULL, ",", &save))
        out[n++] = strtod(t, NULL);
    free(copy);
    return n;
}

static void print_array(const char *name, const double *v, int n) {
    printf(",\"%s\":[", name);
    for (int i = 0; i < n; i++) printf("%s%.9g", i ? "," : "", v[i]);
    printf("]");
}

int main(int argc, char **argv) {
    /* `--print-delay SEED REP RANK`: the harness checks that this file and
     * taskfold's side compute the same seeded delays. */
    if (argc == 5 && !strcmp(argv[1], "--print-delay")) {
        printf("%.17g\n", delay_fraction(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10),
                                         strtoull(argv[4], NULL, 10)));
        return 0;
    }
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);

    const char *scenario = "quiet", *collective = "reduce";
    double sizes[MAXLIST], delays[MAXLIST] = {0}, jitters[MAXLIST] = {0}, ks[MAXLIST] = {1};
    int nsizes = 0, nks = 1, reps = 10, warmup = 2, root = 1, slow = 2;
    uint64_t seed = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--scenario")) scenario = v;
        else if (!strcmp(k, "--sizes")) nsizes = parse_list(v, sizes);
        else if (!strcmp(k, "--reps")) reps = atoi(v);
        else if (!strcmp(k, "--warmup")) warmup = atoi(v);
        else if (!strcmp(k, "--root")) root = atoi(v);
        else if (!strcmp(k, "--slow-rank")) slow = atoi(v);
        else if (!strcmp(k, "--delay-us")) parse_list(v, delays);
        else if (!strcmp(k, "--jitter-us")) parse_list(v, jitters);
        else if (!strcmp(k, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--k")) nks = parse_list(v, ks);
        else if (!strcmp(k, "--collective")) collective = v;
        else {
            if (rank == 0) fprintf(stderr, "reduce_bench: unknown option %s\n", k);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (root >= np) root = np - 1;
    int concurrent = !strcmp(scenario, "concurrent");
    int all = !strcmp(collective, "allreduce"), bcast = !strcmp(collective, "broadcast");
    if (!all && !bcast && strcmp(collective, "reduce")) {
        if (rank == 0) fprintf(stderr, "reduce_bench: unknown collective %s\n", collective);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    float expected = bcast ? (float)(root + 1) : (float)np * (float)(np + 1) / 2.0f;
    /* Ranks whose result is verified: the root, or every rank. */
    int checks = all || bcast || rank == root;
    int failed = 0;

    for (int si = 0; si < nsizes; si++) {
        for (int ki = 0; ki < (concurrent ? nks : 1); ki++) {
            size_t bytes = (size_t)sizes[si];
            size_t n = bytes / sizeof(float);
            if (n == 0) n = 1;
            int k = concurrent ? (int)ks[ki] : 1;
            float **send = malloc(sizeof(float *) * k), **recv = malloc(sizeof(float *) * k);
            for (int j = 0; j < k; j++) {
                send[j] = malloc(n * sizeof(float));
                recv[j] = malloc(n * sizeof(float));
                for (size_t e = 0; e < n; e++) send[j][e] = (float)(rank + 1);
            }
            MPI_Request *reqs = malloc(sizeof(MPI_Request) * k);
            MPI_Status *stats = malloc(sizeof(MPI_Status) * k);
            double *times = calloc(reps, sizeof(double)), *stamps = calloc(reps, sizeof(double));
            double *done = calloc(reps, sizeof(double));
            for (int rep = 0; rep < warmup + reps; rep++) {
                for (int j = 0; j < k && checks; j++) memset(recv[j], 0, n * sizeof(float));
                /* A broadcast sends the root's receive buffer, filled
                 * from its send buffer before the clock starts. */
                for (int j = 0; j < k && bcast && rank == root; j++)
                    memcpy(recv[j], send[j], n * sizeof(float));
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = now_s();
                if (!strcmp(scenario, "slow") && rank == slow) busy_spin(delays[si] * 1e-6);
                if (!strcmp(scenario, "stagger"))
                    sleep_s(delay_fraction(seed, (uint64_t)rep, (uint64_t)rank) * jitters[si] * 1e-6);
                double stamp = now_s();
                if (concurrent) {
                    for (int j = 0; j < k; j++) {
                        if (all)
                            MPI_Iallreduce(send[j], recv[j], (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &reqs[j]);
                        else if (bcast)
                            MPI_Ibcast(recv[j], (int)n, MPI_FLOAT, root, MPI_COMM_WORLD, &reqs[j]);
                        else
                            MPI_Ireduce(send[j], recv[j], (int)n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD, &reqs[j]);
                    }
                    MPI_Waitall(k, reqs, stats);
                } else if (all) {
                    MPI_Allreduce(send[0], recv[0], (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                } else if (bcast) {
                    MPI_Bcast(recv[0], (int)n, MPI_FLOAT, root, MPI_COMM_WORLD);
                } else {
                    MPI_Reduce(send[0], recv[0], (int)n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
                }
                double t1 = now_s();
                /* Every rank checks, after a barrier: no rank's check takes
                 * a core from a rank still waiting (as the taskfold side). */
                if (all || bcast)
                    MPI_Barrier(MPI_COMM_WORLD);
                if (checks)
                    for (int j = 0; j < k; j++)
                        for (size_t e = 0; e < n; e++)
                            if (recv[j][e] != expected) { failed = 1; break; }
                if (rep >= warmup) {
                    times[rep - warmup] = t1 - t0;
                    stamps[rep - warmup] = stamp;
                    done[rep - warmup] = rank == root ? t1 : 0.0;
                }
            }
            double *mt = calloc(reps, sizeof(double)), *ms = calloc(reps, sizeof(double));
            double *md = calloc(reps, sizeof(double));
            MPI_Reduce(times, mt, reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            MPI_Reduce(stamps, ms, reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            MPI_Reduce(done, md, reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (rank == 0) {
                for (int r = 0; r < reps; r++) md[r] -= ms[r];
                printf("{\"scenario\":\"%s\",\"np\":%d,\"size\":%zu,\"k\":%d", scenario, np, bytes, k);
                print_array("times_s", mt, reps);
                print_array("tails_s", md, reps);
                printf("}\n");
                fflush(stdout);
            }
            for (int j = 0; j < k; j++) { free(send[j]); free(recv[j]); }
            free(send); free(recv); free(reqs); free(stats); free(times); free(stamps); free(done);
            free(mt); free(ms); free(md);
        }
    }
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_failed && rank == 0) fprintf(stderr, "reduce_bench: WRONG RESULT at the root\n");
    MPI_Finalize();
    return any_failed ? 1 : 0;
}
