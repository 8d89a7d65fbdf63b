package rlsconfig

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRemoved(t *testing.T) {
	parse := func(files ...string) *Config {
		t.Helper()
		var fs []File
		for i, f := range files {
			fs = append(fs, File{Name: string(rune('a'+i)) + ".yaml", Data: []byte(f)})
		}
		c, err := Parse(fs...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	two := `domain: api.v1
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: path
        value: /a
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 100}
`
	oneRule := `domain: api.v1
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	other := "domain: web\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 9}\n"
	for _, tc := range []struct {
		name          string
		cur, next     *Config
		domains, rule []string
	}{
		{"nothing removed", parse(two, other), parse(two, other), nil, nil},
		{"a rule added", parse(oneRule), parse(two), nil, nil},
		{"rules removed", parse(two, other), parse(oneRule, other), nil, []string{"api.v1.ip", "api.v1.user.path_/a"}},
		{"a domain removed: named alone", parse(two, other), parse(other), []string{"api.v1"}, nil},
		{"everything", parse(two), parse(), []string{"api.v1"}, nil},
		{"from nothing", nil, parse(two), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, r := Removed(tc.cur, tc.next)
			if !slices.Equal(d, tc.domains) || !slices.Equal(r, tc.rule) {
				t.Fatalf("Removed: domains %q rules %q; want %q %q", d, r, tc.domains, tc.rule)
			}
		})
	}
}

// syncBuffer is a log destination the watcher's goroutine writes while
// the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWatchRefusesNoDomains: an emptied or truncated file does not lift
// every limit (issue 44); removing a domain or a rule is taken, with a
// warning naming what was removed; a watcher that started with no domain
// takes a reload to none.
func TestWatchRefusesNoDomains(t *testing.T) {
	start := func(t *testing.T, dir string) (*Watcher, <-chan reload, *syncBuffer) {
		logs := &syncBuffer{}
		ch := make(chan reload, 100)
		w, err := NewWatcher(WatchConfig{Dir: dir, Logger: slog.New(slog.NewTextHandler(logs, nil)),
			Debounce: 10 * time.Millisecond, OnReload: func(c *Config, err error) { ch <- reload{c, err} }})
		if err != nil {
			t.Fatal(err)
		}
		runUntilEnd(t, w.Run)
		waitReload(t, ch, func(reload) bool { return true })
		return w, ch, logs
	}
	rules := "domain: one\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n"

	t.Run("started with domains", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "a.yaml"), rules)
		writeFile(t, filepath.Join(dir, "b.yaml"), "domain: two\n")
		w, ch, logs := start(t, dir)

		// A rule removed: taken, and warned about.
		replaceFile(t, filepath.Join(dir, "a.yaml"), "domain: one\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
		waitReload(t, ch, func(r reload) bool { return r.err == nil && len(r.cfg.Rules()) == 1 })
		if !strings.Contains(logs.String(), `level=WARN msg="rls config: rules removed; their descriptors are no longer limited by them" rules=[one.b]`) {
			t.Fatalf("no warning for the removed rule:\n%s", logs)
		}
		// A domain removed: taken, and warned about.
		if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
			t.Fatal(err)
		}
		waitReload(t, ch, func(r reload) bool { return r.err == nil && domains(r.cfg) == "one" })
		if !strings.Contains(logs.String(), `msg="rls config: domains removed; their requests are no longer limited" domains=[two]`) {
			t.Fatalf("no warning for the removed domain:\n%s", logs)
		}
		// Truncated to nothing: an empty file is an error, as with the
		// peer; the rules in use are kept.
		replaceFile(t, filepath.Join(dir, "a.yaml"), "")
		waitReload(t, ch, func(r reload) bool { return r.err != nil })
		// The directory emptied: no file is wrong, but no domain is left:
		// refused, the rules in use kept.
		if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
			t.Fatal(err)
		}
		r := waitReload(t, ch, func(r reload) bool { return errors.Is(r.err, ErrNoDomains) })
		if !errors.Is(r.err, ErrNoDomains) || !strings.Contains(r.err.Error(), "(1 domains: one)") {
			t.Fatalf("error %v; want ErrNoDomains naming the domain kept", r.err)
		}
		if got := domains(w.Current()); got != "one" || len(w.Current().Rules()) != 1 {
			t.Fatalf("after truncation: domains %s, rules %q", got, w.Current().Rules())
		}
		// Restored: taken again.
		replaceFile(t, filepath.Join(dir, "a.yaml"), rules)
		waitReload(t, ch, func(r reload) bool { return r.err == nil && len(r.cfg.Rules()) == 2 })
	})

	t.Run("started without", func(t *testing.T) {
		dir := t.TempDir()
		w, ch, _ := start(t, dir)
		writeFile(t, filepath.Join(dir, "a.yaml"), rules)
		waitReload(t, ch, func(r reload) bool { return r.err == nil && domains(r.cfg) == "one" })
		if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
			t.Fatal(err)
		}
		waitReload(t, ch, func(r reload) bool { return r.err == nil && domains(r.cfg) == "" })
		if len(w.Current().Domains()) != 0 {
			t.Fatal("a watcher that started empty kept its domains")
		}
	})
}
