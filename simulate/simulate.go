// Package simulate replays a recording of decisions (package record)
// against a proposed configuration, to see what a policy change would do
// to the traffic it would have met before it ships: per policy, the
// requests admitted and refused under the recorded configuration and
// under the proposed one, the keys that change most, when each first
// meets a refusal it did not before, and the decisions that differ.
//
// Each entry is decided twice, on two in-memory stores whose clock is the
// entry's recorded time: once by the limits it was recorded under (the
// old configuration), once by the proposed configuration's policy of the
// same name. The stores decide with engine.Step, as the sidecar's memory
// store and the Redis scripts do, so a recording made on the memory store
// by one sidecar, replayed against its own configuration, reproduces
// every decision it recorded (Report.Reproduced says so). A recording
// made on Redis by several sidecars replays their merged traffic on one
// clock (each entry at its sidecar's time, not Redis's), and a fail-open
// or deny-cache decision that never reached Redis is charged in the
// replay, so its old decisions are close, not identical.
package simulate

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/record"
)

// Config configures a replay. Zero values mean the documented defaults.
type Config struct {
	// Policies is the proposed policies: each recorded policy's requests
	// are decided by its policy of the same name. Nil keeps the recorded
	// policies' limits.
	Policies engine.Policies
	// Rules is the proposed gateway configuration, by rule label (the
	// descriptor's path, rlsconfig's Rule.Label): a request recorded
	// under a rule is decided by the rule of the same label; one whose
	// label the configuration lacks is admitted without a limit, as the
	// gateway door answers a descriptor no rule matches. Nil keeps the
	// recorded rules' limits; so does a limit Envoy sent with the request
	// (its label ends in .envoy_limit). At least one of Policies and
	// Rules is required.
	Rules map[string]Rule
	// Keys is how many of the keys that change most are listed. Zero
	// means 10.
	Keys int
	// Differences is how many differing decisions are listed (all are
	// counted). Zero means 20.
	Differences int
}

// Rule is one rule of a proposed gateway configuration.
type Rule struct {
	Limit      engine.Limit
	Unlimited  bool // every request admitted, none counted
	RefusesAll bool // requests_per_unit 0: every request refused, none counted
	Shadow     bool
}

// Counts are the decisions of one configuration.
type Counts struct {
	Requests int `json:"requests"`
	Admitted int `json:"admitted"`
	// Refused counts the requests refused, shadow mode's included (which
	// the client saw admitted): what enforcing would refuse.
	Refused  int `json:"refused"`
	Shadowed int `json:"shadowed"` // refused, answered as admitted (shadow mode)
	// Errors counts the requests the configuration could not decide: an
	// unknown policy, a concurrency policy, a cost above the capacity.
	Errors int `json:"errors"`
}

// Policy is one policy's (or inline rule's) replay.
type Policy struct {
	Name string `json:"name"`
	Old  Counts `json:"old"`
	New  Counts `json:"new"`
	// Changed counts the requests whose decision differs.
	Changed int `json:"changed"`
	// NewlyRefused counts the requests the old configuration admitted and
	// the new one refuses; FirstNewlyRefused is the first, when any.
	NewlyRefused      int        `json:"newly_refused"`
	FirstNewlyRefused *time.Time `json:"first_newly_refused,omitempty"`
	// Error is why the new configuration cannot decide this policy's
	// requests, when it cannot.
	Error string `json:"error,omitempty"`
}

// Key is one key whose decisions change.
type Key struct {
	Policy     string `json:"policy"`
	Key        string `json:"key"` // as recorded: the key, or its hash
	Requests   int    `json:"requests"`
	OldRefused int    `json:"old_refused"`
	NewRefused int    `json:"new_refused"`
	// FirstNewlyRefused is its first request the old configuration
	// admitted and the new one refuses.
	FirstNewlyRefused *time.Time `json:"first_newly_refused,omitempty"`
}

// Difference is one request decided differently.
type Difference struct {
	Time   time.Time `json:"time"`
	Policy string    `json:"policy"`
	Key    string    `json:"key"`
	Cost   int64     `json:"cost"`
	Old    string    `json:"old"` // admitted, refused, shadowed or error
	New    string    `json:"new"`
}

// Report is a replay's outcome, as JSON for CI and as a table (Table).
type Report struct {
	Entries int       `json:"entries"`
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	// Sampling is the recording's: with one key in Sample recorded, the
	// replay sees all of those keys' decisions, and its counts are theirs;
	// with one decision in Sample (a version 1 recording), it sees a part
	// of each key's, a state that was never the real one.
	record.Sampling
	// Replayed counts the entries that carry their limits and so were
	// decided again under the old configuration; Reproduced, those whose
	// replayed decision is the recorded one (allowed and remaining).
	Replayed     int          `json:"replayed"`
	Reproduced   int          `json:"reproduced"`
	Old          Counts       `json:"old"`
	New          Counts       `json:"new"`
	Changed      int          `json:"changed"`
	NewlyRefused int          `json:"newly_refused"`
	Policies     []Policy     `json:"policies"`
	Keys         []Key        `json:"keys"`
	Differences  []Difference `json:"differences"`
}

// outcome is one configuration's answer to one request.
type outcome uint8

const (
	admitted outcome = iota
	refused
	shadowed
	failed
)

var outcomeNames = [...]string{"admitted", "refused", "shadowed", "error"}

func (o outcome) String() string { return outcomeNames[o] }

// refusal reports whether the limits refused, shadow mode or not.
func (o outcome) refusal() bool { return o == refused || o == shadowed }

func (c *Counts) add(o outcome) {
	c.Requests++
	switch o {
	case admitted:
		c.Admitted++
	case refused:
		c.Refused++
	case shadowed:
		c.Refused++
		c.Shadowed++
	case failed:
		c.Errors++
	}
}

// Read reads every entry of one of a recording's files, and the sample
// it was made at (1 when it has no header).
func Read(f io.Reader) ([]record.Entry, record.Sampling, error) {
	var es []record.Entry
	r := record.NewReader(f)
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			return es, r.Sampling(), nil
		}
		if err != nil {
			return nil, record.Sampling{}, err
		}
		es = append(es, e)
	}
}

// replayer is one configuration's store and clock.
type replayer struct {
	mem *memstore.Store
	now int64
	req [1]engine.Request
	res [1]engine.Result
	det [engine.MaxLimits]engine.Decision
}

func newReplayer(keys int) (*replayer, error) {
	r := &replayer{}
	var err error
	r.mem, err = memstore.New(memstore.Config{MaxKeys: max(keys, 1024), Now: func() time.Time { return time.UnixMicro(r.now) }})
	return r, err
}

// decide decides req at t: the limits' decision, or the request's error.
func (r *replayer) decide(t int64, req engine.Request) (engine.Decision, error) {
	r.now = t
	if req.Multi() {
		req.Detail = r.det[:len(req.Limits)]
	}
	r.req[0] = req
	if err := engine.Wait(r.mem, r.req[:], r.res[:], time.Time{}); err != nil {
		return engine.Decision{}, err
	}
	return r.res[0].Decision, r.res[0].Err
}

// Run replays entries (Read's, in recorded order) against cfg.Policies.
// It changes nothing outside itself.
func Run(cfg Config, entries []record.Entry, sampling record.Sampling) (*Report, error) {
	if cfg.Policies == nil && cfg.Rules == nil {
		return nil, errors.New("simulate: Config.Policies or Config.Rules is required")
	}
	cfg.Keys = cmp.Or(cfg.Keys, 10)
	cfg.Differences = cmp.Or(cfg.Differences, 20)
	// The clock may not go back between a key's decisions as recorded:
	// entries are replayed in time order, the file's order among equals.
	order := make([]int, len(entries))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(entries[a].Time, entries[b].Time) })

	old, err := newReplayer(2 * len(entries))
	if err != nil {
		return nil, err
	}
	nu, err := newReplayer(2 * len(entries))
	if err != nil {
		return nil, err
	}
	sampling.Sample = max(sampling.Sample, 1)
	rep := &Report{Entries: len(entries), Sampling: sampling, Policies: []Policy{}, Keys: []Key{}, Differences: []Difference{}}
	byPolicy := map[string]*Policy{}
	type keyID struct{ policy, key string }
	byKey := map[keyID]*Key{}
	for n, i := range order {
		e := &entries[i]
		if n == 0 {
			rep.From = time.UnixMicro(e.Time).UTC()
		}
		rep.To = time.UnixMicro(e.Time).UTC()
		name := e.Policy
		if name == "" {
			name = cmp.Or(e.Rule, "inline")
		}
		p := byPolicy[name]
		if p == nil {
			p = &Policy{Name: name}
			byPolicy[name] = p
		}
		o := rep.replayOld(old, e)
		nw, why := decideNew(nu, &cfg, e)
		if why != "" && p.Error == "" {
			p.Error = why
		}
		p.Old.add(o)
		p.New.add(nw)
		rep.Old.add(o)
		rep.New.add(nw)
		k := byKey[keyID{name, e.ID()}]
		if k == nil {
			k = &Key{Policy: name, Key: e.ID()}
			byKey[keyID{name, e.ID()}] = k
		}
		k.Requests++
		if o.refusal() {
			k.OldRefused++
		}
		if nw.refusal() {
			k.NewRefused++
		}
		if o == nw {
			continue
		}
		p.Changed++
		rep.Changed++
		at := time.UnixMicro(e.Time).UTC()
		if o == admitted && nw.refusal() {
			p.NewlyRefused++
			rep.NewlyRefused++
			if p.FirstNewlyRefused == nil {
				p.FirstNewlyRefused = &at
			}
			if k.FirstNewlyRefused == nil {
				k.FirstNewlyRefused = &at
			}
		}
		if len(rep.Differences) < cfg.Differences {
			rep.Differences = append(rep.Differences, Difference{Time: at, Policy: name, Key: e.ID(), Cost: e.Cost, Old: o.String(), New: nw.String()})
		}
	}
	for _, p := range byPolicy {
		rep.Policies = append(rep.Policies, *p)
	}
	slices.SortFunc(rep.Policies, func(a, b Policy) int { return cmp.Compare(a.Name, b.Name) })
	for _, k := range byKey {
		if k.OldRefused != k.NewRefused {
			rep.Keys = append(rep.Keys, *k)
		}
	}
	change := func(k Key) int { return max(k.NewRefused-k.OldRefused, k.OldRefused-k.NewRefused) }
	slices.SortFunc(rep.Keys, func(a, b Key) int {
		return cmp.Or(cmp.Compare(change(b), change(a)), cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Key, b.Key))
	})
	if len(rep.Keys) > cfg.Keys {
		rep.Keys = rep.Keys[:cfg.Keys]
	}
	return rep, nil
}

// replayOld decides e by the limits it was recorded under, and counts
// whether that reproduces the recorded decision. An entry without its
// limits (a user's own line) keeps its recorded decision.
func (rep *Report) replayOld(r *replayer, e *record.Entry) outcome {
	recorded := admitted
	if !e.Allowed {
		recorded = refused
		if e.Shadow {
			recorded = shadowed
		}
	}
	if e.Limit.Algorithm == 0 && len(e.Limits) == 0 {
		return recorded
	}
	req := request(e, e.Limit, e.Limits)
	d, err := r.decide(e.Time, req)
	rep.Replayed++
	if err == nil && d.Allowed == e.Allowed && d.Remaining == e.Remaining {
		rep.Reproduced++
	}
	if err != nil {
		return failed
	}
	return decided(d, e.Shadow)
}

// decideNew decides e under the proposed configuration; why says what
// the new configuration cannot decide.
func decideNew(r *replayer, cfg *Config, e *record.Entry) (outcome, string) {
	lim, lims, shadow := e.Limit, e.Limits, e.Shadow
	switch {
	case e.Policy != "" && cfg.Policies != nil:
		p, ok := cfg.Policies.Lookup(e.Policy)
		switch {
		case !ok:
			return failed, "no policy " + e.Policy + " in the proposed configuration"
		case p.Concurrency.Limit > 0:
			return failed, "policy " + e.Policy + " is a concurrency policy in the proposed configuration"
		}
		lim, lims, shadow = p.Limit, p.Limits, p.Shadow
	case e.Policy == "" && e.Rule != "" && cfg.Rules != nil && !strings.HasSuffix(e.Rule, envoyLimit):
		rule, ok := cfg.Rules[e.Rule]
		switch {
		case !ok || rule.Unlimited:
			return admitted, ""
		case rule.RefusesAll:
			return decided(engine.Decision{}, rule.Shadow), ""
		}
		lim, lims, shadow = rule.Limit, nil, rule.Shadow
	}
	if lim.Algorithm == 0 && len(lims) == 0 {
		return failed, "no limit recorded for " + cmp.Or(e.Policy, e.Rule, "an inline request")
	}
	d, err := r.decide(e.Time, request(e, lim, lims))
	if err != nil {
		return failed, err.Error()
	}
	return decided(d, shadow), ""
}

// envoyLimit ends the label of a limit Envoy sent with its request
// (rlsconfig.OverrideLabel): it is in no configuration.
const envoyLimit = ".envoy_limit"

// request is e's request under lim (or lims). A policy's requests are
// kept apart from another's, and from the inline ones, as the sidecar's
// prefixes keep them.
func request(e *record.Entry, lim engine.Limit, lims []engine.NamedLimit) engine.Request {
	key := e.ID()
	if e.Policy != "" {
		key = e.Policy + "\x00" + key
	}
	return engine.Request{Key: key, Limit: lim, Limits: lims, Cost: e.Cost, Peek: e.Peek, Charge: e.Charge}
}

func decided(d engine.Decision, shadow bool) outcome {
	switch {
	case d.Allowed:
		return admitted
	case shadow:
		return shadowed
	}
	return refused
}

// Condition is a --fail-if condition: a share or a count of the replayed
// requests, for one policy or all, above which a CI job fails.
type Condition struct {
	Metric string  // refused, newly_refused or changed
	Policy string  // empty: every policy
	Share  bool    // Limit is a percentage of the requests
	Limit  float64 // the most allowed
	text   string
}

func (c Condition) String() string { return c.text }

// ParseCondition reads METRIC[POLICY]>N or METRIC[POLICY]>N%: refused>5%,
// newly_refused[api]>0, changed>1%.
func ParseCondition(s string) (Condition, error) {
	c := Condition{text: s}
	name, limit, ok := strings.Cut(s, ">")
	if !ok {
		return c, fmt.Errorf("invalid --fail-if %q: want METRIC>N or METRIC>N%%, such as refused>5%% or newly_refused[api]>0", s)
	}
	if open := strings.IndexByte(name, '['); open >= 0 {
		if name[len(name)-1] != ']' || open == len(name)-2 {
			return c, fmt.Errorf("invalid --fail-if %q: a policy is named in brackets, such as refused[api]>5%%", s)
		}
		name, c.Policy = name[:open], name[open+1:len(name)-1]
	}
	switch name {
	case "refused", "newly_refused", "changed":
		c.Metric = name
	default:
		return c, fmt.Errorf("invalid --fail-if %q: the metric must be refused, newly_refused or changed", s)
	}
	if n := len(limit); n > 0 && limit[n-1] == '%' {
		c.Share, limit = true, limit[:n-1]
	}
	v, err := strconv.ParseFloat(limit, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || c.Share && v > 100 {
		return c, fmt.Errorf("invalid --fail-if %q: the bound must be a number, or a percentage from 0 to 100", s)
	}
	c.Limit = v
	return c, nil
}

// Check reports whether the report breaks c, and the value it found.
func (c Condition) Check(r *Report) (broken bool, value float64, err error) {
	var n, total int
	if c.Policy == "" {
		n, total = r.metric(c.Metric, r.New, r.Changed, r.NewlyRefused), r.New.Requests
	} else {
		i := slices.IndexFunc(r.Policies, func(p Policy) bool { return p.Name == c.Policy })
		if i < 0 {
			return false, 0, fmt.Errorf("--fail-if %s: the recording holds no request of policy %q", c.text, c.Policy)
		}
		p := &r.Policies[i]
		n, total = r.metric(c.Metric, p.New, p.Changed, p.NewlyRefused), p.New.Requests
	}
	value = float64(n)
	if c.Share {
		value = 0
		if total > 0 {
			value = 100 * float64(n) / float64(total)
		}
	}
	return value > c.Limit, value, nil
}

func (r *Report) metric(name string, nc Counts, changed, newly int) int {
	switch name {
	case "refused":
		return nc.Refused
	case "newly_refused":
		return newly
	}
	return changed
}
