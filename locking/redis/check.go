package redis

import "time"

// CheckURL parses raw exactly as Open does, building the client options
// (and the client, whose construction go-redis may refuse) without
// connecting anywhere, so `validate` accepts only the URLs every node's
// `run` accepts. Its error is a *locking.InvalidError (so it wraps
// locking.ErrInvalid) and shows no secret.
func CheckURL(raw string) error {
	c, err := newClient(raw, time.Second)
	if err != nil {
		return err
	}
	// Nothing was dialled: go-redis connects lazily. Close frees the pools.
	_ = c.Close()
	return nil
}
