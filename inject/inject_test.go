package inject_test

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/inject"
	"github.com/sluice-rl/sluice/inject/injecttest"
)

var update = flag.Bool("update", false, "rewrite the golden files from the injector's output")

// Each directory of testdata is one case: in.yaml through `sluice inject`
// with the flags in args (one a line) gives out.yaml, and the warnings in
// stderr. Injecting out.yaml again changes nothing.
func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/*/in.yaml")
	if err != nil || len(dirs) < 10 {
		t.Fatalf("golden cases: %v, %v", dirs, err)
	}
	for _, in := range dirs {
		dir := filepath.Dir(in)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var args []string
			if b, err := os.ReadFile(filepath.Join(dir, "args")); err == nil {
				args = strings.Fields(string(b))
			}
			out, stderr := run(t, append(args, "-f", in), nil)
			golden(t, filepath.Join(dir, "out.yaml"), out)
			golden(t, filepath.Join(dir, "stderr"), stderr)
			injecttest.DecodeStrict(t, []byte(out))

			again, stderr2 := run(t, args, strings.NewReader(out))
			if again != out {
				t.Errorf("injecting the output again changed it:\n%s", again)
			}
			if stderr2 != stderr {
				t.Errorf("second run's warnings %q; want %q", stderr2, stderr)
			}
		})
	}
}

// Documents with no pod, or whose pods are all left alone, are written
// byte for byte as read.
func TestUntouchedDocumentsAreVerbatim(t *testing.T) {
	for _, name := range []string{"non-pod", "opt-out", "existing-sluice"} {
		in, err := os.ReadFile(filepath.Join("testdata", name, "in.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := run(t, nil, bytes.NewReader(in))
		if out != string(in) {
			t.Errorf("%s: output differs from input:\n%s", name, out)
		}
	}
	// In a multi-document file, the unchanged Service keeps its comment.
	out, _ := run(t, []string{"-f", "testdata/multi-document/in.yaml"}, nil)
	if !strings.Contains(out, "name: web # the comment stays") {
		t.Errorf("the untouched Service was rewritten:\n%s", out)
	}
}

func TestErrors(t *testing.T) {
	pod := func(annotations string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n" + annotations +
			"spec:\n  containers:\n  - name: a\n    image: a\n"
	}
	tests := []struct {
		name, in string
		args     []string
		code     int
		want     string
	}{
		{"unknown annotation", pod("    sluice.io/upstream-secrets: x\n"), nil, 1,
			"document 1: Pod p: annotation sluice.io/upstream-secrets: no such setting"},
		{"bad annotation value", pod("    sluice.io/on-upstream-failure: maybe\n"), nil, 1,
			`annotation sluice.io/on-upstream-failure: "maybe"`},
		{"secret in an annotation", pod("    sluice.io/upstream: redis://:pw@r:6379\n"), nil, 1,
			"annotation sluice.io/upstream: the address (and its password) would be written into the pod spec"},
		{"bad quantity", pod("    sluice.io/memory-limit: lots\n"), nil, 1, `invalid --memory-limit "lots"`},
		{"admin off", pod("    sluice.io/admin-listen: \"off\"\n"), nil, 1, "the probes need the admin port"},
		{"listen beyond loopback", pod("    sluice.io/listen: 0.0.0.0:6380\n"), nil, 1, "refusing to listen on"},
		{"volume taken", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: a\n    image: a\n" +
			"  volumes:\n  - name: sluice-policies\n    emptyDir: {}\n", nil, 1, "already has a volume named sluice-policies"},
		{"socket in /", pod("    sluice.io/listen: unix:/sluice.sock\n"), nil, 1, "the socket needs a directory of its own"},
		{"socket path relative", pod("    sluice.io/listen: unix:run/sluice.sock\n"), nil, 1, "must be absolute and clean"},
		{"socket path unclean", pod("    sluice.io/listen: unix:/run/../sluice/s.sock\n"), nil, 1, "must be absolute and clean"},
		{"socket over the policies", pod("    sluice.io/listen: unix:/etc/sluice/s.sock\n"), nil, 1, "would overlap the policies' /etc/sluice/policies"},
		{"socket's directory mounted", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    sluice.io/listen: unix:/run/s/s.sock\n" +
			"spec:\n  containers:\n  - name: a\n    image: a\n    volumeMounts:\n    - name: run\n      mountPath: /run/s\n" +
			"  volumes:\n  - name: run\n    emptyDir: {}\n", nil, 1, "container a already mounts run at /run/s, where the sidecar's socket goes"},
		{"socket perm on TCP", pod("    sluice.io/listen-perm: \"660\"\n"), nil, 1, "applies to a Unix socket"},
		{"upstream flag", pod(""), []string{"--upstream=redis://r:6379"}, 2, "--upstream is not an injector setting"},
		{"policies flag", pod(""), []string{"--policies=/p.yaml"}, 2, "give --policies-configmap"},
		{"bad flag", pod(""), []string{"--io-loops=-1"}, 2, "invalid --io-loops"},
		{"not YAML", "kind: [", nil, 1, "document 1"},
		// Issue 28: a Pod without spec leaked a JSON patch error.
		{"pod without spec", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n", nil, 1,
			"document 1: Pod p has no spec: a pod needs one, with its containers"},
		{"template without spec", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  template:\n    metadata: {}\n", nil, 1,
			"document 1: Deployment d has no spec.template.spec: a pod needs one, with its containers"},
		// Issue 28: the HTTP token was written into the pod spec.
		{"HTTP token flag", pod(""), []string{"--http-token=s3cret"}, 2,
			"--http-token is not an injector setting: the token would be written into the pod spec: put it in a Secret and give --http-token-secret NAME (annotation sluice.io/http-token-secret; its key --http-token-secret-key, default http-token)"},
		{"HTTP token annotation", pod("    sluice.io/http-token: s3cret\n"), nil, 1,
			"annotation sluice.io/http-token: the token would be written into the pod spec: put it in a Secret and give --http-token-secret NAME"},
		{"token Secret without a key", pod(""), []string{"--http-token-secret=t", "--http-token-secret-key="}, 2, "invalid --http-token-secret-key: empty"},
		{"memory limit too small to size", pod("    sluice.io/memory-limit: 40Mi\n"), nil, 1,
			"invalid --memory-limit: 40 MiB is too small: the sidecar needs at least 48 MiB"},
		{"workload without template", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec: {}\n", nil, 1,
			"Deployment d has no spec.template"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := inject.Main(tt.args, strings.NewReader(tt.in), &stdout, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tt.code, tt.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("wrote output despite the error:\n%s", stdout.String())
			}
		})
	}
}

func TestOutputFile(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.yaml")
	stdout, _ := run(t, []string{"-f", "testdata/pod/in.yaml", "-o", out}, nil)
	got, err := os.ReadFile(out)
	if err != nil || stdout != "" {
		t.Fatalf("-o: %v; stdout %q", err, stdout)
	}
	want, _ := os.ReadFile("testdata/pod/out.yaml")
	if !bytes.Equal(got, want) {
		t.Errorf("-o wrote:\n%s", got)
	}
}

func TestHelpListsTheSidecarSettings(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := inject.Main([]string{"--help"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{"--on-upstream-failure", "--upstream-secret", "--native", "--shutdown-delay", "(default 0.0.0.0:9380)"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

func run(t *testing.T, args []string, stdin io.Reader) (string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	if code := inject.Main(args, stdin, &stdout, &stderr); code != 0 {
		t.Fatalf("sluice inject %v: exit %d: %s", args, code, stderr.String())
	}
	return stdout.String(), stderr.String()
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if got == "" {
			_ = os.Remove(path)
			return
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it); got:\n%s", path, got)
	}
}
