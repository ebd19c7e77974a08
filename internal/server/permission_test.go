package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking/redis"
)

// A backend that refuses the node's user an operation (a Redis ACL user
// that may only read) is answered 503 backend_permission, saying so, not
// 500 "internal" nor "unavailable".
func TestAPIBackendPermission(t *testing.T) {
	t.Parallel()
	url := testenv.RedisACLUser(t, "~*", "&*", "+@read", "+@connection", "+@scripting")
	l, err := redis.Open(redis.Options{URL: url, KeyPrefix: "bext:test:" + testenv.UniqueName(t) + ":", Holder: "test", OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(t.Context()) })
	a := startAPI(t, l, "p-", writeTok, "")
	req, _ := http.NewRequest(http.MethodPost, a.base+"/api/v1/schedules/p-job/pause", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+writeTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e apiError
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || e.Code != "backend_permission" || !strings.Contains(e.Error, "refused") {
		t.Fatalf("pause with a read-only backend user: %s %+v; want 503 backend_permission", resp.Status, e)
	}
}
