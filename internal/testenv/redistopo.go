package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// RedisNode is one private redis-server process of a test's Redis Cluster
// or Sentinel setup, on a free port, without persistence. Kill sends it
// SIGKILL, as a crashed or powered-off host would be seen.
type RedisNode struct {
	Port   int
	Addr   string
	Admin  *goredis.Client // a plain client on this one process, for the test's own looks
	dir    string
	cmd    *exec.Cmd
	killed bool
}

// startNode starts redis-server with args (after the common ones) and
// returns once it answers PING. It is killed in t.Cleanup. A port is free
// when chosen but may be taken before the server binds it (another test's
// server or client; a cluster node also binds port+10000, its bus): a
// server that says "Address already in use" is started again on another
// port.
func startNode(t testing.TB, args ...string) *RedisNode {
	t.Helper()
	Uncached()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("this test runs its own redis-servers and cannot find one (apt-get install redis-server): %v", err)
	}
	cluster := slices.Contains(args, "--cluster-enabled")
	for attempt := 1; ; attempt++ {
		port := FreePort(t)
		if cluster && !listenable(port+10000) {
			continue
		}
		n := &RedisNode{Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir()}
		all := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", n.dir}, args...)
		n.cmd = exec.Command("redis-server", all...)
		out := &lockedBuffer{}
		n.cmd.Stdout, n.cmd.Stderr = out, out
		if err := n.cmd.Start(); err != nil {
			t.Fatalf("starting redis-server: %v", err)
		}
		n.Admin = goredis.NewClient(&goredis.Options{Addr: n.Addr, MaxRetries: -1, DialTimeout: time.Second})
		err := Poll(10*time.Second, func() error {
			if strings.Contains(out.String(), "Address already in use") {
				return errPortTaken
			}
			return ping(n.Addr)
		})
		if errors.Is(err, errPortTaken) && attempt < 5 {
			n.Kill()
			_ = n.Admin.Close()
			continue
		}
		t.Cleanup(n.Kill)
		t.Cleanup(func() { _ = n.Admin.Close() })
		if err != nil {
			t.Fatalf("private redis-server on %s did not answer PING: %v; its output:\n%s", n.Addr, err, out.String())
		}
		return n
	}
}

var errPortTaken = errors.New("the port was taken before redis-server bound it")

// listenable reports whether port on 127.0.0.1 can be bound now.
func listenable(port int) bool {
	if port > 65535 {
		return false
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Kill sends the process SIGKILL and waits for it: nothing is flushed,
// connections drop. A second Kill is a no-op.
func (n *RedisNode) Kill() {
	if n.killed {
		return
	}
	n.killed = true
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
}

// Info returns one field of INFO section (e.g. "replication", "role").
func (n *RedisNode) Info(section, field string) (string, error) {
	s, err := n.Admin.Info(context.Background(), section).Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO %s has no %s", section, field)
}

// Poll calls f until it succeeds or limit has passed, returning its last
// error: a server cannot tell a test when it is up, a cluster formed or a
// failover done; the test asks it.
func Poll(limit time.Duration, f func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RedisCluster is a private Redis Cluster: Masters[i] serves the i-th
// third (or whatever share) of the slots, and Replicas[i], when present,
// replicates Masters[i]. Shard i keeps its index across a failover: its
// slots move to the promoted replica.
type RedisCluster struct {
	Masters  []*RedisNode
	Replicas []*RedisNode
}

// ClusterNodeTimeout is the cluster-node-timeout of StartRedisCluster's
// nodes: a killed master is marked failed (and a replica promoted) about
// this long after it stopped answering.
const ClusterNodeTimeout = time.Second

// StartRedisCluster starts masters cluster-mode redis-servers, splits the
// 16384 slots between them in equal ranges, gives the first replicas of
// them one replica each, joins them all and returns once every node
// reports cluster_state:ok and each replica is in sync. Full coverage is
// not required (cluster-require-full-coverage no), so the shards left keep
// serving when one is lost, which is what a test of one lost master needs.
func StartRedisCluster(t testing.TB, masters, replicas int) *RedisCluster {
	t.Helper()
	if replicas > masters {
		t.Fatalf("StartRedisCluster: %d replicas for %d masters", replicas, masters)
	}
	ctx := context.Background()
	start := func() *RedisNode {
		dir := t.TempDir()
		return startNode(t, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout.Milliseconds())),
			"--cluster-require-full-coverage", "no",
			// A replica may be promoted however long it was cut off: the
			// tests decide what it lost.
			"--cluster-replica-validity-factor", "0")
	}
	c := &RedisCluster{}
	for range masters {
		c.Masters = append(c.Masters, start())
	}
	for range replicas {
		c.Replicas = append(c.Replicas, start())
	}
	const slots = 16384
	for i, m := range c.Masters {
		lo, hi := i*slots/masters, (i+1)*slots/masters-1
		if err := m.Admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE on %s: %v", m.Addr, err)
		}
	}
	all := c.nodes()
	for _, n := range all[1:] {
		if err := all[0].Admin.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(n.Port)).Err(); err != nil {
			t.Fatalf("CLUSTER MEET %s: %v", n.Addr, err)
		}
	}
	// A replica can only be told to replicate a master it already knows.
	for i, r := range c.Replicas {
		id := c.NodeID(t, c.Masters[i])
		err := Poll(20*time.Second, func() error {
			return r.Admin.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
		})
		if err != nil {
			t.Fatalf("CLUSTER REPLICATE %s on %s: %v", id, r.Addr, err)
		}
	}
	for _, n := range all {
		err := Poll(20*time.Second, func() error {
			info, err := n.Admin.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(all))) ||
				!strings.Contains(info, "cluster_slots_ok:16384") {
				return fmt.Errorf("not formed yet: %s", info)
			}
			// Every node must also see every master's slots as that
			// master's: a node that is "ok" by its own count may still
			// answer CLUSTERDOWN for a slot whose owner it has not heard
			// of (seen once, TestReleaseAllRedisCluster on a fresh machine).
			slots, err := n.Admin.ClusterSlots(ctx).Result()
			if err != nil {
				return err
			}
			owners := map[string]bool{}
			for _, sl := range slots {
				if len(sl.Nodes) > 0 {
					owners[sl.Nodes[0].Addr] = true
				}
			}
			if len(owners) != len(c.Masters) {
				return fmt.Errorf("not formed yet: %s sees %d masters serving slots, want %d", n.Addr, len(owners), len(c.Masters))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("the cluster did not form on %s: %v", n.Addr, err)
		}
	}
	for _, r := range c.Replicas {
		if err := Poll(20*time.Second, func() error { return InSync(r) }); err != nil {
			t.Fatalf("replica %s did not sync: %v", r.Addr, err)
		}
	}
	return c
}

func (c *RedisCluster) nodes() []*RedisNode {
	return append(append([]*RedisNode{}, c.Masters...), c.Replicas...)
}

// URL is the cluster's URL as an operator writes it: the masters' addresses.
func (c *RedisCluster) URL() string {
	addrs := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		addrs[i] = m.Addr
	}
	return "redis://" + strings.Join(addrs, ",")
}

// NodeID is n's cluster node id.
func (c *RedisCluster) NodeID(t testing.TB, n *RedisNode) string {
	t.Helper()
	id, err := n.Admin.Do(context.Background(), "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatalf("CLUSTER MYID on %s: %v", n.Addr, err)
	}
	return id
}

// Shard returns the index of the shard whose slots hold key (the slot
// of its hash tag, as Redis computes it).
func (c *RedisCluster) Shard(t testing.TB, key string) int {
	t.Helper()
	for _, n := range c.nodes() {
		if n.killed {
			continue
		}
		slot, err := n.Admin.ClusterKeySlot(context.Background(), key).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
		}
		return int(slot) * len(c.Masters) / 16384
	}
	t.Fatalf("CLUSTER KEYSLOT %q: every node is down", key)
	return 0
}

// InSync reports nil when replica r's link to its master is up and it has
// applied everything its master sent.
func InSync(r *RedisNode) error {
	s, err := r.Info("replication", "master_link_status")
	if err != nil {
		return err
	}
	if s != "up" {
		return fmt.Errorf("%s: master_link_status:%s", r.Addr, s)
	}
	return nil
}

// Role is what ROLE says n is: "master", "slave" or "sentinel".
func (n *RedisNode) Role() (string, error) {
	v, err := n.Admin.Do(context.Background(), "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(v) == 0 {
		return "", fmt.Errorf("ROLE on %s: empty reply", n.Addr)
	}
	s, _ := v[0].(string)
	return s, nil
}

// RedisSentinel is a private primary with one replica and one Sentinel
// watching them, under the master name SentinelMaster. ReplicaLink is the
// address the replica reaches its primary at: the test may put a proxy
// there (StartRedisSentinel's via) to make the replica lag.
type RedisSentinel struct {
	Primary  *RedisNode
	Replica  *RedisNode
	Sentinel *RedisNode
}

// SentinelMaster is the master name StartRedisSentinel's Sentinel watches.
const SentinelMaster = "bextmaster"

// StartRedisSentinel starts a primary, a replica of it and one Sentinel
// (quorum 1, down after 1 s) monitoring the primary, and returns once the
// Sentinel knows the replica. via, when non-nil, is given the primary's
// address and returns the address the replica should replicate from (a
// fault proxy, so the test can cut the replication link alone).
func StartRedisSentinel(t testing.TB, via func(primary string) string) *RedisSentinel {
	t.Helper()
	ctx := context.Background()
	s := &RedisSentinel{Primary: startNode(t)}
	link := s.Primary.Addr
	if via != nil {
		link = via(link)
	}
	host, port, _ := strings.Cut(link, ":")
	s.Replica = startNode(t, "--replicaof", host, port)
	if err := Poll(20*time.Second, func() error { return InSync(s.Replica) }); err != nil {
		t.Fatalf("replica %s did not sync: %v", s.Replica.Addr, err)
	}

	sport := FreePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
		"sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %[3]s 1000\n"+
		"sentinel failover-timeout %[3]s 10000\n", sport, dir, SentinelMaster, s.Primary.Port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatalf("writing %s: %v", conf, err)
	}
	sn := &RedisNode{Port: sport, Addr: "127.0.0.1:" + strconv.Itoa(sport), dir: dir}
	sn.cmd = exec.Command("redis-server", conf, "--sentinel")
	if err := sn.cmd.Start(); err != nil {
		t.Fatalf("starting redis-server --sentinel: %v", err)
	}
	t.Cleanup(sn.Kill)
	sn.Admin = goredis.NewClient(&goredis.Options{Addr: sn.Addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = sn.Admin.Close() })
	s.Sentinel = sn
	// The Sentinel can promote the replica once it is connected to it and
	// has read its INFO (SENTINEL FAILOVER answers NOGOODSLAVE before).
	err := Poll(30*time.Second, func() error {
		reps, err := sn.Admin.Do(ctx, "SENTINEL", "REPLICAS", SentinelMaster).Slice()
		if err != nil {
			return err
		}
		for _, r := range reps {
			f := fields(r)
			if f["port"] != strconv.Itoa(s.Replica.Port) {
				continue
			}
			refresh, _ := strconv.Atoi(f["info-refresh"])
			if f["flags"] == "slave" && f["master-link-status"] == "ok" && refresh < 5000 {
				return nil
			}
			return fmt.Errorf("the Sentinel sees replica %s as %v", s.Replica.Addr, f)
		}
		return fmt.Errorf("the Sentinel does not know replica %s yet: %v", s.Replica.Addr, reps)
	})
	if err != nil {
		t.Fatalf("Sentinel %s: %v", sn.Addr, err)
	}
	return s
}

// URL is the Sentinel URL of the setup, as an operator writes it.
func (s *RedisSentinel) URL() string {
	return fmt.Sprintf("redis://%s/0?master_name=%s", s.Sentinel.Addr, SentinelMaster)
}

// MasterAddr is the primary's address as the Sentinel names it now.
func (s *RedisSentinel) MasterAddr() (string, error) {
	a, err := s.Sentinel.Admin.Do(context.Background(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster).StringSlice()
	if err != nil {
		return "", err
	}
	if len(a) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME = %v", a)
	}
	return a[0] + ":" + a[1], nil
}

// fields reads one entry of a SENTINEL REPLICAS reply, a flat list of
// names and values (RESP2) or a map (RESP3), as strings.
func fields(v any) map[string]string {
	out := map[string]string{}
	switch e := v.(type) {
	case []any:
		for i := 0; i+1 < len(e); i += 2 {
			out[fmt.Sprint(e[i])] = fmt.Sprint(e[i+1])
		}
	case map[any]any:
		for k, x := range e {
			out[fmt.Sprint(k)] = fmt.Sprint(x)
		}
	case map[string]any:
		for k, x := range e {
			out[k] = fmt.Sprint(x)
		}
	}
	return out
}
