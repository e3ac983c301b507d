// SPDX-License-Identifier: Apache-2.0

package enrich

import (
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// Policy is how the join treats the data (the processor's configuration).
type Policy struct {
	// MatchWindow: how far from a sample an observation taken at a
	// profiler's sample moment may be and still be that sample's.
	MatchWindow time.Duration
	// OverrideLinks replaces a link a sample already has.
	OverrideLinks bool
	// PublishedWins lists the attributes whose published value replaces the
	// data's: an entry ending in "." is a namespace, any other one key.
	PublishedWins []string
	// InsertOtherKeys adds the other published attributes the resource
	// lacks (else only the PublishedWins ones are added).
	InsertOtherKeys bool
}

// takes reports whether the process's value of key goes onto res: it
// replaces res's when published wins, else fills a key res lacks when
// other keys are inserted.
func (m *Policy) takes(res pcommon.Map, key string) bool {
	if m.publishedWins(key) {
		return true
	}
	if !m.InsertOtherKeys {
		return false
	}
	_, has := res.Get(key)
	return !has
}

// publishedWins reports whether the published value of key replaces the
// data's.
func (m *Policy) publishedWins(key string) bool {
	for _, p := range m.PublishedWins {
		if strings.HasSuffix(p, ".") {
			if strings.HasPrefix(key, p) {
				return true
			}
		} else if key == p {
			return true
		}
	}
	return false
}
