package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The README shows each file of examples/ whole (docs_test.go checks it);
// the tests run each one against the binary, so the README cannot show
// code that does not work. The examples talk to localhost:6380; the tests point
// them at the test's port.

// exampleOutput is what every client example prints on a fresh sluice.
const exampleOutput = "allowed: 20 of 21 left\n"

func runExample(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s%s", cmd.Args, err, out.String(), errb.String())
	}
	return out.String()
}

// portCopy writes src with port 6380 replaced by s's, into a temp dir.
func portCopy(t *testing.T, src string, s *sluice) string {
	t.Helper()
	code, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(dst, []byte(strings.ReplaceAll(string(code), "6380", strconv.Itoa(s.Port))), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestPythonExample(t *testing.T) {
	python := ""
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(p, "-c", "import redis").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		t.Fatal("no python3 with the redis module: install python3-redis (scripts/test does)")
	}
	s := startSluice(t)
	got := runExample(t, exec.Command(python, portCopy(t, "../examples/redispy/example.py", s)))
	want := exampleOutput + "[1, 1, 0]\n[0, 16, 15, -1, 2]\n"
	if got != want {
		t.Errorf("python example printed\n%s\nwant\n%s", got, want)
	}
}

func TestNodeExample(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node not found: install nodejs (scripts/test does)")
	}
	modules, _ := filepath.Abs("node/node_modules")
	if _, err := os.Stat(filepath.Join(modules, "ioredis")); err != nil {
		t.Fatal("ioredis is not installed: run npm ci in tests/node (scripts/test does)")
	}
	s := startSluice(t)
	cmd := exec.Command(node, portCopy(t, "../examples/ioredis/example.js", s))
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	got := runExample(t, cmd)
	want := exampleOutput + "[ 1, 1, 0 ]\n[ 0, 16, 15, -1, 2 ]\n"
	if got != want {
		t.Errorf("node example printed\n%s\nwant\n%s", got, want)
	}
}

func TestGoExample(t *testing.T) {
	s := startSluice(t)
	bin := filepath.Join(t.TempDir(), "goexample")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.addr="+s.Addr, "../examples/goredis")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	got := runExample(t, exec.Command(bin))
	want := exampleOutput + "1 1 0 \n[0 16 15 -1 2] <nil>\n"
	if got != want {
		t.Errorf("go example printed\n%s\nwant\n%s", got, want)
	}
}
