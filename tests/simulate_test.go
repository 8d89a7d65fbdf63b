package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/metricstest"
	"github.com/sluice-rl/sluice/record"
	"github.com/sluice-rl/sluice/simulate"
)

// Hour-long limits but burst's: what a run of the binary refuses under
// them does not depend on when each request came, only on each key's
// order, so that a second binary asked the same requests later refuses
// the same ones. burst refills while the load runs: its decisions are
// reproduced only if the replay decides each at the time the binary did.
const (
	simPolicies = `policies:
  api:
    algorithm: token_bucket
    rate: 1
    period: 1h
    capacity: 8
  login:
    algorithm: sliding_log
    limit: 6
    period: 1h
  plan:
    limits:
      - {name: burst, algorithm: gcra, rate: 1, period: 1h, burst: 5}
      - {name: hour, algorithm: sliding_window, limit: 10, period: 1h, precision: 60}
  burst:
    algorithm: token_bucket
    rate: 5
    period: 1s
    capacity: 2
`
	simShop = `domain: shop
descriptors:
  - key: client_ip
    rate_limit: {unit: hour, requests_per_unit: 5}
`
)

// A recording made by the binary under load through its three doors,
// replayed by `sluice simulate`: against the configuration it was made
// under, every decision is reproduced; against a tighter one, each policy
// refuses what a second binary running the tighter configuration refuses
// when asked the same requests, and a tighter gateway rule (--rls-config)
// refuses what a second binary with that rule refuses; against a broken
// configuration, nothing is replayed.
func TestSimulateRecording(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	same := write("policies.yaml", simPolicies)
	tight := write("tight.yaml", strings.NewReplacer("capacity: 8", "capacity: 4", "limit: 6", "limit: 3").Replace(simPolicies))
	broken := write("broken.yaml", strings.Replace(simPolicies, "limit: 6", "limit: six", 1))
	rec := filepath.Join(dir, "rec.jsonl")
	s := startDoors(t, writeRLS(t, map[string]string{"shop.yaml": simShop}), "--policies", same, "--record", rec, "--record-keys", "clear")

	// Three workers a door, each with keys of its own, 80 requests each,
	// all at once: 10 a key and policy through RESP and HTTP.
	const workers, each = 3, 80
	policies := []string{"api", "login", "plan", "burst"}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: workers})
	defer rdb.Close()
	grpcc, _ := rlsClient(t, s.GRPC)
	httpc := &http.Client{Timeout: 5 * time.Second}
	ctx := ctxT(t)
	errs := make(chan error, 3*workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("resp-%d-%d", w, i%2)
				if _, err := rdb.Do(ctx, "RL.ALLOW", policies[i%4], key).Result(); err != nil {
					errs <- fmt.Errorf("resp: %w", err)
					return
				}
			}
		})
		wg.Go(func() {
			for i := range each {
				url := fmt.Sprintf("http://%s/v1/check?policy=%s&key=http-%d-%d", s.HTTP, policies[i%4], w, i%2)
				resp, err := httpc.Get(url)
				if err != nil {
					errs <- fmt.Errorf("http: %w", err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
					errs <- fmt.Errorf("http: %s", resp.Status)
					return
				}
			}
		})
		wg.Go(func() {
			for i := range each {
				d := desc("client_ip", fmt.Sprintf("grpc-%d-%d", w, i%3))
				if _, err := grpcc.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{d}}); err != nil {
					errs <- fmt.Errorf("grpc: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every decision reaches the file (none dropped at this load), as
	// the metrics and INFO say.
	total := float64(3 * workers * each)
	deadline := time.Now().Add(10 * time.Second)
	for {
		fams := metricstest.Scrape(t, "http://"+s.Admin+"/metrics")
		got, _ := metricstest.Sample(fams, "sluice_recording_entries_total", map[string]string{"outcome": "recorded"})
		dropped, _ := metricstest.Sample(fams, "sluice_recording_entries_total", map[string]string{"outcome": "dropped"})
		if got+dropped == total {
			if dropped != 0 {
				t.Errorf("%v of %v decisions dropped from the recording", dropped, total)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice_recording_entries_total: %v recorded, %v dropped, of %v decisions", got, dropped, total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if info, err := rdb.Info(ctx, "recording").Result(); err != nil || !strings.Contains(info, fmt.Sprintf("recorded_decisions:%d\r\n", int(total))) {
		t.Errorf("INFO recording: %v\n%s", err, info)
	}
	s.stop(t) // the recording is whole once the sidecar has stopped

	entries, _ := readRecording(t, rec)
	doors := map[string]int{}
	for _, e := range entries {
		doors[e.Door]++
	}
	if want := (map[string]int{"resp": workers * each, "http": workers * each, "grpc": workers * each}); fmt.Sprint(doors) != fmt.Sprint(want) {
		t.Fatalf("recorded by door %v, want %v", doors, want)
	}

	report := func(policies string) simulate.Report {
		t.Helper()
		code, out, errOut := runCLI(t, nil, "simulate", "--json", "--policies", policies, rec)
		if code != 0 {
			t.Fatalf("simulate --policies %s: exit %d\n%s", policies, code, errOut)
		}
		var r simulate.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("simulate --json: %v\n%s", err, out)
		}
		return r
	}
	r := report(same)
	if r.Entries != len(entries) || r.Replayed != r.Entries || r.Reproduced != r.Entries || r.Changed != 0 {
		t.Errorf("against its own configuration: %d entries, %d replayed, %d reproduced, %d changed; want every one reproduced, none changed",
			r.Entries, r.Replayed, r.Reproduced, r.Changed)
	}
	for _, p := range r.Policies {
		if p.Old.Refused == 0 {
			t.Errorf("the load refused nothing of %s: the test proves little", p.Name)
		}
	}

	// The tighter configuration, live: a second binary asked the recorded
	// policy requests in the recorded order.
	live := startSluice(t, "--policies", tight)
	ldb := redis.NewClient(&redis.Options{Addr: live.Addr, Protocol: 2})
	defer ldb.Close()
	refused := map[string]int{}
	for _, e := range entries {
		if e.Policy == "" {
			continue
		}
		v, err := ldb.Do(ctx, "RL.ALLOW", e.Policy, e.Key).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if v[0] == 0 {
			refused[e.Policy]++
		}
	}
	r = report(tight)
	if r.Reproduced != r.Entries {
		t.Errorf("against the tighter configuration: %d of %d recorded decisions reproduced under their own limits", r.Reproduced, r.Entries)
	}
	for _, p := range r.Policies {
		if p.Name == "plan" || p.Name == "burst" || p.Name == "inline" || strings.Contains(p.Name, "client_ip") {
			if p.Changed != 0 {
				t.Errorf("%s is unchanged, yet %d decisions differ", p.Name, p.Changed)
			}
			continue
		}
		if p.New.Refused != refused[p.Name] || p.NewlyRefused == 0 {
			t.Errorf("%s: the replay refuses %d (%d newly), the tighter configuration live %d", p.Name, p.New.Refused, p.NewlyRefused, refused[p.Name])
		}
	}

	// A tighter gateway rule, met by its label: the same against a second
	// binary with the tighter rule, asked the same gRPC requests.
	tightRules := writeRLS(t, map[string]string{"shop.yaml": strings.Replace(simShop, "requests_per_unit: 5", "requests_per_unit: 2", 1)})
	lg := startDoors(t, tightRules)
	lc, _ := rlsClient(t, lg.GRPC)
	over := 0
	for w := range workers {
		for i := range each {
			d := desc("client_ip", fmt.Sprintf("grpc-%d-%d", w, i%3))
			if ask(t, lc, "shop", 0, d).OverallCode == pb.RateLimitResponse_OVER_LIMIT {
				over++
			}
		}
	}
	code, out, errOut := runCLI(t, nil, "simulate", "--json", "--rls-config", tightRules, rec)
	var rr simulate.Report
	if err := json.Unmarshal([]byte(out), &rr); code != 0 || err != nil {
		t.Fatalf("simulate --rls-config: exit %d, %v\n%s", code, err, errOut)
	}
	for _, p := range rr.Policies {
		switch {
		case p.Name == "shop.client_ip" && (p.New.Refused != over || p.NewlyRefused == 0):
			t.Errorf("%s: the replay refuses %d (%d newly), the tighter rule live %d", p.Name, p.New.Refused, p.NewlyRefused, over)
		case p.Name != "shop.client_ip" && p.Changed != 0:
			t.Errorf("%s: no policy changed, yet %d decisions differ", p.Name, p.Changed)
		}
	}
	if !slices.ContainsFunc(rr.Policies, func(p simulate.Policy) bool { return p.Name == "shop.client_ip" }) {
		t.Errorf("no rule shop.client_ip in the report: %+v", rr.Policies)
	}

	code, out, errOut = runCLI(t, nil, "simulate", "--policies", broken, rec)
	if code != 2 || out != "" || !strings.Contains(errOut, "the proposed configuration is not valid, nothing was replayed") {
		t.Errorf("a broken configuration: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// A sidecar asked for more decisions a second than --record-max-rate
// records fewer keys: the sample rises (INFO, the log, a header line in
// the file), and every key it records keeps a whole first part of its
// decisions, so that the recording, replayed against the configuration it
// was made under, reproduces every decision it holds.
func TestRecordingMaxRate(t *testing.T) {
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(policies, []byte(simPolicies), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(dir, "rec.jsonl")
	s := startSluice(t, "--policies", policies, "--record", rec, "--record-keys", "clear", "--record-max-rate", "2000")
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
	defer rdb.Close()
	ctx := ctxT(t)
	// 2,000 keys, 20 rounds, a round in pipelines of 500: tens of
	// thousands of decisions a second. Each key's eighth is its last
	// admitted (api: 8 an hour).
	const keys, rounds = 2_000, 20
	for range rounds {
		for from := 0; from < keys; from += 500 {
			pipe := rdb.Pipeline()
			for k := from; k < from+500; k++ {
				pipe.Do(ctx, "RL.ALLOW", "api", fmt.Sprintf("user:%d", k))
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	info, err := rdb.Info(ctx, "recording").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sample int
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "recording_sample:"); ok {
			fmt.Sscan(v, &sample)
		}
	}
	if sample < 2 {
		t.Fatalf("INFO recording: the sample did not rise\n%s", info)
	}
	s.stop(t)
	if !strings.Contains(s.logs.String(), "recording fewer keys") {
		t.Errorf("no log line said the sample rose:\n%s", s.logs.String())
	}

	entries, sampling := readRecording(t, rec)
	if sampling.Sample != sample || sampling.ByDecision {
		t.Errorf("the file says %+v, INFO one key in %d", sampling, sample)
	}
	perKey := map[string]int{}
	for _, e := range entries {
		perKey[e.Key]++
	}
	whole := 0
	for _, n := range perKey {
		if n == rounds {
			whole++
		}
	}
	t.Logf("one key in %d recorded: %d decisions of %d keys, %d keys with all %d", sample, len(entries), len(perKey), whole, rounds)
	if whole == 0 || len(entries) >= keys*rounds/2 {
		t.Errorf("%d decisions of %d keys recorded, %d keys with all %d: want some whole, far fewer than all",
			len(entries), len(perKey), whole, rounds)
	}
	code, out, errOut := runCLI(t, nil, "simulate", "--json", "--policies", policies, rec)
	if code != 0 {
		t.Fatalf("simulate: exit %d\n%s", code, errOut)
	}
	var r simulate.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("simulate --json: %v\n%s", err, out)
	}
	if r.Entries != len(entries) || r.Reproduced != r.Entries || r.Old.Refused == 0 || r.Sample != sample {
		t.Errorf("replayed: %d entries, %d reproduced, %d refused, one key in %d; want every one reproduced, some refused, one in %d",
			r.Entries, r.Reproduced, r.Old.Refused, r.Sample, sample)
	}
}

// readRecording is the recording at path, as sluice simulate reads it.
func readRecording(t *testing.T, path string) ([]record.Entry, record.Sampling) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, sampling, err := simulate.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	return entries, sampling
}
