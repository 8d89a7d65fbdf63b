package rls

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
	"unsafe"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/grpcwire"
	"github.com/sluice-rl/sluice/internal/ratefields"
	"github.com/sluice-rl/sluice/internal/rlsopts"
	"github.com/sluice-rl/sluice/rlsconfig"
	"github.com/sluice-rl/sluice/service"
)

// The peer's texts for a call it cannot decide.
const (
	errEmptyDomain      = "rate limit domain must not be empty"
	errEmptyDescriptors = "rate limit descriptor list must not be empty"
)

// call is one ShouldRateLimit's scratch, pooled: the batches its parts
// are decided in, the descriptors as rlsconfig reads them, and where each
// descriptor's decision went.
type call struct {
	svc     *service.Service
	parts   []*service.Batch // parts[0] always; more for a call of more than partSize descriptors
	used    int              // parts holding requests this pass
	ds      []rlsconfig.Descriptor
	entries []rlsconfig.Entry
	over    []rlsconfig.Override
	hits    []int64
	slot    []int // per descriptor: part×partSize + its index there, or one of the no* values
	peeked  bool  // the answer is the peek pass's: nothing was charged
	domain  string
	digest  string // the rules' digest, for an explanation
	keys    []byte // the peer's keys of this call's requests, which alias it (queue)

	// A call on the own transport's fast path (serveCall), between its
	// submission and its answer: what landed needs.
	req     *request
	rep     *reply
	matches []rlsconfig.Match
	wc      *grpcwire.Call
	start   time.Time // when the call was read, with PeerStats
	landed  func()    // s.landed(c), bound once
}

// What a descriptor gets when it does not go to the store.
const (
	noRule      = -1 // no rule, replaced, or unlimited: OK
	noneAllowed = -2 // requests_per_unit 0, or more hits than the rule could ever admit: over
)

// partSize is the most descriptors of one call decided in one store
// submission. A call of more (a cap raised above the default) is decided
// part after part, each waiting for the one before: it then shares each
// round trip with other callers like any call of partSize, and each part
// has the batcher's whole timeout to itself, so that a large call never
// makes a round trip overrun and push other callers' decisions into the
// failure mode (issue 28: 10,000 descriptors in one round trip overran
// the 100ms deadline on a loaded machine).
const partSize = rlsopts.DefaultMaxDescriptors

func newCall(svc *service.Service) *call {
	return &call{svc: svc, parts: []*service.Batch{svc.NewBatch().From("grpc")}}
}

func (c *call) reset() {
	c.clearParts()
	clear(c.entries) // drop the request's strings
	clear(c.ds)
	c.ds, c.entries, c.over, c.hits, c.slot = c.ds[:0], c.entries[:0], c.over[:0], c.hits[:0], c.slot[:0]
	c.peeked, c.domain, c.digest, c.keys = false, "", "", c.keys[:0]
	c.req, c.rep, c.matches, c.wc, c.start = nil, nil, nil, nil, time.Time{}
}

func (c *call) clearParts() {
	for _, b := range c.parts[:c.used] {
		b.Clear()
	}
	c.used = 0
}

// add queues r in the current part, opening the next when it is full.
func (c *call) add(r service.Request) (int, error) {
	if c.used == 0 || c.parts[c.used-1].Len() == partSize {
		if c.used == len(c.parts) {
			c.parts = append(c.parts, c.svc.NewBatch().From("grpc"))
		}
		c.used++
	}
	p := c.used - 1
	k, err := c.parts[p].Add(r)
	if err != nil {
		return k, err
	}
	return p*partSize + k, nil
}

// decide decides the parts in order, each once the one before has
// landed, and reports how many decisions a failure mode made.
func (c *call) decide() (fallbacks int) {
	for _, b := range c.parts[:c.used] {
		c.svc.DecideWait(b)
		fallbacks += byFailureModes(b)
	}
	return fallbacks
}

// byFailureModes is how many of a decided batch's decisions a failure
// mode made.
func byFailureModes(b *service.Batch) (n int) {
	for i := range b.Len() {
		if byFailureMode(b.Path(i)) {
			n++
		}
	}
	return n
}

// result is slot k's decision, whether shadow mode turned a refusal
// into an admission, and the error met instead.
func (c *call) result(k int) (*engine.Decision, bool, error) {
	b, i := c.parts[k/partSize], k%partSize
	d, err := b.Result(i)
	return d, err == nil && b.Shadowed(i), err
}

// ShouldRateLimit answers as envoyproxy/ratelimit does. Every descriptor
// that has a rule to count is decided in one batch; unknown domains and
// descriptors are OK without a current_limit; unlimited ones are OK with
// limit_remaining 4294967295 and never reach the store.
//
// With StopWhenOverLimit, the descriptors are first looked at without
// taking (one batch of peeks) and charged (a second batch) only when none
// is over. Between the two passes another call, on this sidecar or
// another, may take what was looked at: the second pass may then refuse
// one descriptor while charging the others. The peer's own GET then INCRBY
// has the same window. A caller that needs all-or-nothing across several
// limits should put them in one Sluice policy, decided in one script.
func (s *Server) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return s.decideIn(ctx, req, &reply{})
}

// decide answers req into rep, which the answer then points into.
func (s *Server) decide(req *pb.RateLimitRequest, rep *reply) (*pb.RateLimitResponse, error) {
	c, matches, err := s.prepare(req)
	if err != nil {
		return nil, err
	}
	defer s.putCall(c)
	return s.decideWait(c, req, matches, rep)
}

// prepareCall checks req and finds its rules, in a call from the pool.
func (s *Server) prepareCall(req *pb.RateLimitRequest) (*call, []rlsconfig.Match, error) {
	if req.GetDomain() == "" {
		return nil, nil, status.Error(codes.InvalidArgument, errEmptyDomain)
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, nil, status.Error(codes.InvalidArgument, errEmptyDescriptors)
	}
	if err := s.bounded(req); err != nil {
		return nil, nil, err
	}
	c := s.calls.Get().(*call)
	matches, err := s.resolve(c, req)
	if err != nil {
		s.putCall(c)
		return nil, nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return c, matches, nil
}

// prepare checks req and finds its rules, in a call from the pool; a
// refusal counts as the peer's service_error.
func (s *Server) prepare(req *pb.RateLimitRequest) (*call, []rlsconfig.Match, error) {
	c, ms, err := s.prepareCall(req)
	if err != nil && s.stats != nil {
		s.stats.Error("service_error")
	}
	return c, ms, err
}

func (s *Server) putCall(c *call) {
	c.reset()
	s.calls.Put(c)
}

// decideWait decides a prepared call, waiting for the store.
func (s *Server) decideWait(c *call, req *pb.RateLimitRequest, matches []rlsconfig.Match, rep *reply) (*pb.RateLimitResponse, error) {
	if s.stop {
		// A call whose only limited descriptors can never pass (more
		// hits than the limit) queues no peek, and is over all the same.
		if s.queue(c, matches, true) {
			s.fallbacks.note(c.decide(), len(matches))
		}
		if s.anyOver(c) {
			c.peeked = true
			return s.answer(c, req, matches, rep)
		}
		c.clearParts()
	}
	if s.queue(c, matches, false) {
		s.fallbacks.note(c.decide(), len(matches))
	}
	return s.answer(c, req, matches, rep)
}

// resolve reads the request's descriptors and finds their rules.
func (s *Server) resolve(c *call, req *pb.RateLimitRequest) ([]rlsconfig.Match, error) {
	n := 0
	for _, d := range req.Descriptors {
		n += len(d.GetEntries())
	}
	if cap(c.entries) < n {
		c.entries = make([]rlsconfig.Entry, 0, n)
	}
	if cap(c.over) < len(req.Descriptors) {
		c.over = make([]rlsconfig.Override, 0, len(req.Descriptors))
	}
	// The request's own hits_addend is a plain integer that Envoy leaves
	// at 0, meaning 1; a descriptor's wrapper overrides it, 0 included
	// (look without taking).
	reqHits := max(int64(req.HitsAddend), 1)
	c.domain = req.Domain
	for _, d := range req.Descriptors {
		start := len(c.entries)
		for _, e := range d.GetEntries() {
			c.entries = append(c.entries, rlsconfig.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		rd := rlsconfig.Descriptor{Entries: c.entries[start:len(c.entries):len(c.entries)]}
		if l := d.GetLimit(); l != nil {
			c.over = append(c.over, rlsconfig.Override{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: rlsconfig.Unit(l.GetUnit())})
			rd.Override = &c.over[len(c.over)-1]
		}
		c.ds = append(c.ds, rd)
		hits := reqHits
		if h := d.GetHitsAddend(); h != nil {
			hits = int64(min(h.GetValue(), math.MaxInt64))
		}
		c.hits = append(c.hits, hits)
	}
	rules := s.rules()
	if rules != nil {
		c.digest = rules.Digest()
	}
	return rules.Resolve(req.Domain, c.ds)
}

// queue adds to the batch every descriptor that the store decides, as
// peeks or as charges, noting where each went; it reports whether any
// was added.
func (s *Server) queue(c *call, ms []rlsconfig.Match, peek bool) bool {
	c.slot = c.slot[:0]
	now := time.Now()
	for i := range ms {
		m := &ms[i]
		r := &m.Rule
		slot := noRule
		switch {
		case !m.Found || r.Unlimited:
		case r.RefusesAll() || c.hits[i] > r.Limit.Capacity() && (peek || r.RefusalTakesNothing):
			// Over whatever the count: the store would refuse these as
			// invalid, and they can never be admitted.
			slot = noneAllowed
		default:
			// A hit is counted even over the limit, as the peer's INCRBY
			// counts it (a charge), unless the rule says a refusal takes
			// nothing.
			charge := !peek && !r.RefusalTakesNothing
			key, limit := c.keyOf(s.peer, r, i, now)
			k, err := c.add(service.Request{Key: key, Cost: c.hits[i], Peek: peek, Charge: charge, Limit: limit,
				OnFailure: r.OnFailure, Shadow: r.Shadow || s.shadow, Label: r.Label, Digest: c.digest})
			if err != nil {
				// Rules are checked at load; nothing else can fail here.
				s.log.Error("rls: a configured rule was refused by the service", "rule", r.Source, "err", err)
				slot = noneAllowed
			} else {
				slot = k
			}
		}
		c.slot = append(c.slot, slot)
	}
	return c.used > 0
}

// keyOf is where descriptor i, under rule r, is counted at now, and
// with what limit: in the peer's key when peer keys are on and the rule
// takes them (rlsconfig.PeerKeys), otherwise in the rule's own. The
// peer's window starts by this sidecar's clock, as the peer's by its own.
func (c *call) keyOf(peer *rlsconfig.PeerKeys, r *rlsconfig.Rule, i int, now time.Time) (string, engine.Limit) {
	if peer == nil {
		return r.Key, r.Limit
	}
	start := len(c.keys)
	keys, l, ok := peer.Append(c.keys, c.domain, c.ds[i].Entries, r, now)
	if !ok {
		return r.Key, r.Limit
	}
	c.keys = keys
	// The request aliases the call's buffer until the call is answered,
	// as the service allows; a buffer that grows leaves the earlier keys
	// in the old array, which they keep alive.
	k := keys[start:]
	return unsafe.String(unsafe.SliceData(k), len(k)), l
}

// anyOver reports whether any descriptor of the peek pass is over its
// limit, shadowed or not, as the peer's check before it increments is.
func (s *Server) anyOver(c *call) bool {
	for _, k := range c.slot {
		switch {
		case k == noneAllowed:
			return true
		case k >= 0:
			d, shadowed, err := c.result(k)
			if err == nil && (!d.Allowed || shadowed) {
				return true
			}
		}
	}
	return false
}

// answer builds the response from the decided batch, as the peer does.
func (s *Server) answer(c *call, req *pb.RateLimitRequest, ms []rlsconfig.Match, rep *reply) (*pb.RateLimitResponse, error) {
	now := time.Now()
	resp := &rep.resp
	statuses, boxes := rep.sized(len(ms))
	resp.Statuses = statuses
	var h headerPick
	var passed []bool // with DynamicMetadata: per descriptor, not over its limit
	if s.metadata {
		passed = make([]bool, len(ms))
	}
	failedRate, failedQuota, totalQuota := 0, 0, 0
	for i := range ms {
		m, box := &ms[i], &boxes[i]
		st := &box.st
		resp.Statuses[i] = st
		r := &m.Rule
		k := c.slot[i]
		if k == noRule {
			st.Code = pb.RateLimitResponse_OK
			if m.Found && r.Unlimited {
				st.LimitRemaining = math.MaxUint32
			}
			if passed != nil {
				passed[i] = true
			}
			continue
		}
		box.limit = pb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit,
			Unit: pb.RateLimitResponse_RateLimit_Unit(r.Unit)}
		st.CurrentLimit = &box.limit
		over := true
		var retry time.Duration
		reset := windowLeft(r.Limit.Period, now)
		if k >= 0 {
			d, shadowed, err := c.result(k)
			if err != nil {
				if errors.Is(err, engine.ErrInvalid) {
					return nil, status.Error(codes.InvalidArgument, err.Error())
				}
				if s.stats != nil {
					s.stats.Error("redis_error")
				}
				return nil, status.Error(codes.Unavailable, "rate limit store: "+err.Error())
			}
			over = !d.Allowed || shadowed
			if !over {
				left := d.Remaining
				if c.peeked {
					// A peek reports what would be left after the charge
					// that was not made; the peer reports the count as it
					// stands.
					left = min(left+c.hits[i], d.Limit)
				}
				st.LimitRemaining = uint32(min(max(left, 0), math.MaxUint32))
			}
			// The store's clock (Redis's) says when the window ends; a key
			// with nothing counted has no reset of its own, and a fixed
			// window then reports the rest of the current window, as the
			// peer always does. So do the peer's keys, which name their
			// window by this sidecar's clock: the store has no reset and no
			// wait for them (engine.PeerWindow), and a refusal waits for the
			// window's end.
			if d.ResetAfter > 0 || r.Limit.Algorithm != engine.FixedWindow {
				reset = d.ResetAfter
			}
			retry = d.RetryAfter
			if over && c.parts[k/partSize].Limit(k%partSize).Algorithm == engine.PeerWindow {
				retry = reset
			}
		}
		box.reset.Seconds = ratefields.Seconds(reset)
		st.DurationUntilReset = &box.reset
		if k == noneAllowed {
			retry = reset
		}
		if s.stats != nil {
			s.countHit(c, i, r, k)
		}
		// Shadow mode: over its limit, and answered OK with what an
		// over-limit status carries, as the peer's.
		st.Code = pb.RateLimitResponse_OK
		if over && !r.Shadow && !s.shadow {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
		}
		if passed != nil {
			// The peer's global shadow mode answers the call OK but
			// leaves its descriptors over: they did not pass.
			passed[i] = !over || r.Shadow
		}
		h.consider(i, st, r, retry, reset)
		if st.Code == pb.RateLimitResponse_OVER_LIMIT {
			if r.Quota {
				failedQuota++
			} else {
				failedRate++
				h.force(i, st, r, retry, reset)
			}
		}
		if r.Quota {
			totalQuota++
		}
	}
	resp.OverallCode = pb.RateLimitResponse_OK
	if failedRate > 0 || totalQuota > 0 && totalQuota == failedQuota {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	if s.headers != rlsopts.HeadersOff && h.found {
		resp.ResponseHeadersToAdd = s.responseHeaders(&h, resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT)
	}
	if passed != nil {
		resp.DynamicMetadata = dynamicMetadata(req, ms, passed)
	}
	return resp, nil
}

// reply is one call's response with the statuses it points to, made
// once for every status; the gRPC handler's come from a pool, and go back
// once the codec has written them (codec.Marshal).
type reply struct {
	buf      []byte // the own transport's encoding of resp, kept between calls
	resp     pb.RateLimitResponse
	statuses []*pb.RateLimitResponse_DescriptorStatus
	boxes    []statusBox
	pool     *sync.Pool // where the reply goes back; nil: it is the caller's
}

// sized returns the statuses and their boxes for n descriptors.
func (r *reply) sized(n int) ([]*pb.RateLimitResponse_DescriptorStatus, []statusBox) {
	if cap(r.boxes) < n {
		r.statuses, r.boxes = make([]*pb.RateLimitResponse_DescriptorStatus, n), make([]statusBox, n)
	}
	r.statuses, r.boxes = r.statuses[:n], r.boxes[:n]
	return r.statuses, r.boxes
}

// release puts a pooled reply back, emptied; it does nothing to one that
// is not pooled.
func (r *reply) release() {
	if r == nil || r.pool == nil {
		return
	}
	clear(r.statuses)
	clear(r.boxes)
	r.resp.OverallCode, r.resp.Statuses, r.resp.ResponseHeadersToAdd, r.resp.DynamicMetadata = 0, nil, nil, nil
	r.pool.Put(r)
}

// statusBox holds a descriptor status and the messages it points to.
type statusBox struct {
	st    pb.RateLimitResponse_DescriptorStatus
	limit pb.RateLimitResponse_RateLimit
	reset durationpb.Duration
}

// windowLeft is what is left of the current window of period, counted
// from the Unix epoch as the peer counts it.
func windowLeft(period time.Duration, now time.Time) time.Duration {
	if period <= 0 {
		return 0
	}
	return period - time.Duration(now.UnixNano())%period
}

// headerPick is the descriptor whose numbers the headers carry: the peer's
// "closest to its limit", and the last over its limit (outside quota mode)
// when any is.
type headerPick struct {
	found     bool
	remaining uint32
	st        *pb.RateLimitResponse_DescriptorStatus
	rule      *rlsconfig.Rule
	retry     time.Duration
	reset     time.Duration
}

func (h *headerPick) consider(i int, st *pb.RateLimitResponse_DescriptorStatus, r *rlsconfig.Rule, retry, reset time.Duration) {
	if !h.found || st.LimitRemaining < h.remaining {
		h.force(i, st, r, retry, reset)
		h.remaining = st.LimitRemaining
	}
}

func (h *headerPick) force(_ int, st *pb.RateLimitResponse_DescriptorStatus, r *rlsconfig.Rule, retry, reset time.Duration) {
	h.found, h.st, h.rule, h.retry, h.reset, h.remaining = true, st, r, retry, reset, 0
	if st.Code != pb.RateLimitResponse_OVER_LIMIT {
		h.remaining = st.LimitRemaining
	}
}
