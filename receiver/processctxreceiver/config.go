// SPDX-License-Identifier: Apache-2.0

package processctxreceiver

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
)

// Config is the process_ctx receiver's configuration. What it watches and
// how is the process_ctx extension's configuration.
type Config struct {
	// Extension is the ID of the process_ctx extension whose rounds become
	// entity events.
	Extension component.ID `mapstructure:"extension"`
	// EntityInterval is how often an entity_state event is repeated for an
	// unchanged process (otel.entity.interval).
	EntityInterval time.Duration `mapstructure:"entity_interval"`
	// EventFormat chooses the form of the entity events: legacy (the
	// otel.entity.* attributes collector-contrib emits by default) or spec
	// (the entity events specification: event names entity.state and
	// entity.delete, entity.* attributes, relationships).
	EventFormat string `mapstructure:"event_format"`
	// K8sNodeName is the Kubernetes node the collector runs on, set on
	// every event's resource as k8s.node.name (the DaemonSet passes it
	// through the downward API); empty: not in Kubernetes.
	K8sNodeName string `mapstructure:"k8s_node_name"`
	// EnvironmentEntities also announces the processes that publish no
	// process context but name a service in their environment
	// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), their resource marked
	// otelctx.resource.source=environment: which services are instrumented
	// but do not publish yet. Needs the extension's environment_resource.
	EnvironmentEntities bool `mapstructure:"environment_entities"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// Entity event forms (event_format).
const (
	EventFormatLegacy = "legacy"
	EventFormatSpec   = "spec"
)

// movedKeys are the receiver's former settings, now the extension's.
var movedKeys = []string{
	"collection_interval", "discovery_interval", "recheck_interval", "exited_retention", "include", "exclude",
	"limits", "thread_sampler", "thread_context", "dd_otel_ctx",
}

var (
	_ component.Config    = (*Config)(nil)
	_ confmap.Unmarshaler = (*Config)(nil)
)

// Unmarshal refuses the settings that moved to the extension in otelctx
// 0.2.0, all of them in one message saying where they go, rather than the
// decoder's bare "invalid keys": a 0.1 configuration is fixed in one pass.
func (cfg *Config) Unmarshal(conf *confmap.Conf) error {
	var moved []string
	for _, k := range movedKeys {
		if conf.IsSet(k) {
			moved = append(moved, k)
		}
	}
	if len(moved) > 0 {
		return fmt.Errorf("%s moved from the process_ctx receiver to the process_ctx extension in otelctx 0.2.0: "+
			"write them, unchanged, under extensions: process_ctx:, list process_ctx in service.extensions, "+
			"and remove them from the receiver (it keeps extension, entity_interval, event_format, k8s_node_name and environment_entities); "+
			"a ctx_enrich processor's receiver: processctx becomes extension: process_ctx",
			strings.Join(moved, ", "))
	}
	return conf.Unmarshal(cfg)
}

// Validate reports every problem in the configuration at once.
func (cfg *Config) Validate() error {
	var errs []error
	// processctx is the extension's deprecated type, still accepted.
	if t := cfg.Extension.Type().String(); t != "process_ctx" && t != "processctx" {
		errs = append(errs, fmt.Errorf("extension must name a process_ctx extension (process_ctx or process_ctx/<name>), got %q", cfg.Extension))
	}
	if cfg.EntityInterval <= 0 {
		errs = append(errs, fmt.Errorf("entity_interval must be positive, got %v", cfg.EntityInterval))
	}
	if cfg.EventFormat != EventFormatLegacy && cfg.EventFormat != EventFormatSpec {
		errs = append(errs, fmt.Errorf("event_format must be %q or %q, got %q", EventFormatLegacy, EventFormatSpec, cfg.EventFormat))
	}
	return errors.Join(errs...)
}
