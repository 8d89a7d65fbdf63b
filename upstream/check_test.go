package upstream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/upstream"
)

// Check passes where decisions work and fails where they would not,
// including where PING still answers.
func TestCheck(t *testing.T) {
	r := redistest.Start(t)
	if _, err := r.Do("ACL", "SETUSER", "pingonly", "on", ">pw", "~*", "+ping", "+hello", "+auth"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opt  *redis.Options
		want string // "" for a pass
	}{
		{"healthy", &redis.Options{Addr: r.Addr}, ""},
		{"an ACL user without EVALSHA", &redis.Options{Addr: r.Addr, Username: "pingonly", Password: "pw"}, "NOPERM"},
		{"a wrong password", &redis.Options{Addr: r.Addr, Username: "pingonly", Password: "nope"}, "WRONGPASS"},
		{"nothing listening", &redis.Options{Addr: "127.0.0.1:" + fmt.Sprint(redistest.FreePort(t)), MaxRetries: -1}, "connect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := redis.NewClient(tc.opt)
			defer client.Close()
			s, err := upstream.New(upstream.Config{Client: client})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			err = s.Check(ctx)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check = %v; want a pass", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check = %v; want an error with %q", err, tc.want)
			}
			if tc.name == "an ACL user without EVALSHA" {
				if perr := client.Ping(ctx).Err(); perr != nil {
					t.Fatalf("PING as that user: %v; the point is that PING passes where Check fails", perr)
				}
			}
		})
	}
}
