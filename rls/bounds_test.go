package rls

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/internal/rlsopts"
	"github.com/sluice-rl/sluice/rlsconfig"
	"github.com/sluice-rl/sluice/service"
)

func descriptors(n, entries int) []*rlv3.RateLimitDescriptor {
	ds := make([]*rlv3.RateLimitDescriptor, n)
	for i := range ds {
		d := &rlv3.RateLimitDescriptor{}
		for j := range entries {
			key := "client_ip"
			if j > 0 {
				key = fmt.Sprintf("extra%d", j)
			}
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: key, Value: fmt.Sprintf("v%d", i)})
		}
		ds[i] = d
	}
	return ds
}

// A call over a cap is refused INVALID_ARGUMENT naming the cap and its
// flag; one at the cap is answered.
func TestCaps(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        Config
		n, entries int
		wantErr    string // empty: answered
	}{
		{"default descriptors, at the cap", Config{}, 64, 1, ""},
		{"default descriptors, one over", Config{}, 65, 1,
			"rate limit request has 65 descriptors, more than the cap of 64 (--rls-max-descriptors)"},
		{"default entries, at the cap", Config{}, 1, 64, ""},
		{"default entries, one over", Config{}, 2, 65,
			"rate limit descriptor 0 has 65 entries, more than the cap of 64 (--rls-max-entries)"},
		{"raised descriptors", Config{MaxDescriptors: 10_000}, 10_000, 1, ""},
		{"lowered entries", Config{MaxEntries: 2}, 1, 3,
			"rate limit descriptor 0 has 3 entries, more than the cap of 2 (--rls-max-entries)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, benchYAML, tc.cfg)
			resp, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "b", Descriptors: descriptors(tc.n, tc.entries)})
			if tc.wantErr == "" {
				if err != nil || len(resp.Statuses) != tc.n {
					t.Fatalf("%v, %d statuses; want %d answered", err, len(resp.GetStatuses()), tc.n)
				}
				return
			}
			if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != tc.wantErr {
				t.Fatalf("%v; want InvalidArgument %q", err, tc.wantErr)
			}
		})
	}
}

// watched is the in-memory store, watched: the size of each submission
// and the most in flight at once.
type watched struct {
	*memstore.Store
	mu       sync.Mutex
	sizes    []int // guarded by mu
	inFlight int   // guarded by mu
	most     int   // guarded by mu
}

func (w *watched) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	w.mu.Lock()
	w.sizes = append(w.sizes, len(reqs))
	w.inFlight++
	w.most = max(w.most, w.inFlight)
	w.mu.Unlock()
	// Answer later, on another goroutine, as Redis's round trips do, so
	// that parts sent without waiting would be seen in flight together.
	go func() {
		time.Sleep(time.Millisecond)
		w.Store.Submit(reqs, res, deadline, func(err error) {
			w.mu.Lock()
			w.inFlight--
			w.mu.Unlock()
			done(err)
		})
	}()
}

// A call of more descriptors than partSize reaches the store in parts of
// at most partSize, one after another, in both passes of
// StopWhenOverLimit, and is answered whole.
func TestLargeCallInParts(t *testing.T) {
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprintf("stop=%v", stop), func(t *testing.T) {
			mem, err := memstore.New(memstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			w := &watched{Store: mem}
			svc, err := service.New(service.Config{Store: w})
			if err != nil {
				t.Fatal(err)
			}
			rules, err := rlsconfig.Parse(rlsconfig.File{Name: "p.yaml", Data: []byte(`domain: b
descriptors:
  - key: client_ip
    rate_limit: {unit: hour, requests_per_unit: 2}
`)})
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(Config{Service: svc, Rules: func() *rlsconfig.Config { return rules }, MaxDescriptors: 1000, StopWhenOverLimit: stop})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "b", Descriptors: descriptors(1000, 1)})
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range resp.Statuses {
				if st.Code != pb.RateLimitResponse_OK || st.LimitRemaining != 1 {
					t.Fatalf("status %d: %v, %d left; want OK, 1 left", i, st.Code, st.LimitRemaining)
				}
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			total := 0
			for _, n := range w.sizes {
				// The default cap, not partSize, so that a larger partSize fails.
				if n > rlsopts.DefaultMaxDescriptors {
					t.Errorf("a submission of %d requests; want at most %d", n, rlsopts.DefaultMaxDescriptors)
				}
				total += n
			}
			passes := 1
			if stop {
				passes = 2
			}
			if total != passes*1000 || w.most != 1 {
				t.Errorf("%d requests submitted, at most %d at once; want %d, one at a time", total, w.most, passes*1000)
			}
		})
	}
}

// down is a shared store that cannot answer: every round trip fails as
// a deadline would.
type down struct{}

func (down) Submit(_ []engine.Request, _ []engine.Result, _ time.Time, done func(error)) {
	done(errors.New("i/o timeout"))
}

func (down) Reset(context.Context, string, ...engine.NamedLimit) error { return nil }

// Decisions made by the failure mode are logged, once per
// fallbackLogEvery, with how many there were since the last line.
func TestFallbackLogged(t *testing.T) {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The threshold keeps the breaker shut: each round trip fails alone,
	// as one that overran the deadline under load does.
	ch, err := chain.New(chain.Config{Store: down{}, Local: mem, Threshold: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ch.Close)
	svc, err := service.New(service.Config{Store: ch})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := rlsconfig.Parse(rlsconfig.File{Name: "b.yaml", Data: []byte(benchYAML)})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s, err := New(Config{Service: svc, Rules: func() *rlsconfig.Config { return rules },
		Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	s.fallbacks.now = func() time.Time { return now }
	call := func(n int) {
		t.Helper()
		if _, err := s.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "b", Descriptors: descriptors(n, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	lines := func() []string { return strings.Split(strings.TrimSpace(out.String()), "\n") }
	call(3)
	call(1)
	call(2)
	if l := lines(); len(l) != 1 || !strings.Contains(l[0], "failure mode") || !strings.Contains(l[0], "decisions=3 calls=1") {
		t.Fatalf("after three calls: %q; want one line for the first call's 3 decisions", l)
	}
	now = now.Add(fallbackLogEvery)
	call(4)
	if l := lines(); len(l) != 2 || !strings.Contains(l[1], "decisions=7 calls=3 largest_call_descriptors=4") {
		t.Fatalf("past fallbackLogEvery: %q; want a second line for the 7 decisions of 3 calls since", l)
	}
}

func noCaps([]byte) error { return nil }

// emptyDescriptors is a request of n empty descriptors in domain, with
// tail after them: two bytes a descriptor, the cheapest call that costs
// a decoder the most.
func emptyDescriptors(domain string, n int, tail ...byte) []byte {
	b := protowire.AppendString(protowire.AppendTag(nil, reqDomain, protowire.BytesType), domain)
	for range n {
		b = append(b, byte(reqDescriptors<<3|protowire.BytesType), 0)
	}
	return append(b, tail...)
}

// A call over the caps is refused before anything is made for it, on
// the own transport's path (readRequest) and on grpc-go's (the codec),
// and when protobuf would read it (an unknown field sends it there): it
// allocates at most a few times its own size, where decoding it allocated
// a hundred times. A refused call leaves nothing in the pooled request.
func TestRefusedCallCostsLittle(t *testing.T) {
	s := newServer(t, benchYAML, Config{})
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1)
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"descriptors", emptyDescriptors("b", 100_000), "rate limit request has 100000 descriptors, more than the cap of 64 (--rls-max-descriptors)"},
		{"descriptors, for protobuf", emptyDescriptors("b", 100_000, unknown...), "rate limit request has 100000 descriptors, more than the cap of 64 (--rls-max-descriptors)"},
		{"descriptors, truncated after", append(emptyDescriptors("b", 100_000), byte(reqDescriptors<<3|protowire.BytesType), 9), "rate limit request has 100000 descriptors, more than the cap of 64 (--rls-max-descriptors)"},
		{"no domain", emptyDescriptors("", 100_000), errEmptyDomain},
		{"entries", protowire.AppendBytes(protowire.AppendTag(protowire.AppendString(protowire.AppendTag(nil, reqDomain, protowire.BytesType), "b"),
			reqDescriptors, protowire.BytesType), bytes.Repeat([]byte{byte(descEntries<<3 | protowire.BytesType), 0}, 50_000)),
			"rate limit descriptor 0 has 50000 entries, more than the cap of 64 (--rls-max-entries)"},
	} {
		for _, path := range []struct {
			name string
			read func(b []byte) error
		}{
			{"own", func(b []byte) error {
				req, err := s.readRequest(b)
				if err == nil {
					s.putRequest(req)
				}
				return err
			}},
			{"grpc-go", func(b []byte) error {
				req := s.requests.Get().(*request)
				defer s.putRequest(req)
				if err := newCodec(s.overCaps).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, req); err != nil {
					return err
				}
				if cap(req.ds) > rlsopts.DefaultMaxDescriptors || cap(req.es) > rlsopts.DefaultMaxEntries {
					t.Errorf("the pooled request grew to %d descriptors and %d entries", cap(req.ds), cap(req.es))
				}
				return req.refused
			}},
		} {
			t.Run(tc.name+"/"+path.name, func(t *testing.T) {
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				err := path.read(tc.b)
				runtime.ReadMemStats(&after)
				if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != tc.want {
					t.Fatalf("%v; want InvalidArgument %q", err, tc.want)
				}
				if spent := after.TotalAlloc - before.TotalAlloc; spent > uint64(4*len(tc.b)) {
					t.Fatalf("refusing a call of %d bytes allocated %d bytes; want at most 4 times its size", len(tc.b), spent)
				}
			})
		}
	}
}

// overCaps answers a call as the decoders, prepare and bounded answer it
// once decoded, for every call protobuf reads: refused over a cap,
// else left to them.
func checkOverCaps(t *testing.T, s *Server, b []byte) {
	got := s.overCaps(b)
	var m pb.RateLimitRequest
	if proto.Unmarshal(b, &m) != nil {
		return // malformed: overCaps only bounds what the decoders make of it
	}
	var want error
	if err := s.bounded(&m); err != nil {
		want = err
		if m.Domain == "" {
			want = status.Error(codes.InvalidArgument, errEmptyDomain)
		}
	}
	if status.Convert(got).Message() != status.Convert(want).Message() || status.Code(got) != status.Code(want) {
		t.Fatalf("%x: overCaps says %v; decoded, %v", b, got, want)
	}
}

func FuzzOverCaps(f *testing.F) {
	for _, b := range requestCases(f) {
		f.Add(b)
	}
	f.Add(emptyDescriptors("b", 4))
	f.Add(emptyDescriptors("", 3))
	s := newServer(f, benchYAML, Config{MaxDescriptors: 3, MaxEntries: 2})
	f.Fuzz(func(t *testing.T, b []byte) { checkOverCaps(t, s, b) })
}

func TestOverCapsAgrees(t *testing.T) {
	s := newServer(t, benchYAML, Config{MaxDescriptors: 3, MaxEntries: 2})
	cases := requestCases(t)
	for i := range 6 {
		for _, domain := range []string{"", "b"} {
			b, err := proto.Marshal(&pb.RateLimitRequest{Domain: domain, Descriptors: descriptors(i, 4-i%4)})
			if err != nil {
				t.Fatal(err)
			}
			cases[fmt.Sprintf("%d descriptors, domain %q", i, domain)] = b
		}
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) { checkOverCaps(t, s, b) })
	}
}
