package watch

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// replaceSameSizeAndTime replaces path with data, which has the old
// content's size, keeping its modification time (touch -r, then mv).
func replaceSameSizeAndTime(t *testing.T, path, data string) {
	t.Helper()
	fi, err := os.Stat(path)
	must(t, err)
	if fi.Size() != int64(len(data)) {
		t.Fatalf("%q is not the old content's size", data)
	}
	next := path + ".new"
	write(t, next, data)
	must(t, os.Chtimes(next, fi.ModTime(), fi.ModTime()))
	must(t, os.Rename(next, path))
}

// configMap lays dir out as the kubelet lays out a mounted ConfigMap
// holding name: content: name is a link through ..data into a
// timestamped directory. Called again, it swaps ..data as the kubelet
// updates the volume.
func configMap(t *testing.T, dir, version, name, content string) {
	t.Helper()
	v := filepath.Join(dir, "..v"+version)
	must(t, os.Mkdir(v, 0o755))
	write(t, filepath.Join(v, name), content)
	must(t, os.Symlink("..v"+version, filepath.Join(dir, "..data_tmp")))
	must(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	if _, err := os.Lstat(filepath.Join(dir, name)); errors.Is(err, os.ErrNotExist) {
		must(t, os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)))
	}
}

// TestDigest: the digest tells contents apart where size and time do not,
// through a ConfigMap's links, for a file and for a directory.
func TestDigest(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	write(t, file, "limit: 9")
	nine := digest(file)
	replaceSameSizeAndTime(t, file, "limit: 3")
	if digest(file) == nine {
		t.Error("a same-size, same-time replacement has the same digest")
	}
	write(t, file, "limit: 9")
	if digest(file) != nine {
		t.Error("the same content has another digest")
	}

	dirNine := digest(dir)
	write(t, filepath.Join(dir, ".hidden"), "x")
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	if digest(dir) != dirNine {
		t.Error("a dot file or a subdirectory changed the directory's digest")
	}
	replaceSameSizeAndTime(t, file, "limit: 3")
	if digest(dir) == dirNine {
		t.Error("a directory whose file changed has the same digest")
	}

	cm := t.TempDir()
	configMap(t, cm, "1", "p.yaml", "limit: 9")
	before, beforeDir := digest(filepath.Join(cm, "p.yaml")), digest(cm)
	configMap(t, cm, "2", "p.yaml", "limit: 3")
	if digest(filepath.Join(cm, "p.yaml")) == before || digest(cm) == beforeDir {
		t.Error("a ConfigMap's ..data swap left the digest as it was")
	}
	if missing := digest(filepath.Join(dir, "nope")); missing == (Sum{}) || missing != digest(filepath.Join(dir, "nope")) {
		t.Error("a missing file's digest is zero or changes")
	}
}

// counting is a Config whose Apply counts its calls and fails while fail
// is set.
func counting(path string, log *bytes.Buffer) (Config, *atomic.Int64, *atomic.Bool) {
	var n atomic.Int64
	var fail atomic.Bool
	return Config{Path: path, What: "things", Logger: slog.New(slog.NewTextHandler(log, nil)), Apply: func() error {
		n.Add(1)
		if fail.Load() {
			return errors.New("broken")
		}
		return nil
	}}, &n, &fail
}

// TestCheckAppliesChangesOnly: only a new content is applied; a refused
// one is logged once, and the content in use stays until a good one.
func TestCheckAppliesChangesOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	write(t, path, "limit: 9")
	var log bytes.Buffer
	cfg, n, fail := counting(path, &log)
	cfg.Applied = digest(path)
	w, err := New(cfg)
	must(t, err)

	must(t, w.check(false))
	if n.Load() != 0 {
		t.Fatalf("the content in use was applied again: %d", n.Load())
	}
	replaceSameSizeAndTime(t, path, "limit: 3")
	must(t, w.check(false))
	if n.Load() != 1 {
		t.Fatalf("a same-size, same-time replacement was applied %d times; want 1", n.Load())
	}
	fail.Store(true)
	write(t, path, "limit: [")
	if err := w.check(false); err == nil {
		t.Fatal("a refused content reported no error")
	}
	must(t, w.check(false)) // the same refused content: not tried again
	must(t, w.check(false))
	if n.Load() != 2 || strings.Count(log.String(), "things not reloaded") != 1 {
		t.Fatalf("a refused content: applied %d times, logged:\n%s; want tried and logged once", n.Load(), log.String())
	}
	if err := w.Reload(); err == nil || n.Load() != 3 {
		t.Fatalf("Reload of a refused content: %v, %d; want it tried again", err, n.Load())
	}
	fail.Store(false)
	write(t, path, "limit: 3") // the content in use, which was kept: nothing to apply
	must(t, w.check(false))
	write(t, path, "limit: 5")
	must(t, w.check(false))
	must(t, w.check(false))
	if n.Load() != 4 {
		t.Fatalf("after a good content: applied %d times; want 4", n.Load())
	}
	must(t, w.Reload())
	if n.Load() != 5 {
		t.Fatal("Reload did not apply an unchanged content")
	}
	if _, err := New(Config{Path: path}); err == nil {
		t.Error("New took no Apply")
	}
}

// run starts w.Run until the test ends.
func run(t *testing.T, w *Watcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// eventually waits for cond, which Run's goroutine makes true.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

// TestRunFollowsAConfigMapSwap without polling: the notifications alone
// see the ..data swap, for a file in the volume and for the volume's
// directory.
func TestRunFollowsAConfigMapSwap(t *testing.T) {
	for _, watchDir := range []bool{false, true} {
		name := "file"
		if watchDir {
			name = "directory"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			configMap(t, dir, "1", "p.yaml", "limit: 9")
			path := filepath.Join(dir, "p.yaml")
			if watchDir {
				path = dir
			}
			var log bytes.Buffer
			cfg, n, _ := counting(path, &log)
			cfg.Debounce = 5 * time.Millisecond
			cfg.Fallback = time.Hour // were notifications not had, nothing would see the swap
			w, err := New(cfg)
			must(t, err)
			run(t, w)
			eventually(t, "the first apply", func() bool { return n.Load() == 1 })
			configMap(t, dir, "2", "p.yaml", "limit: 3")
			eventually(t, "an apply after the swap", func() bool { return n.Load() == 2 })
		})
	}
}

// TestRunPolls: with notifications from elsewhere only (a file behind a
// link into another directory, which Run does not watch), the poll sees
// the change.
func TestRunPolls(t *testing.T) {
	target := filepath.Join(t.TempDir(), "p.yaml")
	write(t, target, "limit: 9")
	link := filepath.Join(t.TempDir(), "p.yaml")
	must(t, os.Symlink(target, link))
	var log bytes.Buffer
	cfg, n, _ := counting(link, &log)
	cfg.Applied, cfg.Poll = digest(link), 5*time.Millisecond
	w, err := New(cfg)
	must(t, err)
	run(t, w)
	replaceSameSizeAndTime(t, target, "limit: 3")
	eventually(t, "an apply from the poll", func() bool { return n.Load() == 1 })
}

// TestStatus: a content that fails to load is visible in Status and INFO
// until the path holds a good one again, whether a new one or the one in
// use put back; the failures are counted.
func TestStatus(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	write(t, file, "good: 1")
	w, err := New(Config{Path: file, Applied: digest(file), Logger: slog.New(slog.DiscardHandler),
		Apply: func() error {
			data, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			if strings.HasPrefix(string(data), "bad") {
				return errors.New("line 1: not a policy\nline 2: neither")
			}
			return nil
		}})
	must(t, err)
	field := func(name string) string {
		for _, f := range w.Info("policies_") {
			if f[0] == "policies_"+name {
				return f[1]
			}
		}
		t.Fatalf("no INFO field policies_%s in %v", name, w.Info("policies_"))
		return ""
	}
	start := w.Status()
	if start.Loaded.IsZero() || start.Failing || start.Failures != 0 || field("digest") == "" {
		t.Fatalf("at start: %+v, digest %q", start, field("digest"))
	}
	inUse := field("digest")

	steps := []struct {
		name     string
		content  string
		failing  string
		failures string
		digest   string // "" for a new one
	}{
		{"a bad edit", "bad: 1", "1", "1", inUse},
		{"the same bad content again is not a new failure", "bad: 1", "1", "1", inUse},
		{"another bad edit", "bad: 2", "1", "2", inUse},
		{"the content in use put back", "good: 1", "0", "2", inUse},
		{"a bad edit once more", "bad: 3", "1", "3", inUse},
		{"a good new content", "good: 2", "0", "3", ""},
	}
	for _, st := range steps {
		write(t, file, st.content)
		_ = w.check(false)
		if got := field("reload_failing"); got != st.failing {
			t.Errorf("%s: reload_failing %s; want %s", st.name, got, st.failing)
		}
		if got := field("reload_failures"); got != st.failures {
			t.Errorf("%s: reload_failures %s; want %s", st.name, got, st.failures)
		}
		if d := field("digest"); (st.digest != "" && d != st.digest) || (st.digest == "" && d == inUse) {
			t.Errorf("%s: digest %s; in use before %s", st.name, d, inUse)
		}
	}
	if e := field("last_error"); e != "line 1: not a policy line 2: neither" {
		t.Errorf("last_error %q: want the last failure's error on one line", e)
	}
	if w.Status().LastFailure.IsZero() || field("last_failure_at") == "0" {
		t.Error("no time for the last failure")
	}
}
