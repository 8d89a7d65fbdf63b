package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// The docs show each file of examples/ whole (docs_test.go checks it);
// the tests run each one against the binary, so no page can show
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

// pythonWithRedis is a python3 that imports redis-py.
func pythonWithRedis(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(p, "-c", "import redis").Run() == nil {
			return p
		}
	}
	t.Fatal("no python3 with the redis module: install python3-redis (scripts/test does)")
	return ""
}

func TestPythonExample(t *testing.T) {
	python := pythonWithRedis(t)
	s := startSluice(t)
	got := runExample(t, exec.Command(python, portCopy(t, "../examples/redispy/example.py", s)))
	want := exampleOutput + "[1, 1, 0]\n[0, 16, 15, -1, 2]\n"
	if got != want {
		t.Errorf("python example printed\n%s\nwant\n%s", got, want)
	}
}

// nodeModules is tests/node/node_modules, checked to hold pkg, and the
// node binary.
func nodeModules(t *testing.T, pkg string) (node, modules string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node not found: install nodejs (scripts/test does)")
	}
	modules, _ = filepath.Abs("node/node_modules")
	if _, err := os.Stat(filepath.Join(modules, pkg)); err != nil {
		t.Fatalf("%s is not installed: run npm ci in tests/node (scripts/test does)", pkg)
	}
	return node, modules
}

// TestRedisPyDefaultPipeline: redis-py's pipeline() is a transaction by
// default; MULTI's error, which redis-py raises, names the fix, and the
// decision inside it was not charged.
func TestRedisPyDefaultPipeline(t *testing.T) {
	python := pythonWithRedis(t)
	s := startSluice(t)
	code := `import sys, redis
r = redis.Redis(port=int(sys.argv[1]))
p = r.pipeline()
p.execute_command("RL.TOKEN", "tx:1", 20, 10, "1s")
try:
    p.execute()
    print("no error")
except redis.ResponseError as e:
    print(type(e).__name__, "pipeline(transaction=False)" in str(e))
print(r.execute_command("RL.TOKEN", "tx:1", 20, 10, "1s", 0))
`
	got := runExample(t, exec.Command(python, "-c", code, strconv.Itoa(s.Port)))
	if want := "ResponseError True\n[1, 20, 20, 0, 0]\n"; got != want {
		t.Errorf("redis-py's default pipeline printed\n%s\nwant\n%s", got, want)
	}
}

func TestNodeExample(t *testing.T) {
	node, modules := nodeModules(t, "ioredis")
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

// TestNodeRedisDefaults: node-redis 5 (npm "redis") connects with its
// default options (RESP2, CLIENT SETINFO, its maintenance handshake),
// decides, pipelines (commands of one tick, and execAsPipeline), and its
// default multi() gets MULTI's error naming execAsPipeline, with nothing
// charged.
func TestNodeRedisDefaults(t *testing.T) {
	node, modules := nodeModules(t, "redis")
	s := startSluice(t)
	cmd := exec.Command(node, "node/noderedis.js")
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "SLUICE_URL=redis://"+s.Addr)
	got := runExample(t, cmd)
	want := `one: [1,20,19,0,100]
pipeline: [1,1,0]
execAsPipeline: [1,1,0]
multi: SimpleError true
after multi: [1,20,20,0,0]
lib: true true
`
	if got != want {
		t.Errorf("node-redis printed\n%s\nwant\n%s", got, want)
	}
}

// TestRueidisDefaults: rueidis, Redis's own Go client, connects with its
// default options: RESP3, client-side caching on (CLIENT TRACKING ON
// OPTIN, accepted as a no-op), CLUSTER probed first and given up. It
// decides, pipelines (DoMulti), and gets decisions as RESP3 maps.
func TestRueidisDefaults(t *testing.T) {
	s := startSluice(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}})
	if err != nil {
		t.Fatalf("rueidis with its default options: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	one, err := c.Do(ctx, c.B().Arbitrary("RL.TOKEN").Keys("rueidis:1").Args("20", "10", "1s").Build()).AsIntMap()
	if err != nil || one["allowed"] != 1 || one["remaining"] != 19 {
		t.Errorf("one decision: %v, %v", one, err)
	}
	var cmds rueidis.Commands
	for _, cost := range []string{"5", "10", "10"} {
		cmds = append(cmds, c.B().Arbitrary("RL.TOKEN").Keys("upload:42").Args("20", "10", "1s", cost).Build())
	}
	var allowed []int64
	for _, r := range c.DoMulti(ctx, cmds...) {
		m, err := r.AsIntMap()
		if err != nil {
			t.Fatalf("pipelined decision: %v", err)
		}
		allowed = append(allowed, m["allowed"])
	}
	if !slices.Equal(allowed, []int64{1, 1, 0}) {
		t.Errorf("pipeline allowed %v; want [1 1 0]", allowed)
	}
	info, err := c.Do(ctx, c.B().ClientInfo().Build()).ToString()
	if err != nil || !strings.Contains(info, "lib-name=rueidis ") || !strings.Contains(info, "resp=3 ") {
		t.Errorf("CLIENT INFO = %q, %v", info, err)
	}
}
