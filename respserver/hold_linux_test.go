package respserver

import (
	"os"
	"testing"
	"time"
)

// owingUpstream owes replies on fd, or on nothing for -1.
type owingUpstream struct{ fd int }

func (owingUpstream) PollWith(func(int) error) {}
func (owingUpstream) Pump()                    {}
func (owingUpstream) Unpoll()                  {}
func (u owingUpstream) Owing() int             { return u.fd }

// The loop holds for the upstream's reply to a small round only: it ends
// the hold when the reply is readable, gives up holding for a while after
// maxMissed holds in a row found none, and does not hold for a round cut
// in parts or when nothing is owed.
func TestHoldUpstream(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	l := &loop{upstream: owingUpstream{int(r.Fd())}, smallRound: true}
	for i := range maxMissed {
		if l.holdUpstream() {
			t.Fatalf("hold %d ended with nothing to read", i+1)
		}
	}
	if l.holdOff.IsZero() || l.missed != 0 {
		t.Fatalf("after %d missed holds: holdOff %v, missed %d; want holding off", maxMissed, l.holdOff, l.missed)
	}
	if _, err := w.Write([]byte("+OK\r\n")); err != nil {
		t.Fatal(err)
	}
	if l.holdUpstream() {
		t.Error("held while holding off")
	}
	l.holdOff = time.Time{}
	if !l.holdUpstream() {
		t.Error("a reply to read did not end the hold")
	}
	l.smallRound = false
	if l.holdUpstream() {
		t.Error("held for a round cut in parts")
	}
	l.smallRound, l.upstream = true, owingUpstream{-1}
	if l.holdUpstream() {
		t.Error("held with nothing owed")
	}
}
