package deploy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-rl/sluice/deploy/internal/containertest"
	"github.com/sluice-rl/sluice/inject"
	"github.com/sluice-rl/sluice/inject/injecttest"
	"github.com/sluice-rl/sluice/internal/redistest"
)

var sluiceBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := containertest.Build("..")
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy:", err)
		os.Exit(1)
	}
	sluiceBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// run is containertest.Run with the binary built for these tests.
func run(t *testing.T, objs []injecttest.Object, spec corev1.PodSpec, c corev1.Container, extra []string,
	env func(map[string]string), given ...map[string]map[string][]byte) *containertest.Process {
	t.Helper()
	return containertest.Run(t, sluiceBin, objs, spec, c, extra, env, given...)
}

// The demo's sidecar, exactly as kustomize renders it, run as the binary:
// its probes answer at its ports and paths, it decides by the policies of
// the mounted ConfigMap, and it keeps its state in the Redis its Secret
// names, password included.
func TestRenderedSidecarRuns(t *testing.T) {
	objs, _ := render(t, "sidecar/examples/demo")
	web := injecttest.Find[*appsv1.Deployment](objs, "apps/v1/Deployment", "web")
	spec := web.Spec.Template.Spec
	c, _ := sidecarOf(t, spec)
	secret := injecttest.Find[*corev1.Secret](objs, "v1/Secret", "sluice-upstream")
	password := string(secret.Data["redis-password"])

	tests := []struct {
		name  string
		redis bool // a real redis-server, started with the Secret's password
		down  bool // the Secret's address, pointed where nothing listens
		none  bool // no upstream variable: the in-memory store
	}{
		{name: "redis upstream", redis: true},
		{name: "upstream down", down: true},
		{name: "no upstream", none: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var srv *redistest.Server
			if tt.redis {
				// The password is set once the server is up: redistest's
				// readiness PING has none to give.
				srv = redistest.Start(t)
				if _, err := srv.Do("CONFIG", "SET", "requirepass", password); err != nil {
					t.Fatal(err)
				}
			}
			p := run(t, objs, spec, c, []string{"--listen=127.0.0.1:6380"}, func(env map[string]string) {
				switch {
				case tt.none:
					delete(env, "SLUICE_UPSTREAM")
				case tt.redis:
					env["SLUICE_UPSTREAM"] = moveHost(t, env["SLUICE_UPSTREAM"], srv.Addr)
				case tt.down:
					env["SLUICE_UPSTREAM"] = moveHost(t, env["SLUICE_UPSTREAM"], "127.0.0.1:"+containertest.FreePort(t))
				}
			})
			p.Started(t, nil)
			for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
				if code := p.Probe(t, pr, nil); code != http.StatusOK {
					t.Errorf("probe %s: %d; output:\n%s", pr.HTTPGet.Path, code, p.Out.String())
				}
			}
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + p.Ports["6380"], MaxRetries: -1, Protocol: 2})
			defer rdb.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if pong, err := rdb.Ping(ctx).Result(); err != nil || pong != "PONG" {
				t.Fatalf("PING: %q, %v", pong, err)
			}
			// "api" is a policy only the mounted ConfigMap defines.
			reply, err := rdb.Do(ctx, "RL.ALLOW", "api", "user:42").Slice()
			if err != nil || len(reply) < 5 || reply[0] != int64(1) {
				t.Fatalf("RL.ALLOW api: %v, %v; output:\n%s", reply, err, p.Out.String())
			}
			if tt.redis {
				up := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: password, Protocol: 2})
				defer up.Close()
				if n, err := up.DBSize(ctx).Result(); err != nil || n == 0 {
					t.Errorf("the decision left no key in the upstream Redis: %d, %v", n, err)
				}
			}
		})
	}
}

// A pod that asks for a Unix socket (sluice.io/listen: unix:PATH),
// injected and run as the binary: every container of the pod mounts the
// socket's volume where the sidecar does, and the sidecar decides on the
// socket it makes there, open to their users.
func TestInjectedSocketSidecarRuns(t *testing.T) {
	var out, errs bytes.Buffer
	args := []string{"-f", "../inject/testdata/unix-socket/in.yaml", "--upstream-secret=", "--policies-configmap="}
	if code := inject.Main(args, nil, &out, &errs); code != 0 {
		t.Fatalf("sluice inject: exit %d: %s", code, errs.String())
	}
	objs := injecttest.DecodeStrict(t, out.Bytes())
	spec := injecttest.Find[*appsv1.Deployment](objs, "apps/v1/Deployment", "api").Spec.Template.Spec
	c, _ := sidecarOf(t, spec)
	var want corev1.VolumeMount
	ok := false
	for _, m := range c.VolumeMounts {
		if m.Name == inject.SocketVolume {
			want, ok = m, true
		}
	}
	if !ok {
		t.Fatalf("the sidecar mounts no %s: %+v", inject.SocketVolume, c.VolumeMounts)
	}
	for _, other := range slices.Concat(spec.InitContainers, spec.Containers) {
		same := func(m corev1.VolumeMount) bool { return m.Name == want.Name && m.MountPath == want.MountPath }
		if other.Name != inject.ContainerName && !slices.ContainsFunc(other.VolumeMounts, same) {
			t.Errorf("container %s does not mount %+v: %+v", other.Name, want, other.VolumeMounts)
		}
	}

	p := run(t, objs, spec, c, nil, nil)
	p.Started(t, nil)
	sock := filepath.Join(p.Mounts[want.MountPath], "sluice.sock")
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatalf("no socket where the containers look: %v; output:\n%s", err, p.Out.String())
	}
	if st.Mode()&fs.ModeSocket == 0 || st.Mode().Perm() != 0o666 {
		t.Errorf("%s: mode %v; want a socket, rw for every user", sock, st.Mode())
	}
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, MaxRetries: -1, Protocol: 2})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reply, err := rdb.Do(ctx, "CL.THROTTLE", "user:42", "0", "1", "60", "1").Slice()
	if err != nil || len(reply) != 5 || reply[0] != int64(0) {
		t.Fatalf("CL.THROTTLE on the socket: %v, %v; output:\n%s", reply, err, p.Out.String())
	}
	if reply, err := rdb.Do(ctx, "CL.THROTTLE", "user:42", "0", "1", "60", "1").Slice(); err != nil || reply[0] != int64(1) {
		t.Errorf("second CL.THROTTLE: %v, %v; want refused", reply, err)
	}
}

// moveHost is the redis:// URL u, password kept, pointed at addr.
func moveHost(t *testing.T, u, addr string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil || pu.User == nil {
		t.Fatalf("upstream %q: %v", u, err)
	}
	pu.Host = addr
	return pu.String()
}

// The webhook's Deployment, as rendered, run as the binary with a
// certificate in the mounted Secret's place: its probes pass, and it
// injects a review sent over TLS.
func runWebhook(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	dir := t.TempDir()
	pool := x509.NewCertPool()
	injecttest.WriteCert(t, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), 1, pool)
	crt, _ := os.ReadFile(filepath.Join(dir, "tls.crt"))
	key, _ := os.ReadFile(filepath.Join(dir, "tls.key"))
	p := run(t, nil, spec, c, nil, nil, map[string]map[string][]byte{"tls": {"tls.crt": crt, "tls.key": key}})
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	p.Started(t, client)
	if code := p.Probe(t, c.ReadinessProbe, client); code != http.StatusOK {
		t.Errorf("readiness probe: %d", code)
	}
	review, err := os.ReadFile("../webhook/testdata/review-deployment-pod.json")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Post("https://127.0.0.1:"+p.Ports["8443"]+"/inject", "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"allowed":true`)) || !bytes.Contains(body, []byte(`"patchType":"JSONPatch"`)) {
		t.Errorf("review: %d %s", resp.StatusCode, body)
	}
}

// --shutdown-delay: after SIGTERM the sidecar still answers new
// connections for the delay, then drains and exits. The connection is
// made once the log says SIGTERM was taken; a failed one is a failure when
// the test knows it was made within the delay (less than 1s after SIGTERM
// was sent), however slowly a loaded machine got there.
func TestShutdownDelay(t *testing.T) {
	addr := "127.0.0.1:" + containertest.FreePort(t)
	p := containertest.Start(t, exec.Command(sluiceBin, "--listen="+addr, "--admin-listen=off", "--shutdown-delay=1s"))
	p.Listening(t, addr).Close()
	ping := func() error {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		defer rdb.Close()
		return rdb.Ping(context.Background()).Err()
	}
	term := time.Now()
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(p.Out.String(), "serving on until the delay ends") {
		if time.Now().After(deadline) {
			t.Fatalf("no delay logged 15s after SIGTERM; output:\n%s", p.Out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := ping(); err != nil {
		if d := time.Since(term); d < time.Second {
			t.Errorf("a new connection %v after SIGTERM, within the delay: %v", d, err)
		} else {
			t.Logf("a new connection %v after SIGTERM, past the delay: %v", d, err)
		}
	}
	select {
	case <-p.Exited:
		if p.Err != nil {
			t.Errorf("exit: %v; output:\n%s", p.Err, p.Out.String())
		}
		if d := time.Since(term); d < time.Second {
			t.Errorf("exited %v after SIGTERM, before the 1s delay", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("no exit; output:\n%s", p.Out.String())
	}
	if !strings.Contains(p.Out.String(), "serving on until the delay ends") {
		t.Errorf("output:\n%s", p.Out.String())
	}
}

// The central example, exactly as kustomize renders it, run as the binary
// on a real Redis: Envoy's rate limit service answers from the rules of
// its ConfigMap, and the HTTP check decides for a caller with the Secret's
// token and refuses one without.
func TestCentralRuns(t *testing.T) {
	objs, _ := render(t, "sidecar/examples/central")
	dep := injecttest.Find[*appsv1.Deployment](objs, "apps/v1/Deployment", "sluice")
	if dep == nil {
		t.Fatal("no Deployment sluice")
	}
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	srv := redistest.Start(t)
	// RESP, which the central container leaves at its default, on a free
	// port too.
	p := run(t, objs, spec, c, []string{"--listen=127.0.0.1:6380"}, func(env map[string]string) {
		env["SLUICE_UPSTREAM"] = "redis://" + srv.Addr
	})
	p.Started(t, nil)
	grpcAddr := "127.0.0.1:" + p.Ports[containertest.ContainerPort(c, "grpc")]
	httpAddr := "127.0.0.1:" + p.Ports[containertest.ContainerPort(c, "http")]
	p.Listening(t, grpcAddr).Close()
	p.Listening(t, httpAddr).Close()

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}}}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v; output:\n%s", err, p.Out.String())
	}
	if resp.OverallCode != pb.RateLimitResponse_OK || len(resp.Statuses) != 1 || resp.Statuses[0].CurrentLimit == nil {
		t.Errorf("ShouldRateLimit: %v; want OK under the ConfigMap's rule", resp)
	}

	token := string(injecttest.Find[*corev1.Secret](objs, "v1/Secret", "sluice-http-token").Data["token"])
	for _, tc := range []struct {
		token string
		want  int
	}{{token, http.StatusOK}, {"", http.StatusUnauthorized}} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/v1/check?policy=api&key=k", nil)
		if tc.token != "" {
			req.Header.Set("X-Sluice-Token", tc.token)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != tc.want {
			t.Errorf("check with token %q: %d, want %d", tc.token, r.StatusCode, tc.want)
		}
	}
}
