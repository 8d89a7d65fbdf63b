package app

import (
	"testing"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/redisclient"
	"github.com/sluice-rl/sluice/upstream"
)

// Plain batches on one Redis take one lane unless something can ask for
// durability; Cluster's masters always have lanes of their own.
func TestLanes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		upstream string
		durable  engine.Durability
		policies string
		lanes    bool
	}{
		{"one Redis, nothing durable", "redis://127.0.0.1:1", engine.DurableNone, "", false},
		{"Sentinel, nothing durable", "redis+sentinel://127.0.0.1:1/mymaster", engine.DurableNone, "", false},
		{"one Redis, --durable", "redis://127.0.0.1:1", engine.DurableReplica, "", true},
		{"one Redis, a policies file", "redis://127.0.0.1:1", engine.DurableNone, "policies.yaml", true},
		{"Cluster", "redis+cluster://127.0.0.1:1", engine.DurableNone, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, kind, err := redisclient.NewClient(tc.upstream, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			up, err := upstream.New(upstream.Config{Client: client}) // dials nothing
			if err != nil {
				t.Fatal(err)
			}
			defer up.Close()
			got := lanes(kind, Config{Durable: tc.durable, Policies: tc.policies}, up)
			if (got != nil) != tc.lanes {
				t.Errorf("lanes: %v; want lanes %v", got != nil, tc.lanes)
			}
		})
	}
}
