package redistest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// FillUntil writes 10kB values to s, each with a TTL, until done says
// so after a write (with its error), failing tb on any other error: what
// fills a Redis under maxmemory until it refuses writes (OOM) or evicts.
func (s *Server) FillUntil(tb testing.TB, done func(c *redis.Client, err error) bool) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	v := strings.Repeat("x", 10_000)
	for i := range 10_000 {
		err := c.Set(context.Background(), fmt.Sprint("fill:", i), v, time.Hour).Err()
		if done(c, err) {
			return
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	tb.Fatal("10,000 writes of 10kB and no end")
}

// LogBuffer is a bytes.Buffer that goroutines may share (go-redis's pool
// and a store log from goroutines of their own), and that tells of its
// first write: a test waits on the line itself, not polls.
type LogBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{} // guarded by mu; closed once something is written
}

func (b *LogBuffer) Write(p []byte) (int, error) {
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

// Written is closed once something is written.
func (b *LogBuffer) Written() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sig()
}

// sig is the channel Written returns, made at first need; mu is held.
func (b *LogBuffer) sig() chan struct{} {
	if b.wrote == nil {
		b.wrote = make(chan struct{})
	}
	return b.wrote
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
