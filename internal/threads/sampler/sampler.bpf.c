// SPDX-License-Identifier: Apache-2.0

//go:build ignore

/* otelctx thread-context sampler, loaded by sampler.go. It reads two
 * sources: the OTEP 4947 thread-local record (docs/thread-context.md) and the slot of
 * the Datadog Java profiler's "otel" ring buffer (DD_OTEL_CTX, §3).
 *
 * on_tick       perf_event (software cpu-clock, every online CPU): if the
 *               interrupted task belongs to a tracked process (and is the
 *               process the recipe was made for: same start time), read
 *               its thread pointer from task_struct, the otel_thread_ctx_v1
 *               slot per the recipe and the record it points at, and/or its
 *               DD_OTEL_CTX slot, and emit them on `samples`.
 * on_switch     tp_btf/sched_switch (optional, off-CPU): the same for `prev`
 *               just before it leaves the CPU.
 * on_profiler_timer  tp_btf/hrtimer_expire_entry (only when following a
 *               profiler): at the expiry of a cpu-clock event's sampling
 *               timer whose perf event runs a followed BPF program (prog ID
 *               in `followed`), the same capture as on_tick, flagged
 *               FLAG_FOLLOWED: the profiler samples in the same interrupt.
 * on_profiler_entry  fentry on a followed program (loaded once per program,
 *               where the kernel has BPF trampolines): the same.
 * on_prctl_exit tracepoint/syscalls/sys_exit_prctl (where tracefs is
 *               mounted): prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, ...,
 *               "OTEL_CTX" or "DD_OTEL_CTX") returning (successfully or
 *               not) emits the caller's PID on `prctl_events`, at most
 *               two per process per prctl_window_ns (prctl_windows). Only
 *               prctl exits run it.
 * on_sys_exit   raw_tracepoint/sys_exit: the same, the fallback: it runs on
 *               every syscall exit and filters on the syscall number.
 *
 * Readers must only read a thread's record while the thread is stopped or
 * interrupted (docs/thread-context.md): both capture points run on the thread itself
 * (current == the sampled task), so bpf_probe_read_user reads its own mm.
 */
#include "vmlinux_min.h"

#define HDR_SIZE 28      /* OTEP 4947 record header */
#define MAX_READ 1024    /* compile-time bound of a read (header + attrs) */
#define OFF_ATTRS_SIZE 26

/* Set by the loader (Options.ReadCap), HDR_SIZE <= read_cap <= MAX_READ. */
volatile const __u32 read_cap = 640;

#define PLACEMENT_STATIC 1  /* tlsvar.StaticTLS */
#define PLACEMENT_DYNAMIC 2 /* tlsvar.DynamicTLS */

/* Clock ticks of /proc/PID/stat's starttime: USER_HZ is 100 on x86-64
 * and arm64, and fs/proc/array.c computes it as nsec_to_clock_t(
 * timens_add_boottime_ns(start_boottime)), i.e. a division by 10 ms. */
#define NS_PER_TICK 10000000ULL

/* The boot-time offset of the loader's time namespace (what /proc adds to
 * start_boottime for the reader; 0 in the initial time namespace). Set by
 * the loader from /proc/self/timens_offsets. */
volatile const __s64 boot_offset_ns = 0;

/* What the kernel needs to read one tracked process (sampler.go encodes
 * it): the process's start time, tlsvar.Location and/or a DD ring buffer. */
struct recipe {
	__u8 placement;    /* 0: no OTEP 4947 variable to read */
	__u8 walk;         /* WALK_POINTER or WALK_NODE: what the variable holds */
	__u8 node_direct;  /* WALK_NODE: the object's field holds the record (else a wrapper's) */
	__u8 _pad;
	__u32 dd_capacity; /* 0: no DD_OTEL_CTX buffer to read */
	__s64 tp_offset;        /* static: slot = tp + tp_offset */
	__u64 sym_offset;       /* dynamic: slot = block + sym_offset */
	__u64 module_id;        /* dynamic: block = dtv[module_id] */
	__s64 dtv_ptr_offset;   /* dtv = *(tp + dtv_ptr_offset) */
	__u64 dtv_entry_size;
	__s64 dtv_count_offset; /* entries = *(dtv + dtv_count_offset) */
	__u64 dtv_unallocated;  /* besides 0, "block not allocated" */
	__u64 dd_addr;          /* DD_OTEL_CTX header (magic) address */
	/* /proc/PID/stat starttime of the process the recipe was made for:
	 * a task whose group leader started at another tick belongs to a
	 * process that reused the PID, and is not read. */
	__u64 start_ticks;
	/* The process's PID namespace (/proc/PID/ns/pid: device as the
	 * kernel's dev_t, inode), set with a DD buffer: the writer indexes its
	 * slot with gettid() as the thread sees it, its TID in that namespace
	 * (a containerised JVM's), not task->pid. 0: index by task->pid. */
	__u64 pidns_dev;
	__u64 pidns_ino;
	/* WALK_NODE: nodectx.Layout (byte offsets, each < 4096) */
	__u32 node_table_off;
	__u32 node_hdr_size;
	__u32 node_wrapped_off;
	__u32 node_native_off;
};

#define WALK_POINTER 0 /* otel_thread_ctx_v1: a pointer to the record */
#define WALK_NODE 1    /* otel_thread_ctx_nodejs_v1: internal/format/nodectx */

#define FLAG_OFFCPU 1        /* captured at sched_switch */
#define FLAG_NULL 2          /* the slot held NULL (DD: its page was never written): no record */
#define FLAG_NOT_ALLOCATED 4 /* dynamic TLS block not allocated yet */
#define FLAG_DD 8            /* a DD_OTEL_CTX slot (struct dd_event) */
#define FLAG_FOLLOWED 16     /* captured at a followed profiler's sample */

struct sample_event {
	__u32 pid; /* tgid */
	__u32 tid;
	__u64 boot_ns;
	__u16 flags;
	__u16 len; /* bytes of data that follow (0 with FLAG_NULL/NOT_ALLOCATED) */
	__u32 _pad;
	__u8 data[MAX_READ];
};
#define EVENT_HDR 24 /* offsetof(struct sample_event, data) */

/* DD_OTEL_CTX ring buffer (docs/dd-otel-ctx.md): 32-byte header, then slots of
 * 32 bytes, slot of tid at tid % capacity: trace_id_high, trace_id_low,
 * span_id (u64 each), in_use (u8, 1 while the owner writes), 7 padding. */
#define DD_HDR 32
#define DD_SLOT 32
#define DD_FIELDS 24
#define DD_OFF_IN_USE 24
#define DD_MAGIC 0x4F54454C /* "OTEL" */
#define DD_VERSION 1

/* A slot as emitted: the sample_event header (FLAG_DD, len 24; its padding
 * holds the TID the slot was indexed with), then the three fields as the
 * writer stored them (native byte order). */
struct dd_event {
	__u32 pid;
	__u32 tid;
	__u64 boot_ns;
	__u16 flags;
	__u16 len;
	__u32 slot_tid; /* tid in the process's PID namespace: slot = slot_tid % capacity */
	__u64 trace_id_high;
	__u64 trace_id_low;
	__u64 span_id;
};

struct prctl_event {
	__u32 pid;
	__u32 tid;
	__u64 boot_ns;
};

enum {
	C_SAMPLES,  /* captures of a tracked process's thread */
	C_EMITTED,  /* sample events written */
	C_DROPPED,  /* samples ring buffer full (prctl events: C_PRCTL_DROPPED) */
	C_FAILURES, /* a read faulted (thread pointer, DTV, slot or record) */
	C_PRCTL,    /* prctl events written */
	C_STALE,    /* tracked PID, other start time: the PID was reused */
	C_DD_BUSY,  /* DD slot in_use before the fields were read */
	C_DD_TORN,  /* DD slot in_use after the fields were read */
	C_DD_HEADER, /* DD buffer header no longer the recipe's (an exec): not read */
	C_PROFILER,  /* samples of a followed profiler program (any task) */
	C_FOLLOWED,  /* captures of a tracked process's thread at those */
	C_PRCTL_DROPPED, /* prctl_events full: a prctl event lost */
	C_NODE_BAD_POINTER, /* node walk: a pointer failed its tag or alignment check */
	C_NODE_BAD_TABLE,   /* node walk: impossible hash table counts or entry index */
	C_NODE_LONG_CHAIN,  /* node walk: bucket chain longer than NODE_MAX_CHAIN */
	C_PRCTL_LIMITED,    /* prctl event not sent: its process's window was used */
	C_NUM,
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct recipe);
} recipes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* resized by the loader */
} samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} prctl_events SEC(".maps");

/* Per-process limit of prctl events: a process may emit one event opening a
 * window of prctl_window_ns and one more inside it (user space then polls
 * the process at the window's end, reading its last change); the rest are
 * counted (C_PRCTL_LIMITED), so one process calling prctl in a loop cannot
 * fill prctl_events and starve the others. LRU: bounded whatever the
 * number of processes; an evicted process starts a new window. */
struct prctl_window {
	__u64 start_ns;  /* boot ns of the window's first event */
	__u64 leader_ns; /* the group leader's start_boottime: a reused PID is another process */
	__u64 sent;      /* events sent in the window (1 or 2) */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32); /* tgid */
	__type(value, struct prctl_window);
} prctl_windows SEC(".maps");

/* The window, min_rescan_interval (set by the loader; 0: no limit). */
volatile const __u64 prctl_window_ns = 250000000;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_NUM);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Programs followed through their sampling timer (on_profiler_timer):
 * prog ID -> 1. Filled by the loader's program watcher. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} followed SEC(".maps");

/* Samples seen per followed program (either method), prog ID -> count:
 * the watcher tells a program that stopped sampling from one that runs
 * (an fentry link keeps its target loaded after the profiler exits). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} follow_hits SEC(".maps");

/* Address of perf_swevent_hrtimer, the sampling timer callback of software
 * perf events, from /proc/kallsyms (0: unknown, on_profiler_timer does
 * nothing). */
volatile const __u64 swevent_hrtimer_fn = 0;

/* The event is built in a per-CPU buffer (too big for the 512-byte stack)
 * and copied out with bpf_ringbuf_output at its real size, so short
 * records take little ring space. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sample_event);
} scratch SEC(".maps");

/* prctl_event and dd_event appear in no map definition: these pointers
 * put them in the BTF so that bpf2go emits their Go types (recipe and
 * sample_event are map values already). */
struct prctl_event *unused_prctl_event __attribute__((unused));
struct dd_event *unused_dd_event __attribute__((unused));

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);
	if (c)
		__sync_fetch_and_add(c, 1);
}

static __always_inline __u64 thread_pointer(struct task_struct *t)
{
	__u64 tp = 0;
#if defined(__TARGET_ARCH_x86)
	bpf_probe_read_kernel(&tp, sizeof(tp), &t->thread.fsbase);
#else
	bpf_probe_read_kernel(&tp, sizeof(tp), &t->thread.uw.tp_value);
#endif
	return tp;
}

static __always_inline long read_u64(__u64 *dst, __u64 addr)
{
	return bpf_probe_read_user(dst, sizeof(*dst), (const void *)addr);
}

/* The nodejs_v1_dev walk (internal/format/nodectx, same checks): V8 64-bit
 * tagging without pointer compression (heap objects end in 01, a Smi's
 * value is the upper 32 bits). */
#define NODE_MAX_CHAIN 16
#define NODE_MAX_BUCKETS (1 << 16)
#define NODE_OK 0
#define NODE_NO_CONTEXT 1 /* unset variable, undefined frame or store, key absent */
#define NODE_FAULT 2      /* a read faulted */

static __always_inline int heap_object(__u64 p)
{
	return p > 0xffff && (p & 3) == 1;
}

static __always_inline int smi(__u64 v, __s64 *out)
{
	if ((__u32)v != 0)
		return 0;
	*out = (__s64)(__s32)(v >> 32);
	return 1;
}

/* The value of key in the frame's OrderedHashMap (header, then element,
 * deleted and bucket counts, the buckets, then (key, value, chain)
 * entries); NODE_OK with *value, or a NODE_* or counter outcome (< 0). */
static __always_inline int node_lookup(struct recipe *r, __u64 frame, __u64 key, __s32 hash, __u64 *value)
{
	__u64 table = 0, c[3] = {};
	if (read_u64(&table, frame - 1 + r->node_table_off))
		return NODE_FAULT;
	if (!heap_object(table))
		return -C_NODE_BAD_POINTER;
	__u64 base = table - 1 + r->node_hdr_size;
	if (bpf_probe_read_user(c, sizeof(c), (const void *)base))
		return NODE_FAULT;
	__s64 elems = 0, deleted = 0, buckets = 0;
	if (!smi(c[0], &elems) || !smi(c[1], &deleted) || !smi(c[2], &buckets) || elems < 0 || deleted < 0 ||
	    buckets <= 0 || buckets > NODE_MAX_BUCKETS || (buckets & (buckets - 1)) || elems + deleted > 2 * buckets)
		return -C_NODE_BAD_TABLE;
	__s64 used = elems + deleted;
	__u64 entries = base + 24 + (__u64)buckets * 8;
	__u64 head = 0;
	if (read_u64(&head, base + 24 + (__u64)((__s64)hash & (buckets - 1)) * 8))
		return NODE_FAULT;
	for (int i = 0; i < NODE_MAX_CHAIN; i++) {
		__s64 entry = 0;
		if (!smi(head, &entry) || entry < -1 || entry >= used)
			return -C_NODE_BAD_TABLE;
		if (entry == -1)
			return NODE_NO_CONTEXT;
		__u64 e[3] = {};
		if (bpf_probe_read_user(e, sizeof(e), (const void *)(entries + (__u64)entry * 24)))
			return NODE_FAULT;
		if (e[0] == key) {
			*value = e[1];
			return NODE_OK;
		}
		head = e[2];
	}
	return -C_NODE_LONG_CHAIN;
}

/* From the variable at slot to the record's address (*rec). */
static __always_inline int node_walk(struct recipe *r, __u64 slot, __u64 *rec)
{
	/* cped_slot, als_handle, als_identity_hash (+pad), undefined_addr */
	__u64 v[4] = {};
	if (bpf_probe_read_user(v, sizeof(v), (const void *)slot))
		return NODE_FAULT;
	if (!v[0] || !v[1] || !v[3])
		return NODE_NO_CONTEXT;
	if ((v[0] & 7) || (v[1] & 7) || !heap_object(v[3]))
		return -C_NODE_BAD_POINTER;
	__u64 frame = 0, key = 0, value = 0, wrap = 0;
	if (read_u64(&frame, v[0]))
		return NODE_FAULT;
	if (frame == v[3])
		return NODE_NO_CONTEXT;
	if (!heap_object(frame))
		return -C_NODE_BAD_POINTER;
	if (read_u64(&key, v[1]))
		return NODE_FAULT;
	if (!heap_object(key))
		return -C_NODE_BAD_POINTER;
	int res = node_lookup(r, frame, key, (__s32)v[2], &value);
	if (res != NODE_OK)
		return res;
	if (value == v[3])
		return NODE_NO_CONTEXT;
	if (!heap_object(value))
		return -C_NODE_BAD_POINTER;
	if (read_u64(&wrap, value - 1 + r->node_wrapped_off))
		return NODE_FAULT;
	if (r->node_direct) {
		if (!wrap || (wrap & 1))
			return -C_NODE_BAD_POINTER;
		*rec = wrap;
		return NODE_OK;
	}
	if (!wrap || (wrap & 7))
		return -C_NODE_BAD_POINTER;
	if (read_u64(rec, wrap + r->node_native_off))
		return NODE_FAULT;
	if (!*rec || (*rec & 1))
		return -C_NODE_BAD_POINTER;
	return NODE_OK;
}

/* Reads the record of the current task (a thread of tgid, tracked with r,
 * thread pointer tp) and emits it. Same steps as tlsvar.Location.SlotAddr,
 * then threadread: header, then min(attrs_data_size, read_cap - 28). */
static __always_inline void capture(struct recipe *r, __u32 tgid, __u32 tid, __u64 tp, __u16 flags)
{
	__u32 zero = 0;
	struct sample_event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return;
	e->pid = tgid;
	e->tid = tid;
	e->boot_ns = bpf_ktime_get_boot_ns();
	e->_pad = 0;

	__u64 len = 0; /* kept in a register so the verifier keeps its bounds */
	__u64 slot = 0, rec = 0;
	if (tp == 0)
		goto fault;
	if (r->placement == PLACEMENT_STATIC) {
		slot = tp + (__u64)r->tp_offset;
	} else if (r->placement == PLACEMENT_DYNAMIC) {
		__u64 dtv = 0, n = 0, block = 0;
		if (read_u64(&dtv, tp + (__u64)r->dtv_ptr_offset))
			goto fault;
		if (dtv == 0) {
			flags |= FLAG_NOT_ALLOCATED;
			goto emit;
		}
		if (read_u64(&n, dtv + (__u64)r->dtv_count_offset))
			goto fault;
		/* The thread's DTV predates the module: its block does not exist. */
		if (r->module_id > n) {
			flags |= FLAG_NOT_ALLOCATED;
			goto emit;
		}
		if (read_u64(&block, dtv + r->module_id * r->dtv_entry_size))
			goto fault;
		if (block == 0 || (r->dtv_unallocated != 0 && block == r->dtv_unallocated)) {
			flags |= FLAG_NOT_ALLOCATED;
			goto emit;
		}
		slot = block + r->sym_offset;
	} else {
		goto fault;
	}
	if (r->walk == WALK_NODE) {
		int res = node_walk(r, slot, &rec);
		if (res == NODE_FAULT)
			goto fault;
		if (res == NODE_NO_CONTEXT) {
			flags |= FLAG_NULL;
			goto emit;
		}
		if (res < 0) { /* a check failed: counted, nothing emitted */
			count((__u32)-res);
			return;
		}
	} else if (read_u64(&rec, slot)) {
		goto fault;
	}
	if (rec == 0) {
		flags |= FLAG_NULL;
		goto emit;
	}
	if (bpf_probe_read_user(e->data, HDR_SIZE, (const void *)rec))
		goto fault;
	__u64 n = *(__u16 *)&e->data[OFF_ATTRS_SIZE];
	__u64 cap = read_cap;
	/* read_cap is a load-time constant the verifier does not trust to be
	 * in range: clamp it, then clamp n to what fits behind the header. */
	if (cap > MAX_READ)
		cap = MAX_READ;
	if (cap < HDR_SIZE)
		cap = HDR_SIZE;
	if (n > cap - HDR_SIZE)
		n = cap - HDR_SIZE;
	if (n > MAX_READ - HDR_SIZE)
		n = MAX_READ - HDR_SIZE;
	if (n > 0 && bpf_probe_read_user(e->data + HDR_SIZE, n, (const void *)(rec + HDR_SIZE)))
		goto fault;
	len = HDR_SIZE + n;

emit:
	e->flags = flags;
	e->len = len;
	if (len > MAX_READ) /* never true; restates the bound after the joins */
		len = MAX_READ;
	if (bpf_ringbuf_output(&samples, e, EVENT_HDR + len, 0))
		count(C_DROPPED);
	else
		count(C_EMITTED);
	return;
fault:
	count(C_FAILURES);
}

/* Whether t belongs to the process the recipe was made for: its group
 * leader's start time (what /proc/PID/stat shows as starttime, in ticks)
 * is the recipe's. The recipes map is keyed by PID alone; without this a
 * PID reused by a new process would be read with its predecessor's
 * addresses until user space untracked it. */
static __always_inline int same_process(struct recipe *r, struct task_struct *t)
{
	struct task_struct *leader = 0;
	__u64 start = 0;
	if (bpf_probe_read_kernel(&leader, sizeof(leader), &t->group_leader) || !leader ||
	    bpf_probe_read_kernel(&start, sizeof(start), &leader->start_boottime)) {
		count(C_FAILURES);
		return 0;
	}
	if ((start + boot_offset_ns) / NS_PER_TICK != r->start_ticks) {
		count(C_STALE);
		return 0;
	}
	return 1;
}

/* Reads the DD_OTEL_CTX slot of the current task (tid of tgid; its slot is
 * indexed by its TID in the process's PID namespace, recipe.pidns_*) with the
 * writer's in_use protocol: in_use, the three fields, the fields again and
 * in_use again (one read of the whole slot); a slot being written at either
 * check is counted (busy, torn) and not emitted, and so is one whose two
 * copies differ (torn: a whole write fitted between the checks, which
 * in_use alone cannot see). The sampled thread is interrupted, so its own
 * writes cannot progress meanwhile: busy is a write it was interrupted in;
 * a torn slot is a write by another thread whose tid shares the slot (user
 * space does not trust colliding slots either, README.md). */
static __always_inline void capture_dd(struct recipe *r, __u32 tgid, __u32 tid, __u16 flags)
{
	__u32 cap = r->dd_capacity;
	if (cap == 0)
		return;
	/* The writer's gettid(): the current task's TID in its own (innermost)
	 * PID namespace. bpf_get_ns_current_pid_tgid answers for current, which
	 * is the sampled task at both capture points, and only if the namespace
	 * is the recipe's. */
	__u32 slot_tid = tid;
	if (r->pidns_ino) {
		struct bpf_pidns_info ns = {};
		if (bpf_get_ns_current_pid_tgid(r->pidns_dev, r->pidns_ino, &ns, sizeof(ns)))
			goto fault;
		slot_tid = ns.pid;
	}
	/* The header must still describe the buffer of the recipe: an exec
	 * keeps the PID and its start time, and the new image may hold
	 * anything at the old address until user space tracks it again. */
	__u32 ident[4] = {};
	if (bpf_probe_read_user(ident, sizeof(ident), (const void *)r->dd_addr) ||
	    ident[0] != DD_MAGIC || ident[1] != DD_VERSION || ident[2] != cap || ident[3] != DD_SLOT) {
		count(C_DD_HEADER);
		return;
	}
	__u64 slot = r->dd_addr + DD_HDR + (__u64)(slot_tid % cap) * DD_SLOT;
	struct dd_event e = {};
	__u64 again[4] = {}; /* the fields, then in_use (low byte of [3]) and padding */
	__u8 in_use = 1;
	if (bpf_probe_read_user(&in_use, sizeof(in_use), (const void *)(slot + DD_OFF_IN_USE))) {
		/* The slot's page is not resident: in an anonymous mapping that
		 * is a page nobody wrote (a 65536-slot buffer is 512 pages and
		 * threads that never set a context leave theirs untouched), so
		 * the slot is all zeros: no context, not a failure. */
		flags |= FLAG_NULL;
		goto emit;
	}
	if (in_use) {
		count(C_DD_BUSY);
		return;
	}
	/* The second read takes the whole slot: the copy goes up in address
	 * order, so in_use (after the fields) is read after them — the fields
	 * again, then in_use again, in one helper call. */
	if (bpf_probe_read_user(&e.trace_id_high, DD_FIELDS, (const void *)slot) ||
	    bpf_probe_read_user(again, sizeof(again), (const void *)slot))
		goto fault;
	in_use = *(__u8 *)&again[3];
	if (in_use || again[0] != e.trace_id_high || again[1] != e.trace_id_low || again[2] != e.span_id) {
		count(C_DD_TORN);
		return;
	}
emit:
	e.pid = tgid;
	e.tid = tid;
	e.slot_tid = slot_tid;
	e.boot_ns = bpf_ktime_get_boot_ns();
	e.flags = flags | FLAG_DD;
	e.len = DD_FIELDS;
	if (bpf_ringbuf_output(&samples, &e, sizeof(e), 0))
		count(C_DROPPED);
	else
		count(C_EMITTED);
	return;
fault:
	count(C_FAILURES);
}

/* Both sources of task t (current), a thread of the tracked tgid. */
static __always_inline void sample(struct recipe *r, struct task_struct *t, __u32 tgid, __u32 tid, __u16 flags)
{
	if (!same_process(r, t))
		return;
	count(C_SAMPLES);
	if (flags & FLAG_FOLLOWED)
		count(C_FOLLOWED);
	if (r->placement)
		capture(r, tgid, tid, thread_pointer(t), flags);
	if (r->dd_capacity)
		capture_dd(r, tgid, tid, flags);
}

SEC("perf_event")
int on_tick(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct recipe *r = bpf_map_lookup_elem(&recipes, &tgid);
	if (!r) /* the cost for every untracked task: this lookup */
		return 0;
	sample(r, (struct task_struct *)bpf_get_current_task(), tgid, (__u32)id, 0);
	return 0;
}

SEC("tp_btf/sched_switch")
int on_switch(__u64 *ctx)
{
	/* TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state) */
	struct task_struct *prev = (struct task_struct *)ctx[1];
	int tgid = 0, pid = 0;
	bpf_probe_read_kernel(&tgid, sizeof(tgid), &prev->tgid);
	__u32 key = tgid;
	struct recipe *r = bpf_map_lookup_elem(&recipes, &key);
	if (!r)
		return 0;
	bpf_probe_read_kernel(&pid, sizeof(pid), &prev->pid);
	/* The tracepoint fires before the switch: current is still prev, so
	 * bpf_probe_read_user reads prev's address space. Check it rather
	 * than read another process's memory at prev's addresses. */
	if ((__u32)bpf_get_current_pid_tgid() != (__u32)pid) {
		count(C_FAILURES);
		return 0;
	}
	sample(r, prev, key, pid, FLAG_OFFCPU);
	return 0;
}

/* The ID of the BPF program a perf event runs (0: none or unreadable). */
static __always_inline __u32 event_prog_id(struct perf_event *ev)
{
	struct bpf_prog *prog = 0;
	struct bpf_prog_aux *aux = 0;
	__u32 id = 0;
	if (bpf_probe_read_kernel(&prog, sizeof(prog), &ev->prog) || !prog ||
	    bpf_probe_read_kernel(&aux, sizeof(aux), &prog->aux) || !aux ||
	    bpf_probe_read_kernel(&id, sizeof(id), &aux->id))
		return 0;
	return id;
}

/* A followed program (prog_id) samples current right now: count it and
 * capture current as on_tick would. */
static __always_inline void follow(__u32 prog_id)
{
	count(C_PROFILER);
	__u64 *hits = bpf_map_lookup_elem(&follow_hits, &prog_id);
	if (hits)
		__sync_fetch_and_add(hits, 1);
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct recipe *r = bpf_map_lookup_elem(&recipes, &tgid);
	if (!r)
		return;
	sample(r, (struct task_struct *)bpf_get_current_task(), tgid, (__u32)id, FLAG_FOLLOWED);
}

SEC("tp_btf/hrtimer_expire_entry")
int on_profiler_timer(__u64 *ctx)
{
	/* TP_PROTO(struct hrtimer *hrtimer, ktime_t *now), in the timer
	 * interrupt, just before the callback: for a cpu-clock event's timer
	 * the callback runs the event's BPF program on the interrupted task,
	 * which is current here too. Every hrtimer of the system expires
	 * through here: filter on the callback first. */
	__u64 timer = 0, fn = 0;
	bpf_probe_read_kernel(&timer, sizeof(timer), ctx);
	if (!swevent_hrtimer_fn || !timer ||
	    bpf_probe_read_kernel(&fn, sizeof(fn), &((struct hrtimer *)timer)->function) ||
	    fn != swevent_hrtimer_fn)
		return 0;
	/* container_of(timer, struct perf_event, hw.hrtimer) */
	__u64 off = __builtin_preserve_field_info(((struct perf_event *)0)->hw.hrtimer, BPF_FIELD_BYTE_OFFSET);
	__u32 prog_id = event_prog_id((struct perf_event *)(timer - off));
	if (!prog_id || !bpf_map_lookup_elem(&followed, &prog_id))
		return 0;
	follow(prog_id);
	return 0;
}

SEC("fentry")
int on_profiler_entry(__u64 *ctx)
{
	/* The target is a perf_event program: its argument is the kernel's
	 * struct bpf_perf_event_data_kern, and current is the sampled task. */
	__u64 data = 0;
	struct perf_event *ev = 0;
	bpf_probe_read_kernel(&data, sizeof(data), ctx);
	if (data)
		bpf_probe_read_kernel(&ev, sizeof(ev), &((struct bpf_perf_event_data_kern *)data)->event);
	follow(ev ? event_prog_id(ev) : 0);
	return 0;
}

#if defined(__TARGET_ARCH_x86)
#define NR_PRCTL 157
#else
#define NR_PRCTL 167
#endif
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0

#define NAME_MAX_READ 16 /* longest name compared, NUL included: 12 */

/* Whether the user string at addr is "OTEL_CTX" or "DD_OTEL_CTX" (the
 * names of an OTEP process context and of a DD_OTEL_CTX buffer): at most
 * 16 bytes read, compared as two little-endian words (both targets are
 * bpfel); the buffer is zeroed first, so the bytes after the NUL are 0. */
static __always_inline int ctx_name(__u64 addr)
{
	__u64 w[2] = {};
	long n = bpf_probe_read_user_str(w, sizeof(w), (const void *)addr);
	/* "OTEL_CTX" + NUL: 9 bytes */
	if (n == 9 && w[0] == 0x5854435f4c45544fULL && w[1] == 0)
		return 1;
	/* "DD_OTEL_" "CTX" + NUL: 12 bytes */
	if (n == 12 && w[0] == 0x5f4c45544f5f4444ULL && w[1] == 0x585443ULL)
		return 1;
	return 0;
}

/* Whether the calling process may send an event now, charging its window
 * (*w, NULL when the map had no room: sent uncharged). Threads of one
 * process on several CPUs at once may each pass the check (no
 * compare-and-swap in BPF v1): the bound is then per CPU. */
static __always_inline int prctl_allowed(__u32 tgid, __u64 now, struct prctl_window **w)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	struct task_struct *leader = 0;
	__u64 leader_ns = 0;
	if (!bpf_probe_read_kernel(&leader, sizeof(leader), &t->group_leader) && leader)
		bpf_probe_read_kernel(&leader_ns, sizeof(leader_ns), &leader->start_boottime);
	*w = bpf_map_lookup_elem(&prctl_windows, &tgid);
	if (*w && (*w)->leader_ns == leader_ns && now - (*w)->start_ns < prctl_window_ns) {
		if ((*w)->sent >= 2)
			return 0;
		(*w)->sent++;
		return 1;
	}
	struct prctl_window fresh = {.start_ns = now, .leader_ns = leader_ns, .sent = 1};
	bpf_map_update_elem(&prctl_windows, &tgid, &fresh, BPF_ANY);
	*w = bpf_map_lookup_elem(&prctl_windows, &tgid);
	return 1;
}

/* option, arg2 and arg5 of a prctl, already known to be one: emits the
 * caller's PID if it names a mapping OTEL_CTX or DD_OTEL_CTX. */
static __always_inline void prctl_check(__u64 option, __u64 arg2, __u64 name)
{
	/* prctl's option is an int: compare the low 32 bits. */
	if ((__u32)option != PR_SET_VMA || arg2 != PR_SET_VMA_ANON_NAME || !ctx_name(name))
		return;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u64 now = bpf_ktime_get_boot_ns();
	struct prctl_window *w = 0;
	if (prctl_window_ns && !prctl_allowed(tgid, now, &w)) {
		count(C_PRCTL_LIMITED);
		return;
	}
	struct prctl_event *e = bpf_ringbuf_reserve(&prctl_events, sizeof(*e), 0);
	if (!e) {
		/* Not charged to the window: the next call may try again. */
		if (w && w->sent)
			w->sent--;
		count(C_PRCTL_DROPPED);
		return;
	}
	e->pid = tgid;
	e->tid = (__u32)id;
	e->boot_ns = now;
	bpf_ringbuf_submit(e, 0);
	count(C_PRCTL);
}

/* prctl's option, arg2 and arg5 from the user registers saved on entry
 * (regs: a kernel pointer to struct pt_regs). At exit x86's ax and arm64's
 * x0 hold the return value: x86's arguments are in di, si, r8 (untouched);
 * arm64's first is kept in orig_x0, the others in x1..x4. */
static __always_inline void prctl_from_regs(struct pt_regs *regs)
{
	__u64 option = 0, arg2 = 0, name = 0;
#if defined(__TARGET_ARCH_x86)
	bpf_probe_read_kernel(&option, sizeof(option), &regs->di);
	bpf_probe_read_kernel(&arg2, sizeof(arg2), &regs->si);
	bpf_probe_read_kernel(&name, sizeof(name), &regs->r8);
#else
	bpf_probe_read_kernel(&option, sizeof(option), &regs->orig_x0);
	bpf_probe_read_kernel(&arg2, sizeof(arg2), &regs->regs[1]);
	bpf_probe_read_kernel(&name, sizeof(name), &regs->regs[4]);
#endif
	prctl_check(option, arg2, name);
}

/* The stable part of every syscall exit event of tracefs
 * (events/syscalls/sys_exit_prctl/format): 8 bytes of common fields,
 * int __syscall_nr at 8, long ret at 16. */
struct sys_exit_args {
	__u64 common;
	__s32 nr;
	__s32 _pad;
	__s64 ret;
};

SEC("tracepoint/syscalls/sys_exit_prctl")
int on_prctl_exit(struct sys_exit_args *ctx)
{
	/* Runs on prctl exits only (the syscalls event is enabled for this
	 * number alone). The event does not carry the arguments: they are
	 * read from the user registers current saved on entry, which the
	 * syscall path does not modify besides the return value. */
	struct task_struct *t = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
	if (!regs)
		return 0;
	prctl_from_regs(regs);
	return 0;
}

SEC("raw_tracepoint/sys_exit")
int on_sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
	/* TP_PROTO(struct pt_regs *regs, long ret): fires on every syscall
	 * exit, failed ones included (prctl returns EINVAL without
	 * CONFIG_ANON_VMA_NAME; the publisher's call is still the signal). */
	struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
	__u64 nr = 0;
#if defined(__TARGET_ARCH_x86)
	bpf_probe_read_kernel(&nr, sizeof(nr), &regs->orig_ax);
#else
	__s32 nr32 = -1;
	bpf_probe_read_kernel(&nr32, sizeof(nr32), &regs->syscallno);
	nr = (__u64)(__s64)nr32;
#endif
	if (nr != NR_PRCTL)
		return 0;
	prctl_from_regs(regs);
	return 0;
}

/* probe_read_user, get_current_task and the ring buffer helpers are
 * GPL-only. */
char LICENSE[] SEC("license") = "Dual MIT/GPL";
