package lograte

import (
	"sync"
	"testing"
	"time"
)

// TestAllow: said at once, then not again until every has passed, and
// then with the count of the times in between.
func TestAllow(t *testing.T) {
	l := New(time.Second)
	t0 := time.Unix(1_800_000_000, 0)
	steps := []struct {
		at     time.Duration
		ok     bool
		unsaid int64
	}{
		{0, true, 0},
		{10 * time.Millisecond, false, 0},
		{999 * time.Millisecond, false, 0},
		{time.Second, true, 2},
		{time.Second, false, 0},
		{3 * time.Second, true, 1},
	}
	for i, s := range steps {
		unsaid, ok := l.Allow(t0.Add(s.at))
		if ok != s.ok || unsaid != s.unsaid {
			t.Fatalf("step %d at %v: Allow = %d, %v; want %d, %v", i, s.at, unsaid, ok, s.unsaid, s.ok)
		}
	}
}

// TestAllowConcurrent: of many goroutines asking at once, one is let
// through, and the others are all counted for the next line.
func TestAllowConcurrent(t *testing.T) {
	l := New(time.Hour)
	now := time.Unix(1_800_000_000, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	said := 0
	for range 64 {
		wg.Go(func() {
			if _, ok := l.Allow(now); ok {
				mu.Lock()
				said++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if said != 1 {
		t.Fatalf("said %d times, want 1", said)
	}
	if unsaid, ok := l.Allow(now.Add(time.Hour)); !ok || unsaid != 63 {
		t.Fatalf("after the hour: Allow = %d, %v; want 63, true", unsaid, ok)
	}
}
