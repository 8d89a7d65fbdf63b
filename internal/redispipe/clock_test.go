package redispipe

import (
	"testing"
	"time"
)

// TestRedisClock runs the offset estimator over samples on made-up
// clocks: Redis's clock is this one plus a true offset, and each reply
// says what Redis read somewhere within its round trip. The estimate
// keeps the smallest round trip, so a slow or paused round trip does not
// move it; a clock that steps replaces it; and the deadline it sends is
// never before the caller's deadline on Redis's true clock, whatever
// instant within the round trip Redis read.
func TestRedisClock(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	margin := clockMargin.Microseconds()
	type reply struct {
		sent, got float64 // ms after t0, this process's clock
		redisAt   float64 // when Redis read its clock, ms after t0 on this clock
		offset    int64   // Redis's clock minus this one, µs
	}
	for _, tc := range []struct {
		name    string
		replies []reply
		now     float64 // when the deadline is asked for
		offset  int64   // the true offset then
		// want: the offset estimate's error bound, µs (0: no estimate)
		wantErr int64
	}{
		{"no reply: no deadline", nil, 0, 0, 0},
		{"one reply", []reply{{0, 1, 0.5, 7_000_000}}, 2, 7_000_000, 501},
		{"Redis read its clock at the start of the round trip",
			[]reply{{0, 1, 0, -3_000_000}}, 2, -3_000_000, 501},
		{"the smallest round trip wins", []reply{
			{0, 4, 3.9, 250}, {10, 10.2, 10.01, 250}, {20, 23, 20.5, 250},
		}, 30, 250, 101},
		{"a paused Redis's reply does not move the estimate", []reply{
			{0, 0.1, 0.05, 1000}, {1, 2001, 2000.9, 1000},
		}, 2002, 1000, 51},
		{"a window later the old best still stands beside the new",
			[]reply{{0, 0.1, 0.05, 0}, {6000, 6004, 6002, 0}}, 6005, 0, 51},
		{"two windows later it is gone", []reply{
			{0, 0.1, 0.05, 0}, {6000, 6004, 6002, 0}, {12000, 12002, 12001, 0},
		}, 12003, 0, 1001},
		{"Redis's clock stepped ahead a second", []reply{
			{0, 0.1, 0.05, 0}, {100, 100.4, 100.2, 1_000_000},
		}, 101, 1_000_000, 201},
		{"Redis's clock stepped back a second", []reply{
			{0, 0.1, 0.05, 0}, {100, 100.4, 100.4, -1_000_000},
		}, 101, -1_000_000, 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Clock
			for _, r := range tc.replies {
				c.Observe(at(r.sent), at(r.got), at(r.redisAt).UnixMicro()+r.offset)
			}
			local := at(tc.now + 100) // a caller's deadline 100ms ahead
			got := c.deadlineAt(local, at(tc.now))
			if tc.wantErr == 0 {
				if got != 0 {
					t.Fatalf("deadline %d with no estimate; want 0 (none)", got)
				}
				return
			}
			truth := local.UnixMicro() + tc.offset
			// Never before the true deadline: a call Redis starts in time
			// is never late. At most twice the error and the margin after.
			if got < truth || got > truth+2*tc.wantErr+margin {
				t.Errorf("deadline %d is %d µs after the true one; want 0 to %d", got, got-truth, 2*tc.wantErr+margin)
			}
			c.mu.Lock()
			best, _ := c.bestLocked(at(tc.now))
			c.mu.Unlock()
			if best.err != tc.wantErr {
				t.Errorf("error bound %d µs, want %d", best.err, tc.wantErr)
			}
		})
	}
	var c Clock
	if d := c.deadlineAt(time.Time{}, t0); d != 0 {
		t.Errorf("no deadline: %d, want 0", d)
	}
	c.Observe(time.Time{}, t0, 1) // a call queued while dialing: no sample
	c.Observe(t0, t0.Add(-time.Millisecond), 1)
	if d := c.deadlineAt(t0, t0); d != 0 {
		t.Errorf("samples that are no round trip made an estimate: %d", d)
	}
}
