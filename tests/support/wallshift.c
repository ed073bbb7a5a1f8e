/*
 * wallshift: an LD_PRELOAD library that offsets ONLY the wall clock of a process.
 *
 * Used by tests/clock_steps.rs to step redis-server's wall clock forward and back while it
 * runs (libfaketime deadlocks Debian's jemalloc-linked redis-server at start-up).
 *
 * - clock_gettime(CLOCK_REALTIME / CLOCK_REALTIME_COARSE), gettimeofday() and time() return
 *   the real time plus an offset in milliseconds; every other clock (CLOCK_MONOTONIC,
 *   CLOCK_BOOTTIME, CPU clocks, ...) is passed through untouched.
 * - The offset is a signed decimal integer read from the file named by $WALLSHIFT_FILE
 *   (missing, unreadable or unparsable: the last value read, initially 0). The file is re-read
 *   at most every 5 ms, rate-limited on CLOCK_MONOTONIC. Write it atomically (write a temp
 *   file, rename it over the old one).
 * - The path is copied at load time (redis-server overwrites its environment for its process
 *   title). No malloc, no locks, no stdio: only open/read/close and atomics, so it is safe to call
 *   from inside the allocator and from any thread. The real functions are resolved with
 *   dlsym(RTLD_NEXT) in a constructor; until then (or if dlsym fails) raw syscalls are used.
 *
 * Build: cc -shared -fPIC -O2 -o wallshift.so wallshift.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
typedef int (*gettimeofday_fn)(struct timeval *, void *);

static _Atomic(clock_gettime_fn) real_clock_gettime;
static _Atomic(gettimeofday_fn) real_gettimeofday;
/* A copy: redis-server overwrites its environment block for its process title. */
static char control_path[4096];

static _Atomic int64_t offset_ms;
/* CLOCK_MONOTONIC ns of the last read of the control file; INT64_MIN: never read. */
static _Atomic int64_t last_read_ns = INT64_MIN;

#define REREAD_NS (5 * 1000 * 1000LL)

static int call_clock_gettime(clockid_t id, struct timespec *ts) {
    clock_gettime_fn f = atomic_load_explicit(&real_clock_gettime, memory_order_relaxed);
    if (f)
        return f(id, ts);
    return (int)syscall(SYS_clock_gettime, id, ts);
}

static void read_control_file(void) {
    if (!control_path[0])
        return;
    int fd = open(control_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = 0;
    int i = 0, neg = 0, digits = 0;
    while (buf[i] == ' ' || buf[i] == '\t')
        i++;
    if (buf[i] == '-' || buf[i] == '+')
        neg = buf[i++] == '-';
    int64_t v = 0;
    while (buf[i] >= '0' && buf[i] <= '9' && digits < 18) {
        v = v * 10 + (buf[i++] - '0');
        digits++;
    }
    if (digits == 0)
        return;
    atomic_store(&offset_ms, neg ? -v : v);
}

static int64_t current_offset_ms(void) {
    struct timespec m;
    if (call_clock_gettime(CLOCK_MONOTONIC, &m) == 0) {
        int64_t now = (int64_t)m.tv_sec * 1000000000LL + m.tv_nsec;
        int64_t last = atomic_load(&last_read_ns);
        /* Only the thread that wins the exchange re-reads; the others use the old value. */
        if ((last == INT64_MIN || now - last >= REREAD_NS) &&
            atomic_compare_exchange_strong(&last_read_ns, &last, now))
            read_control_file();
    }
    return atomic_load(&offset_ms);
}

static void shift_ns(int64_t *sec, int64_t *nsec, int64_t off_ms) {
    int64_t total = *sec * 1000000000LL + *nsec + off_ms * 1000000LL;
    int64_t s = total / 1000000000LL, ns = total % 1000000000LL;
    if (ns < 0) {
        ns += 1000000000LL;
        s -= 1;
    }
    *sec = s;
    *nsec = ns;
}

__attribute__((constructor)) static void wallshift_init(void) {
    const char *p = getenv("WALLSHIFT_FILE");
    if (p) {
        size_t i = 0;
        while (p[i] && i < sizeof control_path - 1) {
            control_path[i] = p[i];
            i++;
        }
        control_path[i] = 0;
    }
    atomic_store(&real_clock_gettime, (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime"));
    atomic_store(&real_gettimeofday, (gettimeofday_fn)dlsym(RTLD_NEXT, "gettimeofday"));
    read_control_file();
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int r = call_clock_gettime(id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        int64_t s = ts->tv_sec, ns = ts->tv_nsec;
        shift_ns(&s, &ns, current_offset_ms());
        ts->tv_sec = (time_t)s;
        ts->tv_nsec = (long)ns;
    }
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    gettimeofday_fn f = atomic_load_explicit(&real_gettimeofday, memory_order_relaxed);
    int r = f ? f(tv, tz) : (int)syscall(SYS_gettimeofday, tv, tz);
    if (r == 0) {
        int64_t s = tv->tv_sec, ns = (int64_t)tv->tv_usec * 1000;
        shift_ns(&s, &ns, current_offset_ms());
        tv->tv_sec = (time_t)s;
        tv->tv_usec = (suseconds_t)(ns / 1000);
    }
    return r;
}

time_t time(time_t *out) {
    struct timespec ts;
    time_t t = (time_t)-1;
    if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
        t = ts.tv_sec;
    if (out)
        *out = t;
    return t;
}
