package helmtest_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/deploy/helmtest"
)

// TestChartPodServes runs the built node as the chart's pod runs it: its
// args, the rendered ConfigMap, the Secret's environment, against the real
// Redis. The kubelet's probes (the Deployment's paths, Host = the pod's
// address) are answered, the API answers through the Service's name and
// refuses a name it was not given, and SIGTERM ends the node well within
// terminationGracePeriodSeconds.
func TestChartPodServes(t *testing.T) {
	t.Parallel()
	redisURL := os.Getenv("BEXT_TEST_REDIS_URL")
	if redisURL == "" {
		redisURL = "redis://127.0.0.1:6379/0"
	}
	// A key prefix of its own: the test shares the Redis with others.
	prefix := fmt.Sprintf("bext:helmtest:%s:", rand.Text()[:10])
	ms, err := helmtest.Render(helmtest.Release{Name: "bext", Namespace: "jobs", Values: map[string]any{
		"locking": map[string]any{"redis": map[string]any{"keyPrefix": prefix}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := decodeAll(t, ms)
	c := r.dep.Spec.Template.Spec.Containers[0]
	file := filepath.Join(t.TempDir(), "bext.config.toml")
	if err := os.WriteFile(file, []byte(r.cm.Data["bext.config.toml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	// The pod's args, with the ConfigMap's path and the pod's name put in.
	// --listen picks a free port on every interface, as the config's
	// 0.0.0.0:9464 would in the pod.
	var args []string
	for _, a := range c.Args {
		switch {
		case strings.HasPrefix(a, "--config="):
			a = "--config=" + file
		case strings.Contains(a, "$(POD_NAME)"):
			a = strings.ReplaceAll(a, "$(POD_NAME)", "bext-7d9c-x2v")
		}
		args = append(args, a)
	}
	args = append(args, "--listen=0.0.0.0:0")
	env := []string{"PATH=" + os.Getenv("PATH"), "POD_NAME=bext-7d9c-x2v"}
	for k, v := range r.secret.StringData {
		if k == "REDIS_URL" {
			v = redisURL
		}
		env = append(env, k+"="+v)
	}
	readToken := r.secret.StringData["BEXT_API_READ_TOKEN"]

	cmd := exec.Command(bin, args...)
	cmd.Env = env
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	finished := make(chan struct{}) // closed once Wait returned waitErr
	var waitErr error
	addr := make(chan string, 1)
	var logBuf lockedLog
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logBuf.add(sc.Text())
			var l struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "serving metrics and health" {
				addr <- l.Addr
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		<-logDone // Wait closes the pipe: read it all first
		waitErr = cmd.Wait()
		close(finished)
	}()
	t.Cleanup(func() {
		select {
		case <-finished:
		default:
			_ = cmd.Process.Kill()
			<-finished
		}
	})

	var port string
	select {
	case a := <-addr:
		_, port, _ = net.SplitHostPort(a)
	case <-finished:
		t.Fatalf("the node exited before serving: %v\n%s", waitErr, logBuf.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("no \"serving metrics and health\" line in 30s")
	}
	base := "http://127.0.0.1:" + port
	get := func(path, host, token string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Host = host
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s (Host %s): %v", path, host, err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// The kubelet names the pod by its IP: one the node does not have.
	podHost := net.JoinHostPort("10.244.3.17", port)
	if got := get(c.LivenessProbe.HTTPGet.Path, podHost, ""); got != 200 {
		t.Errorf("liveness probe %s: %d, want 200", c.LivenessProbe.HTTPGet.Path, got)
	}
	// Readiness follows the backend's first answer: wait for it, bounded.
	deadline := time.Now().Add(20 * time.Second)
	for get(c.ReadinessProbe.HTTPGet.Path, podHost, "") != 200 {
		if time.Now().After(deadline) {
			t.Fatalf("readiness probe %s not 200 in 20s\n%s", c.ReadinessProbe.HTTPGet.Path, logBuf.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	svcHost := net.JoinHostPort(r.svc.Name+".jobs.svc.cluster.local", port)
	if got := get("/api/v1/status", svcHost, readToken); got != 200 {
		t.Errorf("GET /api/v1/status through the Service's name: %d, want 200", got)
	}
	if got := get("/api/v1/status", svcHost, ""); got != 401 && got != 403 {
		t.Errorf("GET /api/v1/status without the read token: %d, want it refused", got)
	}
	if got := get("/api/v1/status", "rebind.example.com:"+port, readToken); got != http.StatusMisdirectedRequest {
		t.Errorf("GET /api/v1/status with a foreign Host: %d, want 421", got)
	}

	// SIGTERM, as the kubelet sends it: the node exits 0 before the pod's
	// grace runs out.
	grace := time.Duration(*r.dep.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	select {
	case <-finished:
		if waitErr != nil {
			t.Errorf("after SIGTERM the node exited with %v, want 0\n%s", waitErr, logBuf.String())
		}
	case <-ctx.Done():
		t.Errorf("the node outlived terminationGracePeriodSeconds (%s) after SIGTERM", grace)
	}
}

// lockedLog is the node's output so far, read by the test while the
// reader goroutine appends.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(line + "\n")
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
