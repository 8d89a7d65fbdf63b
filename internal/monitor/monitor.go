// Package monitor is Redis's MONITOR without the server: the hub that
// hands every command's line to the connections watching, and the line's
// format, byte for byte as Redis writes it:
//
//	+1767225600.000123 [0 127.0.0.1:50312] "RL.GCRA" "user:42" "5" "10" "1m" -> allowed=1 remaining=4 retry_after_ms=0 path=memory limit=gcra algorithm=gcra state="TAT now+200ms"
//
// respserver decides which commands are shown and when (a decision's line
// waits for its decision, see its monitor.go); this package keeps the
// watchers' backlogs under one lock and knows no connection, command or
// transport: a watcher is woken or dropped through Watcher.
//
// It costs nothing while no one watches: On is one atomic load, the one
// figure the decision path reads. While someone does, the connection that
// ran a command formats its line and Feed appends it to each watcher's
// backlog; the goroutine or loop serving the watcher takes it (Take),
// woken only when its backlog was empty. A watcher whose backlog passes
// MaxBacklog, because it reads slower than commands arrive, is dropped:
// it must not hold memory or the connections it watches.
package monitor

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/internal/resp"
)

// MaxBacklog bounds the lines waiting for one watcher: past it the
// watcher is dropped, and closed by its owner.
const MaxBacklog = 1 << 20

// A line is bounded so that no single command can make a watcher that
// keeps up fall behind: a line is at most a small share of MaxBacklog.
// Redis writes a 2 MB argument whole; here any client could then close
// every operator's MONITOR with one long command (a refused one too) and
// act unseen. An argument longer than MaxArgShown shows its first
// MaxArgShown bytes and its length, as error replies quote a value
// (resp.Quote); once a line passes MaxLine, the arguments after are
// counted, not shown.
const (
	MaxArgShown = 1 << 10
	MaxLine     = 32 << 10
)

// Watcher is a connection in MONITOR mode, as the hub sees it. The hub
// calls it under its lock, so it must not call the hub.
type Watcher interface {
	// Wake has the connection's owner take its lines soon (Take); it is
	// called when a line lands in an empty backlog.
	Wake()
	// Behind says the watcher's backlog passed MaxBacklog: it has been
	// dropped from the hub, and is to be closed.
	Behind(backlog int)
}

// Hub is the set of watchers. The zero value has none.
type Hub struct {
	on   atomic.Int32 // len(taps), for On
	mu   sync.Mutex
	taps []*Tap // guarded by mu
}

// Tap is one watcher's place in the hub.
type Tap struct {
	w     Watcher
	lines []byte // guarded by Hub.mu: fed, not yet taken
}

// On tells whether anyone watches; Len how many do.
func (h *Hub) On() bool { return h.on.Load() > 0 }
func (h *Hub) Len() int { return int(h.on.Load()) }

// Add starts feeding w.
func (h *Hub) Add(w Watcher) *Tap {
	t := &Tap{w: w}
	h.mu.Lock()
	h.taps = append(h.taps, t)
	h.on.Add(1)
	h.mu.Unlock()
	return t
}

// Remove stops feeding t, if Feed has not dropped it already.
func (h *Hub) Remove(t *Tap) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.taps, t); i >= 0 {
		h.dropLocked(i)
	}
}

func (h *Hub) dropLocked(i int) {
	h.taps = slices.Delete(h.taps, i, i+1)
	h.on.Add(-1)
}

// Feed appends a finished line to every watcher's backlog, waking the
// ones whose backlog was empty, and drops a watcher that fell behind.
func (h *Hub) Feed(line []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := 0; i < len(h.taps); i++ {
		t := h.taps[i]
		// Measured with the backlog before it: a watcher that has taken
		// everything is never dropped for one line.
		if len(t.lines) > 0 && len(t.lines)+len(line) > MaxBacklog {
			h.dropLocked(i)
			i--
			t.w.Behind(len(t.lines))
			t.lines = nil
			continue
		}
		if len(t.lines) == 0 {
			t.w.Wake()
		}
		t.lines = append(t.lines, line...)
	}
}

// keepLines is the largest backlog kept for reuse once taken.
const keepLines = 64 << 10

// Take appends the lines waiting for t to dst.
func (h *Hub) Take(t *Tap, dst []byte) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	dst = append(dst, t.lines...)
	if cap(t.lines) > keepLines {
		t.lines = nil // a burst grew it: let it go
	} else {
		t.lines = t.lines[:0]
	}
	return dst
}

// Backlog is the bytes of lines waiting for w, if it watches.
func (h *Hub) Backlog(w Watcher) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.taps {
		if t.w == w {
			return int64(len(t.lines)), true
		}
	}
	return 0, false
}

// Hidden tells the commands Redis keeps out of MONITOR as administrative:
// MONITOR itself, CLIENT LIST and CLIENT KILL.
func Hidden(args [][]byte) bool {
	switch {
	case resp.Is(args[0], "monitor"):
		return true
	case resp.Is(args[0], "client") && len(args) > 1:
		return resp.Is(args[1], "list") || resp.Is(args[1], "kill")
	}
	return false
}

// AppendLine writes a line without its end, as Redis's
// replicationFeedMonitors does: "+<seconds>.<microseconds> [0 <addr>]"
// and each argument quoted and escaped; AUTH's arguments and the pair
// after HELLO's AUTH read "(redacted)", as Redis redacts them. Unlike
// Redis's, the line is bounded (MaxArgShown, MaxLine): a long argument
// reads "first bytes"... (N bytes), and arguments past MaxLine read
// ... (N more arguments).
func AppendLine(dst []byte, now time.Time, addr string, args [][]byte) []byte {
	start := len(dst)
	us := now.UnixMicro()
	dst = append(dst, '+')
	dst = strconv.AppendInt(dst, us/1e6, 10)
	dst = append(dst, '.')
	frac := us % 1e6
	for d := int64(100000); d > 1 && frac < d; d /= 10 {
		dst = append(dst, '0')
	}
	dst = strconv.AppendInt(dst, frac, 10)
	dst = append(dst, " [0 "...)
	dst = append(dst, addr...)
	dst = append(dst, "] "...)
	secret := redacted(args)
	for i, a := range args {
		if i > 0 {
			dst = append(dst, ' ')
		}
		if len(dst)-start > MaxLine {
			dst = append(dst, "... ("...)
			dst = strconv.AppendInt(dst, int64(len(args)-i), 10)
			return append(dst, " more arguments)"...)
		}
		switch {
		case i < len(secret) && secret[i]:
			dst = append(dst, `"(redacted)"`...)
		case len(a) > MaxArgShown:
			dst = resp.AppendRepr(dst, a[:MaxArgShown])
			dst = append(dst, "... ("...)
			dst = strconv.AppendInt(dst, int64(len(a)), 10)
			dst = append(dst, " bytes)"...)
		default:
			dst = resp.AppendRepr(dst, a)
		}
	}
	return dst
}

// redacted marks the arguments MONITOR must not show: every argument of
// AUTH, the user and password after HELLO's AUTH. Nil for any other
// command.
func redacted(args [][]byte) []bool {
	switch {
	case resp.Is(args[0], "auth"):
		secret := make([]bool, len(args))
		for i := 1; i < len(args); i++ {
			secret[i] = true
		}
		return secret
	case resp.Is(args[0], "hello"):
		var secret []bool
		for i := 2; i < len(args); i++ {
			switch {
			case resp.Is(args[i], "auth") && i+2 < len(args):
				if secret == nil {
					secret = make([]bool, len(args))
				}
				secret[i+1], secret[i+2] = true, true
				i += 2
			case resp.Is(args[i], "setname"):
				i++
			}
		}
		return secret
	}
	return nil
}

// AppendError ends a line with the error reply a command got, as
// redis-cli prints one; a line is a simple string, so no line break may
// reach it. An error quotes at most resp.MaxQuoted bytes of a value, so
// it is short; it is cut at MaxArgShown all the same.
func AppendError(dst []byte, msg string) []byte {
	dst = append(dst, " -> (error) "...)
	msg = msg[:min(len(msg), MaxArgShown)]
	for i := 0; i < len(msg); i++ {
		if ch := msg[i]; ch == '\r' || ch == '\n' {
			dst = append(dst, ' ')
		} else {
			dst = append(dst, ch)
		}
	}
	return append(dst, "\r\n"...)
}

// Outcome is a decision as a line shows it: as the client reads it, what
// decided it, and why (the explanation's fields: docs/operating.md, "Why
// was this refused?").
type Outcome struct {
	Allowed      bool
	Remaining    int64
	RetryAfterMs int64 // -1: never
	Path         string
	Shadow       bool // refused, and allowed by shadow mode
	// Policy names the policy the request was decided by, Rule the door's
	// own rule (a gateway's descriptor path); neither for a plain inline
	// request.
	Policy, Rule string
	// Limit names the limit the answer came from, Algorithm its algorithm
	// and State what the decision shows of its key's state in the
	// algorithm's terms ("used 7 of 10, back to full in 420ms"); none
	// shown when Limit is empty.
	Limit, Algorithm string
	State            []byte
	// OnFailure is the failure mode that decided, shown when set: the
	// door sets it for a decision the store did not make.
	OnFailure string
}

// AppendOutcome ends a line with the decision its command got, and why.
func AppendOutcome(dst []byte, o Outcome) []byte {
	dst = append(dst, " -> allowed="...)
	if o.Allowed {
		dst = append(dst, '1')
	} else {
		dst = append(dst, '0')
	}
	dst = append(dst, " remaining="...)
	dst = strconv.AppendInt(dst, o.Remaining, 10)
	dst = append(dst, " retry_after_ms="...)
	dst = strconv.AppendInt(dst, o.RetryAfterMs, 10)
	dst = append(dst, " path="...)
	dst = append(dst, o.Path...)
	if o.Shadow {
		dst = append(dst, " shadow=refused"...)
	}
	if o.OnFailure != "" {
		dst = appendField(dst, " on_failure=", o.OnFailure)
	}
	switch {
	case o.Policy != "":
		dst = appendField(dst, " policy=", o.Policy)
	case o.Rule != "":
		dst = appendField(dst, " rule=", o.Rule)
	}
	if o.Limit != "" {
		dst = appendField(dst, " limit=", o.Limit)
		dst = append(dst, " algorithm="...)
		dst = append(dst, o.Algorithm...)
		dst = append(dst, " state="...)
		dst = resp.AppendRepr(dst, o.State)
	}
	return append(dst, "\r\n"...)
}

// appendField appends name and v: bare when v is a plain word (a policy's
// or a limit's name), else quoted as an argument is, so that a rule with
// a space or a newline keeps the line one line of fields. v is bounded by
// MaxArgShown, as an argument is.
func appendField(dst []byte, name, v string) []byte {
	dst = append(dst, name...)
	if len(v) > MaxArgShown {
		v = v[:MaxArgShown]
	}
	for i := 0; i < len(v); i++ {
		if ch := v[i]; ch <= ' ' || ch == '"' || ch == '\\' || ch == '=' || ch >= 0x7f {
			return resp.AppendRepr(dst, []byte(v))
		}
	}
	return append(dst, v...)
}
