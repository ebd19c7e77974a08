package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/node"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// quiet keeps the examples' output to what they print.
var quiet = slog.New(slog.DiscardHandler)

// A program embeds a node: its schedules are declared in TOML, as an
// operator's are, and their jobs are its Go functions.
func Example() {
	cfg, err := config.Parse([]byte(`
node_id = "embedded"
[locking]
backend = "memory"
[http]
listen = "off"

[[scheduled]]
id = "report"
cron = "* * * * * *" # every second
hint = "require_global"
expected_runtime = "1s"
`), "embedded.toml", config.WithGoJobs("report"))
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan scheduler.Tick, 1)
	n, err := node.New(context.Background(), cfg, node.Options{
		Logger: quiet,
		Jobs: map[string]scheduler.Job{
			"report": scheduler.JobFunc(func(ctx context.Context, t scheduler.Tick) error {
				select {
				case ran <- t:
				default:
				}
				return nil
			}),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error)
	go func() { done <- n.Run(ctx) }()
	t := <-ran
	fmt.Println("ran", t.ScheduleID, "with a fencing token:", t.FencingToken > 0)
	stop() // a graceful stop: running jobs finish, locks are released
	fmt.Println("stopped:", <-done)
	// Output:
	// ran report with a fencing token: true
	// stopped: <nil>
}

// The node serves the operators' API and status page: a program's job is
// triggered, paused and listed like any other.
func Example_trigger() {
	cfg, err := config.Parse([]byte(`
node_id = "embedded"
[locking]
backend = "memory"
[http]
listen = "127.0.0.1:0"
token = "a-long-enough-api-token"

[[scheduled]]
id = "rebuild-index"
cron = "0 3 1 1 *" # once a year: it runs now only when triggered
hint = "require_global"
`), "embedded.toml", config.WithGoJobs("rebuild-index"))
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan struct{}, 1)
	n, err := node.New(context.Background(), cfg, node.Options{
		Logger: quiet,
		Jobs: map[string]scheduler.Job{
			"rebuild-index": scheduler.JobFunc(func(context.Context, scheduler.Tick) error {
				ran <- struct{}{}
				return nil
			}),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error)
	go func() { done <- n.Run(ctx) }()
	<-n.Ready()

	req, _ := http.NewRequest(http.MethodPost, "http://"+n.Addr()+"/api/v1/schedules/rebuild-index/trigger?wait=10s", nil)
	req.Header.Set("Authorization", "Bearer a-long-enough-api-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	var ans struct {
		Accepted bool   `json:"accepted"`
		Node     string `json:"node"`
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(body, &ans); err != nil {
		fmt.Println(resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Println(resp.Status, "accepted:", ans.Accepted, "by", ans.Node)
	<-ran
	fmt.Println("rebuild-index ran")
	stop()
	fmt.Println("stopped:", <-done)
	// Output:
	// 200 OK accepted: true by embedded
	// rebuild-index ran
	// stopped: <nil>
}

// A running node takes a new config without dropping a held lock or a
// running job: here it gains a schedule whose Go function the program
// gave from the start.
func Example_reload() {
	const base = `
node_id = "embedded"
[locking]
backend = "memory"
[http]
listen = "off"

[[scheduled]]
id = "yearly"
cron = "0 0 1 1 *"
command = ["true"]
`
	cfg, err := config.Parse([]byte(base), "embedded.toml")
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan string, 1)
	n, err := node.New(context.Background(), cfg, node.Options{Logger: quiet, Jobs: map[string]scheduler.Job{
		"heartbeat": scheduler.JobFunc(func(_ context.Context, t scheduler.Tick) error {
			select {
			case ran <- t.ScheduleID:
			default:
			}
			return nil
		}),
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error)
	go func() { done <- n.Run(ctx) }()
	<-n.Ready()

	next, err := config.Parse([]byte(base+`
[[scheduled]]
id = "heartbeat"
cron = "* * * * * *"
hint = "node_local"
`), "embedded.toml", config.WithGoJobs("heartbeat"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("reload:", n.Reload(next))
	fmt.Println("ran", <-ran)
	stop()
	fmt.Println("stopped:", <-done)
	// Output:
	// reload: <nil>
	// ran heartbeat
	// stopped: <nil>
}

// An operator pauses a program's schedule through the node's API (with a
// note, as during an incident), and reads its run history: the same
// cluster state the CLI and the status page read.
func Example_pauseAndHistory() {
	cfg, err := config.Parse([]byte(`
node_id = "embedded"
[locking]
backend = "memory"
[http]
listen = "127.0.0.1:0"
token = "a-long-enough-api-token"

[[scheduled]]
id = "sync"
cron = "0 3 1 1 *" # once a year: it runs now only when triggered
hint = "require_global"
`), "embedded.toml", config.WithGoJobs("sync"))
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan struct{}, 1)
	n, err := node.New(context.Background(), cfg, node.Options{
		Logger: quiet,
		Jobs: map[string]scheduler.Job{
			"sync": scheduler.JobFunc(func(context.Context, scheduler.Tick) error {
				ran <- struct{}{}
				return nil
			}),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error)
	go func() { done <- n.Run(ctx) }()
	<-n.Ready()
	call := func(method, path, body string, out any) {
		req, _ := http.NewRequest(method, "http://"+n.Addr()+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer a-long-enough-api-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			fmt.Println(method, path, resp.Status, err)
		}
	}

	var paused struct {
		Paused bool   `json:"paused"`
		Note   string `json:"note"`
	}
	call(http.MethodPost, "/api/v1/schedules/sync/pause", `{"note": "upstream down"}`, &paused)
	fmt.Println("paused:", paused.Paused, "note:", paused.Note)
	call(http.MethodPost, "/api/v1/schedules/sync/resume", "", &paused)
	fmt.Println("paused:", paused.Paused)

	var trig struct {
		Accepted bool `json:"accepted"`
	}
	call(http.MethodPost, "/api/v1/schedules/sync/trigger?wait=10s", "", &trig)
	<-ran
	// The run's final record reaches history after the run (while it runs,
	// its record says running); read until it has.
	var runs []struct {
		Result string `json:"result"`
		Manual bool   `json:"manual"`
		Node   string `json:"node"`
	}
	for range 500 {
		if call(http.MethodGet, "/api/v1/schedules/sync/runs?limit=5", "", &runs); len(runs) > 0 && runs[0].Result != "running" {
			break
		}
		time.Sleep(20 * time.Millisecond) // a client polls; the API has no wait for a record
	}
	if len(runs) == 0 {
		fmt.Println("no run in history after 10s")
		return
	}
	fmt.Println("history:", runs[0].Result, "manual:", runs[0].Manual, "on", runs[0].Node)
	stop()
	fmt.Println("stopped:", <-done)
	// Output:
	// paused: true note: upstream down
	// paused: false
	// history: success manual: true on embedded
	// stopped: <nil>
}
