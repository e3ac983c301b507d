// SPDX-License-Identifier: Apache-2.0

// hostile: a publisher that points otelctx at a file page nobody touched.
//
// It publishes a valid OTEP 4719 process context (service "hostile", a
// thread-context key map of one key) and, on command, rewrites its header
// so that the payload pointer (and so the key map a reader re-reads) is
// an address in a mapping of a file it never touched: on a FUSE file
// system, reading that page waits for the file system's server. One
// worker thread publishes an OTEP 4947 record whose attribute uses a key
// index the published key map does not have, which makes a reader re-read
// the key map at the mapping.
//
// Build (test/hostile): cc -pthread -rdynamic -I testdata/publishers
//                          hostile.c testdata/publishers/otelctx_tls.c
//
// Commands (one per line, each answers one line "ok ..." or "err ..."):
//   mapfile PATH   map 64 KiB of PATH from offset 0 (where a TLS resolver
//                  would look for an ELF header), read-only and shared,
//                  without touching it; "ok ADDR"
//   context        "ok MAPPING STAMP PAYLOAD SIZE" of the published header
//   redirect ADDR  payload pointer := ADDR in place, the stamp unchanged
//                  (a reader polling the stamp sees no update); "ok"
//   move ADDR      payload pointer := ADDR with the update protocol and a
//                  new stamp (a reader polling the stamp re-reads); "ok STAMP"
//   overmap PATH   map the first page of PATH over the header's page
//                  (MAP_FIXED, read-only, shared), without touching it: a
//                  reader of the header now waits for PATH's file system;
//                  "ok ADDR". No command may read the header afterwards.
//   uffd           map 64 KiB of anonymous memory and register it with a
//                  userfaultfd whose faults nobody answers: a read of it
//                  (a fault, or process_vm_readv) waits until this process
//                  exits; "ok ADDR", or "err uffd ERRNO" where the kernel
//                  refuses userfaultfd
//   uffdclose      close that userfaultfd: a read waiting on it returns
//                  (the page reads as zeros); "ok"
//   storm          a thread republishes the same payload with a new stamp
//                  and calls prctl(PR_SET_VMA_ANON_NAME) in a loop, without
//                  pause, for the process's life; "ok"
//   run IDX        the worker publishes a record (trace id 4057..., span id
//                  0badc0de..., flags 1, attribute IDX=hostile), on a page
//                  of its own, and stays busy on its CPU (eBPF samplers see
//                  running threads only); "ok TID"
//   flip PATH      move the payload (a new stamp) to a page of its own; then
//                  a thread, as fast as it can and for the process's life,
//                  maps the first page of PATH over that page (MAP_FIXED,
//                  read-only, shared, never touched), then anonymous memory
//                  again, copies the payload back in and sets a new stamp:
//                  a reader polling the stamp keeps reading the payload,
//                  and finds either a valid payload or a page of PATH whose
//                  read waits for its file system; "ok ADDR" (the page)
//   fliprecord PATH  the same for the page of the worker's record (after
//                  run), which gets its bytes back each time, with no
//                  stamp; "ok ADDR" (the page)
//   selfread ADDR  a thread pread()s 4 KiB of this process's own memory at
//                  ADDR through /proc/self/mem: the kernel holds this
//                  process's mmap lock for reading while the page faults
//                  in, so with ADDR in a FUSE mapping whose READ is held,
//                  the lock stays held. It first starts the thread of
//                  mmapwait (a thread's stack is a mapping too); "ok TID
//                  MMAPTID" (the reading thread, the mmapwait thread)
//   mmapwait       the thread selfread started maps 4 KiB of anonymous
//                  memory: behind the held selfread it queues as a writer
//                  on the mmap lock, and every later reader of the lock (a
//                  read of this process's maps, pagemap, map_files,
//                  memory) queues behind it; "ok"
//   setidx IDX     the running worker's record now names key index IDX
//                  (valid cleared, the index written, valid set: no
//                  mapping made); "ok"
//   slowlock PATH OFF  the slow variant of selfread/mmapwait, for the rest
//                  of the process's life: a thread maps the page at OFF of
//                  PATH (read-only, shared, MADV_RANDOM: no read-around)
//                  and in a loop pread()s it through /proc/self/mem, then
//                  drops it (MADV_DONTNEED, POSIX_FADV_DONTNEED) so that the
//                  next pread faults it in again; a second thread, once the
//                  first waits for the page (state S or D), maps 4 KiB (queued
//                  as a writer, so that every later reader of the mmap
//                  lock queues too) and unmaps it. With PATH on a FUSE file
//                  system that answers each READ after a delay, the lock is
//                  held that long, again and again; "ok ADDR"
// On start it prints "ready PID".
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "procctx.h"

void otelctx_tls_set(void *);

struct __attribute__((packed)) otel_record {
  uint8_t trace_id[16];
  uint8_t span_id[8];
  uint8_t valid;
  uint8_t trace_flags;
  uint16_t attrs_data_size;
  uint8_t attrs_data[64];
};

/* The worker's record lives on a page of its own (fliprecord flips it);
   rec_value is what it holds. */
static struct otel_record *rec;
static struct otel_record rec_value;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long worker_tid;

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* page_alloc: a page of anonymous memory of its own, or NULL. */
static void *page_alloc(void) {
  void *p = mmap(NULL, page_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* new_stamp publishes the unchanged context again with the update
   protocol: a reader polling the stamp reads the payload again. */
static void new_stamp(void) {
  __atomic_store_n(&pc_hdr->published_at_ns, 0, __ATOMIC_RELEASE);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  __atomic_store_n(&pc_hdr->published_at_ns, pc_stamp(), __ATOMIC_RELEASE);
}

/* A page flipped between a page of a file (fd's first) and anonymous
   memory holding value (size bytes), as fast as the system calls go. */
struct flip {
  void *page;
  int fd;
  const void *value;
  size_t size;
  int stamp; /* a new stamp each time the value is back (the payload) */
};

static void *flipper(void *arg) {
  const struct flip *f = arg;
  for (;;) {
    if (mmap(f->page, page_size(), PROT_READ, MAP_SHARED | MAP_FIXED, f->fd, 0) == MAP_FAILED ||
        mmap(f->page, page_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
      /* The page would stay unmapped, or the file's: no longer the test. */
      perror("hostile: flip");
      _exit(2);
    }
    memcpy(f->page, f->value, f->size);
    if (f->stamp) new_stamp();
  }
  return NULL;
}

/* start_flip flips page over path's first page in a new thread; the
   file is opened here, so that a bad path is an error of the command.
   page must hold value already. 0, or -1. */
static int start_flip(void *page, const char *path, const void *value, size_t size, int stamp) {
  static struct flip flips[2]; /* flip and fliprecord, once each */
  static int n;
  if (n == 2) return -1;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct flip *f = &flips[n];
  *f = (struct flip){.page = page, .fd = fd, .value = value, .size = size, .stamp = stamp};
  pthread_t th;
  if (pthread_create(&th, NULL, flipper, f)) {
    close(fd);
    return -1;
  }
  n++;
  return 0;
}

static void *worker(void *arg) {
  (void)arg;
  otelctx_tls_set(rec);
  pthread_mutex_lock(&mu);
  worker_tid = syscall(SYS_gettid);
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  for (volatile uint64_t n = 0;; n++) {
  }
  return NULL;
}

static int run(int idx) {
  static const char v[] = "hostile";
  struct otel_record *r = &rec_value;
  for (int i = 0; i < 16; i++) r->trace_id[i] = (uint8_t)(i == 0 ? 0x40 : i == 1 ? 0x57 : i);
  static const uint8_t span[8] = {0x0b, 0xad, 0xc0, 0xde, 0, 0, 0, 1};
  memcpy(r->span_id, span, 8);
  r->trace_flags = 1;
  r->attrs_data[0] = (uint8_t)idx;
  r->attrs_data[1] = sizeof v - 1;
  memcpy(r->attrs_data + 2, v, sizeof v - 1);
  r->attrs_data_size = 2 + sizeof v - 1;
  r->valid = 1;
  rec = page_alloc();
  if (!rec) return -1;
  memcpy(rec, r, sizeof *r);
  pthread_t th;
  if (pthread_create(&th, NULL, worker, NULL)) return -1;
  pthread_mutex_lock(&mu);
  while (!worker_tid) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  return 0;
}

/* uffd_region: 64 KiB registered with a userfaultfd left open and never
   read, so every fault on it waits. The address, or 0 with errno set. */
static int uffd = -1;

static uint64_t uffd_region(void) {
  void *m = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 0;
  int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0;
  struct uffdio_api api = {.api = UFFD_API};
  if (ioctl(fd, UFFDIO_API, &api)) return 0;
  struct uffdio_register reg = {.range = {.start = (uint64_t)(uintptr_t)m, .len = 65536},
                                .mode = UFFDIO_REGISTER_MODE_MISSING};
  if (ioctl(fd, UFFDIO_REGISTER, &reg)) return 0;
  uffd = fd;
  return (uint64_t)(uintptr_t)m;
}

/* move_payload points the header at addr with the update protocol and
   a new stamp, which it returns. */
static uint64_t move_payload(uint64_t addr) {
  __atomic_store_n(&pc_hdr->published_at_ns, 0, __ATOMIC_RELEASE);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  pc_hdr->payload = addr;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  uint64_t stamp = pc_stamp();
  __atomic_store_n(&pc_hdr->published_at_ns, stamp, __ATOMIC_RELEASE);
  pc_name();
  return stamp;
}

static void *storm(void *arg) {
  (void)arg;
  for (;;) {
    new_stamp();
    pc_name();
  }
  return NULL;
}

/* The threads of selfread and mmapwait: each stores its TID, then blocks
   in the kernel. */
static uint64_t selfread_addr;
static long lock_tid;

static void *selfread(void *arg) {
  (void)arg;
  __atomic_store_n(&lock_tid, syscall(SYS_gettid), __ATOMIC_RELEASE);
  int fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  static char page[4096];
  if (fd >= 0) (void)pread(fd, page, sizeof page, (off_t)selfread_addr);
  return NULL;
}

/* The mmapwait thread is created by selfread, before the lock is held (a
   thread's stack is an mmap too), and waits for its command. */
static int mmap_go;

static void *mmapwait(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  __atomic_store_n(&lock_tid, syscall(SYS_gettid), __ATOMIC_RELEASE);
  while (!mmap_go) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  (void)mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return NULL;
}

/* slowlock's threads: the reader signals each pread it starts (slow_gen),
   the writer queues an mmap behind it once it waits for the page. */
static pthread_mutex_t slow_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slow_cv = PTHREAD_COND_INITIALIZER;
static unsigned long slow_gen;
static int slow_fd;
static off_t slow_off;
static char *slow_page;
static long slow_rtid;

static char task_state(long tid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  return p && p[1] && p[2] ? p[2] : 0;
}

static void *slowread(void *arg) {
  (void)arg;
  __atomic_store_n(&slow_rtid, syscall(SYS_gettid), __ATOMIC_RELEASE);
  int mem = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  static char page[4096];
  for (;;) {
    pthread_mutex_lock(&slow_mu);
    slow_gen++;
    pthread_cond_signal(&slow_cv);
    pthread_mutex_unlock(&slow_mu);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    ssize_t n = mem < 0 ? -1 : pread(mem, page, sizeof page, (off_t)(uintptr_t)slow_page);
    clock_gettime(CLOCK_MONOTONIC, &b);
    (void)madvise(slow_page, 4096, MADV_DONTNEED);
    (void)posix_fadvise(slow_fd, slow_off, 4096, POSIX_FADV_DONTNEED);
    /* Not faulted in from the file system (cached, or an error): no spin. */
    if (n < 0 || (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 1000000L) usleep(10000);
  }
  return NULL;
}

static void *slowwrite(void *arg) {
  (void)arg;
  unsigned long seen = 0;
  for (;;) {
    pthread_mutex_lock(&slow_mu);
    while (slow_gen == seen) pthread_cond_wait(&slow_cv, &slow_mu);
    seen = slow_gen;
    pthread_mutex_unlock(&slow_mu);
    long tid = __atomic_load_n(&slow_rtid, __ATOMIC_ACQUIRE);
    int i;
    /* Its wait for the READ is interruptible (S) at first, killable (D)
       once interrupted. */
    char st = 0;
    for (i = 0; i < 100 && (st = task_state(tid)) != 'S' && st != 'D'; i++) usleep(1000);
    if (i == 100) continue;
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) munmap(m, 4096);
  }
  return NULL;
}

static long start_locker(void *(*fn)(void *)) {
  pthread_t th;
  __atomic_store_n(&lock_tid, 0, __ATOMIC_RELEASE);
  if (pthread_create(&th, NULL, fn, NULL)) return -1;
  long tid;
  while (!(tid = __atomic_load_n(&lock_tid, __ATOMIC_ACQUIRE))) sched_yield();
  return tid;
}

int main(void) {
  if (publish_thread_context("hostile", "tlsdesc_v1_dev", "http.route") != 0) {
    fprintf(stderr, "hostile: publishing the process context failed\n");
    return 1;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready %d\n", getpid());
  char line[1024];
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\r\n")] = 0;
    char *arg = strchr(line, ' ');
    if (arg) *arg++ = 0;
    if (!strcmp(line, "mapfile") && arg) {
      int fd = open(arg, O_RDONLY | O_CLOEXEC);
      void *m = fd < 0 ? MAP_FAILED : mmap(NULL, 65536, PROT_READ, MAP_SHARED, fd, 0);
      if (fd >= 0) close(fd);
      if (m == MAP_FAILED) printf("err mapfile\n");
      else printf("ok %#" PRIx64 "\n", (uint64_t)(uintptr_t)m);
    } else if (!strcmp(line, "context")) {
      printf("ok %#" PRIx64 " %" PRIu64 " %#" PRIx64 " %" PRIu32 "\n", (uint64_t)(uintptr_t)pc_hdr,
             __atomic_load_n(&pc_hdr->published_at_ns, __ATOMIC_ACQUIRE), pc_hdr->payload, pc_hdr->payload_size);
    } else if (!strcmp(line, "redirect") && arg) {
      __atomic_store_n(&pc_hdr->payload, strtoull(arg, NULL, 0), __ATOMIC_RELEASE);
      printf("ok\n");
    } else if (!strcmp(line, "move") && arg) {
      printf("ok %" PRIu64 "\n", move_payload(strtoull(arg, NULL, 0)));
    } else if (!strcmp(line, "flip") && arg) {
      /* The payload's bytes, kept to copy back in, on a page of their own. */
      size_t size = pc_hdr->payload_size;
      void *value = malloc(size), *page = page_alloc();
      if (!value || !page || size > page_size()) {
        printf("err flip\n");
        continue;
      }
      memcpy(value, (void *)(uintptr_t)pc_hdr->payload, size);
      memcpy(page, value, size);
      move_payload((uint64_t)(uintptr_t)page);
      if (start_flip(page, arg, value, size, 1)) printf("err flip\n");
      else printf("ok %#" PRIx64 "\n", (uint64_t)(uintptr_t)page);
    } else if (!strcmp(line, "fliprecord") && arg) {
      if (!rec || start_flip(rec, arg, &rec_value, sizeof rec_value, 0)) printf("err fliprecord\n");
      else printf("ok %#" PRIx64 "\n", (uint64_t)(uintptr_t)rec);
    } else if (!strcmp(line, "overmap") && arg) {
      uintptr_t page = (uintptr_t)pc_hdr & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
      int fd = open(arg, O_RDONLY | O_CLOEXEC);
      void *m = fd < 0 ? MAP_FAILED : mmap((void *)page, (size_t)sysconf(_SC_PAGESIZE), PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
      if (fd >= 0) close(fd);
      if (m == MAP_FAILED) printf("err overmap\n");
      else printf("ok %#" PRIx64 "\n", (uint64_t)(uintptr_t)m);
    } else if (!strcmp(line, "uffd")) {
      uint64_t a = uffd_region();
      if (!a) printf("err uffd %d\n", errno);
      else printf("ok %#" PRIx64 "\n", a);
    } else if (!strcmp(line, "uffdclose")) {
      if (uffd < 0 || close(uffd)) printf("err uffdclose\n");
      else {
        uffd = -1;
        printf("ok\n");
      }
    } else if (!strcmp(line, "storm")) {
      pthread_t th;
      if (pthread_create(&th, NULL, storm, NULL)) printf("err storm\n");
      else printf("ok\n");
    } else if (!strcmp(line, "selfread") && arg) {
      static long mmap_tid;
      selfread_addr = strtoull(arg, NULL, 0);
      long tid = mmap_tid ? -1 : (mmap_tid = start_locker(mmapwait)) < 0 ? -1 : start_locker(selfread);
      if (tid < 0) printf("err selfread\n");
      else printf("ok %ld %ld\n", tid, mmap_tid);
    } else if (!strcmp(line, "mmapwait")) {
      pthread_mutex_lock(&mu);
      mmap_go = 1;
      pthread_cond_broadcast(&cv);
      pthread_mutex_unlock(&mu);
      printf("ok\n");
    } else if (!strcmp(line, "slowlock") && arg) {
      char *off = strchr(arg, ' ');
      if (off) *off++ = 0;
      int fd = off && !slow_page ? open(arg, O_RDONLY | O_CLOEXEC) : -1;
      slow_off = off ? (off_t)strtoll(off, NULL, 0) : 0;
      void *m = fd < 0 ? MAP_FAILED : mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, slow_off);
      pthread_t r, w;
      if (m == MAP_FAILED || madvise(m, 4096, MADV_RANDOM)) {
        printf("err slowlock\n");
      } else {
        slow_fd = fd;
        slow_page = m;
        if (pthread_create(&w, NULL, slowwrite, NULL) || pthread_create(&r, NULL, slowread, NULL)) printf("err slowlock\n");
        else printf("ok %#" PRIxPTR "\n", (uintptr_t)m);
      }
    } else if (!strcmp(line, "setidx") && arg) {
      /* Memory writes only: no mmap, which would wait behind a held lock. */
      if (!rec) printf("err setidx\n");
      else {
        struct otel_record *r = rec;
        __atomic_store_n(&r->valid, 0, __ATOMIC_SEQ_CST);
        r->attrs_data[0] = rec_value.attrs_data[0] = (uint8_t)atoi(arg);
        __atomic_store_n(&r->valid, 1, __ATOMIC_SEQ_CST);
        printf("ok\n");
      }
    } else if (!strcmp(line, "run") && arg) {
      if (worker_tid || run(atoi(arg))) printf("err run\n");
      else printf("ok %ld\n", worker_tid);
    } else {
      printf("err unknown command\n");
    }
  }
  /* A reader that stops this process must not break its system calls. */
  if (ferror(stdin)) {
    fprintf(stderr, "hostile: reading commands: %s\n", strerror(errno));
    return 1;
  }
  return 0;
}
