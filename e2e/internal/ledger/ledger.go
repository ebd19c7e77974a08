// Package ledger is the cluster tests' protected resource and its record.
//
// A Resource is a directory shared by every node of a test cluster: a file
// guarded by flock that remembers the highest fencing token seen per
// schedule and refuses a write whose token is lower (an equal token is
// accepted: consecutive ticks of one holder share its lock and its token),
// and a ledger that gets one line per event of every run. The job program
// (e2e/internal/ledgerjob) writes through it; Check reads the ledger back
// and counts what went wrong.
package ledger

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Events of a run, in the order a run writes them.
const (
	EventBegin = "begin" // the run started: its first fenced write
	EventEnd   = "end"   // the run ended: its last fenced write, or its cancellation
)

// Results of an event.
const (
	Accepted  = "accepted"  // the fenced write went through
	Refused   = "refused"   // a higher token was seen first: a stale holder, caught
	Cancelled = "cancelled" // the run got SIGTERM before its last write (end only)
)

// Record is one ledger line.
type Record struct {
	Event    string    `json:"event"`
	Schedule string    `json:"schedule"`
	Tick     time.Time `json:"tick"` // BEXT_TICK_TIME: the scheduled time
	Node     string    `json:"node"`
	Fence    int64     `json:"fence"` // 0 when the run holds no lock (node_local)
	PID      int       `json:"pid"`   // the job's pid: pairs a run's begin and end
	Time     time.Time `json:"time"`  // the job's wall clock when it wrote
	// Began is the job's wall clock when it started, before it waited for
	// the resource (a begin record only; zero in older ledgers): a job
	// stopped with SIGSTOP while it holds the directory's flock holds up
	// every other job's writes until it resumes, so Time would put their
	// start after the resume.
	Began  time.Time `json:"began,omitzero"`
	Result string    `json:"result"`
}

const (
	lockFile   = "lock"
	fenceFile  = "fences.json"
	ledgerFile = "ledger.jsonl"
)

// Resource is the protected resource in directory Dir.
type Resource struct{ Dir string }

// Write performs one fenced write for r (r.Result is decided here): under
// the directory's flock it compares r.Fence with the highest fence seen for
// r.Schedule, raises that when r.Fence is higher, and appends r to the
// ledger. A record with Fence 0 (no lock) is always accepted. Cancelled
// records are appended without a fenced write.
func (res Resource) Write(r Record) (Record, error) {
	f, err := os.OpenFile(filepath.Join(res.Dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return r, fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return r, fmt.Errorf("ledger: flock: %w", err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing unlocks too

	if r.Result != Cancelled && r.Fence > 0 {
		fences, err := res.fences()
		if err != nil {
			return r, err
		}
		switch high := fences[r.Schedule]; {
		case r.Fence < high:
			r.Result = Refused
		default:
			r.Result = Accepted
			if r.Fence > high {
				fences[r.Schedule] = r.Fence
				if err := res.saveFences(fences); err != nil {
					return r, err
				}
			}
		}
	} else if r.Result != Cancelled {
		r.Result = Accepted
	}
	r.Time = time.Now()
	line, err := json.Marshal(r)
	if err != nil {
		return r, fmt.Errorf("ledger: %w", err)
	}
	lf, err := os.OpenFile(filepath.Join(res.Dir, ledgerFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return r, fmt.Errorf("ledger: %w", err)
	}
	if _, err := lf.Write(append(line, '\n')); err != nil {
		lf.Close()
		return r, fmt.Errorf("ledger: appending: %w", err)
	}
	return r, lf.Close()
}

func (res Resource) fences() (map[string]int64, error) {
	m := map[string]int64{}
	b, err := os.ReadFile(filepath.Join(res.Dir, fenceFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return m, nil
	case err != nil:
		return nil, fmt.Errorf("ledger: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("ledger: %s: %w", fenceFile, err)
	}
	return m, nil
}

func (res Resource) saveFences(m map[string]int64) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	tmp := filepath.Join(res.Dir, fenceFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(res.Dir, fenceFile)); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// Read returns every record in the ledger, in the order written. It takes
// the flock, so it never sees half a line.
func (res Resource) Read() ([]Record, error) {
	f, err := os.OpenFile(filepath.Join(res.Dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		return nil, fmt.Errorf("ledger: flock: %w", err)
	}
	lf, err := os.Open(filepath.Join(res.Dir, ledgerFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer lf.Close()
	var out []Record
	sc := bufio.NewScanner(lf)
	for n := 1; sc.Scan(); n++ {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("ledger: line %d: %w", n, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return out, nil
}
