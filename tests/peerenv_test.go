package tests

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rls/peerstats"
	"github.com/sluice-rl/sluice/rlsconfig/xds/xdstest"
)

// istioConfig is the ConfigMap of Istio's sample (samples/ratelimit/
// rate-limit-service.yaml, in its comment).
const istioConfig = `domain: echo-ratelimit
descriptors:
  - key: PATH
    value: "/"
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: PATH
    rate_limit:
      unit: minute
      requests_per_unit: 100
`

// configMapDir lays files out as the kubelet mounts a ConfigMap: each
// name a link through ..data to a dated directory, which a swap replaces.
func configMapDir(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	dated := filepath.Join(dir, "..2026_12_01_00_00_00.000000001")
	if err := os.MkdirAll(dated, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dated, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(dated), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// startRatelimit runs the binary as /bin/ratelimit, by a link of that name,
// with exactly env as its environment, and waits until addr accepts.
func startRatelimit(t *testing.T, env map[string]string, addr string) *sluice {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(sluiceBin, bin); err != nil {
		t.Fatal(err)
	}
	return startWithEnv(t, bin, env, addr)
}

// startWithEnv runs bin with exactly env as its environment, and waits
// until addr accepts: Sluice as the peer, or the peer itself.
func startWithEnv(t *testing.T, bin string, env map[string]string, addr string) *sluice {
	t.Helper()
	s := &sluice{logs: &syncBuffer{}, done: make(chan error, 1)}
	s.cmd = exec.Command(bin)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		s.cmd.Env = append(s.cmd.Env, k+"="+env[k])
	}
	t.Logf("environment of /bin/ratelimit:\n  %s", strings.Join(s.cmd.Env, "\n  "))
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return s
		}
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("ratelimit exited (%v) before accepting on %s:\n%s", err, addr, s.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ratelimit does not accept on %s:\n%s", addr, s.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// port is a free loopback port, as the variables spell one.
func port(t *testing.T) string { return strconv.Itoa(redistest.FreePort(t)) }

// TestPeerEnvIstio: Sluice started as /bin/ratelimit with the environment
// of Istio's sample, unchanged but for Redis's address and the ports
// (the sample's 8080, 8081 and 6070 are the peer's defaults; a test takes
// free ones), answers Envoy's calls from the ConfigMap's file, plaintext on
// "::", and serves the peer's /healthcheck and /json.
func TestPeerEnvIstio(t *testing.T) {
	r := redistest.Start(t)
	root := t.TempDir()
	configMapDir(t, filepath.Join(root, "ratelimit", "config"), map[string]string{"config.yaml": istioConfig})
	grpcPort, httpPort, debugPort := port(t), port(t), port(t)
	env := map[string]string{
		"LOG_LEVEL": "debug", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr, "USE_STATSD": "false",
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
		"RUNTIME_IGNOREDOTFILES": "true", "HOST": "::", "GRPC_HOST": "::",
		"GRPC_PORT": grpcPort, "PORT": httpPort, "DEBUG_PORT": debugPort,
	}
	s := startRatelimit(t, env, "127.0.0.1:"+grpcPort)
	c, _ := rlsClient(t, "127.0.0.1:"+grpcPort)
	for i, want := range []pb.RateLimitResponse_Code{rlOK, rlOver} {
		resp := ask(t, c, "echo-ratelimit", 0, desc("PATH", "/"))
		t.Logf("ShouldRateLimit echo-ratelimit PATH=/ #%d: %s", i+1, protojson.Format(resp))
		checkStatuses(t, resp, want, st{want, 1, pb.RateLimitResponse_RateLimit_MINUTE, "", 0})
	}
	resp := ask(t, c, "echo-ratelimit", 0, desc("PATH", "/productpage"))
	t.Logf("ShouldRateLimit echo-ratelimit PATH=/productpage: %s", protojson.Format(resp))
	checkStatuses(t, resp, rlOK, st{rlOK, 100, pb.RateLimitResponse_RateLimit_MINUTE, "", 99})

	get := func(method, url, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", method, url, err, s.logs)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		shown, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		t.Logf("%s %s %s → %d %s", method, url, body, res.StatusCode, shown)
		return res.StatusCode, string(b)
	}
	if code, body := get("GET", "http://127.0.0.1:"+httpPort+"/healthcheck", ""); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q, want 200 OK", code, body)
	}
	// The same descriptor as the gRPC calls: one count behind both ports.
	const call = `{"domain":"echo-ratelimit","descriptors":[{"entries":[{"key":"PATH","value":"/"}]}]}`
	if code, body := get("POST", "http://127.0.0.1:"+httpPort+"/json", call); code != http.StatusTooManyRequests || !strings.Contains(body, `"overallCode":"OVER_LIMIT"`) {
		t.Errorf("/json: %d %s, want 429 and OVER_LIMIT", code, body)
	}
	if code, _ := get("POST", "http://127.0.0.1:"+httpPort+"/json", `{"domain":`); code != http.StatusBadRequest {
		t.Errorf("/json with a broken body: %d, want 400", code)
	}
	if code, body := get("GET", "http://127.0.0.1:"+debugPort+"/metrics", ""); code != 200 || !strings.Contains(body, "sluice_") {
		t.Errorf("the debug port's /metrics: %d", code)
	}
	if code, _ := get("GET", "http://127.0.0.1:"+debugPort+"/debug/pprof/", ""); code != http.StatusNotFound {
		t.Errorf("the debug port serves pprof: %d", code)
	}
	if strings.Contains(s.logs.String(), "USE_STATSD") {
		t.Errorf("USE_STATSD=false, which asks for nothing Sluice lacks, is said in the log:\n%s", s.logs)
	}
	if want := ":" + debugPort + " resp="; !strings.Contains(s.logs.String(), " debug=") || !strings.Contains(s.logs.String(), want) {
		t.Errorf("the start-up line does not give the debug port (%s):\n%s", want, s.logs)
	}
}

// TestPeerEnvShadow: SHADOW_MODE=true answers every call OK, counting it:
// the second call of a limit of one is over, and answered OK.
func TestPeerEnvShadow(t *testing.T) {
	r := redistest.Start(t)
	root := t.TempDir()
	configMapDir(t, filepath.Join(root, "config"), map[string]string{"config.yaml": istioConfig})
	grpcPort := port(t)
	startRatelimit(t, map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr, "RUNTIME_ROOT": root,
		"SHADOW_MODE": "true", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": grpcPort, "PORT": port(t), "DEBUG_PORT": port(t)}, "127.0.0.1:"+grpcPort)
	c, _ := rlsClient(t, "127.0.0.1:"+grpcPort)
	for range 2 {
		checkStatuses(t, ask(t, c, "echo-ratelimit", 0, desc("PATH", "/")), rlOK, st{rlOK, 1, pb.RateLimitResponse_RateLimit_MINUTE, "", 0})
	}
	if n := dbsize(t, r); n != "1" {
		t.Errorf("Redis holds %s keys; want the one count", n)
	}
}

// TestPeerEnvEnvoyGateway: Sluice started as /bin/ratelimit with the
// environment of Envoy Gateway's default deployment takes its
// configuration from the xDS server over mTLS, with the certificates EG
// mounts at /certs (here a test CA's, for 127.0.0.1), and serves gRPC over
// TLS with the same certificate. Only addresses and paths differ from EG's:
// the xDS server's and Redis's, the certificates' directory, and free
// ports for the peer's default 8080, 8081 and 6070.
func TestPeerEnvEnvoyGateway(t *testing.T) {
	r := redistest.Start(t)
	caPEM, certPEM, keyPEM := makeCerts(t)
	certs := t.TempDir()
	for name, b := range map[string][]byte{"ca.crt": caPEM, "tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(certs, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// Envoy Gateway's xDS server asks its clients for a certificate of its CA.
	m := xdstest.Start(t, "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	m.Set(t, "envoy-ratelimit", "1", xdstest.Limits("default/eg/http", "client_ip", 2))

	grpcPort, httpPort, debugPort, promPort := port(t), port(t), port(t), port(t)
	// Envoy Gateway's statsd-exporter-config ConfigMap: the peer's default
	// mapper without the response time's scale.
	mapperFile := filepath.Join(t.TempDir(), "conf.yaml")
	if err := os.WriteFile(mapperFile, peerstats.DefaultYAML(false), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true",
		"RUNTIME_WATCH_ROOT": "false", "LOG_LEVEL": "info", "USE_STATSD": "false", "CONFIG_TYPE": "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL": m.Addr, "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": filepath.Join(certs, "tls.crt"),
		"GRPC_SERVER_TLS_KEY": filepath.Join(certs, "tls.key"), "GRPC_SERVER_TLS_CA_CERT": filepath.Join(certs, "ca.crt"),
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": filepath.Join(certs, "tls.crt"),
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":    filepath.Join(certs, "tls.key"),
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": filepath.Join(certs, "ca.crt"), "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr, "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":" + promPort,
		"PROMETHEUS_MAPPER_YAML": mapperFile,
		"GRPC_PORT":              grpcPort, "PORT": httpPort, "DEBUG_PORT": debugPort,
	}
	s := startRatelimit(t, env, "127.0.0.1:"+grpcPort)
	m.Acked(t, "1")

	// Envoy, as Envoy Gateway configures it: TLS, checking the server's
	// certificate against the CA; the peer asks for no client certificate.
	conn, err := grpc.NewClient("127.0.0.1:"+grpcPort, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	for i, want := range []struct {
		code pb.RateLimitResponse_Code
		left uint32
	}{{rlOK, 1}, {rlOK, 0}, {rlOver, 0}} {
		resp := ask(t, c, "default/eg/http", 1, desc("client_ip", "192.0.2.1"))
		t.Logf("ShouldRateLimit default/eg/http client_ip=192.0.2.1 #%d over TLS: %s", i+1, protojson.Format(resp))
		checkStatuses(t, resp, want.code, st{want.code, 2, pb.RateLimitResponse_RateLimit_MINUTE, "", want.left})
	}
	// Plaintext is turned away: the port serves TLS only.
	plain, _ := rlsClient(t, "127.0.0.1:"+grpcPort)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := plain.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "default/eg/http"}); err == nil {
		t.Error("a plaintext call was answered on the TLS port")
	}
	// Envoy Gateway's pod annotations scrape PROMETHEUS_ADDR (its 19001).
	if res, err := http.Get("http://127.0.0.1:" + promPort + "/metrics"); err != nil || res.StatusCode != 200 {
		t.Errorf("/metrics on PROMETHEUS_ADDR, where Envoy Gateway scrapes: %v", err)
	} else {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.Contains(string(b), "sluice_decisions_total") {
			t.Errorf("/metrics on PROMETHEUS_ADDR has no sluice_decisions_total:\n%.2000s", b)
		}
		// Beside Sluice's, the peer's metrics, as Envoy Gateway's
		// dashboard queries them, through its mapper file.
		for _, want := range []string{`ratelimit_service_rate_limit_total_hits{domain="default/eg/http",key1="client_ip"} 3`,
			`ratelimit_service_rate_limit_over_limit{domain="default/eg/http",key1="client_ip"} 1`} {
			if !strings.Contains(string(b), want) {
				t.Errorf("/metrics on PROMETHEUS_ADDR lacks %s:\n%.4000s", want, b)
			}
		}
	}
	// The start-up line names the admin address by the variable that set
	// it: PROMETHEUS_ADDR here, not the debug port.
	if want := " prometheus=0.0.0.0:" + promPort + " "; !strings.Contains(s.logs.String(), want) || strings.Contains(s.logs.String(), " debug=") {
		t.Errorf("the start-up line does not call the Prometheus address %s:\n%s", want, s.logs)
	}
	if strings.Contains(s.logs.String(), "PROMETHEUS_MAPPER_YAML") {
		t.Errorf("PROMETHEUS_MAPPER_YAML, now honoured, is still named as not used:\n%s", s.logs)
	}
	if res, err := http.Get("http://127.0.0.1:" + httpPort + "/healthcheck"); err != nil || res.StatusCode != 200 {
		t.Errorf("/healthcheck, Envoy Gateway's probes: %v", err)
	} else {
		res.Body.Close()
	}
}

// TestPeerEnvRefused: a variable asking for what Sluice does not offer
// stops start-up with one line naming it, exit status 2, by either name of
// the mode.
func TestPeerEnvRefused(t *testing.T) {
	link := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(sluiceBin, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		argv []string
		env  []string
		want string
	}{
		{"per second", []string{link}, []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:1", "REDIS_PERSECOND=true"},
			"ratelimit: REDIS_PERSECOND=true: Sluice keeps every limit in one Redis: unset it, or set false\n"},
		{"merge domains, by the subcommand", []string{sluiceBin, "envoy-ratelimit"}, []string{"MERGE_DOMAIN_CONFIG=true"},
			"ratelimit: MERGE_DOMAIN_CONFIG=true: Sluice takes one file per domain: unset it, or set false\n"},
		{"config directory", []string{link}, []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:1", "RUNTIME_ROOT=/nonexistent"},
			"ratelimit: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY: /nonexistent/config: no such file or directory\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
			cmd.Env = tc.env
			out, err := cmd.CombinedOutput()
			if string(out) != tc.want || cmd.ProcessState.ExitCode() != 2 {
				t.Errorf("%q exit %d (%v); want exit 2 and %q", out, cmd.ProcessState.ExitCode(), err, tc.want)
			}
		})
	}
}

// Started as the peer, Sluice opens no port until Redis answers, as the
// peer does, and gives up after REDIS_STARTUP_MAX_ELAPSED_TIME with exit
// status 1 and the cause.
func TestPeerEnvWaitsForRedis(t *testing.T) {
	cfgDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cfgDir, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Bounded: a sidecar that does not wait serves until killed.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sluiceBin, "envoy-ratelimit")
	cmd.Env = []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)),
		"RUNTIME_ROOT=" + cfgDir, "RUNTIME_SUBDIRECTORY=", "REDIS_STARTUP_MAX_ELAPSED_TIME=1s",
		"PORT=0", "GRPC_PORT=0", "DEBUG_PORT=0", "HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1"}
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), "did not answer within 1s (--upstream-required)") ||
		!strings.Contains(string(out), "nothing accepts connections") || strings.Contains(string(out), "msg=listening") {
		t.Errorf("exit %d; want 1, naming the cause, before any port:\n%s", code, out)
	}
}
