/* What one message costs between two processes on this machine, outside
 * taskfold: a 64-byte ping-pong over TCP loopback (TCP_NODELAY, each side
 * waiting in epoll_wait, as taskfold's runtime thread does) and a futex
 * ping-pong through shared memory (what a shared-memory control path's
 * wake-up would cost). Prints the one-way time of each, averaged over
 * 20,000 round trips.
 *
 *   gcc -O2 benches/scripts/pingpong.c -o /tmp/pingpong && /tmp/pingpong
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N 20000

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void fwait(atomic_int *a, int v) {
    while (atomic_load(a) == v)
        syscall(SYS_futex, a, FUTEX_WAIT, v, NULL, NULL, 0);
}

static void fwake(atomic_int *a) { syscall(SYS_futex, a, FUTEX_WAKE, 1, NULL, NULL, 0); }

/* One side of the TCP ping-pong: `first` sends before it waits. */
static void tcp_side(int c, int first) {
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int ep = epoll_create1(0);
    struct epoll_event e = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
    char b[64] = {0};
    for (int i = 0; i < N; i++) {
        if (first && write(c, b, sizeof b) != sizeof b) exit(1);
        epoll_wait(ep, &e, 1, -1);
        if (read(c, b, sizeof b) != sizeof b) exit(1);
        if (!first && write(c, b, sizeof b) != sizeof b) exit(1);
    }
}

int main(void) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    socklen_t len = sizeof a;
    if (bind(l, (void *)&a, sizeof a) || listen(l, 1) || getsockname(l, (void *)&a, &len))
        return 1;
    fflush(stdout);
    if (fork() == 0) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c, (void *)&a, sizeof a)) exit(1);
        tcp_side(c, 0);
        exit(0);
    }
    int c = accept(l, NULL, NULL);
    double t0 = now_us();
    tcp_side(c, 1);
    printf("tcp loopback + epoll, one way: %.2f us\n", (now_us() - t0) / N / 2);
    wait(NULL);

    atomic_int *f = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    f[0] = 0;
    f[1] = 0;
    fflush(stdout);
    if (fork() == 0) {
        for (int i = 0; i < N; i++) {
            fwait(&f[0], i);
            atomic_store(&f[1], i + 1);
            fwake(&f[1]);
        }
        exit(0);
    }
    t0 = now_us();
    for (int i = 0; i < N; i++) {
        atomic_store(&f[0], i + 1);
        fwake(&f[0]);
        fwait(&f[1], i);
    }
    printf("futex through shared memory, one way: %.2f us\n", (now_us() - t0) / N / 2);
    wait(NULL);
    return 0;
}
