package rlsconfig

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

// largeConfig is a generated configuration as gateways write them: n
// descriptors, each a route value with a nested user key, rate per minute
// for every route. 20,000 of them are 2.5 MB.
func largeConfig(n, rate int) []byte {
	var b strings.Builder
	b.WriteString("domain: big\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - key: route\n    value: route-%06d\n    descriptors:\n      - key: user\n        rate_limit:\n          unit: minute\n          requests_per_unit: %d\n", i, rate)
	}
	return []byte(b.String())
}

// writeLarge writes largeConfig(n, rate) as big.yaml in dir.
func writeLarge(t testing.TB, dir string, n, rate int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "big.yaml"), largeConfig(n, rate), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Issue 29: a 20,000-descriptor file without an alias was refused as "too
// many nodes (aliases)". Files of 20,000 and 100,000 descriptors load,
// answer for their last descriptor, reload with a change, and a reload
// never holds up the lookups that go on meanwhile (they read the current
// configuration, never the one being built).
func TestLoadLargeWithoutAliases(t *testing.T) {
	for _, n := range []int{20_000, 100_000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			if n > 20_000 && testing.Short() {
				t.Skip("-short: 100,000 descriptors take seconds (minutes under -race)")
			}
			dir := t.TempDir()
			writeLarge(t, dir, n, 100)
			w, err := NewWatcher(WatchConfig{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			last := e("route", fmt.Sprintf("route-%06d", n-1), "user", "u1")
			if r, ok := w.Current().Lookup("big", last); !ok || r.RequestsPerUnit != 100 {
				t.Fatalf("lookup of the last descriptor = %+v, %v; want 100 a minute", r, ok)
			}

			writeLarge(t, dir, n, 200)
			// Lookups go on while the reload builds the new configuration.
			// Counted, not timed: on a shared machine one lookup can wait
			// for a core for a second; a lookup that waited for the reload
			// would leave one lookup done in its whole time.
			var during atomic.Int64
			reloading, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					default:
					}
					w.Current().Lookup("big", last)
					select {
					case <-reloading:
						during.Add(1)
					default:
					}
				}
			}()
			close(reloading)
			err = w.Reload()
			close(stop)
			<-done
			if err != nil {
				t.Fatal(err)
			}
			if r, ok := w.Current().Lookup("big", last); !ok || r.RequestsPerUnit != 200 {
				t.Fatalf("after reload, lookup = %+v, %v; want 200 a minute", r, ok)
			}
			if d := during.Load(); d < 10 {
				t.Errorf("%d lookups answered during the reload: they wait for it", d)
			}
		})
	}
}

// A file over maxFileBytes is refused before it is parsed, with its size.
func TestLoadRefusesAFileOverTheLimit(t *testing.T) {
	data := []byte("domain: d\n#" + strings.Repeat("x", maxFileBytes))
	_, err := Parse(File{Name: "x.yaml", Data: data})
	want := fmt.Sprintf("x.yaml:1: error loading config file: the file has %d bytes: at most 67108864 (64 MiB) are read", len(data))
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n got %v\nwant %s", err, want)
	}
}

// BenchmarkLoadLarge measures a load (a reload is the same load while the
// configuration in use stays held) and the live heap a loaded
// configuration keeps, for docs/gateways.md:
//
//	go test -run '^$' -bench LoadLarge -benchtime 5x ./rlsconfig
func BenchmarkLoadLarge(b *testing.B) {
	for _, n := range []int{20_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			dir := b.TempDir()
			writeLarge(b, dir, n, 100)
			st, err := os.Stat(filepath.Join(dir, "big.yaml"))
			if err != nil {
				b.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			held, err := Load(dir)
			if err != nil {
				b.Fatal(err)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			for b.Loop() {
				if _, err := Load(dir); err != nil {
					b.Fatal(err)
				}
			}
			runtime.KeepAlive(held)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MiB")
			b.ReportMetric(float64(st.Size())/(1<<20), "file-MiB")
		})
	}
}
