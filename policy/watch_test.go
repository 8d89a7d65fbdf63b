package policy

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/watch"
)

const (
	nine  = "policies:\n  api:\n    algorithm: fixed_window\n    limit: 9\n    period: 1m\n"
	three = "policies:\n  api:\n    algorithm: fixed_window\n    limit: 3\n    period: 1m\n"
)

// watching starts a Watcher on a file holding first; it stops with the
// test.
func watching(t *testing.T, first string, poll time.Duration) (*Live, *watch.Watcher, string) {
	t.Helper()
	live, path := loaded(t, first)
	return live, watchFile(t, live, path, poll), path
}

// loaded writes content to a file and loads it.
func loaded(t *testing.T, content string) (*Live, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return NewLive(set), path
}

// watchFile runs live's Watcher of path until the test ends.
func watchFile(t *testing.T, live *Live, path string, poll time.Duration) *watch.Watcher {
	t.Helper()
	w, err := live.Watcher(WatchConfig{Path: path, Poll: poll, Debounce: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func limitOf(l *Live) int64 {
	p, _ := l.Lookup("api")
	return p.Limit.Rate
}

// eventually waits for cond, polling: the watcher runs on its own ticker.
func eventually(t *testing.T, cond func() bool) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// TestWatchSeesSameSizeAndTime: a replacement with the same size and
// modification time (touch -r, then mv) is a change all the same.
func TestWatchSeesSameSizeAndTime(t *testing.T) {
	live, _, path := watching(t, nine, 0)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	next := path + ".new"
	if err := os.WriteFile(next, []byte(three), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(next, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	if !eventually(t, func() bool { return limitOf(live) == 3 }) {
		t.Fatalf("limit still %d: the same-size, same-time replacement was not reloaded", limitOf(live))
	}
}

// TestWatchKeepsPoliciesOnABrokenFile, and takes the next good one.
func TestWatchKeepsPoliciesOnABrokenFile(t *testing.T) {
	live, w, path := watching(t, nine, 0)
	if err := os.WriteFile(path, []byte("policies:\n  api: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Reload of a broken file: %v; want an error naming the file", err)
	}
	if got := limitOf(live); got != 9 {
		t.Fatalf("after a broken file, limit %d; want the 9 in use kept", got)
	}
	if err := os.WriteFile(path, []byte(three), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := limitOf(live); got != 3 {
		t.Fatalf("after a good file and a reload, limit %d; want 3", got)
	}
}

// TestWatchFollowsASymlinkSwap, as a ConfigMap volume updates: the file is
// a link into a directory that is replaced by swapping another link.
func TestWatchFollowsASymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"v1": nine, "v2": three} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "policies.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("v1", filepath.Join(dir, "..data")))
	must(os.Symlink(filepath.Join("..data", "policies.yaml"), filepath.Join(dir, "policies.yaml")))
	path := filepath.Join(dir, "policies.yaml")
	set, err := Load(path)
	must(err)
	live := NewLive(set)
	watchFile(t, live, path, 0) // no polling: the notifications see the swap
	must(os.Symlink("v2", filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	if !eventually(t, func() bool { return limitOf(live) == 3 }) {
		t.Fatalf("limit still %d after the ConfigMap-style swap", limitOf(live))
	}
}

// TestWatchComparesWithTheLoadedFile: a change made between Load and the
// watcher's start (a busy machine starts the goroutine late) is a change
// too: the watcher compares with what the set in use was parsed from,
// not with what it happens to read when it starts.
func TestWatchComparesWithTheLoadedFile(t *testing.T) {
	live, path := loaded(t, nine)
	if err := os.WriteFile(path, []byte(three), 0o644); err != nil {
		t.Fatal(err)
	}
	watchFile(t, live, path, 0)
	if !eventually(t, func() bool { return limitOf(live) == 3 }) {
		t.Fatalf("limit still %d: the file changed before Watch started and was never reloaded", limitOf(live))
	}
}

// TestWatchTellsOfReloads: OnReload runs after a reload put new policies
// in use (the sidecar drops its grants then), not for a broken file.
func TestWatchTellsOfReloads(t *testing.T) {
	live, path := loaded(t, nine)
	var reloads atomic.Int32
	w, err := live.Watcher(WatchConfig{Path: path, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnReload: func() { reloads.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("policies:\n  api: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err == nil || reloads.Load() != 0 {
		t.Fatalf("a broken file: %v, %d reloads told", err, reloads.Load())
	}
	if err := os.WriteFile(path, []byte(three), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err != nil || reloads.Load() != 1 {
		t.Fatalf("a good file: %v, %d reloads told; want 1", err, reloads.Load())
	}
}
