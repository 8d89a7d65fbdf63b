package webhook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluice-rl/sluice/inject"
	"github.com/sluice-rl/sluice/inject/injecttest"
	"github.com/sluice-rl/sluice/webhook"
)

// server is a webhook serving over real TLS on loopback.
type server struct {
	url, admin        string
	certFile, keyFile string
	pool              *x509.CertPool
}

func start(t *testing.T) *server {
	t.Helper()
	dir := t.TempDir()
	s := &server{certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key"), pool: x509.NewCertPool()}
	s.writeCert(t, 1)
	cert, err := webhook.LoadCertificate(s.certFile, s.keyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.url, s.admin = "https://"+ln.Addr().String(), "http://"+aln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- webhook.Serve(ctx, ln, aln, cert, inject.DefaultSettings(), slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// writeCert writes a new certificate with the given serial number over
// the server's files, trusted by the client pool from then on.
func (s *server) writeCert(t *testing.T, serial int64) {
	t.Helper()
	injecttest.WriteCert(t, s.certFile, s.keyFile, serial, s.pool)
}

// client makes a fresh connection each time, so each request is a new
// handshake, and reports the serial number of the certificate it got.
func (s *server) post(t *testing.T, contentType string, body []byte) (*http.Response, []byte, int64) {
	t.Helper()
	var serial int64
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: s.pool,
		VerifyConnection: func(cs tls.ConnectionState) error {
			serial = cs.PeerCertificates[0].SerialNumber.Int64()
			return nil
		}}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Post(s.url+"/inject", contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b, serial
}

func (s *server) review(t *testing.T, review []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	resp, body, _ := s.post(t, "application/json", review)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("the answer is no AdmissionReview: %v: %s", err, body)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("answer %s", body)
	}
	return out.Response
}

// reviewOf wraps a pod (YAML) in a CREATE review, as the API server sends it.
func reviewOf(t *testing.T, podYAML string) []byte {
	t.Helper()
	pod, err := yaml.YAMLToJSON([]byte(podYAML))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1",
		"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},
		"namespace":"default","operation":"CREATE","userInfo":{},"object":%s}}`, pod))
}

// injected is `sluice inject`'s output for a pod, as JSON.
func injected(t *testing.T, podJSON []byte) []byte {
	t.Helper()
	y, err := yaml.JSONToYAML(podJSON)
	if err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if code := inject.Main(nil, bytes.NewReader(y), &out, &errs); code != 0 {
		t.Fatalf("sluice inject: %s", errs.String())
	}
	j, err := yaml.YAMLToJSON(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func sameJSON(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("the patched pod differs from sluice inject's:\n got %s\nwant %s", got, want)
	}
}

const optedIn = `apiVersion: v1
kind: Pod
metadata:
  name: p
  labels: {sluice.io/inject: "true"}
spec:
  containers: [{name: app, image: app}]
`

// The patch the webhook answers, applied to the pod it was sent, gives
// exactly what sluice inject makes of that pod.
func TestPatchIsInjectsResult(t *testing.T) {
	s := start(t)
	fixture, err := os.ReadFile("testdata/review-deployment-pod.json")
	if err != nil {
		t.Fatal(err)
	}
	tokenSecret := strings.Replace(optedIn, "  labels:", "  annotations: {sluice.io/http-token-secret: gw-token}\n  labels:", 1)
	for name, review := range map[string][]byte{"fixture": fixture, "minimal pod": reviewOf(t, optedIn), "token from a Secret": reviewOf(t, tokenSecret)} {
		t.Run(name, func(t *testing.T) {
			var in admissionv1.AdmissionReview
			if err := json.Unmarshal(review, &in); err != nil {
				t.Fatal(err)
			}
			resp := s.review(t, review)
			if !resp.Allowed || resp.UID != in.Request.UID || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
				t.Fatalf("response %+v", resp)
			}
			p, err := jsonpatch.DecodePatch(resp.Patch)
			if err != nil {
				t.Fatalf("the patch is no JSON patch: %v: %s", err, resp.Patch)
			}
			patched, err := p.Apply(in.Request.Object.Raw)
			if err != nil {
				t.Fatalf("the patch does not apply: %v: %s", err, resp.Patch)
			}
			sameJSON(t, patched, injected(t, in.Request.Object.Raw))
			if name == "token from a Secret" {
				want := `{"name":"SLUICE_HTTP_TOKEN","valueFrom":{"secretKeyRef":{"name":"gw-token","key":"http-token"}}}`
				if !strings.Contains(string(patched), want) {
					t.Errorf("the patched pod lacks %s: %s", want, patched)
				}
			}
			if name == "fixture" {
				for _, want := range []string{`"futureField":{"fromANewerCluster":true}`, `"--on-upstream-failure=deny"`, `"name":"migrate"`} {
					if !strings.Contains(string(patched), want) {
						t.Errorf("the patched pod lacks %s: %s", want, patched)
					}
				}
			}
		})
	}
}

func TestSkippedAndDenied(t *testing.T) {
	s := start(t)
	tests := []struct {
		name, pod string
		allowed   bool
		want      string // in the warning or the denial's message
	}{
		{"opted out", strings.Replace(optedIn, `"true"`, `"false"`, 1), true, ""},
		{"already injected", strings.Replace(optedIn, "  labels:", "  annotations: {sluice.io/status: '{}'}\n  labels:", 1), true, ""},
		{"has a sluice container", strings.Replace(optedIn, "name: app", "name: sluice", 1), true,
			"already has a container named sluice"},
		{"bad annotation", strings.Replace(optedIn, "  labels:", "  annotations: {sluice.io/on-upstream-failure: sometimes}\n  labels:", 1), false,
			"annotation sluice.io/on-upstream-failure"},
		// Issue 28: the token was written into the pod spec.
		{"HTTP token as a value", strings.Replace(optedIn, "  labels:", "  annotations: {sluice.io/http-token: s3cret}\n  labels:", 1), false,
			"annotation sluice.io/http-token: the token would be written into the pod spec: put it in a Secret and give --http-token-secret NAME"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := s.review(t, reviewOf(t, tt.pod))
			if resp.Allowed != tt.allowed || resp.Patch != nil || resp.UID != "u-1" {
				t.Fatalf("response %+v", resp)
			}
			got := strings.Join(resp.Warnings, " ")
			if resp.Result != nil {
				got += resp.Result.Message
				if resp.Result.Code != http.StatusBadRequest {
					t.Errorf("denial code %d", resp.Result.Code)
				}
			}
			if !strings.Contains(got, tt.want) || tt.want == "" && got != "" {
				t.Errorf("message %q; want %q", got, tt.want)
			}
		})
	}
	// A review of anything but a pod being created is allowed untouched.
	update := bytes.Replace(reviewOf(t, optedIn), []byte(`"CREATE"`), []byte(`"UPDATE"`), 1)
	if resp := s.review(t, update); !resp.Allowed || resp.Patch != nil {
		t.Errorf("UPDATE: %+v", resp)
	}
}

func TestUnreadableReviews(t *testing.T) {
	s := start(t)
	good := reviewOf(t, optedIn)
	tests := []struct {
		name, contentType string
		body              []byte
		status            int
		want              string
	}{
		{"not JSON", "application/json", []byte("{apiVersion"), 400, "not an AdmissionReview"},
		{"wrong version", "application/json", bytes.Replace(good, []byte("admission.k8s.io/v1"), []byte("admission.k8s.io/v1beta1"), 1), 400,
			`apiVersion "admission.k8s.io/v1beta1"`},
		{"wrong kind", "application/json", bytes.Replace(good, []byte(`"kind":"AdmissionReview"`), []byte(`"kind":"Review"`), 1), 400, `kind "Review"`},
		{"no request", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), 400, "has no request"},
		{"oversized", "application/json", append(good, bytes.Repeat([]byte(" "), webhook.DefaultMaxBody)...), 413, "review larger than"},
		{"not JSON content", "text/plain", good, 415, "want application/json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body, _ := s.post(t, tt.contentType, tt.body)
			if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.want) {
				t.Errorf("status %d %q; want %d %q", resp.StatusCode, body, tt.status, tt.want)
			}
		})
	}
	// A pod the injector cannot read is denied, with the reason.
	resp, body, _ := s.post(t, "application/json", bytes.Replace(good, []byte(`"containers":[`), []byte(`"containers":7,"x":[`), 1))
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"allowed":false`) || !strings.Contains(string(body), "reading the pod") {
		t.Errorf("unreadable pod: %d %s", resp.StatusCode, body)
	}
	metrics := fetch(t, s.admin+"/metrics")
	for _, want := range []string{`sluice_webhook_reviews_total{outcome="invalid"} 6`, `sluice_webhook_reviews_total{outcome="denied"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grep(metrics, "sluice_webhook"))
		}
	}
}

// A renewed certificate, written over the old files, is served from the
// next handshake on, without a restart.
func TestCertificateRotation(t *testing.T) {
	s := start(t)
	if _, _, serial := s.post(t, "application/json", reviewOf(t, optedIn)); serial != 1 {
		t.Fatalf("first certificate's serial %d", serial)
	}
	s.writeCert(t, 2)
	if _, _, serial := s.post(t, "application/json", reviewOf(t, optedIn)); serial != 2 {
		t.Errorf("after renewal the serial is %d; want 2", serial)
	}
	// A half-written pair keeps the last good one in service.
	if err := os.WriteFile(s.keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if resp, _, serial := s.post(t, "application/json", reviewOf(t, optedIn)); serial != 2 || resp.StatusCode != 200 {
		t.Errorf("with a broken key file: serial %d, status %d", serial, resp.StatusCode)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	s := start(t)
	s.review(t, reviewOf(t, optedIn))
	if got := fetch(t, s.admin+"/healthz"); got != "ok\n" {
		t.Errorf("/healthz %q", got)
	}
	if m := fetch(t, s.admin+"/metrics"); !strings.Contains(m, `sluice_webhook_reviews_total{outcome="injected"} 1`) ||
		!strings.Contains(m, "sluice_webhook_review_duration_seconds_count 1") {
		t.Errorf("/metrics:\n%s", grep(m, "sluice_webhook"))
	}
}

func TestMainFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "--tls-cert and --tls-key are required"},
		{[]string{"--tls-cert=a", "--tls-key=b", "--sidecar-upstream=redis://x"}, "--sidecar-upstream is not an injector setting"},
		{[]string{"--tls-cert=a", "--tls-key=b", "--sidecar-memory-limit=lots"}, "invalid --memory-limit"},
		{[]string{"--tls-cert=a", "--tls-key=b", "--sidecar-http-token=s3cret"}, "--sidecar-http-token is not an injector setting: the token would be written into the pod spec"},
		{[]string{"--tls-cert=a", "--tls-key=b", "--sidecar-memory-limit=32Mi"}, "invalid --memory-limit: 32 MiB is too small: the sidecar needs at least 48 MiB"},
		{[]string{"--tls-cert=/nonexistent", "--tls-key=/nonexistent", "--listen=127.0.0.1:0"}, "webhook: certificate"},
		{[]string{"--tls-cert=a", "--tls-key=b", "--log-format=yaml"}, `invalid --log-format "yaml": must be json or text`},
		// The log's format: JSON by default, text when asked.
		{[]string{"--tls-cert=/nonexistent", "--tls-key=/nonexistent", "--listen=127.0.0.1:0"}, `"msg":"sluice webhook stopped"`},
		{[]string{"--tls-cert=/nonexistent", "--tls-key=/nonexistent", "--listen=127.0.0.1:0", "--log-format=text"}, `level=ERROR msg="sluice webhook stopped"`},
	}
	for _, tt := range tests {
		var out, errs bytes.Buffer
		code := webhook.Main(context.Background(), tt.args, &out, &errs)
		if code == 0 || !strings.Contains(errs.String(), tt.want) {
			t.Errorf("%v: exit %d, %q; want %q", tt.args, code, errs.String(), tt.want)
		}
	}
	var out, errs bytes.Buffer
	if code := webhook.Main(context.Background(), []string{"--help"}, &out, &errs); code != 0 ||
		!strings.Contains(out.String(), "--sidecar-on-upstream-failure") {
		t.Errorf("--help: %d\n%s", code, out.String())
	}
}

func fetch(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grep(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
