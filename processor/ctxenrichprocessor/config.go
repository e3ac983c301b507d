package ctxenrichprocessor

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"
)

// Values of resource_merge.other_keys.
const (
	// OtherKeysInsert adds a published attribute the resource lacks and
	// keeps the resource's value otherwise.
	OtherKeysInsert = "insert"
	// OtherKeysIgnore adds nothing but the published_wins keys.
	OtherKeysIgnore = "ignore"
)

// Config is the ctxenrich processor's configuration.
type Config struct {
	// Receiver is the component ID of the processctx receiver whose catalog
	// is read (it must be in a pipeline of the same collector).
	Receiver component.ID `mapstructure:"receiver"`
	// ResourceMerge says how published resource attributes are merged into
	// the resources of the data.
	ResourceMerge ResourceMergeConfig `mapstructure:"resource_merge"`
	// MaxRecordAge bounds how long a thread observation is believed after it
	// was made: a sample taken later than that after the thread's last
	// observation (with nothing observed since) is left unmatched.
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

var _ component.Config = (*Config)(nil)

// Validate reports every problem in the configuration at once.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.Receiver.Type().String() == "" {
		errs = append(errs, errors.New("receiver must name the processctx receiver to read, e.g. processctx or processctx/host"))
	} else if cfg.Receiver.Type().String() != "processctx" {
		errs = append(errs, fmt.Errorf("receiver must be a processctx receiver (processctx or processctx/<name>), got %q", cfg.Receiver))
	}
	if cfg.MaxRecordAge <= 0 {
		errs = append(errs, fmt.Errorf("max_record_age must be positive, got %v", cfg.MaxRecordAge))
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

// publishedWins reports whether the published value of key replaces the
// data's.
func (m *ResourceMergeConfig) publishedWins(key string) bool {
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
