/*
 * relay: the pty relay of bench/relayfloor.sh written in C, to tell what the
 * kernel's pty costs a relay from what Go's runtime does. It starts COMMAND
 * under a new pty (forkpty) and reads the master in a poll(2)/read(2) loop
 * until the command's side closes, as script(1) does. With -tee FILE it
 * writes every read to stdout and to FILE, unbuffered (script's two writes);
 * without it, it only reads. It prints bytes, seconds and MiB/s on stderr and
 * exits with 1 if the command did not exit 0.
 *
 *   cc -O2 -o bench/out/relay-c bench/ptyrelay/c/relay.c -lutil
 *   bench/out/relay-c [-tee FILE] COMMAND [ARGS...]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int write_all(int fd, const char *p, ssize_t n) {
	while (n > 0) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		p += k;
		n -= k;
	}
	return 0;
}

int main(int argc, char **argv) {
	int arg = 1, tee = -1;
	if (argc > 2 && strcmp(argv[1], "-tee") == 0) {
		tee = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (tee < 0) {
			perror(argv[2]);
			return 2;
		}
		arg = 3;
	}
	if (arg >= argc) {
		fprintf(stderr, "usage: relay [-tee FILE] COMMAND [ARGS...]\n");
		return 2;
	}
	int master;
	pid_t pid = forkpty(&master, NULL, NULL, NULL);
	if (pid < 0) {
		perror("forkpty");
		return 2;
	}
	if (pid == 0) {
		execvp(argv[arg], argv + arg);
		perror(argv[arg]);
		_exit(127);
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	static char buf[64 << 10];
	long long total = 0;
	struct pollfd p = {.fd = master, .events = POLLIN};
	for (;;) {
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			break;
		ssize_t n = read(master, buf, sizeof buf);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			break; /* EIO: the command's side is closed */
		total += n;
		if (tee >= 0 && (write_all(1, buf, n) < 0 || write_all(tee, buf, n) < 0)) {
			perror("write");
			return 2;
		}
	}
	int status = 0;
	waitpid(pid, &status, 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	fprintf(stderr, "%lld bytes in %.2fs: %.1f MiB/s\n", total, s, total / s / 1048576);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
