// SPDX-License-Identifier: Apache-2.0
#define _GNU_SOURCE

// forkpub: publishes one process context of about 64 KiB (16 resource
// attributes of 4,000 bytes), then forks copies of itself on command, each
// under a UID it is given: copy-on-write children that publish the same
// large context while costing the host next to nothing, as one user (or a
// user minting UIDs) could start them. Line protocol: "ready PID", then
// "fork N UID..." forks N children, child i running as the i-th UID (round
// robin; the GID the same), and answers "ok N" once all exist. Children die
// with forkpub (PR_SET_PDEATHSIG); run it in its own process group.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "procctx.h"

#define NATTRS 16
#define VALUE_LEN 4000
#define MAX_UIDS 64

static int publish_large(void) {
  pc_buf res = {0}, out = {0};
  char key[32];
  static char value[VALUE_LEN + 1];
  memset(value, 'v', VALUE_LEN);
  value[VALUE_LEN] = 0;
  pc_kv_str(&res, 1, "service.name", "forkpub");
  for (int i = 0; i < NATTRS; i++) {
    snprintf(key, sizeof key, "forkpub.%02d", i);
    pc_kv_str(&res, 1, key, value);
  }
  pc_bytes(&out, 1, res.p, res.n);
  free(res.p);
  size_t size = 64 * 1024;
  if (out.n > size - 64) return -1;
  /* Without MADV_DONTFORK (unlike procctx.h): the children inherit it. */
  int fd = (int)syscall(SYS_memfd_create, "OTEL_CTX", 1U /* MFD_CLOEXEC */);
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) return -1;
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return -1;
  struct pc_header *h = p;
  memcpy((uint8_t *)p + 64, out.p, out.n);
  h->payload = (uint64_t)(uintptr_t)((uint8_t *)p + 64);
  h->payload_size = (uint32_t)out.n;
  h->version = 2;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  __atomic_store_n(&h->published_at_ns, pc_stamp(), __ATOMIC_RELEASE);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  memcpy(h->signature, "OTEL_CTX", 8);
  pc_hdr = h;
  free(out.p);
  pc_name();
  return 0;
}

int main(void) {
  (void)publish_thread_context; /* procctx.h's; this program publishes its own */
  signal(SIGPIPE, SIG_IGN);
  signal(SIGCHLD, SIG_IGN); /* children that fail to set up are reaped */
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (publish_large() != 0) {
    printf("err publish: %s\n", strerror(errno));
    return 1;
  }
  printf("ready %d\n", getpid());
  char line[4096];
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\r\n")] = 0;
    char *save = NULL;
    char *cmd = strtok_r(line, " ", &save);
    if (!cmd) { printf("err empty\n"); continue; }
    if (!strcmp(cmd, "fork")) {
      char *n_s = strtok_r(NULL, " ", &save);
      uid_t uids[MAX_UIDS];
      int nuids = 0;
      for (char *u; nuids < MAX_UIDS && (u = strtok_r(NULL, " ", &save));) uids[nuids++] = (uid_t)atoi(u);
      int n = n_s ? atoi(n_s) : 0;
      if (n <= 0 || nuids == 0) { printf("err fork N UID...\n"); continue; }
      pid_t parent = getpid();
      int made = 0;
      for (; made < n; made++) {
        pid_t c = fork();
        if (c < 0) break;
        if (c == 0) {
          prctl(PR_SET_PDEATHSIG, SIGKILL);
          if (getppid() != parent) _exit(0); /* forkpub died before prctl */
          uid_t u = uids[made % nuids];
          if (setresgid(u, u, u) != 0 || setresuid(u, u, u) != 0) _exit(1);
          for (;;) pause();
        }
      }
      if (made < n) printf("err fork after %d: %s\n", made, strerror(errno));
      else printf("ok %d\n", made);
    } else if (!strcmp(cmd, "exit")) {
      return 0;
    } else {
      printf("err unknown command\n");
    }
  }
  return 0;
}
