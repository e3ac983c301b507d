// SPDX-License-Identifier: Apache-2.0

// spinner: a multi-threaded target for the ptrace tests.
//
// Each worker thread increments its own counter about every millisecond, so
// a test can tell, by reading the counters with process_vm_readv, whether a
// thread runs. SIGUSR1 is counted by a handler (the re-injection test).
//
//   spinner N            start N sleeping workers
//   output:  ready PID COUNTERS_ADDR USR1_ADDR
//            thread IDX TID THREAD_POINTER      (one line per worker)
//   stdin:   vfork       a new thread calls vfork(); the child blocks on a
//                        pipe, so the thread sits in an uninterruptible wait
//                        (PTRACE_INTERRUPT cannot stop it). Answers: vfork TID
//            release     lets the vfork child exit. Answers: released
//            spawn       one more worker. Answers: thread IDX TID THREAD_POINTER
//            exit
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define MAXT 64
static volatile uint64_t counters[MAXT];
static volatile uint64_t usr1_count;
static int pipefd[2];

struct info { int idx; pid_t tid; uintptr_t tp; };
static struct info infos[MAXT];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int started;

static void on_usr1(int sig) { (void)sig; __atomic_fetch_add(&usr1_count, 1, __ATOMIC_SEQ_CST); }

static uintptr_t thread_pointer(void) {
#if defined(__x86_64__)
  uintptr_t tp; __asm__ volatile("mov %%fs:0, %0" : "=r"(tp)); return tp;
#elif defined(__aarch64__)
  uintptr_t tp; __asm__ volatile("mrs %0, tpidr_el0" : "=r"(tp)); return tp;
#else
  return 0;
#endif
}

static void *worker(void *arg) {
  int i = (int)(intptr_t)arg;
  pthread_mutex_lock(&mu);
  infos[i].idx = i;
  infos[i].tid = (pid_t)syscall(SYS_gettid);
  infos[i].tp = thread_pointer();
  started++;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  struct timespec ts = {0, 1000000};
  for (;;) {
    counters[i]++;
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static volatile pid_t vfork_tid;
static void *vforker(void *arg) {
  (void)arg;
  vfork_tid = (pid_t)syscall(SYS_gettid);
  pthread_mutex_lock(&mu);
  started++;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  // The parent thread waits (killable, not interruptible) until the child
  // exits; the child only uses raw syscalls on the shared memory.
  pid_t c = vfork();
  if (c == 0) {
    char b;
    // Its own copy of the write end closed: if the spinner is killed
    // before "release", the read ends (EOF) and the child does not outlive
    // it holding the test's output pipes.
    syscall(SYS_close, pipefd[1]);
    syscall(SYS_read, pipefd[0], &b, 1);
    syscall(SYS_exit, 0);
  }
  counters[MAXT - 1]++;
  struct timespec ts = {0, 1000000};
  for (;;) {
    counters[MAXT - 1]++;
    nanosleep(&ts, NULL);
  }
  return NULL;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  int workers;
  if (n < 1 || n > MAXT - 1) n = 4;
  signal(SIGUSR1, on_usr1);
  if (pipe(pipefd) != 0) return 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 0; i < n; i++) {
    pthread_t t;
    pthread_create(&t, NULL, worker, (void *)(intptr_t)i);
  }
  pthread_mutex_lock(&mu);
  while (started < n) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  workers = n;
  printf("ready %d %p %p\n", getpid(), (void *)counters, (void *)&usr1_count);
  for (int i = 0; i < n; i++) printf("thread %d %d %#lx\n", infos[i].idx, infos[i].tid, (unsigned long)infos[i].tp);
  char line[256];
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "vfork", 5) == 0) {
      pthread_t t;
      int want = started + 1;
      pthread_create(&t, NULL, vforker, NULL);
      pthread_mutex_lock(&mu);
      while (started < want) pthread_cond_wait(&cv, &mu);
      pthread_mutex_unlock(&mu);
      printf("vfork %d\n", vfork_tid);
    } else if (strncmp(line, "spawn", 5) == 0 && workers < MAXT - 1) {
      pthread_t t;
      int i = workers++, want = started + 1;
      pthread_create(&t, NULL, worker, (void *)(intptr_t)i);
      pthread_mutex_lock(&mu);
      while (started < want) pthread_cond_wait(&cv, &mu);
      pthread_mutex_unlock(&mu);
      printf("thread %d %d %#lx\n", infos[i].idx, infos[i].tid, (unsigned long)infos[i].tp);
    } else if (strncmp(line, "release", 7) == 0) {
      (void)!write(pipefd[1], "x", 1);
      printf("released\n");
    } else if (strncmp(line, "exit", 4) == 0) {
      return 0;
    }
  }
  return 0;
}
