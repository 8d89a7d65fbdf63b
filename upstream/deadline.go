package upstream

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/lua"
)

// No charge after the deadline (see redispipe's clock.go for the clock).
// A call on a pipe gets its deadline filled in as the pipe writes it
// (redispipe.Pipe.SendStamped); a call through go-redis (the single-slot
// re-sends on Cluster, and a store no pipe can serve) gets it from its
// batch's deadline, on the clock of the master that serves its keys. A call
// Redis starts after it charges nothing and replies "late": if its
// caller still waits (the reply beat the pipe's own timer), its batch
// fails, and its requests get their failure mode's answer, as they would
// have a moment later; most often the caller was answered long before,
// and the reply comes on a connection given up and drained (redispipe's
// Config.Stray).
// Either way it is counted (LateCalls). A call that Redis started in time
// keeps its charges, even when its reply comes too late for its caller:
// per pause, at most the calls Redis was running or started within the
// clock's error of their deadline; those are counted too (OverdueCalls),
// when their reply is read.

// errLate fails a batch call that Redis started after its deadline.
var errLate = errors.New("Redis started the call after its deadline, and charged nothing")

// noteEvery rate-limits the log line about late and overdue calls.
const noteEvery = 10 * time.Second

// LateCalls is how many batch calls Redis started after their deadline,
// and so skipped: INFO's upstream_calls_late.
func (s *Store) LateCalls() uint64 { return s.late.Load() }

// OverdueCalls is how many batch calls Redis ran, and charged, after
// their callers had been answered without them: INFO's
// upstream_calls_overdue.
func (s *Store) OverdueCalls() uint64 { return s.overdue.Load() }

// noteLate counts a late call.
func (s *Store) noteLate() {
	s.late.Add(1)
	s.note()
}

// note logs the late and overdue counts, at most once every noteEvery.
func (s *Store) note() {
	now := time.Now().UnixNano()
	last := s.lastNote.Load()
	if now-last < int64(noteEvery) || !s.lastNote.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("Redis ran batch calls after their callers were answered by the failure mode: late ones charged nothing, overdue ones charged",
		"upstream_calls_late", s.late.Load(), "upstream_calls_overdue", s.overdue.Load())
}

// strayReply takes a reply that came after its caller was answered
// without it (redispipe.Config.Stray): a batch call's says whether Redis skipped it
// (late) or ran it (overdue).
func (s *Store) strayReply(reply any) {
	list, ok := reply.([]any)
	if _, isBatch := lua.ReplyTime(reply); !ok || !isBatch {
		return
	}
	if late, _ := list[1].(int64); late == 1 {
		s.noteLate()
		return
	}
	s.overdue.Add(1)
	s.note()
}

// stampCalls gives calls about to go through go-redis the deadline of
// ctx on Redis's clock: the master's of each call's first request.
func (s *Store) stampCalls(ctx context.Context, calls []call, reqs []engine.Request) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return
	}
	for k := range calls {
		c := &calls[k]
		c.batch.Deadline = s.deadlineOn(ctx, s.keyOf(&reqs[c.reqs[0]]), deadline)
	}
}

// deadlineOn is local on the clock of the Redis that serves key, or 0
// (none) where the store keeps no clock of it (a Cluster no pipe serves:
// go-redis does not say which node answered).
func (s *Store) deadlineOn(ctx context.Context, key string, local time.Time) int64 {
	switch {
	case s.pipe != nil:
		return s.pipe.Deadline(local)
	case s.masters != nil:
		if _, p, err := s.masters.OfKey(ctx, key); err == nil {
			return p.Deadline(local)
		}
		return 0
	case s.cluster:
		return 0
	}
	return s.clock.Deadline(local)
}
