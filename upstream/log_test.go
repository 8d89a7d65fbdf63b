package upstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/upstream"
)

// go-redis's own complaints come out as the process's structured log
// lines. A pool dial that fails makes go-redis log; here a client is
// pointed at a port nothing listens on. A failed dial is a debug line:
// the store's own check names its cause at warn level.
func TestGoRedisLogsThroughSlog(t *testing.T) {
	var buf lockedBuffer // go-redis's pool logs from goroutines of its own
	upstream.LogTo(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { upstream.LogTo(slog.Default()) })
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)), MaxRetries: -1,
		DialTimeout: 100 * time.Millisecond, MinIdleConns: 1})
	defer c.Close()
	_ = c.Ping(context.Background()).Err()
	select {
	case <-buf.written():
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

// lockedBuffer is a bytes.Buffer that goroutines may share, and that
// tells of its first write: a test waits on the line itself, not polls.
type lockedBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{} // guarded by mu; closed once something is written
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if b.buf.Len() > 0 {
		select {
		case <-b.sig():
		default:
			close(b.wrote)
		}
	}
	return n, err
}

// written is closed once something is written.
func (b *lockedBuffer) written() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sig()
}

// sig is the channel written returns, made at first need; mu is held.
func (b *lockedBuffer) sig() chan struct{} {
	if b.wrote == nil {
		b.wrote = make(chan struct{})
	}
	return b.wrote
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
