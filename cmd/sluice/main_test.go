package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/settings"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFlagsAndEnv(t *testing.T) {
	var out bytes.Buffer
	c, err := parseFlags(nil, envOf(nil), &out)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:6380" || c.Upstream != "" || c.LogLevel != slog.LevelInfo || c.LogFormat != "text" ||
		c.KeyPrefix != "sluice:" || c.IOLoops != 1 || c.OnFailure != engine.FailLocal {
		t.Errorf("defaults = %+v", c)
	}
	policies := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(policies, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := envOf(map[string]string{"SLUICE_LISTEN": "127.0.0.1:7000", "SLUICE_UPSTREAM": "redis://r:6379",
		"SLUICE_POLICIES": policies, "SLUICE_REQUIREPASS": "pw", "SLUICE_LOG_LEVEL": "debug", "SLUICE_LOG_FORMAT": "json",
		"SLUICE_ON_UPSTREAM_FAILURE": "deny", "SLUICE_UPSTREAM_TIMEOUT": "250ms", "SLUICE_MAX_KEYS": "7"})
	c, err = parseFlags([]string{"--listen", "127.0.0.1:7001"}, env, &out)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:7001" || c.Upstream != "redis://r:6379" || c.Policies != policies ||
		c.RequirePass != "pw" || c.LogLevel != slog.LevelDebug || c.LogFormat != "json" ||
		c.OnFailure != engine.FailClosed || c.UpstreamTimeout.String() != "250ms" || c.MaxKeys != 7 {
		t.Errorf("env and flags = %+v", c)
	}
	if _, err := parseFlags([]string{"extra"}, envOf(nil), &out); err == nil {
		t.Error("a positional argument was accepted")
	}
	if c, err := parseFlags([]string{"--io-loops", "0"}, envOf(nil), &out); err != nil || c.IOLoops != 0 {
		t.Errorf("--io-loops 0: %d, %v; want a goroutine per connection", c.IOLoops, err)
	}
	if _, err := parseFlags(nil, envOf(map[string]string{"SLUICE_MAX_KEYS": "many"}), &out); err == nil ||
		!strings.Contains(err.Error(), "SLUICE_MAX_KEYS") {
		t.Errorf("a bad variable: %v; want an error naming it", err)
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, envOf(nil), &out, &errs); code != 0 {
		t.Errorf("--help exit code %d", code)
	}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c := settings.Default()
	c.Register(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(out.String(), "  --"+f.Name+" ") {
			t.Errorf("--help does not list --%s", f.Name)
		}
	})
	for _, want := range []string{"SLUICE_LISTEN", "SLUICE_UPSTREAM", "redis+sentinel://", "redis+cluster://", "in-memory", "(default 10000)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help does not mention %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\n  -listen") {
		t.Error("--help writes flags with one dash, unlike docs/running.md")
	}
}

func TestVersion(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, envOf(nil), &out, &errs); code != 0 {
		t.Errorf("--version exit code %d", code)
	}
	if !strings.HasPrefix(out.String(), "sluice ") || len(strings.TrimSpace(out.String())) <= len("sluice ") {
		t.Errorf("--version printed %q", out.String())
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	notSocket := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notSocket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, 2, "refusing to listen on"},
		{[]string{"--listen", ":0"}, 2, "without a password"},
		{[]string{"--listen", "nonsense"}, 2, "invalid --listen"},
		{[]string{"--listen", "unix:"}, 2, "want unix:PATH"},
		{[]string{"--listen", "127.0.0.1:0", "--listen-perm", "660"}, 2, "it applies to a Unix socket"},
		{[]string{"--listen", "unix:/run/x.sock", "--listen-perm", "rw"}, 2, `invalid --listen-perm "rw"`},
		{[]string{"--listen", "unix:/run/x.sock", "--listen-perm", "1777"}, 2, `invalid --listen-perm "1777"`},
		{[]string{"--listen", "unix:" + notSocket, "--admin-listen", "off"}, 1, "the path exists and is not a socket"},
		{[]string{"--log-level", "loud"}, 2, `invalid --log-level "loud": must be debug, info, warn or error`},
		{[]string{"--log-format", "xml"}, 2, "invalid --log-format"},
		{[]string{"--policies", "/nonexistent/p.yaml"}, 2, `invalid --policies "/nonexistent/p.yaml": no such file or directory`},
		{[]string{"--listen", "127.0.0.1:0", "--admin-listen", "off", "--policies", notSocket}, 1, notSocket},
		{[]string{"--upstream", "http://x"}, 2, `invalid --upstream "http://x": scheme must be redis`},
		{[]string{"--bogus"}, 2, "flag provided but not defined: -bogus; sluice --help lists the flags\n"},
		{[]string{"--on-upstream-failure", "maybe"}, 2, "must be allow, deny or local"},
		{[]string{"--policies-poll", "-1s"}, 2, "invalid --policies-poll"},
		{[]string{"--upstream-timeout", "0s"}, 2, "invalid --upstream-timeout"},
		{[]string{"--io-loops", "-1"}, 2, "invalid --io-loops \"-1\": must be a positive integer, or 0"},
		{[]string{"--max-clients", "0"}, 2, "invalid --max-clients \"0\": must be a positive integer"},
	} {
		var out, errs bytes.Buffer
		code := run(context.Background(), tc.args, envOf(nil), &out, &errs)
		if code != tc.code || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("run(%q) = %d, %q; want %d and %q", tc.args, code, errs.String(), tc.code, tc.want)
		}
		if tc.code == 2 && strings.Contains(errs.String(), "Usage:") {
			t.Errorf("run(%q) printed the whole usage for one mistake", tc.args)
		}
	}
}

// TestTuneGC: the collector's target is Sluice's default unless GOGC is
// set, in which case Go's own reading of it stands.
func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	tuneGC(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("GOGC unset: GC percent %d; want %d", got, defaultGCPercent)
	}
	tuneGC(func(k string) string {
		if k == "GOGC" {
			return "100"
		}
		return ""
	})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=100: GC percent %d; want it left alone", got)
	}
}

// Go's memory limit follows the settings when GOMEMLIMIT is unset (never
// above the input budget and an eighth, the store, the deny cache and a
// base), and is left alone when it is set.
func TestLimitMemoryFollowsTheSettings(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	cfg := settings.Default()
	cfg.MaxInputMemory = 64 << 20
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	debug.SetMemoryLimit(math.MaxInt64)
	limitMemory(log, cfg, func(string) string { return "" })
	want := int64(64<<20+8<<20) + int64(cfg.MaxKeys)*bytesPerKey + int64(cfg.DenyCacheSize)*bytesPerRefusal + baseMemory +
		int64(cfg.MaxReservations)*bytesPerReservation
	noHTTP := debug.SetMemoryLimit(-1)
	if noHTTP > want {
		t.Errorf("memory limit %d with GOMEMLIMIT unset; want at most %d, from the settings", noHTTP, want)
	}

	// The HTTP check's connections enter it, as its buffers are outside
	// the input budget.
	cfg.HTTPListen = "127.0.0.1:0"
	debug.SetMemoryLimit(math.MaxInt64)
	limitMemory(log, cfg, func(string) string { return "" })
	// (A container's limit below the settings' bound caps both alike.)
	withHTTP := want + int64(cfg.HTTPMaxConns)*httpConnBytes
	if got := debug.SetMemoryLimit(-1); got > withHTTP || (noHTTP == want && got != withHTTP) {
		t.Errorf("memory limit %d with the HTTP check; want %d, the settings' and its connections'", got, withHTTP)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	limitMemory(log, cfg, func(k string) string {
		if k == "GOMEMLIMIT" {
			return "1GiB"
		}
		return ""
	})
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("memory limit %d with GOMEMLIMIT set; want it left to the runtime", got)
	}
}
