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
// On start it prints "ready PID".
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
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
