package respserver

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/service"
)

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
	for i, l := range loops {
		cuts += l.Cuts()
		// Every part landed before its replies were written: a loop
		// still owing one would hold for a wake-up that never comes.
		if l.Owing() {
			t.Errorf("loop %d owes a part after every reply came", i)
		}
	}
	if cuts == 0 {
		t.Error("no round was cut into parts: the test did not test cutting")
	}
}
