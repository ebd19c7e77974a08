package testenv

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

// ReadOnlyPGRole creates a Postgres role that may log in to the test
// database and read its tables, nothing more, and returns the test URL
// with that role in it. The role is dropped at the test's end.
func ReadOnlyPGRole(t testing.TB) string {
	t.Helper()
	admin := PGURL(t)
	role := UniqueName(t)
	exec := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, sql)
		return err
	}
	id := pgx.Identifier{role}.Sanitize()
	if err := exec("CREATE ROLE " + id + " LOGIN; GRANT SELECT ON ALL TABLES IN SCHEMA public TO " + id); err != nil {
		t.Fatalf("creating role %s: %v", role, err)
	}
	t.Cleanup(func() {
		if err := exec("DROP OWNED BY " + id + "; DROP ROLE " + id); err != nil {
			t.Errorf("dropping role %s: %v", role, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// RedisACLUser creates a user of the test Redis with the given ACL rules
// (as ACL SETUSER takes them, after "on" and its password) and returns the
// test URL logging in as it. The user is deleted at the test's end.
func RedisACLUser(t testing.TB, rules ...string) string {
	t.Helper()
	admin := RedisURL(t)
	opt, err := goredis.ParseURL(admin)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	name, pass := UniqueName(t), "pw-"+UniqueName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">" + pass}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := c.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Do(ctx, "ACL", "DELUSER", name).Err(); err != nil {
			t.Errorf("ACL DELUSER %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, pass)
	return u.String()
}
