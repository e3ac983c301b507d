// SPDX-License-Identifier: Apache-2.0

//go:build linux

package vm

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Machine is how one architecture's kernel boots under QEMU.
type Machine struct {
	GOARCH  string
	Qemu    string   // the system emulator
	Args    []string // machine, CPU, accelerator
	Console string   // the serial console device
}

var Machines = []Machine{
	{GOARCH: "amd64", Qemu: "qemu-system-x86_64", Args: []string{"-accel", "tcg", "-cpu", "max"}, Console: "ttyS0"},
	{GOARCH: "arm64", Qemu: "qemu-system-aarch64", Args: []string{"-M", "virt", "-cpu", "max", "-accel", "tcg"}, Console: "ttyAMA0"},
}

// Boot is what a VM run saw: each test binary's output and exit code, the
// kernel's console, and times.
type Boot struct {
	Kernel  string        // the guest's uname -r and -m
	Runs    []*RunOutput  // in plan order
	Console []string      // lines without the marker (kernel messages)
	Done    bool          // guestinit finished its plan
	BootDur time.Duration // QEMU start to guestinit's first line
	Total   time.Duration
	Err     error // QEMU's exit
	// Registers: the vCPUs' registers when the run timed out.
	Registers string
	TimedOut  bool // a deadline (RunOptions) ended the run
	// TestStarted: a test binary printed its first test's start; a failure
	// before is one of the boot (the kernel, guestinit, the exec).
	TestStarted bool
}

type RunOutput struct {
	Name    string
	Lines   []string
	Code    int // -2 while running (never exited)
	Seconds float64
	Timeout float64 // its -test.timeout in seconds, scaled by the guest
	Scale   float64 // the guest's time scale for it (vm.TimeScale)
	// CalibrationMs: CalibrationLoop's time in the guest before it.
	CalibrationMs int
}

// RunOptions: the vCPUs; Serial2, a host file that receives the guest's
// second serial port (x86's ttyS1: guestinit writes /proc/kallsyms there);
// Progress, if set, sees every console line as it comes.
type RunOptions struct {
	SMP      int
	Serial2  string
	Progress func(string)
	// TCGThread: QEMU's tcg thread= ("multi": a host thread per vCPU,
	// "single": every vCPU on one, in turn); "" for QEMU's default.
	TCGThread string
	// Deadlines. Until guestinit starts its first run, and between runs:
	// StepTimeout. During a run: the timeout guestinit gave the test
	// binary (scaled by the guest's measured speed) plus StepTimeout.
	StepTimeout time.Duration
}

// DefaultStepTimeout: a boot, or the calibration between two runs, on a
// busy host (arm64's boot took 97 s beside a load average of 29 on 2 cores).
const DefaultStepTimeout = 4 * time.Minute

// Run boots kernel with initrd on m until the guest powers off, a deadline
// (RunOptions) passes or ctx ends (then the vCPUs' registers, their
// stacks' first words and instructions are read through QEMU's monitor,
// into Registers, before QEMU is killed).
func (m Machine) Run(ctx context.Context, kernel, initrd, cmdline string, o RunOptions) *Boot {
	b := &Boot{}
	if o.StepTimeout <= 0 {
		o.StepTimeout = DefaultStepTimeout
	}
	dir, err := os.MkdirTemp("", "otelctx-vm-")
	if err != nil {
		b.Err = err
		return b
	}
	defer os.RemoveAll(dir)
	mon := filepath.Join(dir, "monitor")
	args := append([]string{}, m.Args...)
	if o.TCGThread != "" {
		for i, a := range args {
			if a == "tcg" && i > 0 && args[i-1] == "-accel" {
				args[i] = "tcg,thread=" + o.TCGThread
			}
		}
	}
	args = append(args, "-m", "2048", "-smp", strconv.Itoa(max(1, o.SMP)), "-display", "none",
		"-monitor", "unix:"+mon+",server,nowait",
		"-serial", "stdio", "-no-reboot", "-kernel", kernel, "-initrd", initrd,
		"-append", "console="+m.Console+" "+cmdline)
	if o.Serial2 != "" {
		args = append(args, "-serial", "file:"+o.Serial2)
	}
	cmd := exec.Command(m.Qemu, args...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Err = err
		return b
	}
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Err = err
		return b
	}
	exited := make(chan struct{})
	// deadline: the time left from now, reset by the guest's run lines.
	deadline := make(chan time.Duration, 1)
	watched := make(chan struct{})
	var registers string
	var timedOut bool
	go func() {
		defer close(watched)
		registers, timedOut = m.watch(ctx, cmd, mon, o.StepTimeout, deadline, exited)
	}()
	b.read(out, start, o.Progress, func(d time.Duration) {
		select {
		case <-deadline: // replaced by the newer one
		default:
		}
		deadline <- d + o.StepTimeout
	})
	b.Err = cmd.Wait()
	close(exited)
	<-watched
	b.Registers, b.TimedOut = registers, timedOut
	b.Total = time.Since(start)
	return b
}

// watch kills QEMU when ctx ends or a deadline passes (the first after
// step, the next ones from deadline), and returns the vCPUs' registers
// then, and whether a deadline passed; it returns at once on exited.
func (m Machine) watch(ctx context.Context, cmd *exec.Cmd, mon string, step time.Duration, deadline <-chan time.Duration, exited <-chan struct{}) (registers string, timedOut bool) {
	timer := time.NewTimer(step)
	defer timer.Stop()
	for {
		select {
		case d := <-deadline:
			timer.Reset(d)
			continue
		case <-timer.C:
			timedOut = true
		case <-ctx.Done():
		case <-exited:
			return "", false
		}
		registers = monitor(mon, "info registers -a")
		if cmds := m.stackCommands(registers); len(cmds) > 0 {
			registers += "\n" + monitor(mon, cmds...)
		}
		_ = cmd.Process.Kill()
		return registers, timedOut
	}
}

// stackCommands: for each vCPU in an x86 register dump, the 64 words at
// its stack pointer (return addresses, an exception's frame) and the
// instructions at its program counter and at RAX (an indirect jump's
// target); QEMU's monitor names no 64-bit registers, hence the values.
func (m Machine) stackCommands(regs string) []string {
	if m.GOARCH != "amd64" {
		return nil
	}
	var cmds []string
	for _, blk := range cpuBlock.FindAllStringSubmatch(regs, -1) {
		cmds = append(cmds, "cpu "+blk[1])
		if v := regValue(blk[2], "RSP"); v != "" {
			cmds = append(cmds, "x/64gx 0x"+v)
		}
		for _, r := range []string{"RIP", "RAX"} {
			if v := regValue(blk[2], r); strings.HasPrefix(v, "ffffffff") {
				cmds = append(cmds, "x/12i 0x"+v)
			}
		}
	}
	return cmds
}

var cpuBlock = regexp.MustCompile(`(?s)CPU#(\d+)\r?\n(.*?RIP=[0-9a-f]{16})`)

func regValue(blk, name string) string {
	m := regexp.MustCompile(`\b` + name + `=([0-9a-f]{16})`).FindStringSubmatch(blk)
	if m == nil {
		return ""
	}
	return m[1]
}

// monitor sends commands to QEMU's human monitor and returns what it
// printed within 5 s.
func monitor(path string, commands ...string) string {
	c, err := net.DialTimeout("unix", path, 3*time.Second)
	if err != nil {
		return "monitor: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	for _, cmd := range commands {
		if _, err := io.WriteString(c, cmd+"\n"); err != nil {
			return "monitor: " + err.Error()
		}
	}
	out, _ := io.ReadAll(c) // until the deadline
	return string(out)
}

// read parses the console; setDeadline gets the time the guest may take
// from now on: a run's scaled timeout when it starts, 0 when it ends.
func (b *Boot) read(r io.Reader, start time.Time, progress func(string), setDeadline func(time.Duration)) {
	runs := map[string]*RunOutput{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if progress != nil {
			progress(line)
		}
		i := strings.Index(line, Marker)
		if i < 0 {
			b.Console = append(b.Console, line)
			continue
		}
		if i > 0 { // a kernel message without its newline before ours
			b.Console = append(b.Console, line[:i])
		}
		verb, rest, _ := strings.Cut(line[i+len(Marker):], " ")
		switch verb {
		case "kernel":
			b.Kernel, b.BootDur = rest, time.Since(start)
		case "run":
			f := strings.Fields(rest)
			if len(f) == 0 {
				continue
			}
			ro := &RunOutput{Name: f[0], Code: -2, Scale: 1}
			if len(f) == 4 {
				ro.Timeout, _ = strconv.ParseFloat(f[1], 64)
				ro.Scale, _ = strconv.ParseFloat(f[2], 64)
				ro.CalibrationMs, _ = strconv.Atoi(f[3])
			}
			runs[ro.Name] = ro
			b.Runs = append(b.Runs, ro)
			setDeadline(time.Duration(ro.Timeout * float64(time.Second)))
		case "out":
			name, text, _ := strings.Cut(rest, " ")
			if ro := runs[name]; ro != nil {
				ro.Lines = append(ro.Lines, text)
				if strings.Contains(text, "=== RUN") {
					b.TestStarted = true
				}
			}
		case "exit":
			f := strings.Fields(rest)
			if ro := runs[f[0]]; ro != nil && len(f) == 3 {
				ro.Code, _ = strconv.Atoi(f[1])
				ro.Seconds, _ = strconv.ParseFloat(f[2], 64)
			}
			setDeadline(0)
		case "done":
			b.Done = true
		default:
			b.Console = append(b.Console, "guestinit: "+verb+" "+rest)
		}
	}
}

// stallSigns: the console lines of the kernel's watchdogs. Under TCG a
// vCPU is a host thread: one the host does not schedule for a while (a
// busy CI machine) looks stuck to them, whatever it was running.
var stallSigns = []string{"soft lockup", "self-detected stall", "detected stalls", "rcu: INFO"}

// troubleSigns: the console lines that say the kernel went wrong.
var troubleSigns = []string{"hard LOCKUP", "Kernel panic", "BUG:", "Oops", "WARNING:"}

// bpfFrame: a stack frame in a BPF program, trampoline or dispatcher.
var bpfFrame = regexp.MustCompile(`\bbpf_prog_[0-9a-f]|bpf_trampoline|__bpf_prog_run|bpf_dispatcher|\[bpf\]`)

// KernelTrouble returns the console lines that say the kernel went wrong
// (an oops, a BUG, a panic, a warning, a hard lockup; a soft lockup or an
// RCU stall with a BPF program on the stack, or any when strict), with
// what follows each for context. Stalls without BPF on the stack are
// what a starved vCPU looks like: Stalls returns them, for the log.
func (b *Boot) KernelTrouble(strict bool) []string {
	trouble, _ := b.classify(strict)
	return trouble
}

// Stalls are the soft lockups and RCU stalls KernelTrouble leaves out
// (their first lines).
func (b *Boot) Stalls() []string {
	_, stalls := b.classify(false)
	return stalls
}

func (b *Boot) classify(strict bool) (trouble, stalls []string) {
	const context = 40
	for i := 0; i < len(b.Console); i++ {
		l := b.Console[i]
		end := min(len(b.Console), i+context)
		if containsAny(l, stallSigns) {
			if !strict && !bpfFrame.MatchString(strings.Join(b.Console[i:end], "\n")) {
				stalls = append(stalls, l)
				continue
			}
		} else if !containsAny(l, troubleSigns) {
			continue
		}
		trouble = append(trouble, b.Console[i:end]...)
		trouble = append(trouble, "...")
		i = end - 1
	}
	return trouble, stalls
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func (ro *RunOutput) String() string {
	return fmt.Sprintf("%s (exit %d, %.1fs)", ro.Name, ro.Code, ro.Seconds)
}
