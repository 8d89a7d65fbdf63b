package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluice-rl/sluice/deploy/internal/containertest"
	"github.com/sluice-rl/sluice/inject/injecttest"
	"github.com/sluice-rl/sluice/internal/redistest"
)

const (
	monitoringDir = "../monitoring"
	dashboardFile = "sluice-dashboard.json"
	rulesFile     = "sluice-rules.yaml"
	rulesTestFile = "sluice-rules.test.yaml"
)

var update = flag.Bool("update", false, "copy deploy/monitoring's files into the chart")

// The chart ships deploy/monitoring's dashboard and rules (a chart can
// read no file outside its directory): the copies are the same bytes.
func TestChartFilesAreTheMonitoringFiles(t *testing.T) {
	for _, f := range []string{dashboardFile, rulesFile} {
		want, err := os.ReadFile(filepath.Join(monitoringDir, f))
		if err != nil {
			t.Fatal(err)
		}
		copyPath := filepath.Join(chartDir, "files", f)
		if *update {
			if err := os.WriteFile(copyPath, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(copyPath); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not %s (run go generate ./deploy/helm): %v", copyPath, f, err)
		}
	}
}

// The chart's dashboard ConfigMap and PrometheusRule carry the files
// unchanged, labelled for Grafana's sidecar and the Prometheus Operator;
// the rules file is a PrometheusRule's spec as the operator's types read
// it, strictly.
func TestChartMonitoringObjects(t *testing.T) {
	r := render(t, readValues(t, "central-values.yaml", nil))
	dash := find[*corev1.ConfigMap](t, r, "v1/ConfigMap", "edge-sluice-dashboard")
	want, err := os.ReadFile(filepath.Join(monitoringDir, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	if dash.Data[dashboardFile] != string(want) || dash.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v, data equal to the file: %v", dash.Labels, dash.Data[dashboardFile] == string(want))
	}
	rule := find[*monitoringv1.PrometheusRule](t, r, "monitoring.coreos.com/v1/PrometheusRule", "edge-sluice")
	spec := rulesSpec(t)
	gotJSON, _ := json.Marshal(rule.Spec)
	wantJSON, _ := json.Marshal(spec)
	if !bytes.Equal(gotJSON, wantJSON) || rule.Labels["release"] != "prometheus" {
		t.Errorf("PrometheusRule labels %v, spec\n%s\nwant\n%s", rule.Labels, gotJSON, wantJSON)
	}
}

// rulesSpec is the rules file, decoded strictly as a PrometheusRule's spec.
func rulesSpec(t *testing.T) monitoringv1.PrometheusRuleSpec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	var spec monitoringv1.PrometheusRuleSpec
	if err := injecttest.Strict(j, &spec); err != nil {
		t.Fatalf("%s is not a PrometheusRule's spec: %v", rulesFile, err)
	}
	return spec
}

// promtool checks the rules and runs their unit tests. Under CI a missing
// promtool is a failure: scripts/test installs it.
func TestRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found: scripts/test installs Debian's prometheus package")
		}
		t.Skip("promtool not found (apt-get install prometheus)")
	}
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = monitoringDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// targetLabels are the labels Prometheus gives a target, not Sluice.
var targetLabels = map[string]bool{"namespace": true, "pod": true, "container": true, "job": true,
	"instance": true, "service": true, "endpoint": true}

// notSluice are series from elsewhere, which the binary need not export.
func notSluice(name string) bool { return name == "up" || strings.HasPrefix(name, "kube_") }

// series is what a scrape exports: each series name and its label names.
type series map[string]map[string]bool

// families reads the admin endpoint's /metrics at addr as Prometheus does.
func families(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	return fams
}

// scrape is every series the admin endpoint at addr exports.
func scrape(t *testing.T, addr string) series {
	t.Helper()
	s := series{}
	add := func(name string, labels map[string]bool) {
		if s[name] == nil {
			s[name] = map[string]bool{}
		}
		for l := range labels {
			s[name][l] = true
		}
	}
	for name, f := range families(t, addr) {
		for _, m := range f.Metric {
			labels := map[string]bool{}
			for _, l := range m.Label {
				labels[l.GetName()] = true
			}
			if m.Histogram != nil {
				add(name+"_sum", labels)
				add(name+"_count", labels)
				labels["le"] = true
				add(name+"_bucket", labels)
				continue
			}
			add(name, labels)
		}
	}
	return s
}

// checkExpr parses a PromQL expression and checks, against what the
// binary exports, every Sluice series it selects and every label it
// matches, groups or joins on.
func checkExpr(t *testing.T, where, expr string, have series) {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v\n%s", where, err, expr)
		return
	}
	// names are the series under a node.
	names := func(n parser.Node) []string {
		var out []string
		parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				out = append(out, vs.Name)
			}
			return nil
		})
		return out
	}
	// onSome: label is one of at least one Sluice series under n, or
	// the series there are none of Sluice's.
	onSome := func(n parser.Node, label string) bool {
		sluice := false
		for _, name := range names(n) {
			if notSluice(name) {
				continue
			}
			sluice = true
			if have[name][label] {
				return true
			}
		}
		return !sluice || targetLabels[label]
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			if n.Name == "" {
				t.Errorf("%s: a selector without a metric name: %s", where, n)
				return nil
			}
			if notSluice(n.Name) {
				return nil
			}
			labels, ok := have[n.Name]
			if !ok {
				t.Errorf("%s: %s is not exported by the binary\n%s", where, n.Name, expr)
				return nil
			}
			for _, m := range n.LabelMatchers {
				if m.Name != model.MetricNameLabel && !labels[m.Name] && !targetLabels[m.Name] {
					t.Errorf("%s: %s has no label %s\n%s", where, n.Name, m.Name, expr)
				}
			}
		case *parser.AggregateExpr:
			for _, l := range n.Grouping {
				if !onSome(n.Expr, l) {
					t.Errorf("%s: grouped by %s, which none of %v has\n%s", where, l, names(n.Expr), expr)
				}
			}
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				for _, l := range n.VectorMatching.MatchingLabels {
					if !onSome(n.LHS, l) || !onSome(n.RHS, l) {
						t.Errorf("%s: joined on %s, which a side lacks\n%s", where, l, expr)
					}
				}
			}
		}
		return nil
	})
}

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// grafanaVar is a dashboard variable in a query: $name or ${name}.
var grafanaVar = regexp.MustCompile(`\$\{?(\w+)\}?`)

// expand replaces the dashboard's variables as Grafana would, with a
// value of the right kind: a range for the rate intervals, a number for
// timeout, a regular expression for the label filters. An undefined
// variable is an error.
func expand(t *testing.T, where, q string, defined map[string]bool) string {
	t.Helper()
	return grafanaVar.ReplaceAllStringFunc(q, func(v string) string {
		name := grafanaVar.FindStringSubmatch(v)[1]
		switch {
		case name == "__rate_interval" || name == "__interval" || name == "__range":
			return "5m"
		case name == "timeout":
			return "0.1"
		case defined[name]:
			return ".*"
		}
		t.Errorf("%s: variable $%s is not defined in the dashboard", where, name)
		return ".*"
	})
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// checkDashboard checks every panel's and variable's query against have.
func checkDashboard(t *testing.T, d dashboard, have series) {
	t.Helper()
	defined := map[string]bool{}
	for _, v := range d.Templating.List {
		defined[v.Name] = true
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: %q is no label_values(selector, label)", v.Name, q.Query)
			continue
		}
		checkExpr(t, "variable "+v.Name, "count by ("+m[2]+") ("+expand(t, v.Name, m[1], defined)+")", have)
	}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: datasource %+v; want the dashboard's ${datasource}", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for i, q := range p.Targets {
				where := fmt.Sprintf("panel %q query %d", p.Title, i)
				checkExpr(t, where, expand(t, where, q.Expr, defined), have)
			}
		}
	}
	walk(d.Panels)
}

// checkRules checks every rule's expression against have.
func checkRules(t *testing.T, spec monitoringv1.PrometheusRuleSpec, have series) {
	t.Helper()
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			checkExpr(t, "alert "+r.Alert, r.Expr.String(), have)
		}
	}
}

// The panels and alerts this project promises (deploy/README.md), so
// that one removed is noticed.
var (
	wantPanels = []string{"Decisions by policy and outcome", "Decisions by path", "Refusal ratio by policy",
		"Upstream round trip p50 / p99 against the timeout", "Batch size", "Fallbacks", "Breaker",
		"Deny cache hit ratio", "Leases held by policy", "Lease events",
		"Grants held", "Grant units outstanding", "Decisions from grants by policy", "Grant events", "Live sidecars",
		"Local share of each limit", "Reservations open by policy", "Reservation events", "Reservations ending unsettled",
		"Reservation units over and under the estimates"}
	wantAlerts = []string{"SluiceBreakerOpen", "SluiceFallbacks", "SluiceErrorRate", "SluiceUpstreamErrors",
		"SluiceUpstreamNearTimeout", "SluiceSidecarNotReady", "SluiceConfigReloadFailing",
		"SluiceUpstreamFailoverLostWrites", "SluiceDurableUnreplicated", "SluiceReservationsUnsettled"}
)

func TestDashboardShape(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q", d.UID, d.Title)
	}
	titles := map[string]bool{}
	ids := map[int]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if titles[p.Title] || ids[p.ID] {
				t.Errorf("panel %q (id %d): title or id used twice", p.Title, p.ID)
			}
			titles[p.Title], ids[p.ID] = true, true
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, w := range wantPanels {
		if !titles[w] {
			t.Errorf("no panel %q", w)
		}
	}
	var alerts []string
	for _, g := range rulesSpec(t).Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
		}
	}
	for _, w := range wantAlerts {
		if !slices.Contains(alerts, w) {
			t.Errorf("no alert %s in %v", w, alerts)
		}
	}
}

// The central deployment of ci/central-values.yaml, as rendered, run as
// the binary on a real Redis: Envoy's rate limit service answers from
// the ConfigMap's rules and the HTTP check from its policies, with the
// Secret's token. Its decisions (allowed, refused, from the deny cache, a
// reservation settled, a lease taken and one refused, a request error,
// then decisions without Redis), with --grants, make every series exist;
// a scrape of its admin port must then hold every Sluice series, with
// every label, that the dashboard's panels and variables and the alerts
// query.
func TestCentralRunsAndExportsWhatTheDashboardQueries(t *testing.T) {
	r := render(t, readValues(t, "central-values.yaml", nil))
	dep := find[*appsv1.Deployment](t, r, "apps/v1/Deployment", "edge-sluice")
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	srv := redistest.Start(t)
	// RESP too, which the central container leaves on loopback; no delay
	// at the end, which only slows the test.
	p := containertest.Run(t, sluiceBin, r.objs, spec, c, []string{"--listen=127.0.0.1:6380", "--shutdown-delay=0s"}, func(env map[string]string) {
		env["SLUICE_UPSTREAM"] = "redis://" + srv.Addr
	})
	p.Started(t, nil)
	addr := func(port string) string { return "127.0.0.1:" + p.Ports[containertest.ContainerPort(c, port)] }
	for _, door := range []string{"grpc", "http", "6380"} {
		p.Listening(t, addr(door)).Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// gRPC: one request a minute for each remote_address.
	conn, err := grpc.NewClient(addr("grpc"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := pb.NewRateLimitServiceClient(conn)
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		resp, err := rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge",
			Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}}}})
		if err != nil || resp.OverallCode != want {
			t.Fatalf("ShouldRateLimit %d: %v, %v; want %v; output:\n%s", i, resp, err, want, p.Out.String())
		}
	}

	// The HTTP check, policy api (1 a minute, burst 1): with the Secret's
	// token allowed, then refused; without it, unauthorised.
	token := find[*corev1.Secret](t, r, "v1/Secret", "edge-sluice-http-token").StringData["token"]
	send := func(method, target, tok string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+addr("http")+target, nil)
		if tok != "" {
			req.Header.Set("X-Sluice-Token", tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	check := func(key, tok string) int {
		return send(http.MethodGet, "/v1/check?policy=api&key="+key, tok).StatusCode
	}
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests, http.StatusTooManyRequests} {
		if got := check("user:1", token); got != want {
			t.Errorf("check %d: %d; want %d", i, got, want)
		}
	}
	if got := check("user:1", ""); got != http.StatusUnauthorized {
		t.Errorf("check without the token: %d", got)
	}
	// A reservation by the HTTP check, settled: the reservations' series.
	res := send(http.MethodGet, "/v1/check?policy=api&key=user:2&reserve=1", token)
	id := res.Header.Get("X-Sluice-Reservation")
	if res.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("reserve 1: %d, id %q", res.StatusCode, id)
	}
	if res := send(http.MethodPost, "/v1/settle?id="+id+"&actual=1", token); res.StatusCode != http.StatusOK {
		t.Errorf("settle: %d", res.StatusCode)
	}

	// RESP: leases of the jobs policy (one at a time), and a request error.
	rdb := redis.NewClient(&redis.Options{Addr: addr("6380"), MaxRetries: -1, Protocol: 2})
	defer rdb.Close()
	for i, want := range []int64{1, 0} {
		reply, err := rdb.Do(ctx, "RL.ACQUIRE", "POLICY", "jobs", "user:1", fmt.Sprint("req-", i)).Slice()
		if err != nil || len(reply) != 5 || reply[0] != want {
			t.Fatalf("RL.ACQUIRE %d: %v, %v; want allowed %d", i, reply, err, want)
		}
	}
	if err := rdb.Do(ctx, "RL.ALLOW", "no-such-policy", "k").Err(); err == nil {
		t.Error("RL.ALLOW of an unknown policy: no error")
	}

	// Redis gone: decisions fall back to the pod's own memory.
	srv.Kill()
	fallbacks := false
	for i := 0; i < 20 && !fallbacks; i++ {
		check(fmt.Sprint("user:", 100+i), token)
		fallbacks = scrapeValue(t, addr("sluice-admin"), "sluice_fallbacks_total") > 0
	}
	if !fallbacks {
		t.Errorf("no fallback counted with Redis gone; output:\n%s", p.Out.String())
	}

	have := scrape(t, addr("sluice-admin"))
	checkDashboard(t, readDashboard(t), have)
	checkRules(t, rulesSpec(t), have)
}

// scrapeValue is the sum of one series' samples in a scrape.
func scrapeValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	var sum float64
	if f := families(t, addr)[name]; f != nil {
		for _, m := range f.Metric {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
