package upstream

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
)

// BenchmarkSubmitPath is the store's share of a plain batch on one Redis,
// with the wire cut off: every sender completes its batch at once, so
// that what is measured is validation, planning and the batcher's lane
// choice (the one lane, or the lanes by durability of Shards).
func BenchmarkSubmitPath(b *testing.B) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer client.Close()
	s, err := New(Config{Client: client})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	cut := func(bt *batch) { s.finish(bt, nil) }
	s.send = cut
	for _, sh := range s.node.shards {
		sh.send = cut
	}
	limit := engine.Limit{Algorithm: engine.GCRA, Rate: 1_000_000, Period: time.Second, Burst: 1}
	for _, path := range []struct {
		name  string
		shard engine.Shards
	}{{"one-lane", nil}, {"durability-lanes", s.Shards()}} {
		for _, n := range []int{16, 128} {
			b.Run(fmt.Sprintf("%s/batch-of-%d", path.name, n), func(b *testing.B) {
				bt, err := chain.NewBatcher(chain.BatcherConfig{Store: s, Shard: path.shard, MaxBatch: n, Timeout: time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				defer bt.Close()
				reqs := make([]engine.Request, n)
				for i := range reqs {
					reqs[i] = engine.Request{Key: fmt.Sprintf("k%d", i), Limit: limit, Cost: 1}
				}
				res := make([]engine.Result, n)
				landed := make(chan error, 1)
				done := func(err error) { landed <- err }
				b.ReportAllocs()
				for b.Loop() {
					bt.Submit(reqs, res, time.Time{}, done)
					if err := <-landed; err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/req")
			})
		}
	}
}
