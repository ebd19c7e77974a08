package redis

import (
	"context"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/locking"
)

var _ locking.TickWatcher = (*Locker)(nil)

// tickChannel is the channel tick.lua and ticks.lua publish raised marks on
// (a message per script, a 'T key' line per mark): one per cluster (key
// prefix). Channels are not keys: it cannot collide with a lock, mark or
// state key of the prefix, and it belongs to no hash slot (a Redis Cluster
// forwards a PUBLISH to every node).
func (l *Locker) tickChannel() string { return l.prefix + "ticks" }

// WatchTicks subscribes to the cluster's raised marks (locking.TickWatcher)
// on a connection of its own, until ctx ends. go-redis re-subscribes by
// itself after a dropped connection (checking it with pings); Listening is
// called at first and after each re-subscription. A message that does not
// parse (another program on the channel) is ignored.
func (l *Locker) WatchTicks(ctx context.Context, w locking.TickWatch) error {
	if err := l.checkOpen(); err != nil {
		return fmt.Errorf("locking/redis: watch ticks: %w", err)
	}
	ps := l.client.Subscribe(ctx, l.tickChannel())
	defer ps.Close()
	// With subscriptions, the channel carries each (re-)subscription's
	// confirmation as well as the messages.
	ch := ps.ChannelWithSubscriptions()
	var marks []locking.TickMark // a message's, reused: Marks keeps none
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			switch m := m.(type) {
			case *goredis.Subscription:
				if m.Kind == "subscribe" && w.Listening != nil {
					w.Listening()
				}
			case *goredis.Message:
				// One message carries the marks one script raised, a
				// line each (a batch's in one message).
				switch {
				case w.Marks != nil:
					marks = marks[:0]
					for line := range strings.SplitSeq(m.Payload, "\n") {
						if tm, ok := locking.ParseTickMark(line); ok {
							marks = append(marks, tm)
						}
					}
					if len(marks) > 0 {
						w.Marks(marks)
					}
				case w.Mark != nil:
					for line := range strings.SplitSeq(m.Payload, "\n") {
						if tm, ok := locking.ParseTickMark(line); ok {
							w.Mark(tm)
						}
					}
				}
			}
		}
	}
}
