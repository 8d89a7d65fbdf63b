package fleet_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/fleet"
	"github.com/sluice-rl/sluice/internal/redistest"
)

const key = "sluice:fleet"

// clock is the local clock, moved by the test alone.
type clock struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func member(t *testing.T, client redis.UniversalClient, id string, clk *clock, log *slog.Logger) *fleet.Membership {
	t.Helper()
	m, err := fleet.New(fleet.Config{Client: client, Key: key, ID: id, Now: clk.Now, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func beat(t *testing.T, m *fleet.Membership) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Beat(ctx); err != nil {
		t.Fatal(err)
	}
}

// Three sidecars on one Redis learn that they are three; one that leaves
// is counted out at the others' next beat; the key expires a window
// after the last beat.
func TestFleetCounts(t *testing.T) {
	r := redistest.Start(t)
	client := newClient(t, r.Addr)
	clk := &clock{now: time.Unix(1e9, 0)}
	a, b, c := member(t, client, "a", clk, nil), member(t, client, "b", clk, nil), member(t, client, "c", clk, nil)
	if a.Sidecars() != 1 || !a.Stats().Learned.IsZero() {
		t.Fatalf("before any beat: %+v; want 1 sidecar, never learned", a.Stats())
	}
	for i, m := range []*fleet.Membership{a, b, c} {
		beat(t, m)
		if got := m.Sidecars(); got != i+1 {
			t.Errorf("sidecar %d after its first beat: %d; want %d", i, got, i+1)
		}
	}
	beat(t, a)
	if a.Sidecars() != 3 || a.Stats().Learned != clk.Now() {
		t.Errorf("a after the others' beats: %+v; want 3, learned now", a.Stats())
	}
	ctx := context.Background()
	if err := c.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Second) // past the rise-only window of a's first beat
	beat(t, a)
	if a.Sidecars() != 2 {
		t.Errorf("a after c left: %d; want 2", a.Sidecars())
	}
	if ttl := client.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 3*time.Second {
		t.Errorf("the key's TTL %v; want at most a window, 3s", ttl)
	}
	if f := a.Info(); f[2] != [2]string{"fleet_sidecars", "2"} || f[3] != [2]string{"fleet_learned_ms_ago", "0"} || f[1][1] != "a" {
		t.Errorf("INFO fields %v", f)
	}
}

// A member that no beat refreshed for a window (three periods, on Redis's
// clock) is no longer counted; a younger one is.
func TestFleetDropsTheSilent(t *testing.T) {
	r := redistest.Start(t)
	client := newClient(t, r.Addr)
	ctx := context.Background()
	now, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ms := now.UnixMilli()
	client.ZAdd(ctx, key, redis.Z{Score: float64(ms - 3500), Member: "gone"}, redis.Z{Score: float64(ms - 2000), Member: "quiet"})
	m := member(t, client, "me", &clock{now: time.Unix(1e9, 0)}, nil)
	beat(t, m)
	if m.Sidecars() != 2 {
		t.Errorf("%d sidecars; want 2: me, and quiet (2s silent); not gone (3.5s)", m.Sidecars())
	}
	if left := client.ZRange(ctx, key, 0, -1).Val(); strings.Join(left, ",") != "quiet,me" {
		t.Errorf("members %v; want quiet,me", left)
	}
}

// Through an outage the count learned is kept; just after it, while the
// others' members come back one beat at a time, the count only rises,
// for a window; then it follows Redis's again.
func TestFleetKeepsCountThroughOutage(t *testing.T) {
	r := redistest.Start(t)
	client := newClient(t, r.Addr)
	clk := &clock{now: time.Unix(1e9, 0)}
	log, logs := bufferLog()
	a, b, c := member(t, client, "a", clk, log), member(t, client, "b", clk, nil), member(t, client, "c", clk, nil)
	beat(t, b)
	beat(t, c)
	beat(t, a)
	learned := a.Stats().Learned
	r.Kill()
	clk.Advance(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err := a.Beat(ctx)
	cancel()
	if err == nil {
		t.Fatal("a beat on a dead Redis succeeded")
	}
	if st := a.Stats(); st.Sidecars != 3 || st.Learned != learned || st.Failures != 1 {
		t.Errorf("during the outage: %+v; want 3 kept, learned as before, 1 failure", st)
	}
	if out := logs(); strings.Contains(out, "level=WARN") {
		t.Errorf("an outage warned; it is the store's to log:\n%s", out)
	}
	r.Restart() // empty: every member is gone
	beat(t, a)
	if a.Sidecars() != 3 {
		t.Errorf("first beat after the outage, alone in the key: %d; want 3 kept", a.Sidecars())
	}
	clk.Advance(2 * time.Second)
	beat(t, a)
	if a.Sidecars() != 3 {
		t.Errorf("within the window after the outage: %d; want 3 kept", a.Sidecars())
	}
	clk.Advance(time.Second) // the window has passed; b and c never came back
	beat(t, a)
	if a.Sidecars() != 1 {
		t.Errorf("a window after the outage, alone: %d; want 1", a.Sidecars())
	}
}

// A beat Redis refuses (an ACL user without the commands; the key of
// another type) fails, the count stays 1, and one warning names what to
// grant, however many beats fail.
func TestFleetRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup []string // run on Redis first
		user  string
		want  string
	}{
		{"an ACL without ZCARD", []string{"ACL", "SETUSER", "nozcard", "on", ">pw", "~*", "+@all", "-zcard"}, "nozcard", "NOPERM"},
		{"the key of another type", []string{"SET", key, "mine"}, "", "WRONGTYPE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := redistest.Start(t)
			if _, err := r.Do(tc.setup...); err != nil {
				t.Fatal(err)
			}
			opts := &redis.Options{Addr: r.Addr, MaxRetries: -1}
			if tc.user != "" {
				opts.Username, opts.Password = tc.user, "pw"
			}
			client := redis.NewClient(opts)
			t.Cleanup(func() { client.Close() })
			log, logs := bufferLog()
			m := member(t, client, "a", &clock{now: time.Unix(1e9, 0)}, log)
			for range 3 {
				if err := m.Beat(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("beat: %v; want %s", err, tc.want)
				}
			}
			out := logs()
			if m.Sidecars() != 1 || strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "ZCARD") {
				t.Errorf("%d sidecars; log:\n%s\nwant 1, and one warning naming ZCARD", m.Sidecars(), out)
			}
		})
	}
}

// bufferLog is a logger and what it wrote so far.
func bufferLog() (*slog.Logger, func() string) {
	var mu sync.Mutex
	var b bytes.Buffer
	return slog.New(slog.NewTextHandler(lockedWriter{&mu, &b}, nil)), func() string {
		mu.Lock()
		defer mu.Unlock()
		return b.String()
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// On Cluster the beats go to the key's master, TIME included.
func TestFleetCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	clk := &clock{now: time.Unix(1e9, 0)}
	a, b := member(t, client, "a", clk, nil), member(t, client, "b", clk, nil)
	beat(t, a)
	beat(t, b)
	beat(t, a)
	if a.Sidecars() != 2 || b.Sidecars() != 2 {
		t.Errorf("a %d, b %d; want 2 each", a.Sidecars(), b.Sidecars())
	}
	out, err := cl.MasterOf(key).Do("ZCARD", key)
	if err != nil || out != "2" {
		t.Errorf("ZCARD at the key's master: %q %v; want 2", out, err)
	}
}

// Through Sentinel the beats go to the master the sentinels name.
func TestFleetSentinel(t *testing.T) {
	st := redistest.StartSentinel(t)
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.Name, SentinelAddrs: st.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	clk := &clock{now: time.Unix(1e9, 0)}
	a, b := member(t, client, "a", clk, nil), member(t, client, "b", clk, nil)
	beat(t, a)
	beat(t, b)
	beat(t, a)
	if a.Sidecars() != 2 || b.Sidecars() != 2 {
		t.Errorf("a %d, b %d; want 2 each", a.Sidecars(), b.Sidecars())
	}
	if out, err := st.Master.Do("ZCARD", key); err != nil || out != "2" {
		t.Errorf("ZCARD at the master: %q %v; want 2", out, err)
	}
}

// Run beats at once and every period until cancelled; a member's id
// names its host and process, and is unique past that.
func TestFleetRun(t *testing.T) {
	r := redistest.Start(t)
	client := newClient(t, r.Addr)
	m, err := fleet.New(fleet.Config{Client: client, Key: key, Period: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	// A beat is bounded by the period, 20ms, which a loaded machine
	// may overrun now and then: one that succeeds is what is waited for.
	for (m.Stats().Beats < 3 || m.Stats().Learned.IsZero()) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if st := m.Stats(); st.Beats < 3 || st.Learned.IsZero() {
		t.Fatalf("%+v; want 3 beats or more within 5s, one of them learning", st)
	}
	if score := client.ZScore(context.Background(), key, m.ID()); score.Err() != nil {
		t.Errorf("the member %q is not in the key: %v", m.ID(), score.Err())
	}
	host, _ := os.Hostname()
	twin, _ := fleet.New(fleet.Config{Client: client, Key: key})
	if !strings.HasPrefix(m.ID(), host+":"+strconv.Itoa(os.Getpid())+":") || twin.ID() == m.ID() {
		t.Errorf("members %q and %q; want the host, this pid, and each its own random part", m.ID(), twin.ID())
	}
}
