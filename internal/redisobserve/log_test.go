package redisobserve_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redisobserve"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// go-redis's own complaints come out as the process's structured log
// lines. A pool dial that fails makes go-redis log; here a client is
// pointed at a port nothing listens on. A failed dial is a debug line:
// the Observer's check names its cause at warn level.
func TestGoRedisLogsThroughSlog(t *testing.T) {
	var buf redistest.LogBuffer // go-redis's pool logs from goroutines of its own
	redisobserve.LogTo(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { redisobserve.LogTo(slog.Default()) })
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)), MaxRetries: -1,
		DialTimeout: 100 * time.Millisecond, MinIdleConns: 1})
	defer c.Close()
	_ = c.Ping(context.Background()).Err()
	select {
	case <-buf.Written():
	case <-time.After(3 * time.Second):
		t.Fatal("go-redis logged nothing for a pool that cannot dial")
	}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a go-redis line is not JSON: %q", line)
		}
		if rec["source"] != "go-redis" || rec["level"] != "DEBUG" {
			t.Errorf("go-redis line %q: want level DEBUG and source go-redis", line)
		}
	}
}
