// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

func (f *follower) loadTimer() {
	addr := f.spec.Variables[samplerVarSweventHrtimerFn]
	var fn uint64
	if err := addr.Get(&fn); err != nil || fn == 0 {
		f.timerErr = errors.New("hrtimer: perf_swevent_hrtimer not found in /proc/kallsyms (kptr_restrict, or not root)")
		return
	}
	p, err := f.load(samplerProgOnProfilerTimer, nil)
	if err != nil {
		f.timerErr = fmt.Errorf("hrtimer: %w", err)
		return
	}
	f.timer = p
}

// fentryOff: tests set it to follow with the hrtimer method on kernels
// that allow both.
var fentryOff bool

// probeFentry: a kernel refusing trampolines refuses them for every target,
// so following uses the hrtimer method from the start.
func (f *follower) probeFentry() {
	if fentryOff {
		f.fentryErr = errors.New("fentry: turned off (test)")
		return
	}
	p, err := f.load(samplerProgOnProfilerEntry, func(ps *ebpf.ProgramSpec) {
		ps.AttachTarget = f.s.coll.Programs[samplerProgOnTick]
		ps.AttachTo = samplerProgOnTick
	})
	if err == nil {
		var l link.Link
		if l, err = link.AttachTracing(link.TracingOptions{Program: p}); err == nil {
			_ = l.Close()
		}
		_ = p.Close()
	}
	if err != nil {
		f.fentryErr = fmt.Errorf("fentry: %w", err)
	}
}

func (f *follower) load(name string, tweak func(*ebpf.ProgramSpec)) (*ebpf.Program, error) {
	ps := f.spec.Programs[name].Copy()
	if tweak != nil {
		tweak(ps)
	}
	cs := &ebpf.CollectionSpec{
		Maps:      f.spec.Maps,
		Programs:  map[string]*ebpf.ProgramSpec{name: ps},
		Types:     f.spec.Types,
		ByteOrder: f.spec.ByteOrder,
	}
	coll, err := ebpf.NewCollectionWithOptions(cs, ebpf.CollectionOptions{MapReplacements: f.s.coll.Maps})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("loading %s: verifier: %+v", name, ve)
		}
		return nil, fmt.Errorf("loading %s: %w", name, err)
	}
	defer coll.Close()
	return coll.DetachProgram(name), nil
}

func (f *follower) method() string {
	switch {
	case f.fentryErr == nil:
		return MethodFentry
	case f.timer != nil:
		return MethodHrtimer
	}
	return ""
}

func (f *follower) unavailable() error {
	if f.method() != "" {
		return nil
	}
	return errors.Join(f.fentryErr, f.timerErr)
}

// attachFentry remembers a refusal of trampolines as such.
func (f *follower) attachFentry(fp *followedProg, target *ebpf.Program, fn string) error {
	p, err := f.load(samplerProgOnProfilerEntry, func(ps *ebpf.ProgramSpec) {
		ps.AttachTarget = target
		ps.AttachTo = fn
	})
	if err == nil {
		if fp.link, err = link.AttachTracing(link.TracingOptions{Program: p}); err != nil {
			_ = p.Close()
		}
	}
	if err != nil {
		if refused(err) {
			f.fentryErr = fmt.Errorf("fentry on %s (id %d): %w", fn, fp.ID, err)
		}
		return err
	}
	fp.prog = p
	return nil
}

// refused: no trampolines at all (lockdown, no JIT), not a problem of one target.
func refused(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOTSUP) ||
		errors.Is(err, unix.Errno(524)) /* ENOTSUPP */ || errors.Is(err, ebpf.ErrNotSupported)
}

func closeFentry(fp *followedProg) error {
	var errs []error
	if fp.link != nil {
		errs = append(errs, fp.link.Close())
	}
	if fp.prog != nil {
		errs = append(errs, fp.prog.Close())
	}
	fp.link, fp.prog = nil, nil
	return errors.Join(errs...)
}

// updateTimerLink attaches on_profiler_timer only while a program needs
// it: otherwise every hrtimer expiry of the system would run it. If it
// cannot attach, the hrtimer method is off and its programs are let go.
func (f *follower) updateTimerLink() {
	need := false
	for _, fp := range f.progs {
		need = need || fp.Method == MethodHrtimer
	}
	switch {
	case need && f.timerLink == nil:
		l, err := attachTimer(f.timer)
		if err != nil {
			f.timerErr = fmt.Errorf("hrtimer: attaching tp_btf/hrtimer_expire_entry: %w", err)
			f.timerAttachErr = f.timerErr
			_ = f.timer.Close()
			f.timer = nil
			for id, fp := range f.progs {
				if fp.Method == MethodHrtimer {
					f.drop(id)
				}
			}
			return
		}
		f.timerLink = l
	case !need && f.timerLink != nil:
		_ = f.timerLink.Close()
		f.timerLink = nil
	}
}

// attachTimer is a variable so a test can make it fail.
var attachTimer = func(p *ebpf.Program) (link.Link, error) {
	return link.AttachTracing(link.TracingOptions{Program: p})
}

// swEventHrtimerAddr is 0 when hidden (kptr_restrict shows zeros).
func swEventHrtimerAddr(path string) uint64 {
	fh, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasSuffix(line, " perf_swevent_hrtimer") {
			continue
		}
		addr, err := strconv.ParseUint(strings.Fields(line)[0], 16, 64)
		if err == nil {
			return addr
		}
	}
	return 0
}
