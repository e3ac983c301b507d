// SPDX-License-Identifier: Apache-2.0

// procctx.h: the part of testdata/publishers/otel_ctx_publisher.c that a
// thread-context publisher needs: publish an OTEP 4719 process context once,
// with service.name and the threadlocal.* reference data. Kept separate (and
// smaller) so the process-context publisher stays untouched.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct { uint8_t *p; size_t n, cap; } pc_buf;

static void pc_raw(pc_buf *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n) cap *= 2;
    b->p = realloc(b->p, cap);
    if (!b->p) abort();
    b->cap = cap;
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
}
static void pc_varint(pc_buf *b, uint64_t v) {
  uint8_t t[10];
  size_t i = 0;
  do { t[i] = v & 0x7f; v >>= 7; if (v) t[i] |= 0x80; i++; } while (v);
  pc_raw(b, t, i);
}
static void pc_bytes(pc_buf *b, int field, const void *p, size_t n) {
  pc_varint(b, ((uint64_t)field << 3) | 2);
  pc_varint(b, n);
  pc_raw(b, p, n);
}
/* KeyValue{key, AnyValue{string_value}} as field `field` of b. */
static void pc_kv_str(pc_buf *b, int field, const char *k, const char *v) {
  pc_buf any = {0}, kv = {0};
  pc_bytes(&any, 1, v, strlen(v));
  pc_bytes(&kv, 1, k, strlen(k));
  pc_bytes(&kv, 2, any.p, any.n);
  pc_bytes(b, field, kv.p, kv.n);
  free(any.p); free(kv.p);
}
/* KeyValue{key, AnyValue{array_value{values: string...}}} from "a,b,c". */
static void pc_kv_strarray(pc_buf *b, int field, const char *k, const char *csv) {
  pc_buf arr = {0}, any = {0}, kv = {0};
  char *copy = strdup(csv), *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    pc_buf item = {0};
    pc_bytes(&item, 1, tok, strlen(tok));
    pc_bytes(&arr, 1, item.p, item.n);
    free(item.p);
  }
  free(copy);
  pc_bytes(&any, 5, arr.p, arr.n);
  pc_bytes(&kv, 1, k, strlen(k));
  pc_bytes(&kv, 2, any.p, any.n);
  pc_bytes(b, field, kv.p, kv.n);
  free(arr.p); free(any.p); free(kv.p);
}

struct pc_header {
  char signature[8];
  uint32_t version;
  uint32_t payload_size;
  uint64_t published_at_ns;
  uint64_t payload;
};

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

static struct pc_header *pc_hdr; /* the mapping, once published */

/* Unconditional after every publication and update, as OTEP 4719 asks: it
 * fails without CONFIG_ANON_VMA_NAME, but an eBPF hook on its exit sees it. */
static void pc_name(void) {
  prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)pc_hdr, 64 * 1024, (unsigned long)"OTEL_CTX");
}

static uint64_t pc_stamp(void) {
  static uint64_t last;
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  if (t <= last) t = last + 1; /* same-ns updates are bumped */
  return last = t;
}

/* Publishes (memfd mapping, anonymous fallback; payload inline after the
 * header; signature written last) or, when already published, updates in
 * place with the OTEP 4719 update protocol (stamp 0, payload, new stamp). */
static int publish_thread_context(const char *service, const char *schema, const char *keymap) {
  pc_buf res = {0}, out = {0};
  pc_kv_str(&res, 1, "service.name", service);
  pc_bytes(&out, 1, res.p, res.n);
  pc_kv_str(&out, 2, "threadlocal.schema_version", schema);
  pc_kv_strarray(&out, 2, "threadlocal.attribute_key_map", keymap);
  free(res.p);
  size_t size = 64 * 1024;
  if (out.n > size - 64) return -1;
  if (pc_hdr) {
    __atomic_store_n(&pc_hdr->published_at_ns, 0, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    memcpy((uint8_t *)pc_hdr + 64, out.p, out.n);
    pc_hdr->payload_size = (uint32_t)out.n;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&pc_hdr->published_at_ns, pc_stamp(), __ATOMIC_RELEASE);
    free(out.p);
    pc_name();
    return 0;
  }
  void *p = MAP_FAILED;
  int fd = (int)syscall(SYS_memfd_create, "OTEL_CTX", 1U /* MFD_CLOEXEC */);
  if (fd >= 0) {
    if (ftruncate(fd, (off_t)size) == 0) p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
  }
  if (p == MAP_FAILED) p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -1;
  madvise(p, size, MADV_DONTFORK);
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
