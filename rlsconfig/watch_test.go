package rlsconfig

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

type reload struct {
	cfg *Config
	err error
}

// startWatcher runs a Watcher on dir until the test ends, and returns it
// with the reloads it reports, after the first one: the watches are then in
// place.
func startWatcher(t *testing.T, dir string) (*Watcher, <-chan reload) {
	t.Helper()
	ch := make(chan reload, 100)
	w, err := NewWatcher(WatchConfig{
		Dir:      dir,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Debounce: 10 * time.Millisecond,
		OnReload: func(c *Config, err error) { ch <- reload{c, err} },
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(t, w.Run)
	waitReload(t, ch, func(reload) bool { return true })
	return w, ch
}

// runUntilEnd runs a watcher's Run until the test ends.
func runUntilEnd(t *testing.T, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// waitReload waits for a reload that satisfies ok.
func waitReload(t *testing.T, ch <-chan reload, ok func(reload) bool) reload {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-ch:
			if ok(r) {
				return r
			}
		case <-deadline:
			t.Fatal("no such reload within 10s")
		}
	}
}

// replaceFile writes a file the way an editor or a deploy tool does: a
// new file renamed over the old one.
func replaceFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	writeFile(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func domains(c *Config) string { return strings.Join(c.Domains(), ",") }

func TestWatchReloadsAndKeepsTheOldOnError(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "domain: one\n")
	w, ch := startWatcher(t, dir)
	if got := domains(w.Current()); got != "one" {
		t.Fatalf("domains %s", got)
	}

	replaceFile(t, filepath.Join(dir, "a.yaml"), "domain: two\n")
	waitReload(t, ch, func(r reload) bool { return r.err == nil && domains(r.cfg) == "two" })

	// A broken file: the error is reported, the old configuration stays.
	replaceFile(t, filepath.Join(dir, "a.yaml"), "domain: three\ndescriptors:\n  - key: k\n    ratelimit: {}\n")
	r := waitReload(t, ch, func(r reload) bool { return r.err != nil })
	if want := filepath.Join(dir, "a.yaml") + ":4: config error, unknown key 'ratelimit'"; r.err.Error() != want {
		t.Fatalf("error %v, want %s", r.err, want)
	}
	if got := domains(w.Current()); got != "two" {
		t.Fatalf("after a broken file: domains %s, want two", got)
	}

	// Fixed: taken.
	replaceFile(t, filepath.Join(dir, "a.yaml"), "domain: four\n")
	waitReload(t, ch, func(r reload) bool { return r.err == nil && domains(r.cfg) == "four" })

	// A new file, written in place.
	writeFile(t, filepath.Join(dir, "b.yaml"), "domain: five\n")
	waitReload(t, ch, func(r reload) bool { return r.err == nil && domains(r.cfg) == "five,four" })
}

// TestWatchConfigMapSwap lays a directory out as the kubelet lays out a
// mounted ConfigMap and updates it the way the kubelet does: the files are
// symlinks through ..data, and an update swaps ..data atomically.
func TestWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, domain string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "limits.yaml"), "domain: "+domain+"\n")
	}
	version("..2026_01_01_00_00_00.1", "v1")
	if err := os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/limits.yaml", filepath.Join(dir, "limits.yaml")); err != nil {
		t.Fatal(err)
	}
	w, ch := startWatcher(t, dir)
	if got := domains(w.Current()); got != "v1" {
		t.Fatalf("domains %s, want v1 (the ..data directory must not be read twice)", got)
	}

	version("..2026_01_02_00_00_00.2", "v2")
	if err := os.Symlink("..2026_01_02_00_00_00.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	waitReload(t, ch, func(r reload) bool { return r.err == nil && domains(r.cfg) == "v2" })
}

// TestWatchDirectorySymlinkSwap replaces the directory itself, the peer's
// default way (its runtime root is a symlink that a deploy repoints).
func TestWatchDirectorySymlinkSwap(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		if err := os.Mkdir(filepath.Join(root, v), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(root, v, "limits.yaml"), "domain: "+v+"\n")
	}
	link := filepath.Join(root, "current")
	if err := os.Symlink("v1", link); err != nil {
		t.Fatal(err)
	}
	w, ch := startWatcher(t, link)
	if got := domains(w.Current()); got != "v1" {
		t.Fatalf("domains %s", got)
	}
	if err := os.Symlink("v2", filepath.Join(root, "next")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, "next"), link); err != nil {
		t.Fatal(err)
	}
	waitReload(t, ch, func(r reload) bool { return r.err == nil && domains(r.cfg) == "v2" })

	// And the new target is watched.
	replaceFile(t, filepath.Join(root, "v2", "limits.yaml"), "domain: v2b\n")
	waitReload(t, ch, func(r reload) bool { return r.err == nil && domains(r.cfg) == "v2b" })
}

func TestWatcherStartsOnlyOnAGoodConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "domain: d\nbogus: 1\n")
	if _, err := NewWatcher(WatchConfig{Dir: dir}); err == nil {
		t.Fatal("a broken directory started")
	}
	if _, err := NewWatcher(WatchConfig{}); err == nil {
		t.Fatal("no directory started")
	}
}

// TestWatcherConcurrentUse looks rules up while the configuration is
// reloaded, for the race detector.
func TestWatcherConcurrentUse(t *testing.T) {
	dir := t.TempDir()
	src := func(n int) string {
		return "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + itoa(int64(n)) + "}\n"
	}
	writeFile(t, filepath.Join(dir, "a.yaml"), src(1))
	w, err := NewWatcher(WatchConfig{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r, ok := w.Current().Lookup("d", e("k", "v")); !ok || r.RequestsPerUnit == 0 {
					t.Errorf("lookup during reload: %v %+v", ok, r)
					return
				}
			}
		}()
	}
	for n := 2; n < 50; n++ {
		writeFile(t, filepath.Join(dir, "a.yaml"), src(n))
		if err := w.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if r, _ := w.Current().Lookup("d", e("k", "v")); r.RequestsPerUnit != 49 {
		t.Fatalf("last reload not in use: %d", r.RequestsPerUnit)
	}
}

// TestWatchSeesSameSizeAndTime: a file replaced by one of the same size
// and modification time (touch -r, then mv) is a change all the same.
func TestWatchSeesSameSizeAndTime(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	writeFile(t, path, "domain: one\n")
	_, ch := startWatcher(t, dir)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".tmp-a.yaml")
	writeFile(t, tmp, "domain: two\n")
	if err := os.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitReload(t, ch, func(r reload) bool { return r.err == nil && domains(r.cfg) == "two" })
}
