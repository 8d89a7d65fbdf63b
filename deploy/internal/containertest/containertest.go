// Package containertest runs a rendered Kubernetes container as a process
// of the sluice binary, the way the kubelet would run it, for the tests of
// deploy/ (kustomize) and deploy/helm (the chart): its args with each
// listening address moved to a free loopback port, each mounted volume a
// temporary directory holding the rendered ConfigMap's files, and its
// environment with the rendered Secrets resolved.
package containertest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-rl/sluice/inject/injecttest"
)

// Build builds the sluice binary of the module at moduleDir (with that
// module's go.mod, as the image is built) into a temporary directory.
// cleanup removes it.
func Build(moduleDir string) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "sluice-bin-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	build.Dir = moduleDir
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building the sluice binary: %w", err)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// ResolveEnv is the container's environment as the kubelet makes it:
// values, and references to the rendered Secrets and ConfigMaps.
func ResolveEnv(t *testing.T, objs []injecttest.Object, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s := injecttest.Find[*corev1.Secret](objs, "v1/Secret", ref.Name)
			if s == nil {
				t.Fatalf("env %s: no Secret %s in the rendering", e.Name, ref.Name)
			}
			v, ok := s.Data[ref.Key]
			if sv, in := s.StringData[ref.Key]; in { // as a chart or kustomize writes it, before the API server
				v, ok = []byte(sv), true
			}
			if !ok {
				t.Fatalf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = string(v)
		default:
			t.Fatalf("env %s: an unexpected source %+v", e.Name, e.ValueFrom)
		}
	}
	return env
}

// MountedFiles writes the files of each volume the container mounts into
// dir, from the rendered ConfigMaps or from given (volume name → file →
// content, for a Secret made outside the rendering), an emptyDir empty,
// and returns each mount path's directory here.
func MountedFiles(t *testing.T, objs []injecttest.Object, spec corev1.PodSpec, c corev1.Container, dir string,
	given ...map[string]map[string][]byte) map[string]string {
	t.Helper()
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		var files map[string][]byte
		for _, v := range spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			if v.EmptyDir != nil {
				files = map[string][]byte{}
			}
			if v.ConfigMap != nil {
				cm := injecttest.Find[*corev1.ConfigMap](objs, "v1/ConfigMap", v.ConfigMap.Name)
				if cm == nil {
					t.Fatalf("volume %s: no ConfigMap %s in the rendering", v.Name, v.ConfigMap.Name)
				}
				files = map[string][]byte{}
				for k, s := range cm.Data {
					files[k] = []byte(s)
				}
			}
			for _, g := range given {
				if f, ok := g[v.Name]; ok {
					files = f
				}
			}
		}
		if files == nil {
			t.Fatalf("mount %s: no volume with content", m.Name)
		}
		d := filepath.Join(dir, m.Name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for k, b := range files {
			if err := os.WriteFile(filepath.Join(d, k), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		mounts[m.MountPath] = d
	}
	return mounts
}

// Process is a rendered container run here as a process of the built
// binary.
type Process struct {
	C      corev1.Container
	Ports  map[string]string // the manifest's port number → the free port here
	Mounts map[string]string // the manifest's mount path → the directory here
	Cmd    *exec.Cmd
	Out    *SyncBuffer // its standard output and error
	// Exited is closed once the process has been waited for; Err is then
	// Wait's result.
	Exited chan struct{}
	Err    error
}

// SyncBuffer collects a process's output while tests read it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer // guarded by mu
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

var listenArg = regexp.MustCompile(`^(--[a-z-]+=)[0-9.]*:([0-9]+)$`)

// run starts container c of spec as the kubelet would, with two changes
// that a machine shared with other tests needs: every listening address
// in the args (--name=host:port) becomes 127.0.0.1 on a free port, and
// each mount path becomes a temporary directory holding the volume's
// files. extra args come last; env edits the environment first.
func Run(t *testing.T, bin string, objs []injecttest.Object, spec corev1.PodSpec, c corev1.Container, extra []string,
	env func(map[string]string), given ...map[string]map[string][]byte) *Process {
	t.Helper()
	mounts := MountedFiles(t, objs, spec, c, t.TempDir(), given...)
	p := &Process{C: c, Ports: map[string]string{}, Mounts: mounts}
	vars := ResolveEnv(t, objs, c)
	if env != nil {
		env(vars)
	}
	var args []string
	for _, a := range append(append([]string{}, c.Args...), extra...) {
		if m := listenArg.FindStringSubmatch(a); m != nil {
			free := FreePort(t)
			p.Ports[m[2]] = free
			a = m[1] + "127.0.0.1:" + free
		}
		for path, dir := range mounts {
			a = strings.ReplaceAll(a, path+"/", dir+"/")
			if strings.HasSuffix(a, "="+path) { // a mounted directory itself
				a = strings.TrimSuffix(a, path) + dir
			}
		}
		args = append(args, a)
	}
	if len(c.Command) != 0 {
		t.Fatalf("the container sets command %v; the image's entrypoint is the binary", c.Command)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{} // nothing but what the manifest gives
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p.start(t, cmd)
	return p
}

// Start runs cmd until the test ends, collecting its output.
func Start(t *testing.T, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{}
	p.start(t, cmd)
	return p
}

func (p *Process) start(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	p.Cmd, p.Out, p.Exited = cmd, &SyncBuffer{}, make(chan struct{})
	cmd.Stdout, cmd.Stderr = p.Out, p.Out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.Err = cmd.Wait(); close(p.Exited) }()
	t.Cleanup(func() { p.Stop(t) })
}

// listening waits up to 15 seconds for addr to accept a connection, and
// returns it.
func (p *Process) Listening(t *testing.T, addr string) net.Conn {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return conn
		}
		select {
		case <-p.Exited:
			t.Fatalf("exited (%v) before listening on %s; output:\n%s", p.Err, addr, p.Out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not listening on %s after 15s; output:\n%s", addr, p.Out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM, as the kubelet does, and expects a clean exit.
func (p *Process) Stop(t *testing.T) {
	select {
	case <-p.Exited:
		return // started has said why
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited:
		if p.Err != nil {
			t.Errorf("exit after SIGTERM: %v; output:\n%s", p.Err, p.Out.String())
		}
	case <-time.After(20 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.Exited
		t.Errorf("no exit 20s after SIGTERM; output:\n%s", p.Out.String())
	}
}

// probe does what the kubelet does with one probe, once the process is
// up: GET at the probe's scheme, port and path, on the port it was moved
// to. It returns the status code.
func (p *Process) Probe(t *testing.T, pr *corev1.Probe, client *http.Client) int {
	t.Helper()
	port := ContainerPort(p.C, pr.HTTPGet.Port.String())
	free, ok := p.Ports[port]
	if !ok {
		t.Fatalf("probe port %s (%s) is none the container listens on: %v", pr.HTTPGet.Port.String(), port, p.C.Args)
	}
	scheme := strings.ToLower(string(pr.HTTPGet.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	resp, err := client.Get(scheme + "://127.0.0.1:" + free + pr.HTTPGet.Path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// started waits, as the kubelet does, for the startup probe to pass
// (or, with none, the liveness probe), within 15 seconds.
func (p *Process) Started(t *testing.T, client *http.Client) {
	t.Helper()
	pr := p.C.StartupProbe
	if pr == nil {
		pr = p.C.LivenessProbe
	}
	deadline := time.Now().Add(15 * time.Second)
	for p.Probe(t, pr, client) != http.StatusOK {
		select {
		case <-p.Exited:
			t.Fatalf("exited (%v) before its startup probe passed; output:\n%s", p.Err, p.Out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("startup probe %s never passed; output:\n%s", pr.HTTPGet.Path, p.Out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreePort is a loopback port nothing listens on now.
func FreePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// ContainerPort is the number of the container's port named nameOrNumber,
// or nameOrNumber itself when no port has that name.
func ContainerPort(c corev1.Container, nameOrNumber string) string {
	for _, p := range c.Ports {
		if p.Name == nameOrNumber {
			return itoa(p.ContainerPort)
		}
	}
	return nameOrNumber
}
