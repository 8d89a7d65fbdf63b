package service_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/record"
	"github.com/sluice-rl/sluice/service"
)

var pinned = time.Unix(1_800_000_000, 123_456_000)

func newRecorded(t testing.TB, ps engine.Policies, cfg record.Config) (*service.Service, *record.Writer) {
	t.Helper()
	mem, err := memstore.New(memstore.Config{Now: func() time.Time { return pinned }})
	if err != nil {
		t.Fatal(err)
	}
	w, err := record.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{Store: mem, Policies: ps, Recorder: w, StoreName: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	return svc, w
}

func readRecording(t *testing.T, path string) []record.Entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := record.NewReader(f)
	var es []record.Entry
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			return es
		}
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
}

// Every decided request is recorded as the door asked it: the client's
// key without the policy's prefix, the policy or the inline rule, the
// limits, the store's time, and the limits' own decision before shadow
// mode answered it. A request the service refused before the store (an
// unknown policy) decided nothing and is not recorded.
func TestRecordsDecisions(t *testing.T) {
	ps := policies{
		"api":   {Name: "api", Limit: oneAnHour, Prefix: "api:"},
		"trial": {Name: "trial", Limit: oneAnHour, Prefix: "trial:", Shadow: true},
		"plan": {Name: "plan", Prefix: "plan:", Limits: []engine.NamedLimit{
			{Name: "burst", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Second}},
			{Name: "day", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 100, Period: 24 * time.Hour, Burst: 100}}}},
	}
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	svc, w := newRecorded(t, ps, record.Config{Path: path, ClearKeys: true})
	b := svc.NewBatch()
	b.Door = "resp"
	gcra := engine.Limit{Algorithm: engine.GCRA, Rate: 5, Period: time.Minute, Burst: 1}
	for _, r := range []service.Request{
		{ByPolicy: true, Policy: "api", Key: "u1", Cost: 1},
		{ByPolicy: true, Policy: "api", Key: "u1", Cost: 1},
		{ByPolicy: true, Policy: "trial", Key: "u1", Cost: 1},
		{ByPolicy: true, Policy: "trial", Key: "u1", Cost: 1},
		{ByPolicy: true, Policy: "plan", Key: "t1", Cost: 2},
		{Key: "10.0.0.1", Limit: gcra, Cost: 1, Label: "per_ip", OnFailure: engine.FailOpen},
		{Key: "raw", Limit: gcra, Cost: 0, Peek: true},
	} {
		if _, err := b.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Add(service.Request{ByPolicy: true, Policy: "nope", Key: "u1", Cost: 1}); err == nil {
		t.Fatal("an unknown policy was queued")
	}
	decide(svc, b)
	if d, _ := b.Result(3); !d.Allowed {
		t.Fatal("shadow mode refused")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := readRecording(t, path)
	at := pinned.UnixMicro()
	want := []record.Entry{
		{Policy: "api", Key: "u1", Cost: 1, Limit: oneAnHour, Allowed: true},
		{Policy: "api", Key: "u1", Cost: 1, Limit: oneAnHour, Allowed: false, RetryAfter: time.Hour.Microseconds()},
		{Policy: "trial", Key: "u1", Cost: 1, Shadow: true, Limit: oneAnHour, Allowed: true},
		{Policy: "trial", Key: "u1", Cost: 1, Shadow: true, Limit: oneAnHour, Allowed: false, RetryAfter: time.Hour.Microseconds()},
		{Policy: "plan", Key: "t1", Cost: 2, Limits: ps["plan"].Limits, Allowed: true},
		{Rule: "per_ip", Key: "10.0.0.1", Cost: 1, OnFailure: engine.FailOpen, Limit: gcra, Allowed: true, Remaining: 1},
		{Key: "raw", Cost: 0, Peek: true, Limit: gcra, Allowed: true, Remaining: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries recorded, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Time != at || g.Door != "resp" || g.Path != "memory" || g.Policy != w.Policy || g.Rule != w.Rule || g.Key != w.Key ||
			g.Cost != w.Cost || g.Peek != w.Peek || g.Shadow != w.Shadow || g.OnFailure != w.OnFailure || g.Limit != w.Limit ||
			len(g.Limits) != len(w.Limits) || g.Allowed != w.Allowed || w.RetryAfter != 0 && g.RetryAfter != w.RetryAfter ||
			w.Remaining != 0 && g.Remaining != w.Remaining {
			t.Errorf("entry %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

// With a sample of 1 in 3, one key in three is recorded, each with every
// decision of it, picked by its client's key (the policy's prefix not
// part of it): as another Writer under the same salt picks.
func TestRecordsSample(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	cfg := record.Config{Path: path, Sample: 3, Salt: []byte("s3cret"), ClearKeys: true}
	svc, w := newRecorded(t, testPolicies, cfg)
	b := svc.NewBatch()
	for range 3 {
		for k := range 300 {
			if _, err := b.Add(service.Request{ByPolicy: true, Policy: "api", Key: "u" + strconv.Itoa(k), Cost: 0}); err != nil {
				t.Fatal(err)
			}
		}
	}
	decide(svc, b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, e := range readRecording(t, path) {
		got[e.Key]++
	}
	cfg.Path = filepath.Join(t.TempDir(), "other.jsonl")
	other, err := record.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for k := range 300 {
		key := "u" + strconv.Itoa(k)
		if want := map[bool]int{true: 3}[other.Sample(key)]; got[key] != want {
			t.Errorf("key %s: %d decisions recorded, want %d", key, got[key], want)
		}
	}
	if len(got) < 60 || len(got) > 140 {
		t.Errorf("%d of 300 keys recorded at one in 3", len(got))
	}
}

// BenchmarkBatch is the service's own share of a decision: resolving,
// prefixing, counting, on the memory store; then the same with every
// decision, and one in a hundred, recorded to a file: what a recording
// adds to the decision path. It allocates nothing, the writer's goroutine
// included (allocs/op counts the whole process). dropped/op is how many of
// an op's 100 decisions the writer could not keep up with on this
// machine, which a flat-out loop makes more than a sidecar's traffic
// would.
func BenchmarkBatch(b *testing.B) {
	for _, bc := range []struct {
		name   string
		sample int
	}{{"off", 0}, {"every", 1}, {"1in100", 100}} {
		b.Run(bc.name, func(b *testing.B) {
			mem, err := memstore.New(memstore.Config{})
			if err != nil {
				b.Fatal(err)
			}
			cfg := service.Config{Store: mem, Policies: policies{
				"api": {Name: "api", Limit: engine.Limit{Algorithm: engine.TokenBucket, Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}, Prefix: "api:"}}}
			var w *record.Writer
			if bc.sample > 0 {
				if w, err = record.New(record.Config{Path: filepath.Join(b.TempDir(), "rec.jsonl"), Sample: bc.sample, MaxSize: 16 << 20}); err != nil {
					b.Fatal(err)
				}
				cfg.Recorder = w
			}
			svc, err := service.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			batch := svc.NewBatch()
			bs := []*service.Batch{batch}
			keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
			done := func() {}
			b.ReportAllocs()
			for b.Loop() {
				for i := range 100 {
					if _, err := batch.Add(service.Request{ByPolicy: true, Policy: "api", Key: keys[i%len(keys)], Cost: 1}); err != nil {
						b.Fatal(err)
					}
				}
				svc.Decide(bs, done)
				batch.Clear()
			}
			if w != nil {
				st := w.Stats()
				w.Close()
				b.ReportMetric(float64(st.Dropped)/float64(b.N), "dropped/op")
			}
		})
	}
}
