package upstream

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/lua"
)

// Check makes the call that decisions make, with nothing to decide: the
// batch script over an empty batch. It fails wherever decisions would,
// also where a PING succeeds: a wrong password, an ACL user without
// EVALSHA, a read-only replica that refuses scripts, a full Redis.
//
// Until Functions are in use or refused, it first loads the batch library
// on every master (functions.go). Off Cluster, it also makes sure, once
// per outage, that the server is no Cluster node: the empty batch
// declares no key, so a Cluster node would run it, and only the first
// decisions would meet MOVED.
//
// Its error is an *Error naming the cause (cause.go), and its outcome is
// the store's reachability (Reach).
func (s *Store) Check(ctx context.Context) error {
	started := time.Now()
	err := s.check(ctx)
	if err != nil {
		s.checkedNode.Store(false)
		err = s.diagnose(err, started)
	}
	s.observe(err)
	return err
}

func (s *Store) check(ctx context.Context) error {
	if err := s.checkNode(ctx); err != nil {
		return err
	}
	if err := s.loadLibrary(ctx); err != nil {
		return err
	}
	// No keys, limits, runs, key runs or multi-limit requests.
	calls := []call{{script: lua.Batch}}
	s.run(ctx, calls)
	return calls[0].cmd.Err()
}

// checkNode fails on a Cluster node reached as one server (redis://).
// An INFO that the ACL denies proves nothing either way, and is let be.
func (s *Store) checkNode(ctx context.Context) error {
	if s.cluster || s.checkedNode.Load() {
		return nil
	}
	info, err := s.client.Info(ctx, "cluster").Result()
	var rerr redis.Error
	if err != nil && !errors.As(err, &rerr) {
		return err
	}
	if err == nil && strings.Contains(info, "cluster_enabled:1") {
		return &Error{Cause: CauseMoved, Err: errors.New("the server has cluster_enabled:1")}
	}
	s.checkedNode.Store(true)
	return nil
}
