package config

import (
	"errors"
	"sync"

	"github.com/bext-dev/bext-scheduler/locking"
)

// URLCheck parses a lock backend's URL exactly as the backend's Open does,
// without connecting (locking/redis.CheckURL, locking/pg.CheckURL), so
// that `validate` accepts only the URLs every node's `run` accepts. Its
// error must show no secret. A *locking.InvalidError is printed by its
// Reason, after the key and the redacted URL; any other error whole.
type URLCheck func(url string) error

// urlChecks holds the checks SetURLCheck set, by backend name.
var urlChecks struct {
	sync.RWMutex
	m map[string]URLCheck
}

// SetURLCheck makes validation check the URL of the lock backend named
// backend (BackendRedis, BackendPG) with check, after the config's own
// syntax check; nil removes it. config imports no backend: the program
// that opens them sets their checks (internal/service does, for every
// backend it can open). Without a check, a URL is checked for its syntax
// only.
func SetURLCheck(backend string, check URLCheck) {
	urlChecks.Lock()
	defer urlChecks.Unlock()
	if check == nil {
		delete(urlChecks.m, backend)
		return
	}
	if urlChecks.m == nil {
		urlChecks.m = make(map[string]URLCheck)
	}
	urlChecks.m[backend] = check
}

// backendURLProblem runs backend's URL check, if one is set, on raw and
// returns why the backend refuses it ("" if it does not): the Reason of a
// *locking.InvalidError, which names neither the backend nor the URL (the
// message already says both), else the whole error.
func backendURLProblem(backend, raw string) string {
	urlChecks.RLock()
	check := urlChecks.m[backend]
	urlChecks.RUnlock()
	if check == nil {
		return ""
	}
	err := check(raw)
	if err == nil {
		return ""
	}
	if ie := (*locking.InvalidError)(nil); errors.As(err, &ie) {
		return ie.Reason
	}
	return err.Error()
}
