package upstream

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
)

// Reading a key's state back, for an explanation (RL.EXPLAIN): the one
// read a decision may cost, asked only when a person asks why, never on
// the decision path. It reads the key the batch script keeps the state
// in, in the layout the script's header gives (lua/*.lua), and returns
// it as the engine's State, so that the service can say what the state
// means with the same Step the stores decide with.

// maxLogRead bounds the sliding log entries read back: a log of a large
// limit holds one entry per admitted request, and reading a million of
// them would be the slow command an explanation must never be.
const maxLogRead = 4096

// readState reads a key's state and Redis's clock in one script call,
// so that both come from one instant on the key's own node (on Cluster,
// the master serving its slot). Read-only: it changes nothing, and runs
// on a replica's connection as well. Reply: seconds and µs of TIME, the
// key's type, and its value: a hash's field-value pairs, a string, a
// sorted set's member-score pairs (when at most ARGV[1] long, else its
// length), or nothing.
var readState = redis.NewScript(`
local t = redis.call('TIME')
local key = KEYS[1]
local ty = redis.call('TYPE', key)['ok']
local v = false
if ty == 'hash' then
  v = redis.call('HGETALL', key)
elseif ty == 'string' then
  v = redis.call('GET', key)
elseif ty == 'zset' then
  local n = redis.call('ZCARD', key)
  if n > tonumber(ARGV[1]) then
    v = n
  else
    v = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  end
end
return {t[1], t[2], ty, v}
`)

// StateKey is where Redis keeps the state of key under l: Key's, for a
// single-limit request (l.Name empty), else LimitKey's.
func (s *Store) StateKey(key string, l engine.NamedLimit) string {
	return s.keyString(keyRef{key: key, name: l.Name, alg: l.Limit.Algorithm})
}

// ReadState reads the state Redis holds for key under l (StateKey) and
// Redis's clock at that instant (µs; the pinned clock's in tests, as the
// decisions use it). A key Redis does not hold reads as the zero State,
// which every algorithm reads as full capacity. It is safe for
// concurrent use.
func (s *Store) ReadState(ctx context.Context, key string, l engine.NamedLimit) (engine.State, int64, error) {
	k := s.StateKey(key, l)
	reply, err := readState.Run(ctx, s.client, []string{k}, maxLogRead).Slice()
	if err != nil {
		return engine.State{}, 0, fmt.Errorf("upstream: read the state of %q: %w", k, err)
	}
	if len(reply) < 3 {
		return engine.State{}, 0, fmt.Errorf("upstream: read the state of %q: a reply of %d values", k, len(reply))
	}
	sec, err1 := intOf(reply[0])
	us, err2 := intOf(reply[1])
	if err1 != nil || err2 != nil {
		return engine.State{}, 0, fmt.Errorf("upstream: read the state of %q: TIME replied %v %v", k, reply[0], reply[1])
	}
	now := sec*1e6 + us
	if s.now != nil {
		now = s.now().UnixMicro()
	}
	ty, _ := reply[2].(string)
	var v any
	if len(reply) > 3 {
		v = reply[3]
	}
	st, err := parseState(l.Limit.Algorithm, ty, v)
	if err != nil {
		return engine.State{}, now, fmt.Errorf("upstream: the state of %q: %w", k, err)
	}
	return st, now, nil
}

// parseState reads a key's value of type ty as algorithm a keeps it
// (lua/*.lua's "State:" lines): engine.State's fields, as the memory
// store keeps the same values.
func parseState(a engine.Algorithm, ty string, v any) (engine.State, error) {
	var st engine.State
	if ty == "none" {
		return st, nil
	}
	switch a {
	case engine.FixedWindow: // a hash {w = window start, n = count}
		h, err := hashOf(ty, v)
		if err != nil {
			return st, err
		}
		if st.A, err = field(h, "w"); err != nil {
			return st, err
		}
		st.B, err = field(h, "n")
		return st, err
	case engine.SlidingWindow: // a hash {w, n = precision, '0'…n = the ring}
		h, err := hashOf(ty, v)
		if err != nil {
			return st, err
		}
		if st.A, err = field(h, "w"); err != nil {
			return st, err
		}
		if st.B, err = field(h, "n"); err != nil {
			return st, err
		}
		if st.B < 1 || st.B > engine.MaxPrecision {
			return st, fmt.Errorf("precision n = %d", st.B)
		}
		st.Log = make([]int64, st.B+1)
		for j := range st.Log {
			if st.Log[j], err = field(h, strconv.Itoa(j)); err != nil {
				return st, err
			}
		}
		return st, nil
	case engine.TokenBucket, engine.LeakyBucket, engine.GCRA: // z: "µs" or "µs f/d"
		z, ok := v.(string)
		if ty != "string" || !ok {
			return st, fmt.Errorf("a %s, not the string that keeps z (a token bucket of an earlier version, kept as a hash, is rewritten by its next decision)", ty)
		}
		whole, frac, found := strings.Cut(z, " ")
		var err error
		if st.A, err = parseNum(whole); err != nil {
			return st, fmt.Errorf("z = %q: %w", z, err)
		}
		if found {
			f, d, ok := strings.Cut(frac, "/")
			var e1, e2 error
			st.B, e1 = parseNum(f)
			st.C, e2 = parseNum(d)
			if !ok || e1 != nil || e2 != nil || st.C < 1 {
				return st, fmt.Errorf("z = %q: not µs f/d", z)
			}
			if st.B == 0 {
				st.C = 0 // no fraction: as the script writes it, "µs" alone
			}
		}
		return st, nil
	case engine.SlidingLog: // a sorted set: score = time, member = before/cost
		return parseLog(ty, v)
	case engine.PeerWindow: // the peer's count, a plain integer
		c, ok := v.(string)
		if ty != "string" || !ok {
			return st, fmt.Errorf("a %s, not the peer's count", ty)
		}
		var err error
		st.B, err = parseNum(c)
		return st, err
	}
	return st, fmt.Errorf("no state layout for %s", a)
}

// parseLog reads a sliding log: engine's Log pairs (time, running total
// before it) and A, the running total after the newest, modulo 2^52 as
// the script keeps it.
func parseLog(ty string, v any) (engine.State, error) {
	var st engine.State
	if ty != "zset" {
		return st, fmt.Errorf("a %s, not the sorted set that keeps the log", ty)
	}
	if n, ok := v.(int64); ok {
		return st, fmt.Errorf("the log holds %d entries; at most %d are read back", n, maxLogRead)
	}
	pairs, ok := v.([]any)
	if !ok || len(pairs)%2 != 0 {
		return st, fmt.Errorf("the log read back as %T", v)
	}
	st.Log = make([]int64, 0, len(pairs))
	var cost int64
	for i := 0; i < len(pairs); i += 2 {
		member, _ := pairs[i].(string)
		score, _ := pairs[i+1].(string)
		before, c, ok := strings.Cut(member, "/")
		t, e1 := parseNum(score)
		b, e2 := parseNum(before)
		cc, e3 := parseNum(c)
		if !ok || e1 != nil || e2 != nil || e3 != nil {
			return st, fmt.Errorf("the entry %q at %q is not before/cost (a log of an earlier version is rewritten by its next decision)", member, score)
		}
		st.Log = append(st.Log, t, b)
		cost = cc
	}
	if n := len(st.Log); n > 0 {
		st.A = (st.Log[n-1] + cost) % (1 << 52)
	}
	return st, nil
}

// hashOf is a HGETALL reply as a map.
func hashOf(ty string, v any) (map[string]string, error) {
	pairs, ok := v.([]any)
	if ty != "hash" || !ok || len(pairs)%2 != 0 {
		return nil, fmt.Errorf("a %s, not the hash that keeps the window", ty)
	}
	h := make(map[string]string, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		f, _ := pairs[i].(string)
		val, _ := pairs[i+1].(string)
		h[f] = val
	}
	return h, nil
}

// field reads a hash's number; an absent field is 0, as the scripts'
// int reads it.
func field(h map[string]string, name string) (int64, error) {
	v, ok := h[name]
	if !ok {
		return 0, nil
	}
	n, err := parseNum(v)
	if err != nil {
		return 0, fmt.Errorf("field %s = %q: %w", name, v, err)
	}
	return n, nil
}

// parseNum reads a number as the scripts store it: Redis 7.0 prints a
// double with "%.17g", later versions in the shortest form, either of
// which may carry an exponent; every value is an integer below 2^53.
func parseNum(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != float64(int64(f)) {
		return 0, fmt.Errorf("not an integer: %q", s)
	}
	return int64(f), nil
}

// intOf is an integer or a number in a string, as TIME replies.
func intOf(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("%T", v)
}
