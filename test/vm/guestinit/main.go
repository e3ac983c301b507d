// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Command guestinit is PID 1 of the test VMs (test/vm): it mounts what the
// tests need (proc, sys, devtmpfs, bpffs, tracefs, debugfs, cgroup2),
// runs the test binaries listed in /plan.json one after another, writes their
// output to the console line by line behind a marker the host parses, and
// powers the VM off. It is built static (CGO_ENABLED=0) for the guest's
// architecture.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/test/vm"
)

func main() {
	console := os.Stdout
	if f, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		console = f
	}
	say := func(format string, a ...any) { fmt.Fprintf(console, vm.Marker+format+"\n", a...) }
	defer poweroff()
	for _, m := range mounts() {
		if err := mount(m); err != nil {
			say("log mount %s: %v", m.target, err)
		}
	}
	plan, err := readPlan("/plan.json")
	if err != nil {
		say("log %v", err)
		return
	}
	for _, s := range plan.Sysctl {
		k, v, _ := strings.Cut(s, "=")
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0); err != nil {
			say("log sysctl %s: %v", s, err)
		}
	}
	if plan.Kallsyms != "" {
		start := time.Now()
		n, err := copyKallsyms(plan.Kallsyms)
		say("log kallsyms: %d text symbols to %s in %.1fs (%v)", n, plan.Kallsyms, time.Since(start).Seconds(), err)
	}
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	say("kernel %s %s", unix.ByteSliceToString(uts.Release[:]), unix.ByteSliceToString(uts.Machine[:]))
	for _, r := range plan.Runs {
		// Measured before each run: the host's load changes as the other
		// packages' tests come and go.
		calib := calibrate()
		scale := vm.TimeScale(calib, plan.CalibrationRef)
		timeout := time.Duration(float64(r.Timeout) * scale)
		if r.Timeout > 0 {
			r.Args = append(r.Args, fmt.Sprintf("-test.timeout=%v", timeout))
		}
		r.Env = append(r.Env, fmt.Sprintf("%s=%.1f", vm.TimeScaleEnv, scale))
		start := time.Now()
		say("run %s %.0f %.1f %d", r.Name, timeout.Seconds(), scale, calib.Milliseconds())
		code := run(r, plan.Env, console)
		say("exit %s %d %.1f", r.Name, code, time.Since(start).Seconds())
	}
	say("done")
}

// calibrate is the median of three timings of vm.CalibrationLoop.
func calibrate() time.Duration {
	d := []time.Duration{vm.CalibrationLoop(), vm.CalibrationLoop(), vm.CalibrationLoop()}
	slices.Sort(d)
	return d[1]
}

type mnt struct{ source, target, fstype string }

func mounts() []mnt {
	return []mnt{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
		{"bpffs", "/sys/fs/bpf", "bpf"},
		{"tracefs", "/sys/kernel/tracing", "tracefs"},
		{"debugfs", "/sys/kernel/debug", "debugfs"},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2"},
	}
}

func mount(m mnt) error {
	if err := os.MkdirAll(m.target, 0o755); err != nil {
		return err
	}
	err := unix.Mount(m.source, m.target, m.fstype, 0, "")
	if err == unix.EBUSY {
		return nil
	}
	return err
}

func readPlan(path string) (*vm.Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p vm.Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &p, nil
}

// run prefixes each output line with the marker and the run's name, in one
// write per line, so that kernel messages interleave only between lines.
func run(r vm.Run, env []string, console io.Writer) int {
	cmd := exec.Command(r.Path, r.Args...)
	cmd.Dir = r.Dir
	cmd.Env = append(append(append(os.Environ(), "PATH=/bin:/sbin", "HOME=/tmp", "TMPDIR=/tmp"), env...), r.Env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(console, vm.Marker+"log %s: %v\n", r.Name, err)
		return -1
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(console, vm.Marker+"log %s: %v\n", r.Name, err)
		return -1
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	prefix := vm.Marker + "out " + r.Name + " "
	for sc.Scan() {
		_, _ = io.WriteString(console, prefix+sc.Text()+"\n")
	}
	if err := cmd.Wait(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return -1
	}
	return 0
}

func poweroff() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	for {
		time.Sleep(time.Hour)
	}
}

// copyKallsyms writes /proc/kallsyms's text symbols to dev, for the host
// to name the addresses it reads from the vCPUs of a hung guest.
func copyKallsyms(dev string) (int, error) {
	in, err := os.Open("/proc/kallsyms")
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(out, 1<<16)
	n := 0
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && strings.ContainsAny(f[1], "tTwW") {
			_, _ = w.WriteString(sc.Text() + "\n")
			n++
		}
	}
	if err := w.Flush(); err != nil {
		out.Close()
		return n, err
	}
	return n, errors.Join(sc.Err(), out.Close())
}
