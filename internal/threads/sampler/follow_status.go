// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"cmp"
	"errors"
	"maps"
	"slices"
)

// sampled: followed programs whose first sample was seen.
func (f *follower) sampled() int {
	n := 0
	for _, fp := range f.progs {
		if fp.Sampled {
			n++
		}
	}
	return n
}

func (f *follower) applyOwnTicks() error {
	want := f.opts.OwnTicks == OwnTicksAlways ||
		(f.opts.OwnTicks == OwnTicksUnlessFollowing && f.sampled() == 0)
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

func (f *follower) publish(err error) {
	st := FollowStatus{Method: f.method(), Fallback: f.fentryErr}
	if f.listErr != nil {
		st.Method = "" // nothing can be found to follow
	}
	for _, fp := range f.progs {
		st.Programs = append(st.Programs, fp.FollowedProgram)
	}
	// In ID order, so the status compares equal while nothing changes.
	slices.SortFunc(st.Programs, func(a, b FollowedProgram) int { return cmp.Compare(a.ID, b.ID) })
	errs := []error{f.listErr, f.unavailable()}
	for _, id := range slices.Sorted(maps.Keys(f.unfollowed)) {
		errs = append(errs, f.unfollowed[id])
	}
	if f.method() != "" && f.timerAttachErr != nil {
		// fentry works, but programs without BTF cannot be followed.
		errs = append(errs, f.timerAttachErr)
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

// Following says, without copying the status, through which method a
// followed program that has sampled is followed ("" while none has) and
// whether own ticks are open: where thread contexts are read now.
func (s *Sampler) Following() (method string, ownTicks bool) {
	if s.follow == nil {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return "", s.ticks.isOpen()
	}
	s.follow.mu.Lock()
	defer s.follow.mu.Unlock()
	for _, p := range s.follow.status.Programs {
		if p.Sampled {
			return p.Method, s.follow.status.OwnTicks
		}
	}
	return "", s.follow.status.OwnTicks
}
