package upstream

import (
	"context"

	"github.com/sluice-rl/sluice/lua"
)

// Check makes the call that decisions make, with nothing to decide: the
// batch script over an empty batch. It fails wherever decisions would,
// also where a PING succeeds: a wrong password, an ACL user without
// EVALSHA, a read-only replica that refuses scripts, a full Redis.
//
// Until Functions are in use or refused, it first loads the batch library
// on every master (functions.go). The Observer (Config.Observer) runs
// it: off Cluster it makes sure first, once per outage, that the server
// is no Cluster node (the empty batch declares no key, so a Cluster node
// would run it, and only the first decisions would meet MOVED); it names
// the cause of a failure (its error is a *redisobserve.Error), and keeps
// the outcome as the upstream's reachability.
func (s *Store) Check(ctx context.Context) error {
	return s.obs.Check(ctx, s.check)
}

func (s *Store) check(ctx context.Context) error {
	if err := s.loadLibrary(ctx); err != nil {
		return err
	}
	// No keys, limits, runs, key runs or multi-limit requests.
	calls := []call{{script: lua.Batch}}
	s.run(ctx, calls)
	return calls[0].cmd.Err()
}
