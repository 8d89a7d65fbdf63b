package simulate

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/policy"
	"github.com/sluice-rl/sluice/record"
	"github.com/sluice-rl/sluice/service"
)

const recorded = `policies:
  api:
    algorithm: token_bucket
    rate: 4
    period: 1s
    capacity: 3
  login:
    algorithm: sliding_log
    limit: 3
    period: 1m
  plan:
    limits:
      - {name: burst, algorithm: gcra, rate: 4, period: 1s, burst: 2}
      - {name: day, algorithm: sliding_window, limit: 12, period: 1h, precision: 60}
  trial:
    algorithm: fixed_window
    limit: 1
    period: 1s
    shadow: true
`

// tighter halves api and login, and enforces trial.
const tighter = `policies:
  api:
    algorithm: token_bucket
    rate: 2
    period: 1s
    capacity: 2
  login:
    algorithm: sliding_log
    limit: 1
    period: 1m
  plan:
    limits:
      - {name: burst, algorithm: gcra, rate: 4, period: 1s, burst: 2}
      - {name: day, algorithm: sliding_window, limit: 12, period: 1h, precision: 60}
  trial:
    algorithm: fixed_window
    limit: 1
    period: 1s
`

func load(t *testing.T, yaml string) *policy.Set {
	t.Helper()
	set, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// traffic is a sidecar's: requests by policy and inline, on a clock that
// moves 37ms a request, so that windows end and buckets refill during it.
type traffic struct {
	policy string
	key    string
	cost   int64
}

var requests = func() []traffic {
	var ts []traffic
	for i := range 400 {
		k := []string{"a", "b", "c"}[i%3]
		switch i % 5 {
		case 0, 1:
			ts = append(ts, traffic{"api", k, int64(1 + i%2)})
		case 2:
			ts = append(ts, traffic{"login", k, 1})
		case 3:
			ts = append(ts, traffic{"plan", k, 1})
		case 4:
			ts = append(ts, traffic{"trial", k, 1})
		}
		if i%7 == 0 {
			ts = append(ts, traffic{"", "inline-" + k, 1})
		}
	}
	return ts
}()

var inline = engine.Limit{Algorithm: engine.LeakyBucket, Rate: 3, Period: time.Second, Burst: 2}

// live decides the traffic through a real service on the memory store
// under yaml, recording to path when it is set, and returns how many
// requests each policy's limits refused.
func live(t *testing.T, yaml, path string) map[string]int {
	t.Helper()
	now := time.Unix(1_800_000_000, 0)
	mem, err := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	cfg := service.Config{Store: mem, Policies: load(t, yaml), StoreName: "memory"}
	var w *record.Writer
	if path != "" {
		if w, err = record.New(record.Config{Path: path}); err != nil {
			t.Fatal(err)
		}
		cfg.Recorder = w
	}
	svc, err := service.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]int{}
	b := svc.NewBatch().From("resp")
	for _, r := range requests {
		req := service.Request{ByPolicy: r.policy != "", Policy: r.policy, Key: r.key, Cost: r.cost}
		if r.policy == "" {
			req.Limit = inline
		}
		if _, err := b.Add(req); err != nil {
			t.Fatal(err)
		}
		svc.DecideWait(b)
		if d, err := b.Result(0); err != nil {
			t.Fatal(err)
		} else if !d.Allowed || b.Shadowed(0) {
			refused[r.policy]++
		}
		b.Clear()
		now = now.Add(37 * time.Millisecond)
	}
	if w != nil {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return refused
}

func replay(t *testing.T, path, yaml string) *Report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	es, sample, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(Config{Policies: load(t, yaml)}, es, sample)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func policyOf(t *testing.T, r *Report, name string) Policy {
	t.Helper()
	for _, p := range r.Policies {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no policy %q in the report", name)
	return Policy{}
}

// Replayed against the configuration it was recorded under, a recording
// of the memory store reproduces every decision; against a tighter one,
// it refuses what a live run of the tighter configuration refuses.
func TestReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	was := live(t, recorded, path)
	if was["api"] == 0 || was["login"] == 0 || was["trial"] == 0 {
		t.Fatalf("the traffic refuses too little to test with: %v", was)
	}

	same := replay(t, path, recorded)
	if same.Entries != len(requests) || same.Replayed != same.Entries || same.Reproduced != same.Entries {
		t.Errorf("same configuration: %d entries, %d replayed, %d reproduced; want all %d", same.Entries, same.Replayed, same.Reproduced, len(requests))
	}
	if same.Changed != 0 || len(same.Differences) != 0 || len(same.Keys) != 0 {
		t.Errorf("same configuration: %d decisions differ: %+v", same.Changed, same.Differences)
	}
	for name, n := range was {
		if name == "" {
			name = "inline"
		}
		if p := policyOf(t, same, name); p.Old.Refused != n || p.New.Refused != n {
			t.Errorf("%s: refused %d old, %d new; the live run refused %d", name, p.Old.Refused, p.New.Refused, n)
		}
	}

	now := live(t, tighter, "")
	tight := replay(t, path, tighter)
	if tight.Reproduced != tight.Entries {
		t.Errorf("tighter: %d of %d recorded decisions reproduced under their own limits", tight.Reproduced, tight.Entries)
	}
	for _, name := range []string{"api", "login", "plan", "trial", "inline"} {
		p := policyOf(t, tight, name)
		want := now[strings.TrimSuffix(name, "inline")]
		if p.New.Refused != want {
			t.Errorf("%s: the replay refuses %d, the tighter configuration live %d", name, p.New.Refused, want)
		}
		if name == "trial" && (p.New.Shadowed != 0 || p.Old.Shadowed != p.Old.Refused) {
			t.Errorf("trial: shadowed %d of %d refused before, %d after; want all before, none after", p.Old.Shadowed, p.Old.Refused, p.New.Shadowed)
		}
	}
	api := policyOf(t, tight, "api")
	if api.NewlyRefused == 0 || api.FirstNewlyRefused == nil || api.Changed < api.NewlyRefused {
		t.Errorf("api: %+v", api)
	}
	if tight.Changed == 0 || len(tight.Differences) != 20 || len(tight.Keys) == 0 || tight.Keys[0].NewRefused <= tight.Keys[0].OldRefused {
		t.Errorf("tighter: %d changed, %d listed, keys %+v", tight.Changed, len(tight.Differences), tight.Keys)
	}
	if p := policyOf(t, tight, "plan"); p.Changed != 0 {
		t.Errorf("plan, unchanged, has %d decisions that differ", p.Changed)
	}
}

// A policy the proposed configuration drops is an error for each of its
// requests, with the reason.
func TestReplayMissingPolicy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	live(t, recorded, path)
	rep := replay(t, path, strings.Replace(recorded, "  login:", "  signin:", 1))
	p := policyOf(t, rep, "login")
	if p.New.Errors != p.New.Requests || p.Error != "no policy login in the proposed configuration" {
		t.Errorf("login: %+v", p)
	}
}

// A gateway's requests meet the proposed configuration's rules by label:
// a rule that is there decides by its new limit, one that is gone admits,
// and a limit Envoy sent keeps its recorded one.
func TestReplayRules(t *testing.T) {
	hour := engine.Limit{Algorithm: engine.FixedWindow, Rate: 5, Period: time.Hour}
	var es []record.Entry
	for i := range 8 {
		for _, label := range []string{"shop.client_ip", "shop.gone", "shop.envoy_limit"} {
			es = append(es, record.Entry{Time: 1_800_000_000_000_000 + int64(i), Door: "grpc", Rule: label, Key: label + "|k", Cost: 1, Charge: true,
				Limit: hour, Allowed: i < 5, Remaining: 4 - int64(i)})
		}
	}
	rep, err := Run(Config{Rules: map[string]Rule{"shop.client_ip": {Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Hour}}}}, es, record.Sampling{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Reproduced != len(es) {
		t.Errorf("%d of %d reproduced", rep.Reproduced, len(es))
	}
	for _, tc := range []struct {
		label          string
		refused, newly int
	}{{"shop.client_ip", 6, 3}, {"shop.gone", 0, 0}, {"shop.envoy_limit", 3, 0}} {
		if p := policyOf(t, rep, tc.label); p.New.Refused != tc.refused || p.NewlyRefused != tc.newly || p.Old.Refused != 3 {
			t.Errorf("%s: %+v; want %d refused, %d newly", tc.label, p, tc.refused, tc.newly)
		}
	}
}

func TestParseCondition(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Condition
		err  string
	}{
		{in: "refused>5%", want: Condition{Metric: "refused", Share: true, Limit: 5}},
		{in: "newly_refused[api]>0", want: Condition{Metric: "newly_refused", Policy: "api"}},
		{in: "changed>12.5", want: Condition{Metric: "changed", Limit: 12.5}},
		{in: "refused", err: "want METRIC>N"},
		{in: "allowed>1", err: "must be refused, newly_refused or changed"},
		{in: "refused[]>1", err: "named in brackets"},
		{in: "refused>101%", err: "percentage from 0 to 100"},
		{in: "refused>x", err: "must be a number"},
		{in: "refused>NaN", err: "must be a number"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			c, err := ParseCondition(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %v, want %q", err, tc.err)
				}
				return
			}
			c.text = ""
			if err != nil || c != tc.want {
				t.Errorf("%+v, %v; want %+v", c, err, tc.want)
			}
		})
	}
}

// The command: a table by default, JSON with --json, exit 1 when a
// --fail-if holds, and exit 2 with nothing replayed for a broken
// configuration or recording.
func TestMain(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rec.jsonl")
	live(t, recorded, path)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	same, tight := write("same.yaml", recorded), write("tight.yaml", tighter)
	broken := write("broken.yaml", strings.Replace(recorded, "capacity: 3", "capacity: -3", 1))
	badRec := write("bad.jsonl", `{"t":1,"policy":"api","key":"k","allowed":true}`+"\n"+`{"t":2,"policy":"api"}`+"\n")
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		out, errs string
		noOut     bool
	}{
		{"table", []string{"--policies", same, path}, 0, "decisions that differ: 0", "", false},
		{"fail-if holds", []string{"--policies", tight, "--fail-if", "refused>10%", "--fail-if", "changed>100%", path}, 1,
			"KEYS THAT CHANGE MOST", "--fail-if refused>10% holds", false},
		{"fail-if does not hold", []string{"--policies", same, "--fail-if", "newly_refused>0", path}, 0, "", "", false},
		{"json", []string{"--policies", tight, "--json", path}, 0, `"newly_refused":`, "", false},
		{"broken configuration", []string{"--policies", broken, path}, 2, "", "the proposed configuration is not valid, nothing was replayed: ", true},
		{"broken recording", []string{"--policies", same, badRec}, 2, "", `nothing was replayed: ` + badRec + `: recording line 2: no "key" or "key_hash"`, true},
		{"no configuration", []string{path}, 2, "", "--policies FILE or --rls-config DIR is required", true},
		{"bad fail-if", []string{"--policies", same, "--fail-if", "refused", path}, 2, "", `"refused": want METRIC>N`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			code := Main(tc.args, nil, &out, &errs)
			if code != tc.code || !strings.Contains(out.String(), tc.out) || !strings.Contains(errs.String(), tc.errs) || tc.noOut && out.Len() > 0 {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out.String(), errs.String())
			}
			if tc.name == "json" {
				var r Report
				if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Entries != len(requests) || r.NewlyRefused == 0 {
					t.Errorf("JSON %v: %+v", err, r)
				}
			}
		})
	}
}
