// SPDX-License-Identifier: Apache-2.0

package ctxenrichprocessor

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"

	"github.com/otelctx/otelctx/internal/enrich"
)

// Values of resource_merge.other_keys.
const (
	// OtherKeysInsert adds a published attribute the resource lacks and
	// keeps the resource's value otherwise.
	OtherKeysInsert = "insert"
	// OtherKeysIgnore adds nothing but the published_wins keys.
	OtherKeysIgnore = "ignore"
)

// Config is the ctx_enrich processor's configuration.
type Config struct {
	// Extension is the component ID of the process_ctx extension whose
	// catalog is read (listed in service.extensions of the same collector).
	Extension component.ID `mapstructure:"extension"`
	// Receiver was the former place of the catalog (a process_ctx
	// receiver); it is refused with a pointer to extension rather than
	// silently ignored.
	Receiver component.ID `mapstructure:"receiver"`
	// ResourceMerge says how published resource attributes are merged into
	// the resources of the data.
	ResourceMerge ResourceMergeConfig `mapstructure:"resource_merge"`
	// MatchWindow is how far from a sample an observation taken at a
	// profiler's sample moment (the receiver follows the profiler) may be
	// and still be that sample's: it absorbs the difference between the
	// profiler's clock conversion and ours, and stays well under the
	// profiler's sampling period. Other observations vouch for a sample only
	// when the same record was seen on both sides of it.
	MatchWindow time.Duration `mapstructure:"match_window"`
	// MaxRecordAge was the former matching rule (the latest observation
	// before the sample, however old); it is refused with a pointer to
	// match_window rather than silently ignored.
	MaxRecordAge time.Duration `mapstructure:"max_record_age"`
	// OverrideLinks replaces a link a sample already has.
	OverrideLinks bool `mapstructure:"override_links"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// ResourceMergeConfig is the resource merge policy.
type ResourceMergeConfig struct {
	// PublishedWins lists the attributes for which the process's published
	// value replaces the one on the data: an entry ending in "." is a
	// namespace (every key it prefixes), any other entry one exact key.
	PublishedWins []string `mapstructure:"published_wins"`
	// OtherKeys says what happens to the other published attributes:
	// "insert" (default) adds those the resource lacks and keeps the
	// resource's value where it has one (so the profiler's process.*,
	// host.*, container.* stay); "ignore" adds none of them.
	OtherKeys string `mapstructure:"other_keys"`
}

// maxMatchWindow keeps match_window below the sampling period of common
// profiler frequencies: a wider window would let a neighbouring sample's
// observation speak for this one.
const maxMatchWindow = 10 * time.Millisecond

var _ component.Config = (*Config)(nil)

// Validate reports every problem in the configuration at once.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.Extension.Type().String() == "" {
		errs = append(errs, errors.New("extension must name the process_ctx extension to read, e.g. process_ctx or process_ctx/host"))
	} else if t := cfg.Extension.Type().String(); t != "process_ctx" && t != "processctx" {
		// processctx is the extension's deprecated type, still accepted.
		errs = append(errs, fmt.Errorf("extension must be a process_ctx extension (process_ctx or process_ctx/<name>), got %q", cfg.Extension))
	}
	if cfg.Receiver != (component.ID{}) {
		errs = append(errs, fmt.Errorf("receiver is replaced by extension: the catalog is the process_ctx extension's; write extension: %s "+
			"(with the extension under extensions: and in service.extensions) and remove receiver", cfg.Receiver))
	}
	if cfg.MatchWindow <= 0 || cfg.MatchWindow > maxMatchWindow {
		errs = append(errs, fmt.Errorf("match_window must be in (0, %v], got %v", maxMatchWindow, cfg.MatchWindow))
	}
	if cfg.MaxRecordAge != 0 {
		errs = append(errs, errors.New("max_record_age is removed: a sample is matched only with an observation that vouches for it "+
			"(taken within match_window at the profiler's sample, or the same record on both sides); remove max_record_age"))
	}
	for i, p := range cfg.ResourceMerge.PublishedWins {
		if strings.TrimSpace(p) == "" || p == "." {
			errs = append(errs, fmt.Errorf("resource_merge.published_wins[%d]: %q is not a key or a namespace (\"service.\")", i, p))
		}
	}
	switch cfg.ResourceMerge.OtherKeys {
	case OtherKeysInsert, OtherKeysIgnore:
	default:
		errs = append(errs, fmt.Errorf("resource_merge.other_keys must be %q or %q, got %q", OtherKeysInsert, OtherKeysIgnore, cfg.ResourceMerge.OtherKeys))
	}
	return errors.Join(errs...)
}

// policy is the join's view of the configuration.
func (cfg *Config) policy() enrich.Policy {
	return enrich.Policy{
		MatchWindow:     cfg.MatchWindow,
		OverrideLinks:   cfg.OverrideLinks,
		PublishedWins:   cfg.ResourceMerge.PublishedWins,
		InsertOtherKeys: cfg.ResourceMerge.OtherKeys == OtherKeysInsert,
	}
}
