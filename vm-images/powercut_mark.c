/* powercut-mark TEXT: insert TEXT as a mark into the dm-log-writes log of $POWERCUT_DM_NAME.
 * The fast path for workloads in any language: a few ioctls, no Python start-up.
 * Built by `powercut image build` with the host's cc; the Python entry point of the same name is
 * the fallback.  Exit 0 on success, 1 on failure (one line on stderr), 2 on usage.
 *
 * Ordered marks (as in marks.py): with $POWERCUT_ORDER_DEV set, first mark powercut-order-begin,
 * fsync that device (an empty flush through the log-writes target: every completed write is
 * logged), mark powercut-order-end, suspend and resume the target (every bio in flight completes),
 * then mark TEXT.
 *
 * The recording's fault plan (faults.py): with $POWERCUT_FAULT_PLAN set, a mark matching one of the
 * globs in $POWERCUT_FAULT_MARKS (one per line) while the plan is not spent ($POWERCUT_FAULT_STATE.done
 * absent) execs `powercut-fault hook TEXT`, which may switch the fault before this command returns. */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/dm-ioctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static int dm_call(int ctl, unsigned long cmd, const char *name, unsigned flags, const char *mark)
{
	size_t textlen = mark ? strlen(mark) : 0;
	size_t size = sizeof(struct dm_ioctl) + (mark ? sizeof(struct dm_target_msg) + 5 + textlen + 1 : 0);
	size = (size + 7) & ~(size_t)7;
	struct dm_ioctl *io = calloc(1, size);
	if (!io) {
		errno = ENOMEM;
		return -1;
	}
	io->version[0] = DM_VERSION_MAJOR;
	io->data_size = size;
	io->data_start = sizeof(struct dm_ioctl);
	io->flags = flags;
	strncpy(io->name, name, DM_NAME_LEN - 1);
	if (mark) {
		struct dm_target_msg *msg = (struct dm_target_msg *)((char *)io + io->data_start);
		memcpy(msg->message, "mark ", 5);
		memcpy(msg->message + 5, mark, textlen + 1);
	}
	int r = ioctl(ctl, cmd, io);
	int saved = errno;
	free(io);
	errno = saved;
	return r;
}

static int fail(const char *what, const char *name)
{
	fprintf(stderr, "powercut-mark: %s on %s: %s\n", what, name, strerror(errno));
	return 1;
}

/* Does mark TEXT move the recording's fault plan?  (faults.plan_mark decides; this only filters.) */
static int plan_wants(const char *text)
{
	const char *plan = getenv("POWERCUT_FAULT_PLAN"), *state = getenv("POWERCUT_FAULT_STATE");
	const char *globs = getenv("POWERCUT_FAULT_MARKS");
	if (!plan || !*plan || !state || !globs || !strncmp(text, "powercut-", 9))
		return 0;
	char done[4096];
	if (snprintf(done, sizeof done, "%s.done", state) >= (int)sizeof done || access(done, F_OK) == 0)
		return 0;
	char glob[512];
	for (const char *p = globs; *p;) {
		size_t n = strcspn(p, "\n");
		if (n < sizeof glob) {
			memcpy(glob, p, n);
			glob[n] = 0;
			if (n && fnmatch(glob, text, 0) == 0)
				return 1;
		}
		p += n + (p[n] == '\n');
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2 || !argv[1][0] || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		fprintf(stderr, "usage: powercut-mark TEXT   (e.g. powercut-mark ack:42; needs $POWERCUT_DM_NAME)\n");
		return 2;
	}
	const char *name = getenv("POWERCUT_DM_NAME");
	if (!name || !*name || strlen(name) >= DM_NAME_LEN) {
		fprintf(stderr, "powercut-mark: POWERCUT_DM_NAME is not set: marks work only inside a powercut recording\n");
		return 1;
	}
	if (strlen(argv[1]) > 512 - 32 - 1 || strpbrk(argv[1], " \t\n")) {
		fprintf(stderr, "powercut-mark: a mark is one word of at most 479 bytes\n");
		return 1;
	}
	int ctl = open("/dev/mapper/control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return fail("open /dev/mapper/control", name);
	const char *order = getenv("POWERCUT_ORDER_DEV");
	if (order && *order) {
		int fd = open(order, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return fail("open $POWERCUT_ORDER_DEV", order);
		if (dm_call(ctl, DM_TARGET_MSG, name, 0, "powercut-order-begin") < 0)
			return fail("mark powercut-order-begin", name);
		if (fsync(fd) < 0)
			return fail("flush before a mark", order);
		close(fd);
		if (dm_call(ctl, DM_TARGET_MSG, name, 0, "powercut-order-end") < 0)
			return fail("mark powercut-order-end", name);
		if (dm_call(ctl, DM_DEV_SUSPEND, name, DM_SUSPEND_FLAG | DM_SKIP_LOCKFS_FLAG, NULL) < 0)
			return fail("suspend", name);
		if (dm_call(ctl, DM_DEV_SUSPEND, name, 0, NULL) < 0)
			return fail("resume", name);
	}
	if (dm_call(ctl, DM_TARGET_MSG, name, 0, argv[1]) < 0) {
		fprintf(stderr, "powercut-mark: mark %s on %s: %s\n", argv[1], name, strerror(errno));
		return 1;
	}
	if (plan_wants(argv[1])) {
		execlp("powercut-fault", "powercut-fault", "hook", argv[1], (char *)NULL);
		return fail("exec powercut-fault (the fault plan)", name);
	}
	return 0;
}
