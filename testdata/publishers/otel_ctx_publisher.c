// SPDX-License-Identifier: Apache-2.0

// otel_ctx_publisher: publishes an OpenTelemetry process context (OTEP 4719)
// the way an SDK does, and lets a test drive it line by line on stdin.
//
// Build: cc -O2 -pthread -o otel_ctx_publisher otel_ctx_publisher.c
// Run:   otel_ctx_publisher            (commands on stdin, replies on stdout)
//        otel_ctx_publisher --demo     (publish a demo service, update it every 60s)
//        otel_ctx_publisher --no-aslr  (re-exec itself, same PID, without address
//                                       space randomisation: two such processes
//                                       running the same commands map their
//                                       context at the same address)
//
// Commands (one per line; every command answers one line "ok ..." or "err ..."):
//   set KEY VALUE        resource string attribute (published on next publish)
//   setint KEY N         resource int attribute
//   extra KEY VALUE      ProcessContext.attributes string entry (field 2)
//   schema VERSION       threadlocal.schema_version
//   keymap a,b,c         threadlocal.attribute_key_map
//   nested N OUTER INNER N resource attributes hostile.nested.I, each an array
//                        of OUTER arrays of INNER empty AnyValues (tiny values
//                        that cost a reader far more than their bytes)
//   entityrefs N         N resource entity_refs (types hostile.entity.I), each
//                        identified by service.name and every nested attribute
//   badutf8 KEY          resource string attribute KEY with invalid UTF-8 in
//                        its value ("ok\xff\xfe"); KEY itself gets \xc3 appended
//   placement inline|heap  where the payload lives (default heap)
//   anon                 use the anonymous-mapping fallback instead of memfd
//   publish              publish or update; answers "ok ADDR STAMP"
//   drop                 unmap the context; answers "ok"
//   fork                 fork a child that publishes nothing; answers "ok CHILDPID"
//   stress start         a thread updates in place as fast as it can, with
//                        seq.a == seq.b in every consistent payload
//   stress stop          answers "ok UPDATES"
//   garbage N            publish N bytes that are not a valid protobuf
//   raw FIELD VALUE      overwrite a header field: sig TEXT | version N |
//                        size N | stamp N | payload ADDR (hex or decimal)
//   mapfile PATH         map 64 KiB of PATH without touching it; answers
//                        "ok ADDR"
//   exit                 exit(0)
// On start it prints "ready PID".
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 1U
#endif

struct otel_ctx_header {
  char signature[8];
  uint32_t version;
  uint32_t payload_size;
  uint64_t published_at_ns;
  uint64_t payload;
};
_Static_assert(sizeof(struct otel_ctx_header) == 32, "header is 32 bytes");

#define MAP_SIZE (64 * 1024)
#define INLINE_OFF 64 /* inline payloads start here in the mapping */
#define MAX_ATTRS 64

/* ---- protobuf encoding ------------------------------------------------ */
typedef struct { uint8_t *p; size_t n, cap; } buf_t;

static void buf_reserve(buf_t *b, size_t more) {
  if (b->n + more <= b->cap) return;
  size_t cap = b->cap ? b->cap * 2 : 256;
  while (cap < b->n + more) cap *= 2;
  b->p = realloc(b->p, cap);
  if (!b->p) abort();
  b->cap = cap;
}
static void put_raw(buf_t *b, const void *p, size_t n) { buf_reserve(b, n); memcpy(b->p + b->n, p, n); b->n += n; }
static void put_varint(buf_t *b, uint64_t v) {
  uint8_t tmp[10]; size_t i = 0;
  do { uint8_t c = v & 0x7f; v >>= 7; if (v) c |= 0x80; tmp[i++] = c; } while (v);
  put_raw(b, tmp, i);
}
static void put_tag(buf_t *b, int field, int wt) { put_varint(b, ((uint64_t)field << 3) | (uint64_t)wt); }
static void put_bytes(buf_t *b, int field, const void *p, size_t n) { put_tag(b, field, 2); put_varint(b, n); put_raw(b, p, n); }
static void buf_free(buf_t *b) { free(b->p); b->p = NULL; b->n = b->cap = 0; }

/* KeyValue{key, AnyValue{string_value|int_value|array of strings}} as field `field` of b. */
static void put_kv_str(buf_t *b, int field, const char *k, const char *v) {
  buf_t any = {0}, kv = {0};
  put_bytes(&any, 1, v, strlen(v));
  put_bytes(&kv, 1, k, strlen(k));
  put_bytes(&kv, 2, any.p, any.n);
  put_bytes(b, field, kv.p, kv.n);
  buf_free(&any); buf_free(&kv);
}
static void put_kv_int(buf_t *b, int field, const char *k, int64_t v) {
  buf_t any = {0}, kv = {0};
  put_tag(&any, 3, 0); put_varint(&any, (uint64_t)v);
  put_bytes(&kv, 1, k, strlen(k));
  put_bytes(&kv, 2, any.p, any.n);
  put_bytes(b, field, kv.p, kv.n);
  buf_free(&any); buf_free(&kv);
}
static void put_kv_strarray(buf_t *b, int field, const char *k, const char *csv) {
  buf_t arr = {0}, any = {0}, kv = {0};
  char *copy = strdup(csv), *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    buf_t item = {0};
    put_bytes(&item, 1, tok, strlen(tok));
    put_bytes(&arr, 1, item.p, item.n);
    buf_free(&item);
  }
  free(copy);
  put_bytes(&any, 5, arr.p, arr.n);
  put_bytes(&kv, 1, k, strlen(k));
  put_bytes(&kv, 2, any.p, any.n);
  put_bytes(b, field, kv.p, kv.n);
  buf_free(&arr); buf_free(&any); buf_free(&kv);
}

/* ---- state -------------------------------------------------------------- */
struct attr { char *key, *val; int is_int; };
static struct attr res_attrs[MAX_ATTRS]; static int n_res;
static struct attr extra_attrs[MAX_ATTRS]; static int n_extra;
static char *schema_version, *key_map;
static int nested_attrs, nested_outer, nested_inner, n_entity_refs;
static char *bad_utf8_key;
static int inline_payload, use_anon;
static struct otel_ctx_header *hdr; /* the mapping, NULL when unpublished */
static uint8_t *heap_payload;
static uint64_t last_stamp;

static void set_attr(struct attr *list, int *n, const char *k, const char *v, int is_int) {
  for (int i = 0; i < *n; i++)
    if (!strcmp(list[i].key, k)) { free(list[i].val); list[i].val = strdup(v); list[i].is_int = is_int; return; }
  if (*n == MAX_ATTRS) return;
  list[*n].key = strdup(k); list[*n].val = strdup(v); list[*n].is_int = is_int; (*n)++;
}

/* KeyValue{key, AnyValue{array of `outer` AnyValue{array of `inner` empty AnyValues}}}. */
static void put_kv_nested(buf_t *b, int field, const char *k, int outer, int inner) {
  buf_t in = {0}, elem = {0}, arr = {0}, any = {0}, kv = {0};
  for (int i = 0; i < inner; i++) put_bytes(&in, 1, "", 0);
  put_bytes(&elem, 5, in.p, in.n);
  for (int i = 0; i < outer; i++) put_bytes(&arr, 1, elem.p, elem.n);
  put_bytes(&any, 5, arr.p, arr.n);
  put_bytes(&kv, 1, k, strlen(k));
  put_bytes(&kv, 2, any.p, any.n);
  put_bytes(b, field, kv.p, kv.n);
  buf_free(&in); buf_free(&elem); buf_free(&arr); buf_free(&any); buf_free(&kv);
}

static void put_hostile(buf_t *res) {
  char key[64];
  for (int i = 0; i < nested_attrs; i++) {
    snprintf(key, sizeof key, "hostile.nested.%d", i);
    put_kv_nested(res, 1, key, nested_outer, nested_inner);
  }
  for (int r = 0; r < n_entity_refs; r++) { /* Resource.entity_refs = 3 */
    buf_t ref = {0};
    snprintf(key, sizeof key, "hostile.entity.%d", r);
    put_bytes(&ref, 2, key, strlen(key));
    put_bytes(&ref, 3, "service.name", strlen("service.name"));
    for (int i = 0; i < nested_attrs; i++) {
      snprintf(key, sizeof key, "hostile.nested.%d", i);
      put_bytes(&ref, 3, key, strlen(key));
    }
    put_bytes(res, 3, ref.p, ref.n);
    buf_free(&ref);
  }
  if (bad_utf8_key) {
    char k[256];
    snprintf(k, sizeof k, "%s\xc3", bad_utf8_key);
    put_kv_str(res, 1, k, "ok\xff\xfe");
  }
}

static void encode(buf_t *out, const char *seq) {
  buf_t res = {0};
  if (seq) put_kv_str(&res, 1, "seq.a", seq);
  for (int i = 0; i < n_res; i++) {
    if (res_attrs[i].is_int) put_kv_int(&res, 1, res_attrs[i].key, strtoll(res_attrs[i].val, NULL, 10));
    else put_kv_str(&res, 1, res_attrs[i].key, res_attrs[i].val);
  }
  put_hostile(&res);
  put_bytes(out, 1, res.p, res.n);
  buf_free(&res);
  for (int i = 0; i < n_extra; i++) put_kv_str(out, 2, extra_attrs[i].key, extra_attrs[i].val);
  if (schema_version) put_kv_str(out, 2, "threadlocal.schema_version", schema_version);
  if (key_map) put_kv_strarray(out, 2, "threadlocal.attribute_key_map", key_map);
  /* seq.b goes last so that a torn in-place read sees seq.a != seq.b */
  if (seq) put_kv_str(out, 2, "seq.b", seq);
}

static uint64_t now_stamp(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  if (t <= last_stamp) t = last_stamp + 1; /* same-ns updates are bumped */
  last_stamp = t;
  return t;
}

static void name_mapping(void) {
  /* Unconditional, as OTEP 4719 asks: fails here (no CONFIG_ANON_VMA_NAME)
   * but is what an eBPF prctl hook can observe. */
  prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)hdr, MAP_SIZE, (unsigned long)"OTEL_CTX");
}

static int create_mapping(void) {
  void *p = MAP_FAILED;
  if (!use_anon) {
    int fd = (int)syscall(SYS_memfd_create, "OTEL_CTX", MFD_CLOEXEC);
    if (fd >= 0) {
      if (ftruncate(fd, MAP_SIZE) == 0) p = mmap(NULL, MAP_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      close(fd);
    }
  }
  if (p == MAP_FAILED) p = mmap(NULL, MAP_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -1;
  if (madvise(p, MAP_SIZE, MADV_DONTFORK) != 0) { munmap(p, MAP_SIZE); return -1; }
  hdr = p;
  return 0;
}

/* Publication and update protocols of OTEP 4719 for an encoded payload. */
static int publish_bytes(const uint8_t *payload, size_t n) {
  if (n > MAP_SIZE - INLINE_OFF && inline_payload) return -1;
  int first = hdr == NULL;
  if (first && create_mapping() != 0) return -1;
  uint8_t *dst;
  uint8_t *old_heap = heap_payload;
  if (!first) {
    __atomic_store_n(&hdr->published_at_ns, 0, __ATOMIC_RELEASE); /* update in progress */
    atomic_thread_fence(memory_order_seq_cst);
  }
  if (inline_payload) {
    dst = (uint8_t *)hdr + INLINE_OFF;
    heap_payload = NULL;
  } else {
    dst = malloc(n ? n : 1);
    heap_payload = dst;
  }
  memcpy(dst, payload, n);
  hdr->payload = (uint64_t)(uintptr_t)dst;
  hdr->payload_size = (uint32_t)n;
  if (first) hdr->version = 2;
  atomic_thread_fence(memory_order_seq_cst);
  __atomic_store_n(&hdr->published_at_ns, now_stamp(), __ATOMIC_RELEASE);
  if (first) {
    atomic_thread_fence(memory_order_seq_cst);
    memcpy(hdr->signature, "OTEL_CTX", 8); /* written last */
  }
  free(old_heap);
  name_mapping();
  return 0;
}

static int publish(void) {
  buf_t b = {0};
  encode(&b, NULL);
  int rc = publish_bytes(b.p, b.n);
  buf_free(&b);
  return rc;
}

/* ---- stress: in-place updates with a sequence number twice ------------ */
static atomic_int stress_run;
static uint64_t stress_count;
static void *stress_main(void *arg) {
  (void)arg;
  char seq[32];
  buf_t b = {0};
  uint8_t *dst = (uint8_t *)hdr + INLINE_OFF;
  while (atomic_load(&stress_run)) {
    stress_count++;
    snprintf(seq, sizeof seq, "%020" PRIu64, stress_count); /* fixed width: same size */
    b.n = 0;
    encode(&b, seq);
    __atomic_store_n(&hdr->published_at_ns, 0, __ATOMIC_RELEASE);
    atomic_thread_fence(memory_order_seq_cst);
    /* in place, byte by byte, so that a reader racing us would see a mix */
    for (size_t i = 0; i < b.n; i++) ((volatile uint8_t *)dst)[i] = b.p[i];
    hdr->payload = (uint64_t)(uintptr_t)dst;
    hdr->payload_size = (uint32_t)b.n;
    atomic_thread_fence(memory_order_seq_cst);
    __atomic_store_n(&hdr->published_at_ns, now_stamp(), __ATOMIC_RELEASE);
  }
  buf_free(&b);
  return NULL;
}

static uint64_t parse_u64(const char *s) { return strtoull(s, NULL, 0); }

static void demo(void) {
  char id[64];
  snprintf(id, sizeof id, "demo-%d-%ld", getpid(), (long)time(NULL));
  set_attr(res_attrs, &n_res, "service.name", "otelctx-demo", 0);
  set_attr(res_attrs, &n_res, "service.namespace", "otelctx", 0);
  set_attr(res_attrs, &n_res, "service.instance.id", id, 0);
  set_attr(res_attrs, &n_res, "service.version", "1.0.0", 0);
  set_attr(res_attrs, &n_res, "deployment.environment.name", "dev", 0);
  set_attr(res_attrs, &n_res, "telemetry.sdk.language", "cpp", 0);
  set_attr(res_attrs, &n_res, "telemetry.sdk.name", "otelctx-demo-publisher", 0);
  schema_version = strdup("tlsdesc_v1_dev");
  key_map = strdup("http.route,http.request.method");
  for (long tick = 0;; tick++) {
    char v[32];
    snprintf(v, sizeof v, "%ld", tick / 6);
    set_attr(res_attrs, &n_res, "demo.minute", v, 1);
    if (tick % 6 == 0 && publish() != 0) { perror("publish"); exit(1); }
    if (tick == 0) { printf("otel_ctx_publisher: demo service published by pid %d\n", getpid()); fflush(stdout); }
    sleep(10); /* the demo's pace, not synchronisation */
  }
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc > 1 && !strcmp(argv[1], "--no-aslr")) {
    if (personality(0xffffffff) & ADDR_NO_RANDOMIZE) { argv[1] = argv[0]; argv++; argc--; }
    else {
      if (personality(personality(0xffffffff) | ADDR_NO_RANDOMIZE) == -1) { perror("personality"); return 1; }
      execv("/proc/self/exe", argv); /* same PID, new address space layout */
      perror("execv");
      return 1;
    }
  }
  if (argc > 1 && !strcmp(argv[1], "--demo")) demo();
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready %d\n", getpid());
  char line[8192];
  pthread_t stress_thread;
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\r\n")] = 0;
    char *save = NULL;
    char *cmd = strtok_r(line, " ", &save);
    char *a1 = strtok_r(NULL, " ", &save);
    char *a2 = save && *save ? save : NULL;
    if (!cmd) { printf("err empty\n"); continue; }
    if (!strcmp(cmd, "set") && a1 && a2) { set_attr(res_attrs, &n_res, a1, a2, 0); printf("ok\n"); }
    else if (!strcmp(cmd, "setint") && a1 && a2) { set_attr(res_attrs, &n_res, a1, a2, 1); printf("ok\n"); }
    else if (!strcmp(cmd, "extra") && a1 && a2) { set_attr(extra_attrs, &n_extra, a1, a2, 0); printf("ok\n"); }
    else if (!strcmp(cmd, "schema") && a1) { free(schema_version); schema_version = strdup(a1); printf("ok\n"); }
    else if (!strcmp(cmd, "keymap") && a1) { free(key_map); key_map = strdup(a1); printf("ok\n"); }
    else if (!strcmp(cmd, "nested") && a1 && a2) {
      nested_attrs = atoi(a1);
      if (sscanf(a2, "%d %d", &nested_outer, &nested_inner) != 2) { printf("err nested N OUTER INNER\n"); continue; }
      printf("ok\n");
    } else if (!strcmp(cmd, "entityrefs") && a1) { n_entity_refs = atoi(a1); printf("ok\n"); }
    else if (!strcmp(cmd, "badutf8") && a1) { free(bad_utf8_key); bad_utf8_key = strdup(a1); printf("ok\n"); }
    else if (!strcmp(cmd, "placement") && a1) { inline_payload = !strcmp(a1, "inline"); printf("ok\n"); }
    else if (!strcmp(cmd, "anon")) { use_anon = 1; printf("ok\n"); }
    else if (!strcmp(cmd, "publish")) {
      if (publish() != 0) printf("err publish: %s\n", strerror(errno));
      else printf("ok %#" PRIx64 " %" PRIu64 "\n", (uint64_t)(uintptr_t)hdr, hdr->published_at_ns);
    } else if (!strcmp(cmd, "drop")) {
      if (hdr) munmap(hdr, MAP_SIZE);
      hdr = NULL;
      printf("ok\n");
    } else if (!strcmp(cmd, "fork")) {
      pid_t parent = getpid();
      pid_t c = fork();
      if (c == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(0); /* the parent died before prctl */
        for (;;) pause();
      }
      printf("ok %d\n", (int)c);
    } else if (!strcmp(cmd, "stress") && a1 && !strcmp(a1, "start")) {
      inline_payload = 1;
      if (!hdr && publish() != 0) { printf("err publish\n"); continue; }
      stress_count = 0;
      atomic_store(&stress_run, 1);
      pthread_create(&stress_thread, NULL, stress_main, NULL);
      printf("ok\n");
    } else if (!strcmp(cmd, "stress") && a1 && !strcmp(a1, "stop")) {
      atomic_store(&stress_run, 0);
      pthread_join(stress_thread, NULL);
      printf("ok %" PRIu64 "\n", stress_count);
    } else if (!strcmp(cmd, "garbage") && a1) {
      size_t n = (size_t)parse_u64(a1);
      uint8_t *g = malloc(n ? n : 1);
      for (size_t i = 0; i < n; i++) g[i] = 0xff; /* tag with an over-long varint */
      if (publish_bytes(g, n) != 0) printf("err publish\n");
      else printf("ok %#" PRIx64 " %" PRIu64 "\n", (uint64_t)(uintptr_t)hdr, hdr->published_at_ns);
      free(g);
    } else if (!strcmp(cmd, "raw") && a1 && a2 && hdr) {
      if (!strcmp(a1, "sig")) memcpy(hdr->signature, a2, strnlen(a2, 8));
      else if (!strcmp(a1, "version")) hdr->version = (uint32_t)parse_u64(a2);
      else if (!strcmp(a1, "size")) hdr->payload_size = (uint32_t)parse_u64(a2);
      else if (!strcmp(a1, "stamp")) hdr->published_at_ns = parse_u64(a2);
      else if (!strcmp(a1, "payload")) hdr->payload = parse_u64(a2);
      else { printf("err field\n"); continue; }
      if (strcmp(a1, "stamp")) hdr->published_at_ns = now_stamp(); /* make readers look again */
      printf("ok\n");
    } else if (!strcmp(cmd, "mapfile") && a1) {
      /* Map a file without touching it: its pages are not in this
         process's page tables (a reader must not fault them in). */
      int fd = open(a1, O_RDONLY);
      void *m = fd < 0 ? MAP_FAILED : mmap(NULL, 65536, PROT_READ, MAP_SHARED, fd, 0);
      if (fd >= 0) close(fd);
      if (m == MAP_FAILED) printf("err mapfile %s\n", strerror(errno));
      else printf("ok %#" PRIx64 "\n", (uint64_t)(uintptr_t)m);
    } else if (!strcmp(cmd, "exit")) {
      exit(0);
    } else {
      printf("err unknown command\n");
    }
  }
  return 0;
}
