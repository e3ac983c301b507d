// SPDX-License-Identifier: Apache-2.0

package decodebudgetextension

import "errors"

// Defaults. A message's bytes: the shipped configurations' largest gRPC
// message (max_recv_msg_size_mib: 1), so two such messages decode one
// after the other. Elements: a message of empty samples just under 1 MiB
// holds 524,280 (some 75 MiB decoded); the OTel eBPF profiler's 5 s report
// holds a few thousand samples per CPU and its dictionary, and 1 MiB of
// real samples (a timestamp, a value and attributes each) some 50,000.
const (
	DefaultMaxDecodingBytes = 1 << 20
	DefaultMaxElements      = 65536
)

// Config of the decode_budget extension.
type Config struct {
	// MaxDecodingBytes bounds the wire bytes of the messages being decoded
	// at once, across every stream and connection of the gRPC servers that
	// name the extension in their middlewares; a message larger than it
	// decodes alone.
	MaxDecodingBytes int64 `mapstructure:"max_decoding_bytes"`
	// MaxElements bounds what one profiles, traces or logs export request
	// may hold: its sub-messages (samples, dictionary entries, spans, log
	// records, attributes), counted on the wire before decoding (each
	// decodes to a struct of its own). Past it the request is
	// refused with ResourceExhausted.
	MaxElements int `mapstructure:"max_elements"`
}

// Validate checks the bounds are positive.
func (c *Config) Validate() error {
	var errs error
	if c.MaxDecodingBytes <= 0 {
		errs = errors.Join(errs, errors.New("max_decoding_bytes must be positive"))
	}
	if c.MaxElements <= 0 {
		errs = errors.Join(errs, errors.New("max_elements must be positive"))
	}
	return errs
}
