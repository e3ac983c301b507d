// SPDX-License-Identifier: Apache-2.0

package enrich

import "github.com/otelctx/otelctx/internal/profiledict"

// Invalid says why a sample's indices or times cannot be trusted: such a
// sample is passed on untouched (not moved, split or joined) and counted.
// The dictionary's verdicts (profiledict.Invalid) keep their values.
type Invalid uint8

const (
	validSample      = Invalid(profiledict.Valid)
	invalidTimestamp = Invalid(profiledict.NumInvalid) // a timestamp past 2262 (not an int64 of Unix ns)
	// NumInvalid is the number of verdicts, validSample included.
	NumInvalid = invalidTimestamp + 1
)

var invalidNames = [NumInvalid]string{"", "attribute_index", "string_index", "link_index", "stack_index",
	"location_index", "mapping_index", "function_index", "timestamp"}

// String is the verdict as the processor's metrics label it ("" when valid).
func (r Invalid) String() string { return invalidNames[r] }
