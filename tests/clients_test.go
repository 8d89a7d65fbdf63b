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
// code that does not work. The examples talk to SLUICE_ADDR, or
// localhost:6380 when it is unset; the tests set it to the test's address.

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

// withAddr is cmd with SLUICE_ADDR set to s's address, which every
// example reads (localhost:6380 when unset).
func withAddr(cmd *exec.Cmd, s *sluice) *exec.Cmd {
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "SLUICE_ADDR="+s.Addr)
	return cmd
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
	got := runExample(t, withAddr(exec.Command(python, "../examples/redispy/example.py"), s))
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
	cmd := exec.Command(node, "../examples/ioredis/example.js")
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	got := runExample(t, withAddr(cmd, s))
	want := exampleOutput + "[ 1, 1, 0 ]\n[ 0, 16, 15, -1, 2 ]\n"
	if got != want {
		t.Errorf("node example printed\n%s\nwant\n%s", got, want)
	}
}

func TestGoExample(t *testing.T) {
	s := startSluice(t)
	bin := filepath.Join(t.TempDir(), "goexample")
	build := exec.Command("go", "build", "-o", bin, "../examples/goredis")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	got := runExample(t, withAddr(exec.Command(bin), s))
	want := exampleOutput + "1 1 0 \n[0 16 15 -1 2] <nil>\n"
	if got != want {
		t.Errorf("go example printed\n%s\nwant\n%s", got, want)
	}
}

// TestNodeRedisDefaults: node-redis 4, 5 and 6 (npm "redis", v5, and
// package.json's aliases redis4 and redis6) connect with their default
// options (RESP2 for 4 and 5, RESP3 for 6; CLIENT SETINFO; 5's
// maintenance handshake), decide, pipeline (commands of one tick, and
// execAsPipeline), and their default multi() gets MULTI's error naming
// execAsPipeline, with nothing charged. Each reads a refusal's r[0] as 0:
// under 6's RESP3 default the decision is the array too, or a refusal
// would read as an admission. RL.REPLY MAP gives the named map (RESP3) or
// name, value pairs (RESP2).
func TestNodeRedisDefaults(t *testing.T) {
	for _, tc := range []struct {
		pkg, multiErr, resp, named string
	}{
		{"redis4", "ErrorReply", "resp=2", `["allowed",1,"limit",5,"remaining",4,"retry_after_ms",0,"reset_after_ms",1000]`},
		{"redis", "SimpleError", "resp=2", `["allowed",1,"limit",5,"remaining",4,"retry_after_ms",0,"reset_after_ms",1000]`},
		{"redis6", "SimpleError", "resp=3", `{"allowed":1,"limit":5,"remaining":4,"retry_after_ms":0,"reset_after_ms":1000}`},
	} {
		t.Run(tc.pkg, func(t *testing.T) {
			node, modules := nodeModules(t, tc.pkg)
			s := startSluice(t)
			cmd := exec.Command(node, "node/noderedis.js")
			cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "SLUICE_URL=redis://"+s.Addr, "NODE_REDIS="+tc.pkg)
			got := runExample(t, cmd)
			want := `one: [1,20,19,0,100]
pipeline: [1,1,0]
execAsPipeline: [1,1,0]
multi: ` + tc.multiErr + ` true
after multi: [1,20,20,0,0]
refused: refused [0,1,0]
named: ` + tc.named + `
lib: true ` + tc.resp + `
`
			if got != want {
				t.Errorf("node-redis (%s) printed\n%s\nwant\n%s", tc.pkg, got, want)
			}
		})
	}
}

// TestRueidisDefaults: rueidis, Redis's own Go client, connects with its
// default options: RESP3, client-side caching on (CLIENT TRACKING ON
// OPTIN, accepted as a no-op), CLUSTER probed first and given up. It
// decides, pipelines (DoMulti), and gets decisions as arrays, as under
// RESP2; after RL.REPLY MAP, as RESP3 maps.
func TestRueidisDefaults(t *testing.T) {
	s := startSluice(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}})
	if err != nil {
		t.Fatalf("rueidis with its default options: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	one, err := c.Do(ctx, c.B().Arbitrary("RL.TOKEN").Keys("rueidis:1").Args("20", "10", "1s").Build()).AsIntSlice()
	if err != nil || !slices.Equal(one, []int64{1, 20, 19, 0, 100}) {
		t.Errorf("one decision: %v, %v", one, err)
	}
	var cmds rueidis.Commands
	for _, cost := range []string{"5", "10", "10"} {
		cmds = append(cmds, c.B().Arbitrary("RL.TOKEN").Keys("upload:42").Args("20", "10", "1s", cost).Build())
	}
	var allowed []int64
	for _, r := range c.DoMulti(ctx, cmds...) {
		v, err := r.AsIntSlice()
		if err != nil {
			t.Fatalf("pipelined decision: %v", err)
		}
		allowed = append(allowed, v[0])
	}
	if !slices.Equal(allowed, []int64{1, 1, 0}) {
		t.Errorf("pipeline allowed %v; want [1 1 0]", allowed)
	}
	// A dedicated connection: RL.REPLY is the connection's, and rueidis
	// pools its connections.
	err = c.Dedicated(func(dc rueidis.DedicatedClient) error {
		if err := dc.Do(ctx, dc.B().Arbitrary("RL.REPLY").Args("MAP").Build()).Error(); err != nil {
			return err
		}
		m, err := dc.Do(ctx, dc.B().Arbitrary("RL.TOKEN").Keys("rueidis:2").Args("20", "10", "1s").Build()).AsIntMap()
		if err != nil || m["allowed"] != 1 || m["remaining"] != 19 {
			t.Errorf("RL.REPLY MAP, then a decision: %v, %v", m, err)
		}
		return nil
	})
	if err != nil {
		t.Errorf("RL.REPLY MAP: %v", err)
	}
	info, err := c.Do(ctx, c.B().ClientInfo().Build()).ToString()
	if err != nil || !strings.Contains(info, "lib-name=rueidis ") || !strings.Contains(info, "resp=3 ") {
		t.Errorf("CLIENT INFO = %q, %v", info, err)
	}
}
