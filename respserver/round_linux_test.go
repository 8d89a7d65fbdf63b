package respserver

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/service"
)

// A large round is cut into parts of about equal size at batch (that is,
// connection) boundaries, never into more parts than asked; a small one,
// a round of one batch, and one with parts ≤ 1 stay whole.
func TestCutRound(t *testing.T) {
	ones := func(n, size int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = size
		}
		return s
	}
	for _, c := range []struct {
		name  string
		sizes []int
		parts int
		want  []int
	}{
		{"50 clients at -P 16, in two", ones(50, 16), 2, []int{25, 50}},
		{"in three", ones(50, 16), 3, []int{17, 34, 50}},
		{"uneven", []int{150, 10, 10}, 2, []int{1, 3}},
		{"one large batch last", append(ones(5, 10), 200), 2, []int{6}},
		{"too few decisions", ones(50, 1), 2, []int{50}},
		{"one batch", []int{1000}, 2, []int{1}},
		{"one part", ones(50, 16), 1, []int{50}},
		{"no parts", ones(50, 16), 0, []int{50}},
	} {
		got := cutRound(c.sizes, c.parts, nil)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: cut at %v; want %v", c.name, got, c.want)
		}
		if c.parts > 1 && len(got) > c.parts {
			t.Errorf("%s: %d parts; want at most %d", c.name, len(got), c.parts)
		}
	}
}

// Rounds cut into parts that land in any order still answer each
// connection in the order it asked, each decision as if made alone.
func TestCutRoundsKeepOrder(t *testing.T) {
	b, err := chain.NewBatcher(chain.BatcherConfig{Store: memStore(t), MaxInFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	// The service says the store has two round trips in flight: the
	// loop cuts large rounds in two.
	svc, err := service.New(service.Config{Store: b, StoreName: "memory", InFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv, addr := startServer(t, Config{Service: svc})
	const conns, pipeline, rounds = 10, 40, 5
	var wg sync.WaitGroup
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := dialTest(t, addr)
			key := fmt.Sprint("conn-", c)
			cmd := encodeCommand(bytesArgs("RL.FIXED", key, "1000", "1m"))
			for r := range rounds {
				conn.send(t, bytes.Repeat(cmd, pipeline))
				for i := range pipeline {
					want := fmt.Sprintf("[1, 1000, %d, 0, ", 1000-(r*pipeline+i+1))
					if got, err := conn.reply(t); err != nil || !strings.HasPrefix(got, want) {
						t.Errorf("%s, round %d, reply %d: %q, %v; want %s…", key, r, i, got, err, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	srv.mu.Lock()
	loops := srv.loops
	srv.mu.Unlock()
	cuts := int64(0)
	for _, l := range loops {
		cuts += l.cuts.Load()
	}
	if cuts == 0 {
		t.Error("no round was cut into parts: the test did not test cutting")
	}
}
