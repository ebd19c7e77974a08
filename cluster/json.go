package cluster

import (
	"encoding/json"
	"math"
	"time"
)

// runJSON is Run as the JSON contract spells it (DESIGN.md "Operating it"):
// the duration in seconds as a number, every field always present.
type runJSON struct {
	Schedule        string    `json:"schedule"`
	Tick            time.Time `json:"tick"`
	Node            string    `json:"node"`
	Result          string    `json:"result"`
	StartedAt       time.Time `json:"started_at"`
	DurationSeconds float64   `json:"duration_seconds"`
	Fence           int64     `json:"fence"`
	Manual          bool      `json:"manual"`
	Attempts        int       `json:"attempts"`
	Error           string    `json:"error"`
	RunID           string    `json:"run_id"`
	OutputTail      string    `json:"output_tail"`
	Anomaly         *string   `json:"anomaly"` // null: none
	By              *string   `json:"by"`      // null: a scheduled run
}

// orNull is s, or nil (JSON null) when empty.
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// orEmpty is *p, or "" when nil.
func orEmpty(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// MarshalJSON writes r with its duration as duration_seconds, the name the
// CLI and the API promise; a struct tag alone cannot turn a Duration into
// seconds. One correctly rounded division (not Duration.Seconds, which adds
// two parts) prints 1.500001, not 1.5000010000000001.
func (r Run) MarshalJSON() ([]byte, error) {
	return json.Marshal(runJSON{
		Schedule: r.Schedule, Tick: r.Tick, Node: r.Node, Result: r.Result,
		StartedAt: r.StartedAt, DurationSeconds: float64(r.Duration) / 1e9, Fence: r.Fence,
		Manual: r.Manual, Attempts: r.Attempts, Error: r.Error, RunID: r.RunID,
		OutputTail: r.OutputTail, Anomaly: orNull(r.Anomaly), By: orNull(r.By),
	})
}

// UnmarshalJSON reads what MarshalJSON writes. The duration is rounded to
// the nanosecond, so any duration of microsecond precision (what every
// backend stores) comes back exactly.
func (r *Run) UnmarshalJSON(b []byte) error {
	var j runJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Run{
		Schedule: j.Schedule, Tick: j.Tick, Node: j.Node, Result: j.Result,
		StartedAt: j.StartedAt, Duration: time.Duration(math.Round(j.DurationSeconds * 1e9)),
		Fence: j.Fence, Manual: j.Manual, Attempts: j.Attempts, Error: j.Error,
		RunID: j.RunID, OutputTail: j.OutputTail, Anomaly: orEmpty(j.Anomaly), By: orEmpty(j.By),
	}
	return nil
}
