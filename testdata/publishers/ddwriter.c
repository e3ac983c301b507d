// SPDX-License-Identifier: Apache-2.0

/*
 * ddwriter: a test program that publishes thread contexts the way the
 * Datadog Java profiler does with ctxstorage=otel (seed 001,
 * docs/dd-otel-ctx.md): one private anonymous mapping of 32 + 32*capacity bytes,
 * a 32-byte header (magic, version 1, capacity, slot size 32, 16 reserved),
 * then one 32-byte slot per thread at tid % capacity, written with the
 * in_use protocol (release store of 1, relaxed field stores, release store
 * of 0). Naming the mapping DD_OTEL_CTX with prctl is attempted and its
 * failure ignored, as the profiler does.
 *
 * Usage: ddwriter [--capacity N] [--threads N] [--context SERVICE]
 * --context also publishes an OTEP 4719 process context with service.name
 * SERVICE (and no thread-local schema), as a Java service with an
 * OpenTelemetry SDK publishing its resource would.
 * Prints "ready pid=<pid> buf=0x<hex> capacity=<n> named=<0|1>", then one
 * "thread tid=<tid> index=<i>" line per worker, then answers each stdin
 * command with one line ending in "ok" (or starting with "err"):
 *
 *   set I HI LO SPAN   worker I writes its slot (hex values) and keeps it
 *   clear I            worker I writes zeros
 *   busy I             worker I spins on CPU, keeping its context
 *   idle I             worker I blocks (futex), keeping its context
 *   storm              every worker rewrites its slot in a tight loop with
 *                      self-checking values: hi = v (v = 1, 2, ...),
 *                      lo = hi * K, span = hi ^ (tid * M) (K, M below), so
 *                      a torn mix of two writes, or another thread's
 *                      values, fails the check; reply "writes=<n> ok" with
 *                      the writes so far (0 at the start)
 *   calm               stop storming: each worker finishes its current
 *                      write (the slot keeps a consistent value) and
 *                      blocks; reply "writes=<n> ok"
 *   spawn              start one more worker: "thread tid=<t> index=<i> ok"
 *   collide I          start workers until one's tid % capacity equals
 *                      worker I's (the others exit at once; at most 100000
 *                      tries): "thread tid=<t> index=<j> tries=<n> ok"
 *   header MAGIC VERSION CAPACITY SLOTSIZE
 *                      overwrite the header fields (hex), for hostile-buffer
 *                      tests: "ok"
 *   exit I             worker I exits (its slot keeps its last value, as a
 *                      thread's slot does when it ends): "tid=<t> ok"
 *   context SERVICE    publish (or update) the process context: "ok"
 *   info               "buf=0x<hex> size=<bytes> capacity=<n> ok"
 *   quit               exit
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "procctx.h" /* publish_thread_context, PR_SET_VMA */

/* The storm's self-check constants (also in internal/testutil/ddwriter). */
#define STORM_K 0x9E3779B97F4A7C15ull
#define STORM_M 0xFF51AFD7ED558CCDull

struct header {
	uint32_t magic, version, capacity, slot_size;
	uint8_t reserved[16];
};

struct slot {
	uint64_t trace_id_high, trace_id_low, span_id;
	uint8_t in_use;
	uint8_t padding[7];
};

_Static_assert(sizeof(struct header) == 32, "header is 32 bytes");
_Static_assert(sizeof(struct slot) == 32, "slot is 32 bytes");

static struct header *buf;
static size_t buf_size;
static uint32_t capacity = 65536;

enum mode { IDLE, BUSY, STORM };
enum cmd { NONE, SET, CLEAR, GO_BUSY, GO_IDLE, GO_STORM, EXIT };

struct worker {
	pthread_t th;
	int index;
	pid_t tid;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int cmd;     /* guarded by mu; also read atomically by spinning loops */
	uint64_t hi, lo, span;
	enum mode mode;
	uint64_t writes; /* storm writes, read atomically by the main thread */
	int started;
	int exited; /* joined: commands to it are refused */
};

#define MAX_WORKERS 4096
static struct worker *workers[MAX_WORKERS];
static int nworkers;

static pid_t gettid_(void) { return (pid_t)syscall(SYS_gettid); }

static struct slot *slot_of(pid_t tid) {
	struct slot *slots = (struct slot *)(buf + 1);
	return &slots[(uint32_t)tid % capacity];
}

/* The writer of seed 001's OtelContexts::set, verbatim in its atomics. */
static void slot_set(pid_t tid, uint64_t hi, uint64_t lo, uint64_t span) {
	struct slot *s = slot_of(tid);
	__atomic_store_n(&s->in_use, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&s->trace_id_high, hi, __ATOMIC_RELAXED);
	__atomic_store_n(&s->trace_id_low, lo, __ATOMIC_RELAXED);
	__atomic_store_n(&s->span_id, span, __ATOMIC_RELAXED);
	__atomic_store_n(&s->in_use, 0, __ATOMIC_RELEASE);
}

static int pending(struct worker *w) { return __atomic_load_n(&w->cmd, __ATOMIC_ACQUIRE) != NONE; }

static void *worker_main(void *arg) {
	struct worker *w = arg;
	pthread_mutex_lock(&w->mu);
	w->tid = gettid_();
	w->started = 1;
	pthread_cond_broadcast(&w->cv);
	for (;;) {
		while (w->cmd == NONE && w->mode == IDLE)
			pthread_cond_wait(&w->cv, &w->mu);
		int c = w->cmd;
		switch (c) {
		case SET: slot_set(w->tid, w->hi, w->lo, w->span); break;
		case CLEAR: slot_set(w->tid, 0, 0, 0); break;
		case GO_BUSY: w->mode = BUSY; break;
		case GO_IDLE: w->mode = IDLE; break;
		case GO_STORM: w->mode = STORM; break;
		case EXIT:
			__atomic_store_n(&w->cmd, NONE, __ATOMIC_RELEASE);
			pthread_cond_broadcast(&w->cv);
			pthread_mutex_unlock(&w->mu);
			return NULL;
		}
		if (c != NONE) {
			__atomic_store_n(&w->cmd, NONE, __ATOMIC_RELEASE);
			pthread_cond_broadcast(&w->cv);
		}
		enum mode m = w->mode;
		if (m == IDLE)
			continue;
		pthread_mutex_unlock(&w->mu);
		if (m == BUSY) {
			volatile uint64_t x = 0;
			while (!pending(w))
				for (int i = 0; i < 1000; i++)
					x += i;
		} else {
			const uint64_t mix = (uint64_t)w->tid * STORM_M;
			uint64_t v = __atomic_load_n(&w->writes, __ATOMIC_RELAXED);
			/* At least one write, even if calm comes at once: after a
			 * storm every worker's slot holds a storm value. */
			do {
				v++;
				slot_set(w->tid, v, v * STORM_K, v ^ mix);
				__atomic_store_n(&w->writes, v, __ATOMIC_RELAXED);
			} while (!pending(w));
		}
		pthread_mutex_lock(&w->mu);
	}
}

/* post gives worker w a command and waits until it has been applied. */
static void post(struct worker *w, int c) {
	pthread_mutex_lock(&w->mu);
	__atomic_store_n(&w->cmd, c, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&w->cv);
	while (w->cmd != NONE)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

static struct worker *start_worker(void) {
	if (nworkers == MAX_WORKERS)
		return NULL;
	struct worker *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->index = nworkers;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
		free(w);
		return NULL;
	}
	pthread_mutex_lock(&w->mu);
	while (!w->started)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
	workers[nworkers++] = w;
	return w;
}

static void stop_worker(struct worker *w) {
	post(w, EXIT);
	pthread_join(w->th, NULL);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free(w);
}

static struct worker *worker_arg(const char *s) {
	char *end;
	long i = strtol(s, &end, 10);
	if (*end || i < 0 || i >= nworkers || workers[i]->exited)
		return NULL;
	return workers[i];
}

static uint64_t total_writes(void) {
	uint64_t n = 0;
	for (int i = 0; i < nworkers; i++)
		n += __atomic_load_n(&workers[i]->writes, __ATOMIC_RELAXED);
	return n;
}

static int command(char *line) {
	char *argv[8];
	int argc = 0;
	for (char *tok = strtok(line, " \t\n"); tok && argc < 8; tok = strtok(NULL, " \t\n"))
		argv[argc++] = tok;
	if (argc == 0)
		return 1;
	const char *c = argv[0];
	struct worker *w = argc > 1 ? worker_arg(argv[1]) : NULL;
	if (!strcmp(c, "quit"))
		return 0;
	if (!strcmp(c, "set") && argc == 5 && w) {
		w->hi = strtoull(argv[2], NULL, 16);
		w->lo = strtoull(argv[3], NULL, 16);
		w->span = strtoull(argv[4], NULL, 16);
		post(w, SET);
		printf("tid=%d ok\n", w->tid);
	} else if (!strcmp(c, "clear") && argc == 2 && w) {
		post(w, CLEAR);
		printf("tid=%d ok\n", w->tid);
	} else if (!strcmp(c, "busy") && argc == 2 && w) {
		post(w, GO_BUSY);
		printf("ok\n");
	} else if (!strcmp(c, "idle") && argc == 2 && w) {
		post(w, GO_IDLE);
		printf("ok\n");
	} else if (!strcmp(c, "storm") && argc == 1) {
		uint64_t n = total_writes();
		for (int i = 0; i < nworkers; i++)
			if (!workers[i]->exited)
				post(workers[i], GO_STORM);
		printf("writes=%" PRIu64 " ok\n", n);
	} else if (!strcmp(c, "calm") && argc == 1) {
		for (int i = 0; i < nworkers; i++)
			if (!workers[i]->exited)
				post(workers[i], GO_IDLE);
		printf("writes=%" PRIu64 " ok\n", total_writes());
	} else if (!strcmp(c, "spawn") && argc == 1) {
		struct worker *n = start_worker();
		if (!n) {
			printf("err cannot start a worker\n");
		} else {
			printf("thread tid=%d index=%d ok\n", n->tid, n->index);
		}
	} else if (!strcmp(c, "collide") && argc == 2 && w) {
		uint32_t want = (uint32_t)w->tid % capacity;
		int tries = 0;
		struct worker *n = NULL;
		while (tries < 100000) {
			tries++;
			n = start_worker();
			if (!n)
				break;
			if ((uint32_t)n->tid % capacity == want && n->tid != w->tid)
				break;
			nworkers--;
			stop_worker(n);
			n = NULL;
		}
		if (!n)
			printf("err no colliding thread after %d tries\n", tries);
		else
			printf("thread tid=%d index=%d tries=%d ok\n", n->tid, n->index, tries);
	} else if (!strcmp(c, "header") && argc == 5) {
		buf->magic = (uint32_t)strtoul(argv[1], NULL, 16);
		buf->version = (uint32_t)strtoul(argv[2], NULL, 16);
		buf->capacity = (uint32_t)strtoul(argv[3], NULL, 16);
		buf->slot_size = (uint32_t)strtoul(argv[4], NULL, 16);
		printf("ok\n");
	} else if (!strcmp(c, "exit") && argc == 2 && w) {
		post(w, EXIT);
		pthread_join(w->th, NULL);
		w->exited = 1;
		printf("tid=%d ok\n", w->tid);
	} else if (!strcmp(c, "context") && argc == 2) {
		if (publish_thread_context(argv[1], "", "") != 0)
			printf("err publishing the process context failed\n");
		else
			printf("ok\n");
	} else if (!strcmp(c, "info") && argc == 1) {
		printf("buf=%p size=%zu capacity=%u ok\n", (void *)buf, buf_size, capacity);
	} else {
		printf("err bad command %s\n", c);
	}
	fflush(stdout);
	return 1;
}

int main(int argc, char **argv) {
	int nthreads = 4;
	const char *service = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--capacity") && i + 1 < argc)
			capacity = (uint32_t)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			nthreads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--context") && i + 1 < argc)
			service = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--capacity N] [--threads N] [--context SERVICE]\n", argv[0]);
			return 2;
		}
	}
	if (capacity == 0) {
		fprintf(stderr, "capacity must be > 0\n");
		return 2;
	}
	/* The test is killed with the test binary's process group; also die
	 * with the parent so a crashed test leaves no writer behind. */
	prctl(PR_SET_PDEATHSIG, 9);

	/* OtelContexts::initialize: map, try to name, fill the header. */
	buf_size = sizeof(struct header) + (size_t)capacity * sizeof(struct slot);
	void *p = mmap(NULL, buf_size, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	int named = prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)p, buf_size, (unsigned long)"DD_OTEL_CTX") == 0;
	buf = p;
	buf->magic = 0x4F54454C;
	buf->version = 1;
	buf->capacity = capacity;
	buf->slot_size = sizeof(struct slot);

	if (service && publish_thread_context(service, "", "") != 0) {
		fprintf(stderr, "publishing the process context failed\n");
		return 1;
	}

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready pid=%d buf=%p capacity=%u named=%d\n", getpid(), p, capacity, named);
	for (int i = 0; i < nthreads; i++) {
		struct worker *w = start_worker();
		if (!w) {
			fprintf(stderr, "cannot start worker %d\n", i);
			return 1;
		}
		printf("thread tid=%d index=%d\n", w->tid, w->index);
	}
	fflush(stdout);
	char line[256];
	while (fgets(line, sizeof line, stdin))
		if (!command(line))
			break;
	/* Exit without joining: storming or busy workers die with the process. */
	_exit(0);
}
