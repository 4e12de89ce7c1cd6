/* powercut-mark TEXT: insert TEXT as a mark into the dm-log-writes log of $POWERCUT_DM_NAME.
 * The fast path for workloads in any language: one DM_TARGET_MSG ioctl, no Python start-up.
 * Built by `powercut image build` with the host's cc; the Python entry point of the same name is
 * the fallback.  Exit 0 on success, 1 on failure (one line on stderr), 2 on usage. */
#include <errno.h>
#include <fcntl.h>
#include <linux/dm-ioctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

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
	size_t textlen = strlen(argv[1]);
	if (textlen > 512 - 32 - 1 || strpbrk(argv[1], " \t\n")) {
		fprintf(stderr, "powercut-mark: a mark is one word of at most 479 bytes\n");
		return 1;
	}
	size_t size = sizeof(struct dm_ioctl) + sizeof(struct dm_target_msg) + 5 + textlen + 1;
	size = (size + 7) & ~(size_t)7;
	struct dm_ioctl *io = calloc(1, size);
	if (!io)
		return 1;
	io->version[0] = DM_VERSION_MAJOR;
	io->data_size = size;
	io->data_start = sizeof(struct dm_ioctl);
	strncpy(io->name, name, DM_NAME_LEN - 1);
	struct dm_target_msg *msg = (struct dm_target_msg *)((char *)io + io->data_start);
	memcpy(msg->message, "mark ", 5);
	memcpy(msg->message + 5, argv[1], textlen + 1);
	int fd = open("/dev/mapper/control", O_RDWR | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, DM_TARGET_MSG, io) < 0) {
		fprintf(stderr, "powercut-mark: mark %s on %s: %s\n", argv[1], name, strerror(errno));
		return 1;
	}
	return 0;
}
