// SPDX-License-Identifier: Apache-2.0

// scalepub: the processes of the scale test (test/scale). One parent forks
// the children and waits; every child dies with it (PR_SET_PDEATHSIG), so
// killing the parent's process group, or the parent, ends them all.
//
//   scalepub idle N THREADS PUBLISH   N children, each with THREADS sleeping
//                                     threads besides its main one; with
//                                     PUBLISH=1 each publishes a process
//                                     context (OTEP 4719) first
//   scalepub churn RATE LIFETIME      a new publishing child RATE times a
//                                     second, each exiting after LIFETIME s
//
// The parent prints "ready N" once N children (idle) are started, then
// one line per second in churn mode ("started N").
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

#define MAP_SIZE 4096
#define INLINE_OFF 64

struct otel_ctx_header {
  char signature[8];
  uint32_t version;
  uint32_t payload_size;
  uint64_t published_at_ns;
  uint64_t payload;
};

// put_len appends a protobuf length-delimited field (tag, length < 128).
static size_t put_len(uint8_t *b, size_t n, int field, const void *p, size_t len) {
  b[n++] = (uint8_t)(field << 3 | 2);
  b[n++] = (uint8_t)len;
  memcpy(b + n, p, len);
  return n + len;
}

// kv encodes KeyValue{key, AnyValue{string_value}}.
static size_t kv(uint8_t *b, const char *k, const char *v) {
  uint8_t any[128];
  size_t a = put_len(any, 0, 1, v, strlen(v));
  size_t n = put_len(b, 0, 1, k, strlen(k));
  return put_len(b, n, 2, any, a);
}

// publish maps a memfd named OTEL_CTX with the header and an inline
// payload: ProcessContext{resource: Resource{service.name, service.instance.id}}.
static void publish(long id) {
  char name[32], inst[32];
  snprintf(name, sizeof name, "scale-%ld", id % 100);
  snprintf(inst, sizeof inst, "scale-%d", getpid());
  uint8_t attr[128], res[256], out[300];
  size_t r = 0;
  r = put_len(res, r, 1, attr, kv(attr, "service.name", name));
  r = put_len(res, r, 1, attr, kv(attr, "service.instance.id", inst));
  size_t n = put_len(out, 0, 1, res, r);
  int fd = (int)syscall(SYS_memfd_create, "OTEL_CTX", 1U /* MFD_CLOEXEC */);
  if (fd < 0 || ftruncate(fd, MAP_SIZE) != 0) _exit(2);
  struct otel_ctx_header *h = mmap(NULL, MAP_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd);
  if (h == MAP_FAILED) _exit(2);
  madvise(h, MAP_SIZE, MADV_DONTFORK);
  memcpy((uint8_t *)h + INLINE_OFF, out, n);
  h->payload = (uint64_t)(uintptr_t)((uint8_t *)h + INLINE_OFF);
  h->payload_size = (uint32_t)n;
  h->version = 2;
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  __atomic_store_n(&h->published_at_ns, (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec, __ATOMIC_RELEASE);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  memcpy(h->signature, "OTEL_CTX", 8);
  prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)h, MAP_SIZE, (unsigned long)"OTEL_CTX");
}

static void *sleeper(void *arg) {
  (void)arg;
  for (;;) pause();
  return NULL;
}

// child runs in a forked child: it dies with the parent.
static void child(pid_t parent, long id, int threads, int pub, int lifetime) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(0); // the parent died before prctl
  if (pub) publish(id);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  for (int i = 0; i < threads; i++) {
    pthread_t t;
    if (pthread_create(&t, &attr, sleeper, NULL) != 0) _exit(3);
  }
  if (lifetime > 0) {
    sleep((unsigned)lifetime); // the child's life, not synchronisation
    _exit(0);
  }
  for (;;) pause();
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGCHLD, SIG_IGN); // exited children are reaped by the kernel
  pid_t self = getpid();
  if (argc == 5 && !strcmp(argv[1], "idle")) {
    long n = atol(argv[2]);
    int threads = atoi(argv[3]), pub = atoi(argv[4]);
    for (long i = 0; i < n; i++) {
      pid_t c = fork();
      if (c < 0) { perror("fork"); return 1; }
      if (c == 0) child(self, i, threads, pub, 0);
    }
    printf("ready %ld\n", n);
    for (;;) pause();
  }
  if (argc == 4 && !strcmp(argv[1], "churn")) {
    long rate = atol(argv[2]);
    int lifetime = atoi(argv[3]);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (long i = 0;; i++) {
      pid_t c = fork();
      if (c < 0) { perror("fork"); return 1; }
      if (c == 0) child(self, i, 0, 1, lifetime);
      if (i % rate == rate - 1) printf("started %ld\n", i + 1);
      next.tv_nsec += 1000000000L / rate; // paced on the clock, not on sleeps
      if (next.tv_nsec >= 1000000000L) { next.tv_sec++; next.tv_nsec -= 1000000000L; }
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
  }
  fprintf(stderr, "usage: scalepub idle N THREADS PUBLISH | scalepub churn RATE LIFETIME\n");
  return 2;
}
