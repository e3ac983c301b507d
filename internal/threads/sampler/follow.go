// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

type OwnTicks uint8

const (
	// OwnTicksAlways: without following, the only on-CPU samples.
	OwnTicksAlways OwnTicks = iota
	// OwnTicksUnlessFollowing: own ticks until a followed program's first
	// sample (nothing is lost while a profiler loads before it samples),
	// and again once no followed program is loaded.
	OwnTicksUnlessFollowing
	OwnTicksNever
)

func (o OwnTicks) String() string {
	switch o {
	case OwnTicksAlways:
		return "always"
	case OwnTicksUnlessFollowing:
		return "unless_following"
	case OwnTicksNever:
		return "never"
	}
	return "own_ticks(" + strconv.Itoa(int(o)) + ")"
}

const (
	MethodFentry = "fentry"
	// MethodHrtimer: hrtimer_expire_entry, filtered to the sampling timers of
	// perf events running a followed program.
	MethodHrtimer = "hrtimer"
)

const DefaultRescan = 250 * time.Millisecond

// followQuiet: a followed program that gave no sample for this long counts
// as silent (not sampled: own ticks under auto until it samples again), and
// an fentry-followed one moves to the hrtimer method, which holds nothing
// (our fentry link keeps an exited profiler's program loaded, so its ID
// does not disappear by itself). A variable so that tests can shorten it.
var followQuiet = 2 * time.Second

// FollowOptions: capture at a host profiler's samples (same interrupt, same
// thread), so contexts are read when the profiler samples.
type FollowOptions struct {
	// Programs match the kernel's 15-byte name or, with BTF, the full function name.
	Programs []string
	OwnTicks OwnTicks
	Rescan   time.Duration
	// OnChange is never called concurrently: first from New, then from the watcher.
	OnChange func(FollowStatus)
}

type FollowedProgram struct {
	ID     uint32 // BPF program ID (changes when the profiler restarts)
	Name   string // the full function name with BTF, else the kernel's name
	Method string // MethodFentry or MethodHrtimer
	// NoFentry: why a program is followed with the hrtimer method although
	// this kernel allows fentry ("" otherwise).
	NoFentry string
	// Sampled: a sample was seen through Method, the last one less than
	// 2 s ago (own ticks, under OwnTicksUnlessFollowing, run while no
	// followed program has sampled).
	Sampled bool
	// Silent: it sampled, then gave no sample for 2 s (a paused profiler
	// that keeps its program loaded); Sampled again at its next sample.
	Silent bool
}

type FollowStatus struct {
	// Programs: every loaded program named in Follow.Programs that a
	// method follows, sampled or not yet, sorted by ID.
	Programs []FollowedProgram
	OwnTicks bool // own perf events currently open
	// Method: how programs found next are followed; "" when it cannot work.
	Method string
	// Err: why following is off, why wanted programs are not followed, or
	// the watcher's last failure.
	Err error
	// Fallback: why fentry is not used.
	Fallback error
}

func (o FollowOptions) withDefaults() (FollowOptions, error) {
	if o.OwnTicks > OwnTicksNever {
		return o, fmt.Errorf("sampler: bad Follow.OwnTicks %d", o.OwnTicks)
	}
	if o.Rescan < 0 {
		return o, fmt.Errorf("sampler: Follow.Rescan %v < 0", o.Rescan)
	}
	if o.Rescan == 0 {
		o.Rescan = DefaultRescan
	}
	for _, n := range o.Programs {
		if n == "" {
			return o, errors.New("sampler: empty name in Follow.Programs")
		}
	}
	o.Programs = slices.Clone(o.Programs)
	return o, nil
}

type follower struct {
	s        *Sampler
	opts     FollowOptions
	spec     *ebpf.CollectionSpec // for the follow programs, loaded on their own
	followed *ebpf.Map
	hits     *ebpf.Map

	timer     *ebpf.Program // on_profiler_timer, nil if it did not load
	timerLink link.Link     // attached while a program is followed by it
	timerErr  error         // why the hrtimer method is off (timer is nil)
	// timerAttachErr: loaded but could not attach, so hrtimer went off while running.
	timerAttachErr error
	fentryErr      error // non-nil: fentry is refused here, not tried again
	listErr        error // the last listing of program IDs failed

	progs   map[ebpf.ProgramID]*followedProg
	ignored map[ebpf.ProgramID]bool // listed, never followed (type, name, no method)
	// unfollowed: wanted programs that no method may follow (fentry could
	// loop their tail calls, and the hrtimer method is off).
	unfollowed map[ebpf.ProgramID]error
	kernel     string // uname release, for fentryLoopsTailCalls

	quiet time.Duration

	mu     sync.Mutex // guards status (FollowStatus may be called anytime)
	status FollowStatus
	sent   bool
	wg     sync.WaitGroup
}

// followedProg stays followed until its ID disappears: silence (perf
// events not opened yet, a paused profiler) costs the method's misses and,
// under auto, own ticks while it lasts.
type followedProg struct {
	FollowedProgram
	prog  *ebpf.Program // fentry only: our program and its link
	link  link.Link
	hits  uint64
	moved time.Time // when hits last changed (or the program was followed)
}

// startFollowing scans once, so own ticks follow the policy when New returns.
func (s *Sampler) startFollowing(spec *ebpf.CollectionSpec, opts FollowOptions) error {
	if len(opts.Programs) == 0 {
		return nil
	}
	f := &follower{
		s:          s,
		opts:       opts,
		spec:       spec,
		followed:   s.coll.Maps[samplerMapFollowed],
		hits:       s.coll.Maps[samplerMapFollowHits],
		progs:      map[ebpf.ProgramID]*followedProg{},
		ignored:    map[ebpf.ProgramID]bool{},
		unfollowed: map[ebpf.ProgramID]error{},
		kernel:     kernelRelease(),
		quiet:      followQuiet,
	}
	f.loadTimer()
	f.probeFentry()
	if f.method() == "" && opts.OwnTicks == OwnTicksNever {
		_ = f.release() // the error returned is why following is unavailable
		return fmt.Errorf("%w: following with OwnTicksNever: %w", ErrUnavailable, f.unavailable())
	}
	// The first scan publishes the status even when following cannot work,
	// and applies the own ticks policy.
	err := f.rescan()
	if err == nil && opts.OwnTicks == OwnTicksNever {
		if f.listErr != nil {
			err = f.listErr
		} else if f.method() == "" { // the timer program failed to attach
			err = f.unavailable()
		}
		if err != nil {
			err = fmt.Errorf("following with OwnTicksNever: %w", err)
		}
	}
	if err != nil {
		_ = f.release() // err is what is reported
		if !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	s.follow = f
	f.wg.Add(1)
	go f.run()
	return nil
}

func (s *Sampler) stopFollowing() error {
	if s.follow == nil {
		return nil
	}
	s.follow.wg.Wait()
	return s.follow.release()
}

func (s *Sampler) FollowStatus() FollowStatus {
	if s.follow == nil {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return FollowStatus{OwnTicks: s.ticks.isOpen()}
	}
	s.follow.mu.Lock()
	defer s.follow.mu.Unlock()
	st := s.follow.status
	st.Programs = slices.Clone(st.Programs)
	return st
}

func (f *follower) run() {
	defer f.wg.Done()
	t := time.NewTicker(f.opts.Rescan)
	defer t.Stop()
	for {
		select {
		case <-f.s.done:
			return
		case <-t.C:
			_ = f.rescan() // its error is in the status
		}
	}
}

func (f *follower) release() error {
	var errs []error
	for id, fp := range f.progs {
		errs = append(errs, closeFentry(fp))
		delete(f.progs, id)
	}
	if f.timerLink != nil {
		errs = append(errs, f.timerLink.Close())
		f.timerLink = nil
	}
	if f.timer != nil {
		errs = append(errs, f.timer.Close())
		f.timer = nil
	}
	return errors.Join(errs...)
}
