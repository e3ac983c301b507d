// SPDX-License-Identifier: Apache-2.0

// threadpub: an OTEP 4947 thread-context publisher for tests. Worker threads
// publish Thread-Local Context Records through otel_thread_ctx_v1 and then
// park, so a reader can look at a stable record; every answer carries the
// ground truth a reader must reproduce (TID, thread pointer, &otel_thread_ctx_v1
// as seen by the thread itself). It also publishes an OTEP 4719 process
// context carrying threadlocal.schema_version and threadlocal.attribute_key_map.
//
// Build (see internal/testutil/threadpub, which builds every matrix cell):
//   variable in the executable:  cc -pthread -rdynamic threadpub.c otelctx_tls.c
//   linked library:              cc -DOTELCTX_LINKED -pthread threadpub.c -L. -lotelctx_tls -Wl,-rpath,DIR
//   dlopen'ed library:           cc -DOTELCTX_DLOPEN -pthread threadpub.c -ldl
//   linked, and the executable accesses the variable itself:
//                                add -DOTELCTX_EXE_ACCESS to the linked build
//
// Options:
//   --writer swap|flip   swap: set the TLS pointer to NULL, build a fresh
//                        record, point at it. flip: one record per thread,
//                        valid=0 while mutating (default swap)
//   --lib PATH           (OTELCTX_DLOPEN) the library to dlopen
//   --fill A,B,...       (OTELCTX_DLOPEN) libraries to dlopen and touch
//                        first, to use up glibc's static TLS surplus
//   --no-context         do not publish a process context
//   --late               (OTELCTX_DLOPEN) do not dlopen at start-up but on
//                        the "load" command, e.g. after workers exist
//   --demo               no commands: publish the service otelctx-demo and
//                        run demo threads forever (`make run`): each serves
//                        "requests" of 2-4 spans of 10-50 ms each, busy-looping
//                        with the span's record published (random trace and
//                        span ids, http.route and http.request.method), then
//                        withdraws the record and sleeps so that it is busy
//                        about --demo-busy percent of the time
//   --demo-threads N     demo threads (default 2)
//   --demo-busy PCT      busy share of each demo thread, 1-100 (default 20)
//   THREADPUB_SERVICE    (environment) the service.name to publish instead
//                        of threadpub (otelctx-demo with --demo)
//
// Commands (one per line, each answers one line "ok ..." or "err ..."):
//   threads N            start N worker threads (numbered from 0 on)
//   set K TRACE SPAN FLAGS [IDX=VALUE ...]
//                        worker K publishes a record (hex ids, FLAGS decimal;
//                        IDX is a key index into the key map) and parks;
//                        answers "ok TID TP SLOT RECORD"
//   clear K              worker K sets its pointer to NULL (swap) or valid=0
//                        (flip); answers "ok TID TP SLOT RECORD"
//   info K               answers "ok TID TP" without K touching the variable
//   point K ADDR         worker K sets its pointer to ADDR (a hostile
//                        publisher) and parks; answers "ok TID"
//   mapfile PATH         map 64 KiB of PATH without touching it; answers
//                        "ok ADDR"
//   spin K MS            worker K busy-loops on its CPU for MS milliseconds
//                        (its record, or lack of one, unchanged; it does not
//                        touch the variable), then parks; answers
//                        "ok TID LOOPS" when done. For samplers that only
//                        see threads while they run (eBPF perf events).
//   switch K N MS PATH   worker K runs N spans of MS ms each, busy-looping,
//                        publishing span i's record (trace id
//                        5157<PID:8 hex><K:4 hex><i+1:16 hex>, span id
//                        <K+1:8 hex><i+1:8 hex>,
//                        flags 1, attribute 0=/switch) with the writer
//                        protocol, then withdraws it. Answers "ok TID" at
//                        once; the worker appends the ground truth to PATH,
//                        one line per span:
//                          span I TRACE SPAN BOOT_START BOOT_END REAL_START REAL_END
//                        (CLOCK_BOOTTIME / CLOCK_REALTIME ns: START is read
//                        after the record became visible, END before it is
//                        replaced), then "done BOOT REAL" after the
//                        withdrawal. "wait K" waits for the end.
//   switch K N MS PATH ROUTES
//                        the same, but span i takes the route and the
//                        busy time of entry i mod count of ROUTES
//                        (ROUTE:MS,ROUTE:MS,... up to 8 entries; MS is
//                        ignored): attribute 0 is the route, and the span
//                        lasts until the thread's own CPU time
//                        (CLOCK_THREAD_CPUTIME_ID) has advanced by the
//                        entry's MS, however often it is preempted. Each
//                        truth line gets two more fields, ROUTE CPU_NS:
//                        the thread's CPU time while the record was visible.
//   wait K               waits until worker K's switch run is over; "ok"
//   crowd N LOOPS EVERY  runs N extra threads at once (not workers), each
//                        publishing a record, doing LOOPS iterations of
//                        integer work and swapping between two records
//                        every EVERY iterations, then exiting; answers
//                        "ok WALL_NS CPU_NS" (CPU: the whole process) when
//                        all are done. A fixed amount of work, for
//                        overhead measurements.
//   main                 the main thread's "ok TID TP SLOT" (touches it)
//   load                 (--late) dlopen the fillers and the library now
//   keymap A,B,...       republish the process context with this
//                        threadlocal.attribute_key_map (update protocol)
//   exit                 exit(0)
// On start it prints "ready PID".
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifndef ARCH_GET_FS
#define ARCH_GET_FS 0x1003 /* asm/prctl.h; musl-gcc has no kernel headers */
#endif

#define MAX_THREADS 64
#define REC_CAP 640 /* the eBPF profiler's read limit: keep records within it */

/* ---- the variable's accessors: direct or through dlsym ----------------- */
typedef void **(*slot_fn_t)(void);
typedef void (*set_fn_t)(void *);
static slot_fn_t slot_fn;
static set_fn_t set_fn;
#if defined(OTELCTX_EXE_ACCESS)
/* The executable accesses the library's variable itself (an application
 * instrumented directly): its .dynsym gets an undefined reference and the
 * access is Initial Exec (R_X86_64_TPOFF64 against the symbol). */
extern __thread void *otel_thread_ctx_v1;
__attribute__((noinline)) static void **otelctx_tls_slot(void) { return &otel_thread_ctx_v1; }
__attribute__((noinline)) static void otelctx_tls_set(void *rec) {
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  *(void *volatile *)&otel_thread_ctx_v1 = rec;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
#elif !defined(OTELCTX_DLOPEN)
void **otelctx_tls_slot(void);
void otelctx_tls_set(void *);
#endif

static uint64_t thread_pointer(void) {
#if defined(__x86_64__)
  unsigned long fs = 0;
  syscall(SYS_arch_prctl, ARCH_GET_FS, &fs);
  return fs;
#elif defined(__aarch64__)
  uint64_t tp;
  __asm__ volatile("mrs %0, tpidr_el0" : "=r"(tp));
  return tp;
#else
#error "unsupported architecture"
#endif
}

/* ---- OTEP 4947 record: packed 28-byte header + attrs_data --------------- */
struct __attribute__((packed)) otel_record {
  uint8_t trace_id[16];
  uint8_t span_id[8];
  uint8_t valid;
  uint8_t trace_flags;
  uint16_t attrs_data_size;
  uint8_t attrs_data[REC_CAP - 28];
};
_Static_assert(sizeof(struct otel_record) == REC_CAP, "record is header + attrs");

static int hex_bytes(const char *s, uint8_t *out, size_t n) {
  if (strlen(s) != 2 * n) return -1;
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
    out[i] = (uint8_t)v;
  }
  return 0;
}

/* Fills r (valid left to the caller) from "TRACE SPAN FLAGS [IDX=V ...]". */
static int fill_record(struct otel_record *r, char *args) {
  char *save = NULL;
  char *trace = strtok_r(args, " ", &save), *span = strtok_r(NULL, " ", &save), *flags = strtok_r(NULL, " ", &save);
  if (!trace || !span || !flags) return -1;
  if (hex_bytes(trace, r->trace_id, 16) || hex_bytes(span, r->span_id, 8)) return -1;
  r->trace_flags = (uint8_t)strtoul(flags, NULL, 0);
  size_t n = 0;
  for (char *kv = strtok_r(NULL, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq) return -1;
    size_t vl = strlen(eq + 1);
    if (vl > 255 || n + 2 + vl > sizeof r->attrs_data) return -1;
    r->attrs_data[n++] = (uint8_t)strtoul(kv, NULL, 10);
    r->attrs_data[n++] = (uint8_t)vl;
    memcpy(r->attrs_data + n, eq + 1, vl);
    n += vl;
  }
  r->attrs_data_size = (uint16_t)n;
  return 0;
}

/* ---- workers ------------------------------------------------------------ */
enum { CMD_NONE, CMD_SET, CMD_CLEAR, CMD_INFO, CMD_SPIN, CMD_SWITCH, CMD_POINT };
struct worker {
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int cmd;       /* CMD_NONE when idle */
  char args[1024];
  char reply[256];
  struct otel_record *fixed;   /* flip writer: the thread's one record */
  struct otel_record *bufs[2]; /* swap writer: alternate between two */
  int next_buf;
  int busy; /* a switch run is in progress (the worker is not parked) */
};
static struct worker workers[MAX_THREADS];
static int n_workers, flip_writer;

static void do_set(struct worker *w, char *args, char *reply, size_t cap) {
  struct otel_record *r;
  if (flip_writer) {
    r = w->fixed;
    if (*slot_fn() != r) set_fn(r); /* the pointer is set once and stays */
    r->valid = 0;                    /* mutating */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    memset(r->trace_id, 0, 28);
    int bad = fill_record(r, args);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (bad) { snprintf(reply, cap, "err bad record"); return; }
    r->valid = 1;
  } else {
    set_fn(NULL); /* no record while building */
    r = w->bufs[w->next_buf];
    w->next_buf ^= 1;
    memset(r, 0, sizeof *r);
    if (fill_record(r, args)) { snprintf(reply, cap, "err bad record"); return; }
    r->valid = 1;
    set_fn(r);
  }
  snprintf(reply, cap, "ok %ld %#" PRIx64 " %#" PRIx64 " %#" PRIx64, (long)syscall(SYS_gettid), thread_pointer(),
           (uint64_t)(uintptr_t)slot_fn(), (uint64_t)(uintptr_t)r);
}

static void do_clear(struct worker *w, char *reply, size_t cap) {
  if (flip_writer) {
    if (*slot_fn() != w->fixed) set_fn(w->fixed);
    w->fixed->valid = 0;
  } else {
    set_fn(NULL);
  }
  snprintf(reply, cap, "ok %ld %#" PRIx64 " %#" PRIx64 " %#" PRIx64, (long)syscall(SYS_gettid), thread_pointer(),
           (uint64_t)(uintptr_t)slot_fn(), (uint64_t)(uintptr_t)*slot_fn());
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Stays on the CPU (no syscalls besides the vDSO clock) for ms milliseconds. */
static void do_spin(const char *args, char *reply, size_t cap) {
  long ms = strtol(args, NULL, 10);
  if (ms <= 0 || ms > 60000) { snprintf(reply, cap, "err bad duration"); return; }
  uint64_t end = now_ns() + (uint64_t)ms * 1000000u;
  volatile uint64_t loops = 0;
  while (now_ns() < end) loops++;
  snprintf(reply, cap, "ok %ld %" PRIu64, (long)syscall(SYS_gettid), (uint64_t)loops);
}

static uint64_t clock_ns(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Publishes rec's contents on the calling worker with the writer protocol
 * (swap: NULL while building, then the new record; flip: valid=0 while
 * mutating). rec == NULL withdraws the record. */
static void publish_record(struct worker *w, const struct otel_record *rec) {
  if (flip_writer) {
    struct otel_record *r = w->fixed;
    if (*slot_fn() != r) set_fn(r);
    r->valid = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (!rec) return;
    memcpy(r, rec, 28 + rec->attrs_data_size);
    r->valid = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    r->valid = 1;
    return;
  }
  set_fn(NULL);
  if (!rec) return;
  struct otel_record *r = w->bufs[w->next_buf];
  w->next_buf ^= 1;
  memcpy(r, rec, 28 + rec->attrs_data_size);
  r->valid = 1;
  set_fn(r);
}

static void put_be64(uint8_t *p, uint64_t v) {
  for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

/* Routes of a switch run with ROUTES (see the command list). */
#define MAX_ROUTES 8
struct route_mix {
  int n;
  char name[MAX_ROUTES][64];
  long ms[MAX_ROUTES];
};

/* Parses ROUTE:MS,ROUTE:MS,...; 0 on success. */
static int parse_routes(const char *spec, struct route_mix *mix) {
  mix->n = 0;
  const char *p = spec;
  while (*p) {
    const char *colon = strchr(p, ':'), *comma = strchr(p, ',');
    if (!colon || (comma && comma < colon) || mix->n == MAX_ROUTES) return -1;
    size_t l = (size_t)(colon - p);
    if (l == 0 || l >= sizeof mix->name[0]) return -1;
    memcpy(mix->name[mix->n], p, l);
    mix->name[mix->n][l] = 0;
    long ms = strtol(colon + 1, NULL, 10);
    if (ms <= 0 || ms > 60000) return -1;
    mix->ms[mix->n++] = ms;
    if (!comma) break;
    p = comma + 1;
  }
  return mix->n > 0 ? 0 : -1;
}

/* The switch run of worker k: see the command list. mix NULL: every span
 * is /switch for ms of wall-clock time. */
static void do_switch(struct worker *w, int k, long n, long ms, FILE *truth, const struct route_mix *mix) {
  static const char switch_route[] = "/switch";
  struct otel_record rec;
  uint64_t prev_boot = 0, prev_real = 0, prev_cpu = 0;
  for (long i = 0; i < n; i++) {
    const char *route = mix ? mix->name[i % mix->n] : switch_route;
    size_t route_len = strlen(route);
    memset(&rec, 0, sizeof rec);
    /* The pid keeps two publishers on one host (a measurement beside a
     * test run) from sharing trace and span ids. */
    put_be64(rec.trace_id, 0x5157000000000000ull | (uint64_t)(uint32_t)getpid() << 16 | (uint64_t)(k & 0xffff));
    put_be64(rec.trace_id + 8, (uint64_t)i + 1);
    put_be64(rec.span_id, ((uint64_t)(k + 1) << 32) | (uint64_t)(i + 1));
    rec.trace_flags = 1;
    rec.attrs_data[0] = 0;
    rec.attrs_data[1] = (uint8_t)route_len;
    memcpy(rec.attrs_data + 2, route, route_len);
    rec.attrs_data_size = (uint16_t)(2 + route_len);
    uint64_t end_boot = clock_ns(CLOCK_BOOTTIME), end_real = clock_ns(CLOCK_REALTIME);
    uint64_t end_cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    if (i > 0) {
      fprintf(truth, " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, prev_boot, end_boot, prev_real, end_real);
      if (mix) fprintf(truth, " %s %" PRIu64, mix->name[(i - 1) % mix->n], end_cpu - prev_cpu);
      fprintf(truth, "\n");
    }
    publish_record(w, &rec);
    prev_cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    prev_boot = clock_ns(CLOCK_BOOTTIME);
    prev_real = clock_ns(CLOCK_REALTIME);
    fprintf(truth, "span %ld", i);
    for (int b = 0; b < 16; b++) fprintf(truth, "%s%02x", b ? "" : " ", rec.trace_id[b]);
    for (int b = 0; b < 8; b++) fprintf(truth, "%s%02x", b ? "" : " ", rec.span_id[b]);
    /* The file is written while the span runs: stdio buffers it, so the
     * span's time is busy-looping, not I/O. */
    if (mix) {
      /* The thread CPU clock is a system call: read it every 1024 turns
       * (tens of µs), so the span stays in user space, where a profiler
       * that excludes the kernel samples it too. */
      uint64_t until = prev_cpu + (uint64_t)mix->ms[i % mix->n] * 1000000u;
      for (unsigned turn = 1;; turn++) {
        (void)clock_ns(CLOCK_BOOTTIME);
        if (turn % 1024 == 0 && clock_ns(CLOCK_THREAD_CPUTIME_ID) >= until) break;
      }
    } else {
      uint64_t until = prev_boot + (uint64_t)ms * 1000000u;
      while (clock_ns(CLOCK_BOOTTIME) < until) {
      }
    }
  }
  uint64_t end_boot = clock_ns(CLOCK_BOOTTIME), end_real = clock_ns(CLOCK_REALTIME);
  uint64_t end_cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  if (n > 0) {
    fprintf(truth, " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, prev_boot, end_boot, prev_real, end_real);
    if (mix) fprintf(truth, " %s %" PRIu64, mix->name[(n - 1) % mix->n], end_cpu - prev_cpu);
    fprintf(truth, "\n");
  }
  publish_record(w, NULL);
  fprintf(truth, "done %" PRIu64 " %" PRIu64 "\n", clock_ns(CLOCK_BOOTTIME), clock_ns(CLOCK_REALTIME));
}

static void *worker_main(void *arg) {
  struct worker *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (w->cmd == CMD_NONE) pthread_cond_wait(&w->cv, &w->mu); /* parked in a futex */
    switch (w->cmd) {
    case CMD_SET: do_set(w, w->args, w->reply, sizeof w->reply); break;
    case CMD_CLEAR: do_clear(w, w->reply, sizeof w->reply); break;
    case CMD_POINT: /* a hostile writer: the pointer goes wherever it is told */
      set_fn((struct otel_record *)(uintptr_t)strtoull(w->args, NULL, 0));
      snprintf(w->reply, sizeof w->reply, "ok %ld", (long)syscall(SYS_gettid));
      break;
    case CMD_INFO:
      snprintf(w->reply, sizeof w->reply, "ok %ld %#" PRIx64, (long)syscall(SYS_gettid), thread_pointer());
      break;
    case CMD_SPIN: do_spin(w->args, w->reply, sizeof w->reply); break;
    case CMD_SWITCH: {
      /* Answer at once and run unlocked, so that several workers switch
       * concurrently; "wait K" waits for busy to drop. */
      int k = (int)(w - workers);
      long n = 0, ms = 0;
      char path[900] = "", routes[600] = "";
      FILE *truth = NULL;
      struct route_mix mix;
      int got = sscanf(w->args, "%ld %ld %899s %599s", &n, &ms, path, routes);
      if (got < 3 || n < 0 || ms <= 0 || (got == 4 && parse_routes(routes, &mix) != 0) || !(truth = fopen(path, "a"))) {
        snprintf(w->reply, sizeof w->reply, "err switch: N MS PATH [ROUTE:MS,...]");
        break;
      }
      snprintf(w->reply, sizeof w->reply, "ok %ld", (long)syscall(SYS_gettid));
      w->busy = 1;
      w->cmd = CMD_NONE;
      pthread_cond_broadcast(&w->cv);
      pthread_mutex_unlock(&w->mu);
      do_switch(w, k, n, ms, truth, got == 4 ? &mix : NULL);
      fclose(truth);
      pthread_mutex_lock(&w->mu);
      w->busy = 0;
      break;
    }
    }
    w->cmd = CMD_NONE;
    pthread_cond_broadcast(&w->cv);
  }
  return NULL;
}

/* ---- crowd: many short-lived busy publishing threads ---------------------- */
struct crowd_arg {
  long loops, every;
};

static void *crowd_main(void *arg) {
  struct crowd_arg *a = arg;
  struct otel_record recs[2];
  memset(recs, 0, sizeof recs);
  long tid = syscall(SYS_gettid);
  for (int i = 0; i < 2; i++) {
    put_be64(recs[i].trace_id + 8, (uint64_t)tid);
    put_be64(recs[i].span_id, (uint64_t)i + 1);
    recs[i].trace_flags = 1;
    recs[i].valid = 1;
  }
  uint64_t x = (uint64_t)tid;
  set_fn(&recs[0]);
  for (long i = 0; i < a->loops; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    if (a->every > 0 && i % a->every == 0) set_fn(&recs[(i / a->every) & 1]);
  }
  set_fn(NULL);
  return (void *)(uintptr_t)(x & 1); /* keeps the work from being optimised out */
}

static void do_crowd(long n, long loops, long every) {
  if (n <= 0 || n > 100000 || loops <= 0) { printf("err crowd: N LOOPS EVERY\n"); return; }
  pthread_t *th = calloc((size_t)n, sizeof *th);
  struct crowd_arg a = {loops, every};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  uint64_t wall0 = clock_ns(CLOCK_MONOTONIC), cpu0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  long started = 0;
  for (; started < n; started++)
    if (pthread_create(&th[started], &attr, crowd_main, &a)) break;
  for (long i = 0; i < started; i++) pthread_join(th[i], NULL);
  uint64_t wall = clock_ns(CLOCK_MONOTONIC) - wall0, cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
  pthread_attr_destroy(&attr);
  free(th);
  if (started < n) printf("err crowd: started %ld of %ld threads\n", started, n);
  else printf("ok %" PRIu64 " %" PRIu64 "\n", wall, cpu);
}

/* Hands cmd to worker k and waits for its reply (the worker parks again). */
static void ask(int k, int cmd, const char *args) {
  if (k < 0 || k >= n_workers) { printf("err no worker %d\n", k); return; }
  struct worker *w = &workers[k];
  pthread_mutex_lock(&w->mu);
  snprintf(w->args, sizeof w->args, "%s", args ? args : "");
  w->cmd = cmd;
  pthread_cond_broadcast(&w->cv);
  while (w->cmd != CMD_NONE) pthread_cond_wait(&w->cv, &w->mu);
  printf("%s\n", w->reply);
  pthread_mutex_unlock(&w->mu);
}

static int start_threads(int n) {
  for (int i = 0; i < n; i++) {
    if (n_workers == MAX_THREADS) return -1;
    struct worker *w = &workers[n_workers];
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->fixed = calloc(1, sizeof *w->fixed);
    w->bufs[0] = calloc(1, sizeof *w->bufs[0]);
    w->bufs[1] = calloc(1, sizeof *w->bufs[1]);
    if (pthread_create(&w->th, NULL, worker_main, w)) return -1;
    n_workers++;
  }
  return 0;
}

/* ---- OTEP 4719 process context (the subset the thread context needs) ---- */
#include "procctx.h"

/* ---- loading the library ------------------------------------------------- */
#if defined(OTELCTX_DLOPEN)
/* dlopens and touches the fillers (each TLSDESC filler claims optional static
 * TLS when first used), then the otelctx library. */
static int load_library(const char *lib, const char *fill) {
  if (fill) {
    char *copy = strdup(fill), *save = NULL;
    for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
      void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
      if (!h) { fprintf(stderr, "threadpub: dlopen %s: %s\n", p, dlerror()); free(copy); return -1; }
      void *(*touch)(void) = (void *(*)(void))dlsym(h, "filler_touch");
      if (touch) touch();
    }
    free(copy);
  }
  void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
  if (!h) { fprintf(stderr, "threadpub: dlopen %s: %s\n", lib, dlerror()); return -1; }
  slot_fn = (slot_fn_t)dlsym(h, "otelctx_tls_slot");
  set_fn = (set_fn_t)dlsym(h, "otelctx_tls_set");
  if (!slot_fn || !set_fn) { fprintf(stderr, "threadpub: dlsym: %s\n", dlerror()); return -1; }
  return 0;
}
#endif

/* ---- --demo: busy threads switching spans forever ------------------------ */
static int demo_busy_pct = 20;

static uint64_t demo_rand(uint64_t *x) { /* xorshift64* */
  *x ^= *x >> 12;
  *x ^= *x << 25;
  *x ^= *x >> 27;
  return *x * 2685821657736338717ull;
}

static void *demo_main(void *arg) {
  struct worker *w = arg;
  static const char *routes[] = {"/checkout", "/cart", "/search", "/login"};
  static const char *methods[] = {"POST", "GET", "GET", "POST"};
  uint64_t x = clock_ns(CLOCK_REALTIME) ^ ((uint64_t)syscall(SYS_gettid) << 32) ^ (uint64_t)(uintptr_t)w;
  if (!x) x = 1;
  struct otel_record rec;
  for (;;) {
    int route = (int)(demo_rand(&x) % 4);
    memset(&rec, 0, sizeof rec);
    put_be64(rec.trace_id, demo_rand(&x));
    put_be64(rec.trace_id + 8, demo_rand(&x));
    rec.trace_flags = 1;
    size_t n = 0;
    const char *vals[2] = {routes[route], methods[route]};
    for (int k = 0; k < 2; k++) {
      size_t l = strlen(vals[k]);
      rec.attrs_data[n++] = (uint8_t)k;
      rec.attrs_data[n++] = (uint8_t)l;
      memcpy(rec.attrs_data + n, vals[k], l);
      n += l;
    }
    rec.attrs_data_size = (uint16_t)n;
    /* A request: 2-4 spans of 10-50 ms back to back, busy on the CPU. */
    int spans = 2 + (int)(demo_rand(&x) % 3);
    uint64_t busy_ns = 0;
    for (int i = 0; i < spans; i++) {
      put_be64(rec.span_id, demo_rand(&x) | 1);
      publish_record(w, &rec);
      uint64_t ms = 10 + demo_rand(&x) % 41, t0 = clock_ns(CLOCK_MONOTONIC), until = t0 + ms * 1000000u;
      while (clock_ns(CLOCK_MONOTONIC) < until) {
      }
      busy_ns += clock_ns(CLOCK_MONOTONIC) - t0;
    }
    publish_record(w, NULL);
    /* Idle so that the thread is busy demo_busy_pct % of the time (the
     * demo's pace, not synchronisation). */
    uint64_t idle = busy_ns * (uint64_t)(100 - demo_busy_pct) / (uint64_t)demo_busy_pct;
    struct timespec ts = {(time_t)(idle / 1000000000u), (long)(idle % 1000000000u)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
  }
  return NULL;
}

static int run_demo(int n) {
  if (n < 1 || n > MAX_THREADS || demo_busy_pct < 1 || demo_busy_pct > 100) {
    fprintf(stderr, "threadpub: --demo-threads 1-%d, --demo-busy 1-100\n", MAX_THREADS);
    return 2;
  }
  for (int i = 0; i < n; i++) {
    struct worker *w = &workers[i];
    w->fixed = calloc(1, sizeof *w->fixed);
    w->bufs[0] = calloc(1, sizeof *w->bufs[0]);
    w->bufs[1] = calloc(1, sizeof *w->bufs[1]);
    if (pthread_create(&w->th, NULL, demo_main, w)) { fprintf(stderr, "threadpub: pthread_create failed\n"); return 1; }
  }
  printf("threadpub: demo: pid %d publishes service otelctx-demo; %d threads serve requests of 2-4 spans of 10-50 ms, busy %d%% of the time\n",
         getpid(), n, demo_busy_pct);
  fflush(stdout);
  for (int i = 0; i < n; i++) pthread_join(workers[i].th, NULL);
  return 0;
}

/* ---- main ----------------------------------------------------------------- */
int main(int argc, char **argv) {
  const char *lib = NULL, *fill = NULL;
  int context = 1, late = 0, demo = 0, demo_threads = 2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--writer") && i + 1 < argc) flip_writer = !strcmp(argv[++i], "flip");
    else if (!strcmp(argv[i], "--lib") && i + 1 < argc) lib = argv[++i];
    else if (!strcmp(argv[i], "--fill") && i + 1 < argc) fill = argv[++i];
    else if (!strcmp(argv[i], "--no-context")) context = 0;
    else if (!strcmp(argv[i], "--late")) late = 1;
    else if (!strcmp(argv[i], "--demo")) demo = 1;
    else if (!strcmp(argv[i], "--demo-threads") && i + 1 < argc) demo_threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--demo-busy") && i + 1 < argc) demo_busy_pct = atoi(argv[++i]);
    else { fprintf(stderr, "threadpub: unknown argument %s\n", argv[i]); return 2; }
  }
#if defined(OTELCTX_DLOPEN)
  if (!lib) { fprintf(stderr, "threadpub: --lib is required\n"); return 2; }
  if (!late && load_library(lib, fill) != 0) return 1;
#else
  (void)lib; (void)fill; (void)late;
  slot_fn = otelctx_tls_slot;
  set_fn = otelctx_tls_set;
#endif
  /* THREADPUB_SERVICE names a measurement's publisher apart from the
   * threadpubs of tests running on the same host. */
  const char *service = getenv("THREADPUB_SERVICE");
  if (!service || !*service) service = demo ? "otelctx-demo" : "threadpub";
  if (context && publish_thread_context(service, "tlsdesc_v1_dev", "http.route,http.request.method,user.id") != 0) {
    fprintf(stderr, "threadpub: publishing the process context failed\n");
    return 1;
  }
  if (demo) {
    if (!slot_fn) { fprintf(stderr, "threadpub: --demo with --late\n"); return 2; }
    return run_demo(demo_threads);
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready %d\n", getpid());
  char line[2048];
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\r\n")] = 0;
    char *save = NULL;
    char *cmd = strtok_r(line, " ", &save);
    char *rest = save && *save ? save : NULL;
    if (!cmd) { printf("err empty\n"); continue; }
    if (!slot_fn && (!strcmp(cmd, "set") || !strcmp(cmd, "clear") || !strcmp(cmd, "main") || !strcmp(cmd, "point"))) {
      printf("err library not loaded yet\n");
      continue;
    }
    if (!strcmp(cmd, "threads") && rest) {
      if (start_threads(atoi(rest))) printf("err threads\n");
      else printf("ok %d\n", n_workers);
    } else if ((!strcmp(cmd, "set") || !strcmp(cmd, "clear") || !strcmp(cmd, "info") || !strcmp(cmd, "spin")) && rest) {
      char *s2 = NULL;
      char *k = strtok_r(rest, " ", &s2);
      int c = !strcmp(cmd, "set") ? CMD_SET : !strcmp(cmd, "clear") ? CMD_CLEAR : !strcmp(cmd, "spin") ? CMD_SPIN : CMD_INFO;
      ask(atoi(k), c, s2);
    } else if (!strcmp(cmd, "point") && rest) {
      char *s2 = NULL;
      char *k = strtok_r(rest, " ", &s2);
      ask(atoi(k), CMD_POINT, s2);
    } else if (!strcmp(cmd, "mapfile") && rest) {
      /* Map a file without touching it: its pages are not in this
         process's page tables (a reader must not fault them in). */
      int fd = open(rest, O_RDONLY);
      void *m = fd < 0 ? MAP_FAILED : mmap(NULL, 65536, PROT_READ, MAP_SHARED, fd, 0);
      if (fd >= 0) close(fd);
      if (m == MAP_FAILED) printf("err mapfile\n");
      else printf("ok %#" PRIx64 "\n", (uint64_t)(uintptr_t)m);
    } else if (!strcmp(cmd, "switch") && rest) {
      char *s2 = NULL;
      char *k = strtok_r(rest, " ", &s2);
      ask(atoi(k), CMD_SWITCH, s2);
    } else if (!strcmp(cmd, "wait") && rest) {
      int k = atoi(rest);
      if (k < 0 || k >= n_workers) { printf("err no worker %d\n", k); continue; }
      struct worker *w = &workers[k];
      pthread_mutex_lock(&w->mu);
      while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
      pthread_mutex_unlock(&w->mu);
      printf("ok\n");
    } else if (!strcmp(cmd, "crowd") && rest) {
      long n = 0, loops = 0, every = 0;
      if (sscanf(rest, "%ld %ld %ld", &n, &loops, &every) != 3) printf("err crowd: N LOOPS EVERY\n");
      else do_crowd(n, loops, every);
    } else if (!strcmp(cmd, "load")) {
#if defined(OTELCTX_DLOPEN)
      if (slot_fn) printf("err already loaded\n");
      else if (load_library(lib, fill) != 0) printf("err load\n");
      else printf("ok\n");
#else
      printf("err not a dlopen build\n");
#endif
    } else if (!strcmp(cmd, "main")) {
      printf("ok %ld %#" PRIx64 " %#" PRIx64 "\n", (long)syscall(SYS_gettid), thread_pointer(), (uint64_t)(uintptr_t)slot_fn());
    } else if (!strcmp(cmd, "keymap") && rest) {
      /* Append-only in real SDKs: the test passes the old keys first. */
      if (publish_thread_context("threadpub", "tlsdesc_v1_dev", rest) != 0) printf("err publish\n");
      else printf("ok\n");
    } else if (!strcmp(cmd, "exit")) {
      exit(0);
    } else {
      printf("err unknown command\n");
    }
  }
  return 0;
}
