package memstore_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
)

// benchLimits gives every algorithm a limit generous enough that the
// benchmark loop exercises admissions and refusals alike.
func benchLimits() map[engine.Algorithm]engine.Limit {
	return map[engine.Algorithm]engine.Limit{
		engine.FixedWindow:   {Algorithm: engine.FixedWindow, Rate: 1000, Period: time.Second},
		engine.SlidingLog:    {Algorithm: engine.SlidingLog, Rate: 1000, Period: time.Second},
		engine.SlidingWindow: {Algorithm: engine.SlidingWindow, Rate: 1000, Period: time.Second},
		engine.TokenBucket:   {Algorithm: engine.TokenBucket, Rate: 1000, Period: time.Second, Burst: 100},
		engine.LeakyBucket:   {Algorithm: engine.LeakyBucket, Rate: 1000, Period: time.Second, Burst: 100},
		engine.GCRA:          {Algorithm: engine.GCRA, Rate: 1000, Period: time.Second, Burst: 100},
	}
}

// warmStore returns a memory store that has decided once for each of n
// keys prefix+i under l, so that a benchmark measures decisions, not
// first writes, and the keys.
func warmStore(b *testing.B, l engine.Limit, prefix string, n int) (*memstore.Store, []string) {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, n)
	res := make([]engine.Result, 1)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
		_ = engine.Wait(s, []engine.Request{{Key: keys[i], Limit: l, Cost: 1}}, res, time.Time{})
	}
	return s, keys
}

func BenchmarkMemoryDecide(b *testing.B) {
	for _, alg := range engine.Algorithms {
		l := benchLimits()[alg]
		b.Run(alg.String(), func(b *testing.B) {
			s, keys := warmStore(b, l, "user:", 1024)
			req := make([]engine.Request, 1)
			res := make([]engine.Result, 1)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req[0] = engine.Request{Key: keys[i%len(keys)], Limit: l, Cost: 1}
				if err := engine.Wait(s, req, res, time.Time{}); err != nil || res[0].Err != nil {
					b.Fatal(err, res[0].Err)
				}
				i++
			}
		})
	}
}

func BenchmarkMemoryDecideParallel(b *testing.B) {
	l := benchLimits()[engine.GCRA]
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := []engine.Request{{Limit: l, Cost: 1}}
		res := make([]engine.Result, 1)
		keys := make([]string, 256)
		for i := range keys {
			keys[i] = "parallel:" + strconv.Itoa(i)
		}
		i := 0
		for pb.Next() {
			req[0].Key = keys[i%len(keys)]
			_ = engine.Wait(s, req, res, time.Time{})
			i++
		}
	})
}

// BenchmarkMemoryDecideManyKeys draws keys at random from 100,000, as
// go run ./bench does: most lookups miss the CPU's caches. A batch of 16
// is a pipeline of 16 from one client, which the store decides in one
// call; the time reported is per decision.
func BenchmarkMemoryDecideManyKeys(b *testing.B) {
	l := benchLimits()[engine.GCRA]
	s, keys := warmStore(b, l, "k:", 100_000)
	order := rand.New(rand.NewPCG(1, 2)).Perm(1 << 20)
	for _, batch := range []int{1, 16} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			req := make([]engine.Request, batch)
			res := make([]engine.Result, batch)
			// Each batch's keys are written into one buffer, as a
			// connection's pipeline is: the misses measured are the
			// store's, not the benchmark's.
			buf := make([]byte, 0, 16*batch)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				buf = buf[:0]
				for j := range req {
					start := len(buf)
					buf = strconv.AppendInt(append(buf, "k:"...), int64(order[i%len(order)]%len(keys)), 10)
					req[j] = engine.Request{Key: unsafe.String(&buf[start], len(buf)-start), Limit: l, Cost: 1}
					i++
				}
				_ = engine.Wait(s, req, res, time.Time{})
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/decision")
		})
	}
}

// A pipeline of 16 requests for one key under a policy of two limits: a
// hot tenant under RL.ALLOW.
func BenchmarkMemoryHotPolicy(b *testing.B) {
	// A clock a millisecond on at every batch, so that the limits admit
	// every request however fast the loop runs.
	t := time.Unix(1_767_225_600, 0)
	s, err := memstore.New(memstore.Config{Now: func() time.Time { t = t.Add(time.Millisecond); return t }})
	if err != nil {
		b.Fatal(err)
	}
	policy := []engine.NamedLimit{
		{Name: "burst", Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}},
		{Name: "daily", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 1_000_000_000_000, Period: 24 * time.Hour}},
	}
	reqs := make([]engine.Request, 16)
	res := make([]engine.Result, len(reqs))
	for i := range reqs {
		reqs[i] = engine.Request{Key: "tenant:hot", Limits: policy, Cost: 1, Detail: make([]engine.Decision, len(policy))}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := engine.Wait(s, reqs, res, time.Time{}); err != nil || res[15].Err != nil || !res[15].Decision.Allowed {
			b.Fatal(err, res[15])
		}
	}
}
