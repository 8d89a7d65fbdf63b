package policy

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

const (
	nine  = "policies:\n  api:\n    algorithm: fixed_window\n    limit: 9\n    period: 1m\n"
	three = "policies:\n  api:\n    algorithm: fixed_window\n    limit: 3\n    period: 1m\n"
)

// watching starts Watch on a file holding first; it stops with the test.
func watching(t *testing.T, first string, every time.Duration, reload chan struct{}) (*Live, string) {
	t.Helper()
	live, path := loaded(t, first)
	watch(t, live, path, every, reload)
	return live, path
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

// watch runs live.Watch on path until the test ends.
func watch(t *testing.T, live *Live, path string, every time.Duration, reload chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		live.Watch(ctx, WatchConfig{Path: path, Every: every, Reload: reload, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	t.Cleanup(func() { cancel(); <-done })
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
	live, path := watching(t, nine, 5*time.Millisecond, nil)
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
	reload := make(chan struct{})
	live, path := watching(t, nine, 0, reload)
	if err := os.WriteFile(path, []byte("policies:\n  api: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reload <- struct{}{}
	reload <- struct{}{} // the first is handled once the second is taken
	if got := limitOf(live); got != 9 {
		t.Fatalf("after a broken file, limit %d; want the 9 in use kept", got)
	}
	if err := os.WriteFile(path, []byte(three), 0o644); err != nil {
		t.Fatal(err)
	}
	reload <- struct{}{}
	reload <- struct{}{}
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go live.Watch(ctx, WatchConfig{Path: path, Every: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
	watch(t, live, path, 5*time.Millisecond, nil)
	if !eventually(t, func() bool { return limitOf(live) == 3 }) {
		t.Fatalf("limit still %d: the file changed before Watch started and was never reloaded", limitOf(live))
	}
}
