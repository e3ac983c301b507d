// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package processctxreceiver

import (
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"

	"github.com/otelctx/otelctx/internal/linuxonly"
)

func newReceiver(receiver.Settings, *Config, consumer.Logs) (linuxonly.Component, error) {
	return linuxonly.Component{Name: "process_ctx receiver"}, nil
}
