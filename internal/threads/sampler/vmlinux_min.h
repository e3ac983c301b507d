// SPDX-License-Identifier: Apache-2.0

/* Minimal, hand-written kernel type declarations for sampler.bpf.c.
 *
 * Only the fields the program touches are declared. Every struct carries
 * preserve_access_index, so clang emits CO-RE relocations for each field
 * access and the loader (cilium/ebpf) rewrites the offsets against the
 * running kernel's BTF (/sys/kernel/btf/vmlinux): the layout below does not
 * have to match any kernel, only the type and field names do. This keeps
 * `make generate` down to clang alone (no bpftool, no vmlinux.h dump).
 */
#ifndef OTELCTX_VMLINUX_MIN_H
#define OTELCTX_VMLINUX_MIN_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;

#if defined(__TARGET_ARCH_x86)
/* x86-64: the user thread pointer is fs_base, saved in thread_struct. */
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

/* Syscall number and the first two arguments as the kernel saved them on
 * entry (at sys_exit, ax already holds the return value; orig_ax keeps nr). */
struct pt_regs {
	unsigned long di;
	unsigned long si;
	unsigned long r8; /* fifth argument */
	unsigned long orig_ax;
} __attribute__((preserve_access_index));
#elif defined(__TARGET_ARCH_arm64)
/* arm64: TPIDR_EL0 is kept in thread.uw.tp_value (uw is a named member of
 * an anonymous struct type: CO-RE matches it by member names). */
struct thread_struct {
	struct {
		unsigned long tp_value;
	} uw;
} __attribute__((preserve_access_index));

/* regs[] sits inside an anonymous union in the kernel's definition; CO-RE
 * finds members through anonymous members. x0 is overwritten by the return
 * value at sys_exit, so the first argument comes from orig_x0. */
struct pt_regs {
	__u64 regs[31];
	__u64 orig_x0;
	__s32 syscallno;
} __attribute__((preserve_access_index));
#else
#error "define __TARGET_ARCH_x86 or __TARGET_ARCH_arm64 (bpf2go -target amd64,arm64 does)"
#endif

struct task_struct {
	int pid;  /* thread id in the initial pid namespace */
	int tgid; /* process id in the initial pid namespace */
	struct task_struct *group_leader;
	/* ns since boot (CLOCK_BOOTTIME) when the task was created; the
	 * leader's is /proc/PID/stat's starttime (since 5.5; before, the
	 * field was real_start_time, older than the ring buffers we need). */
	__u64 start_boottime;
	struct thread_struct thread;
} __attribute__((preserve_access_index));

/* Following a profiler: a cpu-clock perf event samples from its hrtimer
 * (perf_event.hw.hrtimer, callback perf_swevent_hrtimer) and runs the BPF
 * program attached to it (perf_event.prog). hw.hrtimer sits in anonymous
 * unions of hw_perf_event: CO-RE finds it by member names. */
struct hrtimer {
	void *function;
} __attribute__((preserve_access_index));

struct hw_perf_event {
	struct hrtimer hrtimer;
} __attribute__((preserve_access_index));

struct bpf_prog_aux {
	__u32 id;
} __attribute__((preserve_access_index));

struct bpf_prog {
	struct bpf_prog_aux *aux;
} __attribute__((preserve_access_index));

struct perf_event {
	struct hw_perf_event hw;
	struct bpf_prog *prog;
} __attribute__((preserve_access_index));

/* What a perf_event program's context really is (fentry on one sees it). */
struct bpf_perf_event_data_kern {
	struct perf_event *event;
} __attribute__((preserve_access_index));

struct bpf_raw_tracepoint_args {
	__u64 args[0];
};

/* ---- the few definitions of <linux/bpf.h> and libbpf's bpf_helpers.h
 * the program uses (helper ids from include/uapi/linux/bpf.h) ---------- */
enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};

/* __builtin_preserve_field_info kinds (libbpf's bpf_core_read.h). */
#define BPF_FIELD_BYTE_OFFSET 0

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
#define BPF_ANY 0
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static __u64 (*bpf_get_current_task)(void) = (void *)35;
static long (*bpf_probe_read_user)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)112;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)113;
static __u64 (*bpf_ktime_get_boot_ns)(void) = (void *)125;
/* pid (TID) and tgid of current in the PID namespace (dev, ino), 5.7. */
struct bpf_pidns_info {
	__u32 pid;
	__u32 tgid;
};
static long (*bpf_get_ns_current_pid_tgid)(__u64 dev, __u64 ino, struct bpf_pidns_info *nsdata, __u32 size) = (void *)120;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) = (void *)130;
static void *(*bpf_ringbuf_reserve)(void *ringbuf, __u64 size, __u64 flags) = (void *)131;
static void (*bpf_ringbuf_submit)(void *data, __u64 flags) = (void *)132;
static long (*bpf_probe_read_user_str)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)114;
/* current as a BTF pointer (5.11), and the user registers it saved on
 * kernel entry (task_pt_regs, 5.15). */
static struct task_struct *(*bpf_get_current_task_btf)(void) = (void *)158;
static long (*bpf_task_pt_regs)(struct task_struct *task) = (void *)175;

#endif
