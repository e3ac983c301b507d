// SPDX-License-Identifier: Apache-2.0
//
// A process whose environment (what /proc/PID/environ shows: the range the
// kernel keeps as env_start..env_end) is moved with prctl(PR_SET_MM) to
// memory the test chose, then waits for a line on stdin.
//   environ_helper big MB    MB megabytes of padding variables, then
//                            OTEL_SERVICE_NAME=big
//   environ_helper file PATH one page of the file PATH (e.g. on FUSE)
// Needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <linux/prctl.h>
#include <unistd.h>

// set_env moves the environment with PR_SET_MM_MAP, which needs
// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE (in the process's user
// namespace); the other fields keep their values, read from /proc/self/stat.
static int set_env(char *start, char *end) {
	char buf[4096];
	int fd = open("/proc/self/stat", O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	unsigned long long f[64] = {0};
	int field = 2; // ')' ends field 2
	for (p++; *p && field < 63;) {
		while (*p == ' ')
			p++;
		field++;
		f[field] = strtoull(p, &p, 10);
		while (*p && *p != ' ')
			p++;
	}
	struct prctl_mm_map m = {
		.start_code = f[26], .end_code = f[27], .start_stack = f[28],
		.start_data = f[45], .end_data = f[46], .start_brk = f[47],
		.brk = (unsigned long)sbrk(0),
		.arg_start = f[48], .arg_end = f[49],
		.env_start = (unsigned long)start, .env_end = (unsigned long)end,
		.exe_fd = (__u32)-1,
	};
	return prctl(PR_SET_MM, PR_SET_MM_MAP, (unsigned long)&m, sizeof m, 0);
}

int main(int argc, char **argv) {
	if (argc < 3)
		return 2;
	char *start, *end;
	if (strcmp(argv[1], "big") == 0) {
		size_t size = (size_t)atol(argv[2]) << 20;
		const char *last = "OTEL_SERVICE_NAME=big";
		start = malloc(size + 64);
		if (!start)
			return 3;
		size_t off = 0;
		for (int i = 0; off + 64 < size; i++) {
			int n = snprintf(start + off, 64, "PAD_%d=0123456789abcdef0123456789abcdef", i);
			off += n + 1;
		}
		strcpy(start + off, last);
		end = start + off + strlen(last) + 1;
	} else if (strcmp(argv[1], "file") == 0) {
		long page = sysconf(_SC_PAGESIZE);
		int fd = open(argv[2], O_RDONLY);
		if (fd < 0)
			return 4;
		start = mmap(NULL, page, PROT_READ, MAP_PRIVATE, fd, 0);
		if (start == MAP_FAILED)
			return 5;
		end = start + page;
	} else {
		return 2;
	}
	if (set_env(start, end) != 0) {
		perror("prctl");
		return 6;
	}
	printf("ready\n");
	fflush(stdout);
	char line[16];
	if (read(0, line, sizeof line) < 0)
		return 7;
	return 0;
}
