package sampler

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
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
	// noSamplesGrace: a program followed this long without a single
	// sample is not followable as it is (its method does not see its
	// samples, or its profiler's perf events are not running): it is let
	// go and tried again later. A running profiler samples on every CPU
	// (cpu-clock timers fire on idle CPUs too), so seconds without a
	// sample mean it is not seen.
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
	// Err: why following is unavailable (listing BPF programs refused
	// without CAP_SYS_ADMIN, neither method loads), which listed programs
	// of a wanted name are not followed because they gave no samples (and
	// why that may be), or the last failure of the watcher (opening own
	// ticks again); nil when all works.
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

// loadTimer loads on_profiler_timer (attached later, while needed).
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

// probeFentry loads and attaches on_profiler_entry on our own on_tick: if
// the kernel refuses trampolines, it refuses them for every target, and
// following falls back to the hrtimer method from the start.
func (f *follower) probeFentry() {
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

// load loads one follow program against the sampler's maps.
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

// method is how the next program found would be followed.
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

// rescan lists BPF programs: follows new matching ones (and those let go
// whose retry time came), lets go of those gone or not sampling, then
// attaches the timer program and opens or closes own ticks as needed, and
// reports a changed status. A listing failure (no CAP_SYS_ADMIN) is kept
// in f.listErr and shown in the status; the policy is applied all the
// same. The error returned is the watcher's own (own ticks).
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

// listingError says what a failure to list program IDs means. The kernel
// lists them only to CAP_SYS_ADMIN (BPF_PROG_GET_NEXT_ID), whatever
// CAP_BPF allows.
func listingError(err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("sampler: listing BPF programs needs CAP_SYS_ADMIN: following is off (%w)", err)
	}
	return fmt.Errorf("sampler: listing BPF programs: following is off: %w", err)
}

// programIDs lists the IDs of the loaded BPF programs.
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

// check reads the sample count of a followed program and lets it go when
// it gave no sample since it was followed (grace), or, followed by fentry,
// when its samples stopped (quiet): its profiler closed its perf events,
// or exited while our link keeps the program loaded. A program on
// probation that samples counts again.
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
		// A paused profiler (still listed after we let go) is tried
		// again later; one that exited disappears with our link.
		f.letGo(id, fp, now, nil)
	}
}

// noSamples says that fp gave no samples and why that may be.
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

// letGo stops following fp and ignores it until its retry time.
func (f *follower) letGo(id ebpf.ProgramID, fp *followedProg, now time.Time, note error) {
	wait := fp.backoff
	if wait <= 0 {
		wait = f.retryMin
	}
	f.drop(id)
	f.ignored[id] = &ignoredProg{retry: now.Add(wait), backoff: min(2*wait, f.retryMax), note: note}
}

// consider follows program id if it is a perf_event program of a wanted
// name; programs that are not are remembered and not opened again. A
// program let go before (ig) is followed on probation.
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

// attachFentry loads on_profiler_entry on target and attaches it. A
// refusal of trampolines as such is remembered (no more fentry tries).
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

// refused: the kernel does not allow BPF trampolines at all (lockdown,
// no JIT support), as opposed to a problem with one target.
func refused(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOTSUP) ||
		errors.Is(err, unix.Errno(524)) /* ENOTSUPP */ || errors.Is(err, ebpf.ErrNotSupported)
}

// drop stops following id.
func (f *follower) drop(id ebpf.ProgramID) {
	fp := f.progs[id]
	delete(f.progs, id)
	_ = f.followed.Delete(uint32(id))
	_ = f.hits.Delete(uint32(id))
	closeFentry(fp)
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

// updateTimerLink attaches on_profiler_timer while a program is followed
// through it: otherwise every hrtimer expiry of the system would run it.
// A program is followed by the hrtimer only while the link is attached:
// if it cannot be, the hrtimer method is off (f.timerErr says why) and
// the programs are let go (the next scan ignores them, or follows them by
// fentry if it can).
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

// attachTimer attaches on_profiler_timer (a variable so that a test can
// make it fail).
var attachTimer = func(p *ebpf.Program) (link.Link, error) {
	return link.AttachTracing(link.TracingOptions{Program: p})
}

// counted: the followed programs that count (not on probation).
func (f *follower) counted() int {
	n := 0
	for _, fp := range f.progs {
		if !fp.probation {
			n++
		}
	}
	return n
}

// applyOwnTicks opens or closes own ticks per the policy.
func (f *follower) applyOwnTicks() error {
	want := f.opts.OwnTicks == OwnTicksAlways ||
		(f.opts.OwnTicks == OwnTicksUnlessFollowing && f.counted() == 0)
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil
	case want && !s.ticks.isOpen():
		return s.ticks.open()
	case !want && s.ticks.isOpen():
		return s.ticks.close()
	}
	return nil
}

// publish updates the status and calls OnChange if it changed.
func (f *follower) publish(err error) {
	st := FollowStatus{Method: f.method(), Fallback: f.fentryErr}
	if f.listErr != nil {
		st.Method = "" // nothing can be found to follow
	}
	// Why programs are not followed, in ID order (the status compares
	// equal while nothing changes).
	notes := map[uint32]error{}
	for id, ig := range f.ignored {
		if ig.note != nil {
			notes[uint32(id)] = ig.note
		}
	}
	for _, fp := range f.progs {
		if fp.probation {
			if fp.note != nil {
				notes[fp.ID] = fp.note
			}
			continue
		}
		st.Programs = append(st.Programs, fp.FollowedProgram)
	}
	slices.SortFunc(st.Programs, func(a, b FollowedProgram) int { return cmp.Compare(a.ID, b.ID) })
	errs := []error{f.listErr, f.unavailable()}
	if f.method() != "" && f.timerAttachErr != nil {
		// fentry works, but programs without BTF cannot be followed.
		errs = append(errs, f.timerAttachErr)
	}
	for _, id := range slices.Sorted(maps.Keys(notes)) {
		errs = append(errs, notes[id])
	}
	st.Err = errors.Join(append(errs, err)...)
	f.s.mu.RLock()
	st.OwnTicks = f.s.ticks.isOpen()
	f.s.mu.RUnlock()

	f.mu.Lock()
	changed := !f.sent || !sameStatus(f.status, st)
	f.status, f.sent = st, true
	f.mu.Unlock()
	if changed && f.opts.OnChange != nil {
		f.opts.OnChange(st)
	}
}

func sameStatus(a, b FollowStatus) bool {
	return slices.Equal(a.Programs, b.Programs) && a.OwnTicks == b.OwnTicks &&
		a.Method == b.Method && errString(a.Err) == errString(b.Err)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
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

// mainFuncName is the BTF name of the program's entry function ("" without
// BTF func info).
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

// progNameLen is BPF_OBJ_NAME_LEN - 1: the kernel keeps 15 bytes of a name.
const progNameLen = 15

// matchesAny: one of names is the program's function name (fn, "" without
// BTF), its kernel name, or, without BTF, has the kernel name as its
// truncation.
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

// swEventHrtimerAddr is perf_swevent_hrtimer's address in kallsyms (0 when
// missing or hidden: kptr_restrict shows zeros to those who may not see).
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
