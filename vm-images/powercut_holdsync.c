/* powercut-holdsync: run a program and hold each of its fsync, fdatasync, sync_file_range, msync
 * and syncfs calls on a file whose path matches a glob for that glob's time (--delay-sync, issue
 * 60).  Below libc: a seccomp filter sends those five system calls to this supervisor (seccomp user
 * notification), so every program is held alike -- a static Go binary, a program that drops root,
 * every thread and every child it forks -- and other system calls never stop.
 *
 *   powercut-holdsync [-l LOG] [-m MOUNT] [-r NS:GLOB]... -- PROGRAM [ARG]...
 *
 * -r: a rule, the hold in nanoseconds and the glob (the first rule that matches wins); a glob is
 *     matched (fnmatch, '*' crossing '/') against the file's absolute path and, under MOUNT, its
 *     path relative to MOUNT.
 * -l: every sync call is appended to LOG, "CALL<TAB>NS<TAB>TID<TAB>CALLED<TAB>PATH" (NS 0: not
 *     held; TID the calling thread; CALLED when the kernel notified the call, CLOCK_REALTIME seconds
 *     as strace -ttt prints them); its first line, "# powercut-holdsync listening", says the filter
 *     is in place.
 *
 * How: the supervisor forks; the child installs the filter (SECCOMP_FILTER_FLAG_NEW_LISTENER, and
 * WAIT_KILLABLE_RECV where the kernel has it, so a signal during a hold does not restart it), hands
 * the listener to the parent over a socketpair and execs PROGRAM.  The parent polls the listener
 * and the child's pidfd, with the nearest hold's end as the timeout; for each notification it reads
 * the path (/proc/TID/fd/N; for msync the mapping in /proc/TID/maps), checks that the notification
 * is still valid, and answers SECCOMP_USER_NOTIF_FLAG_CONTINUE at once or when the hold ends: the
 * call then runs in the kernel as it would have.  Under strace without --seccomp-bpf (plain ptrace),
 * the trace shows each held call where the program made it, with the hold in its duration.
 *
 * When PROGRAM exits, what is held is answered at once, calls of processes it left behind are
 * answered without a hold for up to half a second, and the supervisor exits with PROGRAM's status
 * (or is killed by its signal).  Exit 125: the filter could not be installed (the line says why). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "powercut-holdsync: unknown architecture"
#endif

#ifndef SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
#define SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (1UL << 5)
#endif

#define MAX_RULES 32
#define MAX_HELD 4096
#define PATH_BYTES 1024
#define GRACE_NS 500000000LL

static const char *me = "powercut-holdsync";

struct rule {
    long long ns;
    const char *glob;
};

struct held {
    uint64_t id;
    long long due;   /* CLOCK_MONOTONIC nanoseconds */
};

static struct rule rules[MAX_RULES];
static int nrules;
static const char *mnt = "";
static int logfd = -1;
static struct held held[MAX_HELD];
static int nheld;

static long long now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void usage(void) {
    fprintf(stderr, "usage: %s [-l LOG] [-m MOUNT] [-r NS:GLOB]... -- PROGRAM [ARG]...\n", me);
    exit(2);
}

static void add_rule(const char *text) {
    char *end;
    long long ns = strtoll(text, &end, 10);
    if (end == text || *end != ':' || end[1] == 0 || ns < 0) {
        fprintf(stderr, "%s: -r %s: expected NANOSECONDS:GLOB\n", me, text);
        exit(2);
    }
    if (nrules == MAX_RULES) {
        fprintf(stderr, "%s: at most %d rules\n", me, MAX_RULES);
        exit(2);
    }
    rules[nrules].ns = ns;
    rules[nrules].glob = end + 1;
    nrules++;
}

/* The hold for a file, 0 when no rule matches it. */
static long long hold_for(const char *path) {
    size_t len = strlen(mnt);
    const char *rel = NULL;
    if (len && strncmp(path, mnt, len) == 0 && path[len] == '/')
        rel = path + len + 1;
    for (int i = 0; i < nrules; i++) {
        if (fnmatch(rules[i].glob, path, 0) == 0)
            return rules[i].ns;
        if (rel && fnmatch(rules[i].glob, rel, 0) == 0)
            return rules[i].ns;
    }
    return 0;
}

static struct sock_filter insns[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fsync, 5, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fdatasync, 4, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_sync_file_range, 3, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_msync, 2, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_syncfs, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
};

static const char *call_name(int nr) {
    switch (nr) {
    case SYS_fsync:
        return "fsync";
    case SYS_fdatasync:
        return "fdatasync";
    case SYS_sync_file_range:
        return "sync_file_range";
    case SYS_msync:
        return "msync";
    case SYS_syncfs:
        return "syncfs";
    }
    return "?";
}

static int install(int flags, struct sock_fprog *prog) {
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, prog);
}

/* The child: the filter, its listener to the parent, then the program.  Never returns. */
static void child(int sock, char **argv) {
    struct sock_fprog prog = {sizeof insns / sizeof insns[0], insns};
    int flags = SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
    int listener = install(flags, &prog);
    if (listener < 0 && errno == EINVAL) {   /* a kernel before 5.19 */
        flags = SECCOMP_FILTER_FLAG_NEW_LISTENER;
        listener = install(flags, &prog);
    }
    if (listener < 0 && errno == EACCES) {   /* not root: without new privileges, as seccomp asks */
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        listener = install(flags, &prog);
    }
    if (listener < 0) {
        fprintf(stderr, "%s: cannot install the seccomp filter that holds syncs: %s\n", me, strerror(errno));
        _exit(125);
    }
    char byte = 0;
    char control[CMSG_SPACE(sizeof(int))];
    memset(control, 0, sizeof control);
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &listener, sizeof(int));
    if (sendmsg(sock, &msg, 0) != 1 || read(sock, &byte, 1) != 1)
        _exit(125);   /* the parent is gone: nothing would answer a sync */
    close(listener);
    close(sock);
    execvp(argv[0], argv);
    fprintf(stderr, "%s: cannot run %s: %s\n", me, argv[0], strerror(errno));
    _exit(127);
}

static int receive_listener(int sock) {
    char byte;
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
    if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS)
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

static void fd_path(pid_t tid, long long fd, char *path) {
    char link[64];
    snprintf(link, sizeof link, "/proc/%d/fd/%lld", (int)tid, fd);
    ssize_t k = readlink(link, path, PATH_BYTES - 1);
    path[k > 0 ? k : 0] = 0;
}

/* The file mapped at addr in the thread's address space, or "". */
static void map_path(pid_t tid, unsigned long long addr, char *path) {
    char name[64];
    path[0] = 0;
    snprintf(name, sizeof name, "/proc/%d/maps", (int)tid);
    FILE *f = fopen(name, "re");
    if (!f)
        return;
    char line[PATH_BYTES + 128];
    while (fgets(line, sizeof line, f)) {
        unsigned long long lo, hi;
        int off = 0;
        if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %n", &lo, &hi, &off) < 2 || addr < lo || addr >= hi)
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

static void log_call(const char *call, long long ns, pid_t tid, long long called, const char *path) {
    if (logfd < 0)
        return;
    char line[PATH_BYTES + 96];
    int n = snprintf(line, sizeof line, "%s\t%lld\t%d\t%lld.%06lld\t%s\n", call, ns, (int)tid,
                     called / 1000000000LL, (called % 1000000000LL) / 1000, path[0] ? path : "?");
    if (n > 0 && n < (int)sizeof line)
        (void)!write(logfd, line, (size_t)n);
}

/* Let the call run (an id no longer valid -- its thread was killed -- is nothing to answer). */
static void answer(int listener, uint64_t id) {
    struct seccomp_notif_resp resp;
    memset(&resp, 0, sizeof resp);
    resp.id = id;
    resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    (void)ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
}

/* One notification: answered at once, or held until its rule's time has passed. */
static void serve(int listener, int holding) {
    struct seccomp_notif req;
    memset(&req, 0, sizeof req);
    if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) < 0)
        return;   /* ENOENT: the caller was interrupted before we read it; it will call again */
    long long called = now_ns(CLOCK_REALTIME);
    char path[PATH_BYTES];
    if (req.data.nr == SYS_msync)
        map_path((pid_t)req.pid, req.data.args[0], path);
    else
        fd_path((pid_t)req.pid, (long long)(int)req.data.args[0], path);
    if (ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &req.id) < 0)
        return;   /* the thread is gone; the path may be another process's */
    long long ns = holding && path[0] ? hold_for(path) : 0;
    log_call(call_name(req.data.nr), ns, (pid_t)req.pid, called, path);
    if (ns == 0 || nheld == MAX_HELD) {
        answer(listener, req.id);
        return;
    }
    held[nheld].id = req.id;
    held[nheld].due = now_ns(CLOCK_MONOTONIC) + ns;
    nheld++;
}

/* Answer every hold that is due (all of them with ``all``); the milliseconds to the next one, -1 none. */
static int release(int listener, int all) {
    long long now = now_ns(CLOCK_MONOTONIC);
    long long next = -1;
    int kept = 0;
    for (int i = 0; i < nheld; i++) {
        if (all || held[i].due <= now) {
            answer(listener, held[i].id);
            continue;
        }
        if (next < 0 || held[i].due < next)
            next = held[i].due;
        held[kept++] = held[i];
    }
    nheld = kept;
    if (next < 0)
        return -1;
    return (int)((next - now + 999999) / 1000000);
}

static int exit_like(int status) {
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    int sig = WTERMSIG(status);
    signal(sig, SIG_DFL);
    kill(getpid(), sig);
    return 128 + sig;
}

int main(int argc, char **argv) {
    const char *logpath = NULL;
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (i + 1 >= argc)
            usage();
        if (strcmp(argv[i], "-l") == 0)
            logpath = argv[++i];
        else if (strcmp(argv[i], "-m") == 0)
            mnt = argv[++i];
        else if (strcmp(argv[i], "-r") == 0)
            add_rule(argv[++i]);
        else
            usage();
    }
    if (i + 1 >= argc)
        usage();
    char **program = argv + i + 1;
    if (logpath) {
        logfd = open(logpath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (logfd < 0) {
            fprintf(stderr, "%s: cannot open %s: %s\n", me, logpath, strerror(errno));
            return 2;
        }
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        fprintf(stderr, "%s: socketpair: %s\n", me, strerror(errno));
        return 125;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%s: fork: %s\n", me, strerror(errno));
        return 125;
    }
    if (pid == 0) {
        close(sv[0]);
        if (logfd >= 0)
            close(logfd);
        child(sv[1], program);
    }
    close(sv[1]);
    int listener = receive_listener(sv[0]);
    if (listener >= 0) {
        static const char ready[] = "# powercut-holdsync listening\n";
        if (logfd >= 0)
            (void)!write(logfd, ready, sizeof ready - 1);
        (void)!write(sv[0], "", 1);
    }
    close(sv[0]);
    int status = 0;
    if (listener < 0) {   /* the child said why on stderr */
        waitpid(pid, &status, 0);
        return exit_like(status);
    }
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    long long end = -1;   /* once the program has exited: when to stop serving what it left */
    for (;;) {
        int timeout = release(listener, 0);
        if (end >= 0) {
            long long left = (end - now_ns(CLOCK_MONOTONIC)) / 1000000;
            if (left <= 0)
                break;
            timeout = (int)left;
        } else if (pidfd < 0 && (timeout < 0 || timeout > 50)) {
            timeout = 50;   /* no pidfd (a kernel before 5.3): look for the exit every 50 ms */
        }
        struct pollfd fds[2] = {{listener, POLLIN, 0}, {pidfd, POLLIN, 0}};
        int n = poll(fds, end < 0 && pidfd >= 0 ? 2 : 1, timeout);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "%s: poll: %s\n", me, strerror(errno));
            break;
        }
        if (n > 0 && (fds[0].revents & POLLIN))
            serve(listener, end < 0);
        if (n > 0 && (fds[0].revents & (POLLHUP | POLLERR)) && end >= 0)
            break;   /* no process under the filter is left */
        if (end < 0 && waitpid(pid, &status, WNOHANG) == pid) {
            release(listener, 1);
            end = now_ns(CLOCK_MONOTONIC) + GRACE_NS;
        }
    }
    release(listener, 1);
    if (end < 0)
        waitpid(pid, &status, 0);
    return exit_like(status);
}
