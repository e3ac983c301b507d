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

// OwnTicks says when the sampler's own cpu-clock perf events run.
type OwnTicks uint8

// OwnTicks policies.
const (
	// OwnTicksAlways: always (the zero value; without following, the only
	// source of on-CPU samples).
	OwnTicksAlways OwnTicks = iota
	// OwnTicksUnlessFollowing: only while no followed program exists.
	OwnTicksUnlessFollowing
	// OwnTicksNever: never; samples come from followed programs only.
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

// Follow methods (FollowedProgram.Method, FollowStatus.Method).
const (
	// MethodFentry: an fentry program on the followed program itself.
	MethodFentry = "fentry"
	// MethodHrtimer: tp_btf/hrtimer_expire_entry, filtered to the sampling
	// timers of perf events that run a followed program.
	MethodHrtimer = "hrtimer"
)

// DefaultRescan is how often the program watcher lists BPF programs.
const DefaultRescan = 250 * time.Millisecond

// Timings of the program watcher. Variables so that tests can shorten
// them; startFollowing copies them into the follower.
var (
	// noSamplesGrace: a program followed this long without a sample is let
	// go and tried again later. A running profiler samples on every CPU
	// (cpu-clock timers fire on idle CPUs too), so seconds without one
	// mean its samples are not seen.
	noSamplesGrace = 3 * time.Second
	// fentryQuiet: an fentry-followed program whose samples stopped for
	// this long is let go. Our link holds the program loaded after its
	// profiler exits, so its ID does not disappear by itself.
	fentryQuiet = 2 * time.Second
	// retryMin, retryMax: a program let go while its ID stays listed is
	// tried again after retryMin, then after twice as long each time it is
	// let go again, up to retryMax.
	retryMin = 10 * time.Second
	retryMax = 5 * time.Minute
)

// FollowOptions: capture at the samples of a host profiler's BPF programs
// (in the same interrupt, on the sampled thread) rather than at our own
// ticks, so contexts are read at the moments the profiler samples.
type FollowOptions struct {
	// Programs: names of perf_event BPF programs whose samples are
	// followed, matched against the kernel's (15-byte truncated) program
	// name and, when the program has BTF, its full function name. Empty:
	// no following.
	Programs []string
	// OwnTicks: when the sampler's own cpu-clock perf events run.
	OwnTicks OwnTicks
	// Rescan: how often BPF program IDs are listed to find programs to
	// follow and notice those that went away (default 250 ms).
	Rescan time.Duration
	// OnChange, if set, is called (never concurrently; first from New with
	// the initial status, then from the watcher goroutine) whenever the
	// followed set, the method or whether own ticks run changes.
	OnChange func(FollowStatus)
}

// FollowedProgram is one program being followed.
type FollowedProgram struct {
	ID     uint32 // BPF program ID (changes when the profiler restarts)
	Name   string // the full function name with BTF, else the kernel's name
	Method string // MethodFentry or MethodHrtimer
}

// FollowStatus is the state of following.
type FollowStatus struct {
	Programs []FollowedProgram // sorted by ID
	OwnTicks bool              // own perf events currently open
	// Method: how programs found next are followed (MethodFentry,
	// MethodHrtimer), "" when following cannot work (Err says why).
	Method string
	// Err: why following is unavailable, why programs of a wanted name
	// are not followed, or the watcher's last failure; nil when all works.
	Err error
	// Fallback: why fentry is not used (Method is MethodHrtimer or "");
	// nil when it is.
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

// follower is the program watcher and what it attached.
type follower struct {
	s        *Sampler
	opts     FollowOptions
	spec     *ebpf.CollectionSpec // for the follow programs, loaded on their own
	followed *ebpf.Map
	hits     *ebpf.Map

	timer     *ebpf.Program // on_profiler_timer, nil if it did not load
	timerLink link.Link     // attached while a program is followed by it
	timerErr  error         // why the hrtimer method is off (timer is nil)
	// timerAttachErr: the timer program loaded but could not be attached
	// (also in timerErr): the hrtimer method went off while running.
	timerAttachErr error
	fentryErr      error // non-nil: fentry is refused here, not tried again
	listErr        error // the last listing of program IDs failed

	progs   map[ebpf.ProgramID]*followedProg
	ignored map[ebpf.ProgramID]*ignoredProg // listed, not followed (now)

	grace, quiet, retryMin, retryMax time.Duration

	mu     sync.Mutex // guards status (FollowStatus may be called anytime)
	status FollowStatus
	sent   bool
	wg     sync.WaitGroup
}

type followedProg struct {
	FollowedProgram
	prog  *ebpf.Program // fentry only: our program and its link
	link  link.Link
	hits  uint64
	since time.Time // followed since (its method attached)
	moved time.Time // when hits last changed
	// probation: followed again after it was let go; it counts (own
	// ticks policy, FollowStatus.Programs) once it samples.
	probation bool
	backoff   time.Duration // wait before the next try if let go again
	note      error         // why it was let go (kept while on probation)
}

// ignoredProg is a listed program that is not followed: never (not a
// perf_event program of a wanted name, or no method can follow it), or
// until retry (it was let go).
type ignoredProg struct {
	retry   time.Time     // zero: never
	backoff time.Duration // wait before the try after retry
	note    error         // why, when the user should know (FollowStatus.Err)
}

// startFollowing loads what following needs, makes a first scan (so own
// ticks are already as the policy wants when New returns) and starts the
// watcher goroutine, which ends with Close.
func (s *Sampler) startFollowing(spec *ebpf.CollectionSpec, opts FollowOptions) error {
	if len(opts.Programs) == 0 {
		return nil
	}
	f := &follower{
		s:        s,
		opts:     opts,
		spec:     spec,
		followed: s.coll.Maps[samplerMapFollowed],
		hits:     s.coll.Maps[samplerMapFollowHits],
		progs:    map[ebpf.ProgramID]*followedProg{},
		ignored:  map[ebpf.ProgramID]*ignoredProg{},
		grace:    noSamplesGrace,
		quiet:    fentryQuiet,
		retryMin: retryMin,
		retryMax: retryMax,
	}
	f.loadTimer()
	f.probeFentry()
	if f.method() == "" && opts.OwnTicks == OwnTicksNever {
		f.release()
		return fmt.Errorf("%w: following with OwnTicksNever: %w", ErrUnavailable, f.unavailable())
	}
	// The first scan applies the own ticks policy and publishes the status
	// even when following cannot work (listing refused): own ticks are
	// then what the policy allows, and the status says why.
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
		f.release()
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

// stopFollowing stops the watcher and detaches what it attached.
func (s *Sampler) stopFollowing() error {
	if s.follow == nil {
		return nil
	}
	s.follow.wg.Wait()
	return s.follow.release()
}

// FollowStatus is the current state of following (zero but OwnTicks
// without Options.Follow.Programs).
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

// release detaches and closes everything following attached or loaded.
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
