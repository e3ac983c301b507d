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
}

type RunOutput struct {
	Name    string
	Lines   []string
	Code    int // -2 while running (never exited)
	Seconds float64
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
}

// Run boots kernel with initrd on m until the guest powers off or ctx ends
// (then the vCPUs' registers, their stacks' first words and instructions
// are read through QEMU's monitor, into Registers, before QEMU is killed).
func (m Machine) Run(ctx context.Context, kernel, initrd, cmdline string, o RunOptions) *Boot {
	b := &Boot{}
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
	go func() {
		select {
		case <-ctx.Done():
			b.Registers = monitor(mon, "info registers -a")
			if cmds := m.stackCommands(b.Registers); len(cmds) > 0 {
				b.Registers += "\n" + monitor(mon, cmds...)
			}
			_ = cmd.Process.Kill()
		case <-exited:
		}
	}()
	b.read(out, start, o.Progress)
	b.Err = cmd.Wait()
	close(exited)
	b.Total = time.Since(start)
	return b
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

func (b *Boot) read(r io.Reader, start time.Time, progress func(string)) {
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
			ro := &RunOutput{Name: rest, Code: -2}
			runs[rest] = ro
			b.Runs = append(b.Runs, ro)
		case "out":
			name, text, _ := strings.Cut(rest, " ")
			if ro := runs[name]; ro != nil {
				ro.Lines = append(ro.Lines, text)
			}
		case "exit":
			f := strings.Fields(rest)
			if ro := runs[f[0]]; ro != nil && len(f) == 3 {
				ro.Code, _ = strconv.Atoi(f[1])
				ro.Seconds, _ = strconv.ParseFloat(f[2], 64)
			}
		case "done":
			b.Done = true
		default:
			b.Console = append(b.Console, "guestinit: "+verb+" "+rest)
		}
	}
}

// KernelTrouble returns the console lines that say the kernel went wrong
// (a lockup, an oops, a panic, a BPF or RCU stall warning), with what
// follows each for context.
func (b *Boot) KernelTrouble() []string {
	var out []string
	for i, l := range b.Console {
		for _, s := range []string{"soft lockup", "hard LOCKUP", "Kernel panic", "BUG:", "Oops", "rcu_sched self-detected stall", "rcu: INFO", "WARNING:"} {
			if strings.Contains(l, s) {
				end := min(len(b.Console), i+40)
				out = append(out, b.Console[i:end]...)
				out = append(out, "...")
				break
			}
		}
	}
	return out
}

func (ro *RunOutput) String() string {
	return fmt.Sprintf("%s (exit %d, %.1fs)", ro.Name, ro.Code, ro.Seconds)
}
