package lua_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/lua"
)

// pinned is the clock the round trips pin: 2026-01-01, a whole second.
const pinned = 1767225600000000

// redisConn sends batch calls to a real Redis, encoded by BatchCall.Append,
// and reads the replies back as []any (int64, string, replyErr).
type redisConn struct {
	t testing.TB
	c net.Conn
	r *bufio.Reader
}

type replyErr string

func dialRedis(t testing.TB) *redisConn {
	srv := redistest.Start(t)
	c, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &redisConn{t: t, c: c, r: bufio.NewReader(c)}
}

// eval runs the batch script on keys with c's arguments.
func (rc *redisConn) eval(keys []string, c *lua.BatchCall) any {
	buf := redcon.AppendArray(nil, 3+len(keys)+c.Args())
	buf = redcon.AppendBulkString(buf, "EVAL")
	buf = redcon.AppendBulkString(buf, lua.Batch.Source)
	buf = redcon.AppendBulkString(buf, strconv.Itoa(len(keys)))
	for _, k := range keys {
		buf = redcon.AppendBulkString(buf, k)
	}
	buf = c.Append(buf)
	if _, err := rc.c.Write(buf); err != nil {
		rc.t.Fatal(err)
	}
	v, err := readReply(rc.r)
	if err != nil {
		rc.t.Fatal(err)
	}
	return v
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	body := strings.TrimSuffix(line[1:], "\r\n")
	switch line[0] {
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '+':
		return body, nil
	case '-':
		return replyErr(body), nil
	case '$':
		n, _ := strconv.Atoi(body)
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, _ := strconv.Atoi(body)
		a := make([]any, n)
		for i := range a {
			if a[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return a, nil
	}
	return nil, fmt.Errorf("unknown reply %q", line)
}

// decided is a decision as the test compares it: its error message, if
// it failed, instead of the message's index.
type decided struct {
	lua.Decision
	err string
}

// decide runs c on keys and decodes the reply.
func (rc *redisConn) decide(keys []string, c *lua.BatchCall) []decided {
	rc.t.Helper()
	v := rc.eval(keys, c)
	list, ok := v.([]any)
	if !ok {
		rc.t.Fatalf("%+v: reply %v", c, v)
	}
	var r lua.BatchReply
	if err := r.Decode(list, c); err != nil {
		rc.t.Fatalf("%+v: %v", c, err)
	}
	out := make([]decided, len(r.Decisions))
	for i, d := range r.Decisions {
		out[i].Decision = d
		if d.Allowed < 0 {
			out[i].err = r.Err(d).Error()
			out[i].Allowed = -1
		}
	}
	return out
}

// TestBatchRoundTrip encodes batch calls, runs them through the batch
// script on a real Redis, decodes the replies and compares them with the
// decisions worked out by hand: each field of the format in its place.
func TestBatchRoundTrip(t *testing.T) {
	rc := dialRedis(t)
	gcra := lua.Limit{Algorithm: "gcra", Rate: 1, Period: 1_000_000, Burst: 4} // capacity 5
	fixed := lua.Limit{Algorithm: "fixed", Rate: 3, Period: 60_000_000}        // 3 a minute
	logL := lua.Limit{Algorithm: "log", Rate: 10, Period: 1_000_000}           // 10 a second
	for _, tc := range []struct {
		name string
		keys []string
		call lua.BatchCall
		want []decided
	}{
		{"one take", []string{"a"}, lua.BatchCall{
			Limits: []lua.Limit{gcra}, Runs: []lua.Run{{Requests: 1, Limit: 1, Cost: 1}}, KeyRuns: []lua.KeyRun{{Keys: 1, Requests: 1}},
		}, []decided{{Decision: lua.Decision{Allowed: 1, Remaining: 4, ResetAfter: 1_000_000}}}},
		{"a hot key counts down, then refuses", []string{"b"}, lua.BatchCall{
			Limits: []lua.Limit{fixed}, Runs: []lua.Run{{Requests: 5, Limit: 1, Cost: 1}}, KeyRuns: []lua.KeyRun{{Keys: 1, Requests: 5}},
		}, []decided{
			{Decision: lua.Decision{Allowed: 1, Remaining: 2, ResetAfter: 60_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 1, ResetAfter: 60_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 0, ResetAfter: 60_000_000}},
			{Decision: lua.Decision{Allowed: 0, Remaining: 0, RetryAfter: 60_000_000, ResetAfter: 60_000_000}},
			{Decision: lua.Decision{Allowed: 0, Remaining: 0, RetryAfter: 60_000_000, ResetAfter: 60_000_000}},
		}},
		{"two limits, a cost, a peek, two keys of two", []string{"c1", "c2"}, lua.BatchCall{
			Limits:  []lua.Limit{fixed, gcra},
			Runs:    []lua.Run{{Requests: 1, Limit: 2, Cost: 2}, {Requests: 1, Limit: 2, Cost: 1, Mode: lua.Peek}, {Requests: 2, Limit: 1, Cost: 3}},
			KeyRuns: []lua.KeyRun{{Keys: 2, Requests: 2}},
		}, []decided{
			{Decision: lua.Decision{Allowed: 1, Remaining: 3, ResetAfter: 2_000_000}},
			// A peek replies what a take would.
			{Decision: lua.Decision{Allowed: 1, Remaining: 2, ResetAfter: 3_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 0, ResetAfter: 60_000_000}},
			{Decision: lua.Decision{Allowed: 0, Remaining: 0, RetryAfter: 60_000_000, ResetAfter: 60_000_000}},
		}},
		{"a charge past the limit", []string{"d"}, lua.BatchCall{
			Limits: []lua.Limit{gcra}, Runs: []lua.Run{{Requests: 1, Limit: 1, Cost: 7, Mode: lua.Charge}}, KeyRuns: []lua.KeyRun{{Keys: 1, Requests: 1}},
		}, []decided{{Decision: lua.Decision{Allowed: 0, Remaining: -2, RetryAfter: 3_000_000, ResetAfter: 7_000_000}}}},
		{"an error by index", []string{"e1", "e2"}, lua.BatchCall{
			Limits:  []lua.Limit{logL, gcra},
			Runs:    []lua.Run{{Requests: 1, Limit: 1, Cost: 1, Mode: lua.Charge}, {Requests: 1, Limit: 2, Cost: 1}},
			KeyRuns: []lua.KeyRun{{Keys: 2, Requests: 1}},
		}, []decided{
			{Decision: lua.Decision{Allowed: -1}, err: "ERR sluice: the sliding log takes no charge"},
			{Decision: lua.Decision{Allowed: 1, Remaining: 4, ResetAfter: 1_000_000}},
		}},
		{"a multi-limit request refused by one limit", []string{"f1", "m:fixed", "m:gcra"}, lua.BatchCall{
			Limits:      []lua.Limit{gcra, fixed},
			Runs:        []lua.Run{{Requests: 1, Limit: 1, Cost: 1}},
			KeyRuns:     []lua.KeyRun{{Keys: 1, Requests: 1}},
			Multis:      []lua.Multi{{Requests: 1, Limits: 2, Cost: 4}},
			MultiLimits: []int64{2, 1},
		}, []decided{
			{Decision: lua.Decision{Allowed: 1, Remaining: 4, ResetAfter: 1_000_000}},
			{Decision: lua.Decision{Allowed: 0, Remaining: 3, RetryAfter: 60_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 5}},
		}},
		// The reply has a multi-limit run's decisions a limit at a time;
		// Decode puts them a request at a time. The first two requests
		// of the run of three are on one key (a hot run): the second is
		// refused by the fixed window, and the GCRA reports what it has.
		{"multi-limit runs, a limit at a time", []string{"g1", "r1:g", "r1:f", "r1:g", "r1:f", "r2:g", "r2:f", "r3:g", "r3:f"}, lua.BatchCall{
			Limits:      []lua.Limit{gcra, fixed},
			Runs:        []lua.Run{{Requests: 1, Limit: 1, Cost: 1}},
			KeyRuns:     []lua.KeyRun{{Keys: 1, Requests: 1}},
			Multis:      []lua.Multi{{Requests: 3, Limits: 2, Cost: 2}, {Requests: 1, Limits: 2, Cost: 1}},
			MultiLimits: []int64{1, 2, 1, 2},
		}, []decided{
			{Decision: lua.Decision{Allowed: 1, Remaining: 4, ResetAfter: 1_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 3, ResetAfter: 2_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 1, ResetAfter: 60_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 3, ResetAfter: 2_000_000}},
			{Decision: lua.Decision{Allowed: 0, Remaining: 1, RetryAfter: 60_000_000, ResetAfter: 60_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 3, ResetAfter: 2_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 1, ResetAfter: 60_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 4, ResetAfter: 1_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 2, ResetAfter: 60_000_000}},
		}},
		// A grant's reply carries its hold as retry_after and its anchor
		// as delay; a refund names its grant by the anchor, one per
		// request (a multi-limit one's, one per limit).
		{"a grant and a refund", []string{"h", "l"}, lua.BatchCall{
			Limits:  []lua.Limit{fixed, {Algorithm: "leaky", Rate: 1, Period: 1_000_000, Burst: 2}},
			Runs:    []lua.Run{{Requests: 1, Limit: 1, Cost: 2, Mode: lua.Grant}, {Requests: 1, Limit: 1, Cost: 1, Mode: lua.Refund}, {Requests: 1, Limit: 2, Cost: 1, Mode: lua.Grant}},
			KeyRuns: []lua.KeyRun{{Keys: 1, Requests: 2}, {Keys: 1, Requests: 1}},
			Anchors: []int64{pinned + 60_000_000},
		}, []decided{
			{Decision: lua.Decision{Allowed: 1, Remaining: 1, RetryAfter: 60_000_000, ResetAfter: 60_000_000, Delay: pinned + 60_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 2, ResetAfter: 60_000_000}},
			{Decision: lua.Decision{Allowed: -1}, err: "ERR sluice: the leaky algorithm takes no grant"},
		}},
		{"a multi-limit grant and refund", []string{"mg:g", "mg:f", "mg:g", "mg:f"}, lua.BatchCall{
			Limits:      []lua.Limit{gcra, fixed},
			Multis:      []lua.Multi{{Requests: 1, Limits: 2, Cost: 2, Mode: lua.Grant}, {Requests: 1, Limits: 2, Cost: 1, Mode: lua.Refund}},
			MultiLimits: []int64{1, 2, 1, 2},
			Anchors:     []int64{pinned + 2_000_000, pinned + 60_000_000},
		}, []decided{
			{Decision: lua.Decision{Allowed: 1, Remaining: 3, RetryAfter: 2_000_000, ResetAfter: 2_000_000, Delay: pinned + 2_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 1, RetryAfter: 60_000_000, ResetAfter: 60_000_000, Delay: pinned + 60_000_000}},
			// GCRA gives back one of the two, ceil(2 s / 1 s) >= 1.
			{Decision: lua.Decision{Allowed: 1, Remaining: 4, ResetAfter: 1_000_000}},
			{Decision: lua.Decision{Allowed: 1, Remaining: 2, ResetAfter: 60_000_000}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.call
			c.Now, c.Pinned = pinned, true
			if got := rc.decide(tc.keys, &c); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestBatchValues: the boxed arguments (go-redis's) are the appended ones.
func TestBatchValues(t *testing.T) {
	c := lua.BatchCall{
		Limits:      []lua.Limit{{Algorithm: "sliding", Rate: 5, Period: 1000, Burst: 10}},
		Runs:        []lua.Run{{Requests: 2, Limit: 1, Cost: 3, Mode: lua.Peek}},
		KeyRuns:     []lua.KeyRun{{Keys: 1, Requests: 2}},
		Multis:      []lua.Multi{{Requests: 1, Limits: 1, Cost: 9, Mode: lua.Charge}, {Requests: 1, Limits: 1, Cost: 2, Mode: lua.Refund}},
		MultiLimits: []int64{1, 1}, Anchors: []int64{pinned + 1000},
		Now: pinned, Pinned: true,
	}
	var boxed []byte
	vals := c.Values(nil)
	for _, v := range vals {
		boxed = redcon.AppendBulkString(boxed, fmt.Sprint(v))
	}
	if got := string(c.Append(nil)); got != string(boxed) || len(vals) != c.Args() {
		t.Errorf("Append %q\nValues %q (%d, Args %d)", got, boxed, len(vals), c.Args())
	}
}

// generated is a batch call made from fuzz bytes, its keys, and the same
// requests one call each.
type generated struct {
	call lua.BatchCall
	keys []string
	ones []lua.BatchCall // each request alone, in the order of its reply
	oneK [][]string
}

var fuzzLimits = []lua.Limit{
	{Algorithm: "gcra", Rate: 2, Period: 1_000_000, Burst: 3},
	{Algorithm: "fixed", Rate: 3, Period: 10_000_000},
	{Algorithm: "token", Rate: 1, Period: 1_000_000, Burst: 2},
	{Algorithm: "log", Rate: 2, Period: 1_000_000},
	{Algorithm: "sliding", Rate: 4, Period: 2_000_000, Burst: 10},
	{Algorithm: "leaky", Rate: 5, Period: 1_000_000, Burst: 2},
}

// generate reads a batch from data: a few keys with a few requests each,
// each request a limit, cost and mode, in runs where they repeat, then a
// few runs of multi-limit requests. prefix keeps one test's keys apart.
func generate(data []byte, prefix string) generated {
	next := func(n int) int {
		if len(data) == 0 {
			return 0
		}
		v := int(data[0]) % n
		data = data[1:]
		return v
	}
	var g generated
	// The table: one to three of the limits.
	pick := map[int]int64{}
	for range 1 + next(3) {
		l := next(len(fuzzLimits))
		if _, ok := pick[l]; !ok {
			g.call.Limits = append(g.call.Limits, fuzzLimits[l])
			pick[l] = int64(len(g.call.Limits))
		}
	}
	m := len(g.call.Limits)
	type req struct {
		limit, cost int64
		mode        lua.Mode
	}
	// A refund's anchor: the ends of the fuzz limits' windows and
	// sub-windows at pinned, a bucket's time, or one that names nothing.
	anchors := []int64{pinned + 10_000_000, pinned + 200_000, pinned + 1_500_000, pinned + 1}
	anchor := func(mode lua.Mode) []int64 {
		if mode != lua.Refund {
			return nil
		}
		return []int64{anchors[next(len(anchors))]}
	}
	one := func(keys []string, c lua.BatchCall) {
		c.Limits, c.Now, c.Pinned = g.call.Limits, pinned, true
		g.ones, g.oneK = append(g.ones, c), append(g.oneK, keys)
	}
	var reqs []req
	for k := range 1 + next(4) {
		n := 1 + next(3)
		key := fmt.Sprintf("%s:k%d", prefix, k)
		g.keys = append(g.keys, key)
		if len(g.call.KeyRuns) > 0 && g.call.KeyRuns[len(g.call.KeyRuns)-1].Requests == int64(n) {
			g.call.KeyRuns[len(g.call.KeyRuns)-1].Keys++
		} else {
			g.call.KeyRuns = append(g.call.KeyRuns, lua.KeyRun{Keys: 1, Requests: int64(n)})
		}
		// A key keeps one limit: its state is that algorithm's.
		limit := int64(1 + next(m))
		for range n {
			r := req{limit, int64(next(4)), lua.Mode(next(5))}
			reqs = append(reqs, r)
			a := anchor(r.mode)
			g.call.Anchors = append(g.call.Anchors, a...)
			one([]string{"one" + key}, lua.BatchCall{
				Runs: []lua.Run{{Requests: 1, Limit: r.limit, Cost: r.cost, Mode: r.mode}}, KeyRuns: []lua.KeyRun{{Keys: 1, Requests: 1}},
				Anchors: a,
			})
		}
	}
	for q, r := range reqs {
		if q > 0 && reqs[q-1] == r {
			g.call.Runs[len(g.call.Runs)-1].Requests++
			continue
		}
		g.call.Runs = append(g.call.Runs, lua.Run{Requests: 1, Limit: r.limit, Cost: r.cost, Mode: r.mode})
	}
	// Runs of one to three multi-limit requests, each on the keys of the
	// one before (a hot key's run) or on keys of its own.
	for x := range next(3) {
		mu := lua.Multi{Requests: int64(1 + next(3)), Limits: 1 + next(m), Cost: int64(next(4)), Mode: lua.Mode(next(5))}
		var limits []int64
		for range mu.Limits {
			limits = append(limits, int64(1+next(m)))
		}
		g.call.Multis = append(g.call.Multis, mu)
		g.call.MultiLimits = append(g.call.MultiLimits, limits...)
		keys := make([]string, mu.Limits)
		for y := range mu.Requests {
			if y == 0 || next(2) == 1 {
				for j := range keys {
					keys[j] = fmt.Sprintf("%s:m%d:%d:%d", prefix, x, y, j)
				}
			}
			g.keys = append(g.keys, keys...)
			oneKeys := make([]string, len(keys))
			for j, k := range keys {
				oneKeys[j] = "one" + k
			}
			alone := mu
			alone.Requests = 1
			var as []int64
			for range mu.Limits {
				as = append(as, anchor(mu.Mode)...)
			}
			g.call.Anchors = append(g.call.Anchors, as...)
			one(oneKeys, lua.BatchCall{Multis: []lua.Multi{alone}, MultiLimits: limits, Anchors: as})
		}
	}
	g.call.Now, g.call.Pinned = pinned, true
	return g
}

// FuzzBatchRoundTripRedis encodes generated batches, runs each through the
// batch script on a real Redis and decodes the reply, and compares it with
// the same requests sent one call each: runs of requests, runs of keys and
// the reply's runs change no decision.
func FuzzBatchRoundTripRedis(f *testing.F) {
	f.Add([]byte{2, 0, 1, 3, 2, 1, 0, 0, 2, 1, 2, 2, 1, 2, 0})
	f.Add([]byte{0, 0, 0, 2, 0, 1, 0, 1, 0, 1, 0, 1, 0})
	f.Add([]byte{1, 3, 5, 2, 1, 1, 2, 2, 2, 2, 1, 1, 0, 2, 1, 1, 2, 3, 1, 0})
	// Grants and refunds (modes 3 and 4), single-limit and multi-limit.
	f.Add([]byte{2, 1, 0, 0, 2, 0, 3, 3, 2, 4, 0, 1, 2, 1, 2, 1, 1, 2, 4, 0, 1, 2})
	f.Add([]byte{1, 2, 0, 3, 0, 2, 3, 0, 1, 4, 1, 2, 3, 1, 2, 2, 3, 1, 1, 1, 4, 2, 0, 3})
	conn := dialRedis(f)
	n := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		conn.t = t
		n++
		g := generate(data, "f"+strconv.Itoa(n))
		got := conn.decide(g.keys, &g.call)
		var want []decided
		for k := range g.ones {
			want = append(want, conn.decide(g.oneK[k], &g.ones[k])...)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%+v\nbatch   %+v\none by one %+v", g.call, got, want)
		}
	})
}

// encodeReply encodes decisions and error messages as batch.lua's emit
// does: a row that repeats the one before's allowed and steps its other
// fields as the one before did starts or lengthens a run.
func encodeReply(ds []lua.Decision, errs []string) []any {
	out := []any{int64(pinned), int64(0)} // the header: Redis's time, not late
	row := func(a, b, c, d, e int64) { out = append(out, a, b, c, d, e) }
	repeats := 0
	var p, step lua.Decision
	for i, d := range ds {
		if i > 0 && d.Allowed == p.Allowed {
			x := lua.Decision{Remaining: d.Remaining - p.Remaining, RetryAfter: d.RetryAfter - p.RetryAfter, ResetAfter: d.ResetAfter - p.ResetAfter, Delay: d.Delay - p.Delay}
			if repeats == 0 || x == step {
				step, repeats, p = x, repeats+1, d
				continue
			}
		}
		if repeats > 0 {
			row(int64(repeats+1), step.Remaining, step.RetryAfter, step.ResetAfter, step.Delay)
			repeats = 0
		}
		row(d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay)
		p = d
	}
	if repeats > 0 {
		row(int64(repeats+1), step.Remaining, step.RetryAfter, step.ResetAfter, step.Delay)
	}
	for _, e := range errs {
		out = append(out, e)
	}
	return out
}

// singles is a call of n single-limit requests, for decoding replies.
func singles(n int) *lua.BatchCall {
	return &lua.BatchCall{Runs: []lua.Run{{Requests: int64(n), Limit: 1, Cost: 1}}}
}

// FuzzBatchReply: a reply encoded as the script encodes it decodes to the
// decisions it was made of, runs and errors included.
func FuzzBatchReply(f *testing.F) {
	f.Add([]byte{1, 5, 1, 4, 1, 3, 0, 0, 0, 0, 255, 0})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var ds []lua.Decision
		var errs []string
		for len(data) >= 2 {
			a := int64(data[0]%4) - 1 // -1 (an error), 0 or 1
			if a == 2 {
				a = 1
			}
			v := int64(data[1]) - 128
			if a < 0 {
				errs = append(errs, fmt.Sprintf("ERR %d", len(errs)))
				ds = append(ds, lua.Decision{Allowed: -int64(len(errs))})
			} else {
				ds = append(ds, lua.Decision{Allowed: a, Remaining: v, RetryAfter: v * 3, ResetAfter: 1000 - v, Delay: v & 7})
			}
			data = data[2:]
		}
		var r lua.BatchReply
		if err := r.Decode(encodeReply(ds, errs), singles(len(ds))); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r.Decisions, ds) && len(ds) > 0 {
			t.Fatalf("decoded %+v\nwant    %+v", r.Decisions, ds)
		}
		for _, d := range ds {
			if d.Allowed < 0 {
				if got, want := r.Err(d).Error(), errs[-d.Allowed-1]; got != want {
					t.Errorf("error %d: %q, want %q", -d.Allowed, got, want)
				}
			}
		}
	})
}

// TestBatchReplyBad: a reply that is not the format fails with a reason,
// and asks for no room it does not hold.
func TestBatchReplyBad(t *testing.T) {
	for _, tc := range []struct {
		reply []any
		rows  int
		want  string
	}{
		{[]any{int64(pinned)}, 0, "cut short"},
		{[]any{int64(pinned), int64(0), int64(1), int64(0)}, 1, "cut short"},
		{[]any{int64(pinned), int64(0), int64(3), int64(0), int64(0), int64(0), int64(0)}, 2, "repeats before"},
		{[]any{int64(pinned), int64(0), int64(1), int64(0), int64(0), int64(0), int64(0), int64(1 << 40), int64(0), int64(0), int64(0), int64(0)}, 3, "past its 3"},
		{[]any{int64(pinned), int64(0), int64(1), "x", int64(0), int64(0), int64(0)}, 1, "field 3 is string"},
		{[]any{"x", int64(0)}, 0, "field 0 is string"},
	} {
		var r lua.BatchReply
		if err := r.Decode(tc.reply, singles(tc.rows)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.reply, err, tc.want)
		}
	}
	var r lua.BatchReply
	if err := r.Decode([]any{int64(pinned), int64(0), int64(-2), int64(0), int64(0), int64(0), int64(0), "ERR one"}, singles(1)); err != nil {
		t.Fatal(err)
	}
	if err := r.Err(r.Decisions[0]); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("error 2 of 1: %v", err)
	}
}

// TestBatchNoAllocs: once its buffers are warm, a caller encodes a call
// and decodes its reply without allocating (the store's hot path).
func TestBatchNoAllocs(t *testing.T) {
	c := lua.BatchCall{
		Limits:  []lua.Limit{{Algorithm: "gcra", Rate: 1000, Period: 1_000_000, Burst: 4000}},
		Runs:    []lua.Run{{Requests: 3, Limit: 1, Cost: 1}},
		KeyRuns: []lua.KeyRun{{Keys: 3, Requests: 1}},
		// A multi-limit run, whose decisions Decode reorders.
		Multis:      []lua.Multi{{Requests: 2, Limits: 2, Cost: 1}},
		MultiLimits: []int64{1, 1},
		Now:         pinned, Pinned: true,
	}
	reply := encodeReply([]lua.Decision{{Allowed: 1, Remaining: 4000}, {Allowed: 1, Remaining: 3999}, {Allowed: 0, RetryAfter: 1000},
		{Allowed: 1, Remaining: 7}, {Allowed: 1, Remaining: 6}, {Allowed: 0, Remaining: 5}, {Allowed: 0, Remaining: 4}}, nil)
	buf := make([]byte, 0, 1024)
	var r lua.BatchReply
	allocs := testing.AllocsPerRun(100, func() {
		buf = c.Append(buf[:0])
		if err := r.Decode(reply, &c); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations a call", allocs)
	}
}

// TestBatchDeadline: a call's reply starts with Redis's TIME as the call
// read it; a call with a deadline still ahead on Redis's clock decides,
// and one whose deadline has passed is late: it says so, and charges
// nothing (the next call finds the key as the one before left it). A
// deadline filled in over Append's (PutDeadline, as the store's
// connection does) is the one the script reads.
func TestBatchDeadline(t *testing.T) {
	rc := dialRedis(t)
	take := func(deadline int64) lua.BatchCall {
		return lua.BatchCall{
			Limits:   []lua.Limit{{Algorithm: "fixed", Rate: 10, Period: 60_000_000}},
			Runs:     []lua.Run{{Requests: 1, Limit: 1, Cost: 1}},
			KeyRuns:  []lua.KeyRun{{Keys: 1, Requests: 1}},
			Deadline: deadline,
		}
	}
	run := func(c lua.BatchCall, fill func(cmd []byte)) lua.BatchReply {
		t.Helper()
		buf := redcon.AppendArray(nil, 4+c.Args())
		buf = redcon.AppendBulkString(buf, "EVAL")
		buf = redcon.AppendBulkString(buf, lua.Batch.Source)
		buf = redcon.AppendBulkString(buf, "1")
		buf = redcon.AppendBulkString(buf, "late")
		buf = c.Append(buf)
		if fill != nil {
			fill(buf)
		}
		if _, err := rc.c.Write(buf); err != nil {
			t.Fatal(err)
		}
		v, err := readReply(rc.r)
		if err != nil {
			t.Fatal(err)
		}
		list, ok := v.([]any)
		if !ok {
			t.Fatalf("reply %v", v)
		}
		var r lua.BatchReply
		if err := r.Decode(list, &c); err != nil {
			t.Fatal(err)
		}
		return r
	}
	now := func() int64 {
		t.Helper()
		c := take(0)
		tm, ok := lua.ReplyTime(rc.eval([]string{"clock"}, &c))
		if !ok {
			t.Fatal("no time in the reply")
		}
		return tm
	}
	before := now()
	r := run(take(0), nil) // no deadline
	if r.Late || len(r.Decisions) != 1 || r.Decisions[0].Remaining != 9 {
		t.Fatalf("no deadline: %+v", r)
	}
	if r.Time < before || r.Time > now() {
		t.Errorf("the reply's time %d is not Redis's, between %d and the next call's", r.Time, before)
	}
	hour := int64(3600_000_000)
	if r = run(take(now()+hour), nil); r.Late || r.Decisions[0].Remaining != 8 {
		t.Fatalf("a deadline an hour ahead: %+v", r)
	}
	if r = run(take(now()-1), nil); !r.Late || len(r.Decisions) != 0 {
		t.Fatalf("a deadline passed: %+v, want late and no decisions", r)
	}
	// Filled in: an hour ago over an hour ahead is late; an hour ahead
	// over an hour ago decides.
	if r = run(take(now()+hour), func(cmd []byte) { lua.PutDeadline(cmd, now()-hour) }); !r.Late {
		t.Fatalf("a deadline filled in an hour ago: %+v, want late", r)
	}
	if r = run(take(now()-hour), func(cmd []byte) { lua.PutDeadline(cmd, now()+hour) }); r.Late || r.Decisions[0].Remaining != 7 {
		t.Fatalf("a deadline filled in an hour ahead: %+v; want 7 left: the late calls charged nothing", r)
	}
}
