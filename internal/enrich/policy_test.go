// SPDX-License-Identifier: Apache-2.0

package enrich

import "testing"

func TestPublishedWins(t *testing.T) {
	m := Policy{PublishedWins: []string{"service.", "host.name"}}
	for key, want := range map[string]bool{
		"service.name": true, "service": false, "servicex.name": false,
		"host.name": true, "host.id": false, "process.pid": false,
	} {
		if m.publishedWins(key) != want {
			t.Errorf("%s: %v", key, !want)
		}
	}
}
