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
			}
		}
		for id := range present {
			if f.progs[id] != nil {
				continue
			}
			ig := f.ignored[id]
			if ig == nil || (!ig.retry.IsZero() && !now.Before(ig.retry)) {
				f.consider(id, ig, now)
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

// check lets a followed program go when it never sampled (grace) or, under
// fentry, stopped sampling (quiet): our link keeps an exited profiler's
// program loaded, so its ID alone does not say it is gone.
func (f *follower) check(id ebpf.ProgramID, fp *followedProg, now time.Time) {
	var n uint64
	if err := f.hits.Lookup(uint32(id), &n); err != nil {
		n = fp.hits
	}
	switch {
	case n != fp.hits:
		fp.hits, fp.moved = n, now
		fp.probation, fp.note, fp.backoff = false, nil, 0 // sampling: back to the first retry wait
	case n == 0 && now.Sub(fp.since) >= f.grace:
		note := fp.note
		if !fp.probation {
			note = f.noSamples(fp)
		}
		f.letGo(id, fp, now, note)
	case n > 0 && fp.Method == MethodFentry && now.Sub(fp.moved) >= f.quiet:
		// A paused profiler is tried again later; an exited one disappears with our link.
		f.letGo(id, fp, now, nil)
	}
}

func (f *follower) noSamples(fp *followedProg) error {
	why := "its profiler's perf events are not running"
	if fp.Method == MethodHrtimer {
		why = "the hrtimer method sees only software cpu-clock perf events (a profiler on hardware PMU or other " +
			"events is invisible to it; on arm64 kernels before 6.1 built with CONFIG_CFI_CLANG the timer " +
			"callback is a CFI stub, not perf_swevent_hrtimer), or its profiler's perf events are not running"
	}
	return fmt.Errorf("sampler: %s (BPF program %d) gave no samples through %s in %v, not followed (tried again later): %s",
		fp.Name, fp.ID, fp.Method, f.grace, why)
}

func (f *follower) letGo(id ebpf.ProgramID, fp *followedProg, now time.Time, note error) {
	wait := fp.backoff
	if wait <= 0 {
		wait = f.retryMin
	}
	f.drop(id)
	f.ignored[id] = &ignoredProg{retry: now.Add(wait), backoff: min(2*wait, f.retryMax), note: note}
}

// consider remembers programs it will never follow, so they are not opened
// again; one let go before (ig) is followed on probation.
func (f *follower) consider(id ebpf.ProgramID, ig *ignoredProg, now time.Time) {
	never := func() { f.ignored[id] = &ignoredProg{} }
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
	fp := &followedProg{FollowedProgram: FollowedProgram{ID: uint32(id), Name: name}, since: now, moved: now}
	if ig != nil {
		fp.probation, fp.backoff, fp.note = true, ig.backoff, ig.note
	}
	if err := f.hits.Update(uint32(id), uint64(0), ebpf.UpdateAny); err != nil {
		never()
		return
	}
	if f.fentryErr == nil && fn != "" && f.attachFentry(fp, prog, fn) == nil {
		fp.Method = MethodFentry
	} else if f.timer != nil && f.followed.Update(uint32(id), uint8(1), ebpf.UpdateAny) == nil {
		fp.Method = MethodHrtimer
	} else {
		_ = f.hits.Delete(uint32(id))
		never()
		return
	}
	delete(f.ignored, id)
	f.progs[id] = fp
}

func (f *follower) drop(id ebpf.ProgramID) {
	fp := f.progs[id]
	delete(f.progs, id)
	_ = f.followed.Delete(uint32(id))
	_ = f.hits.Delete(uint32(id))
	closeFentry(fp)
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
