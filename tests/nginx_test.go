package tests

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// findNginx is Debian's nginx (scripts/test installs it). Missing, it fails
// the test under CI and skips it elsewhere, saying how to install it.
func findNginx(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	msg := "nginx is not installed: scripts/test installs it (apt-get install nginx)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// recipe is the fenced block of docs/gateways.md in the given language
// that follows the line holding marker: the test runs what the docs say.
func recipe(t *testing.T, lang, marker string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/gateways.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, marker)
	if i < 0 {
		t.Fatalf("docs/gateways.md has no %q", marker)
	}
	m := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```").FindStringSubmatch(doc[i:])
	if m == nil {
		t.Fatalf("docs/gateways.md has no %s block after %q", lang, marker)
	}
	return m[1]
}

// TestNginxAuthRequest runs docs/gateways.md's nginx auth_request recipe against
// a real nginx in front of a small upstream: 200s with the X-RateLimit-*
// headers, then 429 with Retry-After, and nginx logs no "unexpected status".
func TestNginxAuthRequest(t *testing.T) {
	nginx := findNginx(t)
	policies := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(policies, []byte("policies:\n  api:\n    algorithm: fixed_window\n    limit: 3\n    period: 1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startDoors(t, "", "--policies", policies)

	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello from the app\n")
	}), ReadHeaderTimeout: 5 * time.Second}
	appLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Serve(appLn) }()
	t.Cleanup(func() { app.Close() })

	dir := t.TempDir()
	port := redistest.FreePort(t)
	server := recipe(t, "nginx", "<!-- recipe: nginx -->")
	server = strings.NewReplacer("listen 8080;", fmt.Sprintf("listen 127.0.0.1:%d;", port),
		"127.0.0.1:8082", s.HTTP, "127.0.0.1:9000", appLn.Addr().String()).Replace(server)
	errorLog := filepath.Join(dir, "error.log")
	conf := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[2]s info;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
%[3]s
}
`, dir, errorLog, server)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nginx, "-p", dir, "-c", confPath, "-e", errorLog)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d/", port)
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-exited:
			logs, _ := os.ReadFile(errorLog)
			t.Fatalf("nginx exited: %v\n%s\n%s", err, out, logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not listen:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}

	get := func() (*http.Response, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"orders", nil)
		// A client trying its own policy, key and cost: the recipe's query
		// form ignores them.
		req.Header.Set("X-Sluice-Key", "someone-else")
		req.Header.Set("X-Sluice-Cost", "0")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	for i, remaining := range []string{"2", "1", "0"} {
		resp, body := get()
		h := resp.Header
		if resp.StatusCode != 200 || body != "hello from the app\n" || h.Get("X-RateLimit-Limit") != "3" ||
			h.Get("X-RateLimit-Remaining") != remaining || !between(h.Get("X-RateLimit-Reset"), 1, 3600) || h.Get("Retry-After") != "" {
			t.Fatalf("request %d: %d %v %q", i, resp.StatusCode, h, body)
		}
	}
	resp, body := get()
	if h := resp.Header; resp.StatusCode != 429 || !between(h.Get("Retry-After"), 1, 3600) || h.Get("X-RateLimit-Remaining") != "0" ||
		h.Get("X-RateLimit-Limit") != "3" || !strings.Contains(body, `"status":429`) {
		t.Fatalf("refused: %d %v %q", resp.StatusCode, h, body)
	}
	logs, _ := os.ReadFile(errorLog)
	if strings.Contains(string(logs), "unexpected status") {
		t.Fatalf("nginx's error log says unexpected status:\n%s", logs)
	}
}
