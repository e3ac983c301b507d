// SPDX-License-Identifier: Apache-2.0

package entityevents

// The types of entity events (collector-contrib's otel.entity.event.type;
// the receiver's event_type label).
const (
	EventTypeState  = "entity_state"
	EventTypeDelete = "entity_delete"
)
