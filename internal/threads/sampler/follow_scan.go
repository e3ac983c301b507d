// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// rescan: a listing failure goes to the status, not the error, so the own
// ticks policy is applied all the same.
func (f *follower) rescan() error {
	now := time.Now()
	present, err := programIDs()
	f.listErr = nil
	if err != nil {
		f.listErr = listingError(err)
	}
	for id, fp := range f.progs {
		if present != nil && !present[id] {
			f.drop(id)
			continue
		}
		f.check(id, fp, now)
	}
	if present != nil {
		for id := range f.ignored {
			if !present[id] {
				delete(f.ignored, id)
				delete(f.unfollowed, id)
			}
		}
		for id := range present {
			if f.progs[id] == nil && !f.ignored[id] {
				f.consider(id, now)
			}
		}
	}
	f.updateTimerLink()
	err = f.applyOwnTicks()
	f.publish(err)
	return err
}

// listingError: only CAP_SYS_ADMIN may list program IDs, whatever CAP_BPF allows.
func listingError(err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("sampler: listing BPF programs needs CAP_SYS_ADMIN: following is off (%w)", err)
	}
	return fmt.Errorf("sampler: listing BPF programs: following is off: %w", err)
}

func programIDs() (map[ebpf.ProgramID]bool, error) {
	ids := map[ebpf.ProgramID]bool{}
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return ids, nil
		}
		if err != nil {
			return nil, err
		}
		ids[next], id = true, next
	}
}

// check notes a followed program's samples and its silences. A program
// that gave no sample for a while (quiet) counts as not sampled (own ticks
// under auto) until it samples again: a profiler that paused its perf
// events but keeps its program loaded no longer leaves threads unread. Our
// fentry link keeps an exited profiler's program loaded, so its ID alone
// would not say it is gone: a quiet fentry-followed program also moves to
// the hrtimer method, which holds nothing (its ID goes when its profiler
// exits). Without the hrtimer method it stays on fentry.
func (f *follower) check(id ebpf.ProgramID, fp *followedProg, now time.Time) {
	var n uint64
	if err := f.hits.Lookup(uint32(id), &n); err != nil {
		n = fp.hits
	}
	if n != fp.hits {
		fp.hits, fp.moved, fp.Sampled, fp.Silent = n, now, true, false
		return
	}
	if now.Sub(fp.moved) < f.quiet {
		return
	}
	if fp.Sampled {
		fp.Sampled, fp.Silent = false, true
	}
	if fp.Method == MethodFentry && f.timer != nil &&
		f.followed.Update(uint32(id), uint8(1), ebpf.UpdateAny) == nil {
		_ = closeFentry(fp)
		fp.Method = MethodHrtimer
	}
}

// consider remembers programs it will never follow, so they are not opened
// again.
func (f *follower) consider(id ebpf.ProgramID, now time.Time) {
	never := func() { f.ignored[id] = true }
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			never() // not ours to open (or gone between list and open)
		}
		return
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil || info.Type != ebpf.PerfEvent {
		never()
		return
	}
	fn := mainFuncName(info)
	if !matchesAny(f.opts.Programs, info.Name, fn) || f.method() == "" {
		never()
		return
	}
	name := fn
	if name == "" {
		name = info.Name
	}
	fp := &followedProg{FollowedProgram: FollowedProgram{ID: uint32(id), Name: name}, moved: now}
	if err := f.hits.Update(uint32(id), uint64(0), ebpf.UpdateAny); err != nil {
		never()
		return
	}
	fentry := f.fentryErr == nil && fn != ""
	tailCallLoop := fentry && fentryLoopsTailCalls(f.kernel, usesProgArray(info))
	switch {
	case fentry && !tailCallLoop && f.attachFentry(fp, prog, fn) == nil:
		fp.Method = MethodFentry
	case f.timer != nil && f.followed.Update(uint32(id), uint8(1), ebpf.UpdateAny) == nil:
		fp.Method = MethodHrtimer
		if tailCallLoop {
			fp.NoFentry = errTailCallLoop.Error()
		}
	default:
		_ = f.hits.Delete(uint32(id))
		never()
		if tailCallLoop {
			f.unfollowed[id] = fmt.Errorf("%s (BPF program %d) not followed: %w, and the hrtimer method is off", name, id, errTailCallLoop)
		}
		return
	}
	f.progs[id] = fp
}

func (f *follower) drop(id ebpf.ProgramID) {
	fp := f.progs[id]
	delete(f.progs, id)
	_ = f.followed.Delete(uint32(id))
	_ = f.hits.Delete(uint32(id))
	_ = closeFentry(fp)
}

func mainFuncName(info *ebpf.ProgramInfo) string {
	fis, err := info.FuncInfos()
	if err != nil {
		return ""
	}
	for _, fo := range fis {
		if fo.Offset == 0 && fo.Func != nil {
			return fo.Func.Name
		}
	}
	return ""
}

// progNameLen: the kernel keeps 15 bytes of a name.
const progNameLen = 15

// matchesAny: without BTF, a longer name matches its 15-byte truncation.
func matchesAny(names []string, kernelName, fn string) bool {
	for _, n := range names {
		switch {
		case n == fn && fn != "", n == kernelName:
			return true
		case fn == "" && len(n) > progNameLen && n[:progNameLen] == kernelName:
			return true
		}
	}
	return false
}
