package node_test

import (
	"slices"
	"testing"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/notify"
)

// config validates [notify] events without importing the notifier: its
// lists must be the notifier's.
func TestNotifyEventNamesAgree(t *testing.T) {
	t.Parallel()
	if !slices.Equal(config.NotifyEvents, notify.Events) || !slices.Equal(config.DefaultNotifyEvents, notify.DefaultEvents) {
		t.Errorf("config's events %v (default %v), notify's %v (default %v)",
			config.NotifyEvents, config.DefaultNotifyEvents, notify.Events, notify.DefaultEvents)
	}
}
