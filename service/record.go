package service

import (
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/record"
)

// record hands request i of a decided batch to the recorder: its inputs
// as the door asked them (the client's key, without the policy's prefix)
// and its limits' own decision, before shadow mode turns a refusal into
// an admission. now is the clock read earlier in this batch, or zero;
// record returns it read, when the store did not say when it decided.
// Called once per sampled decision; the entry lives on the stack, and
// Record copies it.
func (s *Service) record(b *Batch, i int, now int64) int64 {
	req, res, m := &b.reqs[i], &b.res[i], &b.meta[i]
	at := res.At
	if at == 0 {
		if now == 0 {
			now = time.Now().UnixMicro()
		}
		at = now
	}
	e := record.Entry{Time: at, Door: b.Door, Key: req.Key[m.prefix:], Cost: req.Cost, Peek: req.Peek, Charge: req.Charge,
		Shadow: m.shadow, OnFailure: req.OnFailure, Limit: req.Limit, Limits: req.Limits,
		Allowed: res.Decision.Allowed, Remaining: res.Decision.Remaining, RetryAfter: res.Decision.RetryAfter.Microseconds(),
		Path: s.PathName(res.Path)}
	if m.byPolicy {
		e.Policy = m.policy
	} else if m.policy != Inline {
		e.Rule = m.policy
	}
	if req.Multi() {
		e.Limit = engine.Limit{}
	}
	s.recorder.Record(&e)
	return now
}
