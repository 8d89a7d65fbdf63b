package upstream

import (
	"context"
	"fmt"

	"github.com/sluice-rl/sluice/lua"
)

// Check makes the call that decisions make, with nothing to decide: the
// batch script over an empty batch. It fails wherever decisions would,
// also where a PING succeeds: a wrong password, an ACL user without
// EVALSHA, a read-only replica that refuses scripts.
//
// Until Functions are in use or refused, it first loads the batch library
// on every master (functions.go).
func (s *Store) Check(ctx context.Context) error {
	if err := s.loadLibrary(ctx); err != nil {
		return err
	}
	// No keys, limits, runs, key runs or multi-limit requests.
	calls := []call{{script: lua.Batch}}
	s.run(ctx, calls)
	if err := calls[0].cmd.Err(); err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	return nil
}
