package tests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// The binary against Sentinel and Cluster, through the --upstream forms
// docs/running.md documents: decisions land in the shared store, so a second
// sidecar sees the first one's count.
func TestTopologies(t *testing.T) {
	for _, tc := range []struct {
		name     string
		upstream func(t *testing.T) string
	}{
		{"sentinel", func(t *testing.T) string {
			st := redistest.StartSentinel(t)
			return "redis+sentinel://" + strings.Join(st.Addrs(), ",") + "/" + st.Name
		}},
		{"cluster", func(t *testing.T) string {
			c := redistest.StartCluster(t, 3, 0)
			return "redis+cluster://" + strings.Join(c.Addrs(), ",")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := tc.upstream(t)
			a := startSluice(t, "--upstream", up, "--on-upstream-failure", "deny")
			b := startSluice(t, "--upstream", up, "--on-upstream-failure", "deny")
			ctx := ctxT(t)
			ra := redis.NewClient(&redis.Options{Addr: a.Addr, Protocol: 2})
			rb := redis.NewClient(&redis.Options{Addr: b.Addr, Protocol: 2})
			defer ra.Close()
			defer rb.Close()
			// Keys over many slots, pipelined through one sidecar.
			cmds, err := ra.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i := range 50 {
					p.Do(ctx, "RL.TOKEN", fmt.Sprint("topo:", i), 10, 1, "1h", 3)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("pipeline: %v\n%s", err, a.logs)
			}
			for i, c := range cmds {
				if d := decision(t, 2, c.(*redis.Cmd).Val()); d[0] != 1 || d[2] != 7 {
					t.Fatalf("key %d: %v", i, d)
				}
			}
			// The other sidecar shares the count.
			for i := range 50 {
				v, err := rb.Do(ctx, "RL.TOKEN", fmt.Sprint("topo:", i), 10, 1, "1h", 0).Result()
				if err != nil || decision(t, 2, v)[2] != 7 {
					t.Fatalf("key %d through the second sidecar: %v, %v\n%s", i, v, err, b.logs)
				}
			}
			if got, err := rb.Do(ctx, "CL.THROTTLE", "topo:cell", 15, 30, 60, 1).Int64Slice(); err != nil || fmt.Sprint(got) != "[0 16 15 -1 2]" {
				t.Errorf("CL.THROTTLE: %v, %v", got, err)
			}
			for _, s := range []*sluice{a, b} {
				if !strings.Contains(s.logs.String(), "kind="+tc.name) {
					t.Errorf("log does not name the %s upstream:\n%s", tc.name, s.logs)
				}
			}
		})
	}
}
