/* powercut's --delay-sync shim (LD_PRELOAD in the recording guest, issue 50): every fsync,
 * fdatasync, sync_file_range, msync and syncfs of the workload -- every thread, every child that
 * keeps the environment -- on a file whose path matches a glob is held for that glob's time before
 * it enters the kernel.  A program that syncs without libc (Go, a static binary) is not seen: the
 * recording compares what this shim saw with the syscall trace and says so.
 *
 * $POWERCUT_DELAY_SYNC: one rule a line, "NANOSECONDS<TAB>GLOB" (the first rule that matches wins).
 * A glob is matched (fnmatch, '*' crossing '/') against the file's absolute path and, under
 * $POWERCUT_MOUNT, its path relative to the recorded filesystem.
 * $POWERCUT_DELAY_SYNC_LOG: every sync call is appended there,
 * "CALL<TAB>NANOSECONDS<TAB>TID<TAB>CALLED<TAB>PATH" (NANOSECONDS 0: not held; TID the calling
 * thread; CALLED when the program called it, CLOCK_REALTIME seconds as strace -ttt prints them, so
 * the host can place the held call where the program made it), one write(2) each (O_APPEND: whole
 * lines from any thread or process).
 * errno is what the real call leaves. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_RULES 32
#define PATH_BYTES 1024

static struct { long long ns; char glob[256]; } rules[MAX_RULES];
static int nrules;
static char mnt[256];
static size_t mntlen;
static int logfd = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
    const char *spec = getenv("POWERCUT_DELAY_SYNC");
    const char *m = getenv("POWERCUT_MOUNT");
    const char *lp = getenv("POWERCUT_DELAY_SYNC_LOG");
    if (m && strlen(m) < sizeof mnt) {
        strcpy(mnt, m);
        mntlen = strlen(mnt);
    }
    while (spec && *spec && nrules < MAX_RULES) {
        const char *end = strchr(spec, '\n');
        size_t len = end ? (size_t)(end - spec) : strlen(spec);
        const char *tab = memchr(spec, '\t', len);
        if (tab && (size_t)(spec + len - tab - 1) < sizeof rules[0].glob) {
            rules[nrules].ns = strtoll(spec, NULL, 10);
            memcpy(rules[nrules].glob, tab + 1, spec + len - tab - 1);
            rules[nrules].glob[spec + len - tab - 1] = 0;
            nrules++;
        }
        spec = end ? end + 1 : spec + len;
    }
    if (lp && *lp)
        logfd = open(lp, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

static long long delay_for(const char *path) {
    const char *rel = NULL;
    if (mntlen && strncmp(path, mnt, mntlen) == 0 && path[mntlen] == '/')
        rel = path + mntlen + 1;
    for (int i = 0; i < nrules; i++)
        if (fnmatch(rules[i].glob, path, 0) == 0 || (rel && fnmatch(rules[i].glob, rel, 0) == 0))
            return rules[i].ns;
    return 0;
}

/* Hold the call if its file matches, and log it; errno as it was. */
static void gate(const char *call, const char *path) {
    int saved = errno;
    struct timespec called;
    clock_gettime(CLOCK_REALTIME, &called);
    long long ns = path[0] ? delay_for(path) : 0;
    if (ns > 0) {
        struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
            ;
    }
    if (logfd >= 0) {
        char line[PATH_BYTES + 64];
        int n = snprintf(line, sizeof line, "%s\t%lld\t%ld\t%lld.%06ld\t%s\n", call, ns, (long)syscall(SYS_gettid),
                         (long long)called.tv_sec, called.tv_nsec / 1000, path[0] ? path : "?");
        if (n > 0 && n < (int)sizeof line)
            (void)!write(logfd, line, (size_t)n);
    }
    errno = saved;
}

static void fd_path(int fd, char *path) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, path, PATH_BYTES - 1);
    path[k > 0 ? k : 0] = 0;
}

/* The file mapped at addr (/proc/self/maps), or "". */
static void map_path(const void *addr, char *path) {
    path[0] = 0;
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return;
    char line[PATH_BYTES + 128];
    uintptr_t a = (uintptr_t)addr;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int off = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &off) < 2 || a < lo || a >= hi)
            continue;
        if (off > 0 && line[off] == '/') {
            size_t len = strcspn(line + off, "\n");
            if (len >= PATH_BYTES)
                len = PATH_BYTES - 1;
            memcpy(path, line + off, len);
            path[len] = 0;
        }
        break;
    }
    fclose(f);
}

typedef int (*fd_call)(int);
typedef int (*range_call)(int, off64_t, off64_t, unsigned int);
typedef int (*map_call)(void *, size_t, int);
#define REAL(name, type) static type real_##name; if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

int fsync(int fd) {
    REAL(fsync, fd_call);
    char path[PATH_BYTES];
    pthread_once(&once, load);
    fd_path(fd, path);
    gate("fsync", path);
    return real_fsync(fd);
}

int fdatasync(int fd) {
    REAL(fdatasync, fd_call);
    char path[PATH_BYTES];
    pthread_once(&once, load);
    fd_path(fd, path);
    gate("fdatasync", path);
    return real_fdatasync(fd);
}

int syncfs(int fd) {
    REAL(syncfs, fd_call);
    char path[PATH_BYTES];
    pthread_once(&once, load);
    fd_path(fd, path);
    gate("syncfs", path);
    return real_syncfs(fd);
}

int sync_file_range(int fd, off64_t offset, off64_t nbytes, unsigned int flags) {
    REAL(sync_file_range, range_call);
    char path[PATH_BYTES];
    pthread_once(&once, load);
    fd_path(fd, path);
    gate("sync_file_range", path);
    return real_sync_file_range(fd, offset, nbytes, flags);
}

int msync(void *addr, size_t length, int flags) {
    REAL(msync, map_call);
    char path[PATH_BYTES];
    pthread_once(&once, load);
    map_path(addr, path);
    gate("msync", path);
    return real_msync(addr, length, flags);
}
