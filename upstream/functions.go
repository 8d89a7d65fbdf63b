package upstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redisobserve"
	"github.com/sluice-rl/sluice/internal/redispipe"
	"github.com/sluice-rl/sluice/internal/resp"
	"github.com/sluice-rl/sluice/lua"
)

// Redis Functions. The batch script's top level (its helpers' and
// algorithms' definitions) runs again on every EVALSHA; loaded as a
// library (lua.BatchLibrary), it runs once, and FCALL calls the batch
// function alone. The store starts on EVALSHA and moves to FCALL once
// Check has loaded the library on every master (FUNCTION LOAD REPLACE:
// loading the same library again changes nothing). A master that lost
// it (FUNCTION FLUSH, a failover to a master that never had it) answers
// "ERR Function not found", as it answers NOSCRIPT for a script: the
// call goes again as EVAL, and the library is loaded again on that
// master first. Where Redis refuses FUNCTION LOAD (an ACL user denied
// FUNCTION, a proxy that does not know it), the store stays on, or goes
// back to, EVALSHA, and tries FUNCTION LOAD again a minute later (from
// a batch call, or the idle check), so that a user granted FUNCTION
// since moves to FCALL without a restart; INFO's upstream_scripts and
// the log say which is in use. Only the batch script is a library: the
// lease script's calls are rare.

// scriptRef is the command and reference a call of script sc starts
// with: FCALL and the batch function while Functions are in use, else
// EVALSHA and the script's SHA.
func (s *Store) scriptRef(sc *lua.Script) (name, ref string) {
	if sc == lua.Batch {
		if s.functions.Load() {
			return "FCALL", lua.BatchLibrary.Function
		}
		s.retryFunctions()
	}
	return "EVALSHA", sc.SHA
}

// functionsRetry is how long after Redis refused FUNCTION LOAD the store
// tries it again.
var functionsRetry = time.Minute

// retryFunctions tries FUNCTION LOAD again, off the caller's goroutine,
// once functionsRetry has passed since Redis refused it.
func (s *Store) retryFunctions() {
	at := s.refusedAt.Load()
	if at == 0 || time.Since(time.Unix(0, at)) < functionsRetry || !s.retrying.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.retrying.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.loadLibrary(ctx)
	}()
}

// Scripts says how batches call Redis: "functions" (FCALL of the loaded
// library) or "evalsha".
func (s *Store) Scripts() string {
	if s.functions.Load() {
		return "functions"
	}
	return "evalsha"
}

// loadLibrary loads the batch library on every master, unless Functions
// are in use already or were refused less than functionsRetry ago, and
// moves the store to FCALL when it loaded everywhere. Only a refusal of
// Functions themselves (isFunctionRefusal: an ACL that denies FUNCTION,
// a Redis or proxy that does not know it) moves it to EVALSHA, until the
// retry; any other failure (a connection, a wrong password, a replica, a
// full Redis) is the check's error, and the next check loads again.
func (s *Store) loadLibrary(ctx context.Context) error {
	if s.functions.Load() {
		return nil
	}
	if at := s.refusedAt.Load(); at != 0 && time.Since(time.Unix(0, at)) < functionsRetry {
		return nil
	}
	loaded, err := s.loadEverywhere(ctx)
	if loaded {
		s.refusedAt.Store(0)
		s.functions.Store(true)
		s.log.Info("calling the batch script as a Redis function", "upstream_scripts", "functions", "library", lua.BatchLibrary.Name)
	}
	return err
}

// loadEverywhere loads the batch library on every master with go-redis,
// and says whether it did; a refusal of Functions moves the store to
// EVALSHA and is no error.
func (s *Store) loadEverywhere(ctx context.Context) (loaded bool, err error) {
	load := func(ctx context.Context, c *redis.Client) error {
		return c.FunctionLoadReplace(ctx, lua.BatchLibrary.Source).Err()
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, load)
	case *redis.Client:
		err = load(ctx, c)
	default:
		err = fmt.Errorf("a %T has no FUNCTION LOAD of its own", s.client)
		s.refuseFunctions(err)
		return false, nil
	}
	switch {
	case err == nil:
		return true, nil
	case isFunctionRefusal(err):
		s.refuseFunctions(err)
		return false, nil
	}
	return false, fmt.Errorf("function load: %w", err)
}

// refuseFunctions moves the store to EVALSHA until the retry: Redis
// refused FUNCTION LOAD with err. The log says so when it changes.
func (s *Store) refuseFunctions(err error) {
	was := s.functions.Swap(false)
	if s.refusedAt.Swap(time.Now().UnixNano()) == 0 || was {
		s.log.Warn("Redis refused FUNCTION LOAD: calling the batch script with EVALSHA", "upstream_scripts", "evalsha", "err", err)
	}
}

// reload loads the batch library again after a call that go-redis made
// (run) found it missing; on a pipe, reloadOn does. Its error is left to
// the next call, which finds the function missing again and goes as EVAL.
func (s *Store) reload(ctx context.Context) {
	_, _ = s.loadEverywhere(ctx)
}

// reloadOn sends FUNCTION LOAD on p, ahead of a call sent again as EVAL
// after p's master answered that the batch function is missing: the
// calls after it find it again.
func (s *Store) reloadOn(p *redispipe.Pipe, deadline time.Time) {
	if _, busy := s.reloading.LoadOrStore(p, struct{}{}); busy {
		return
	}
	cmd := resp.AppendCommand(nil, "FUNCTION", "LOAD", "REPLACE", lua.BatchLibrary.Source)
	p.Send(cmd, deadline, func(reply any, err error) {
		s.reloading.Delete(p)
		if v, ok := reply.(resp.ReplyError); ok && err == nil && isFunctionRefusal(v) {
			s.refuseFunctions(v)
		}
	})
}

// isFunctionRefusal says whether err, FUNCTION LOAD's error, is about
// Redis Functions themselves: an ACL that denies FUNCTION, a Redis or a
// proxy that does not know the command, a library Redis will not take.
// Only these move the store to EVALSHA; any other error (a wrong
// password, a replica, a full Redis) is the upstream's, and the next
// check tries FUNCTION LOAD again.
func isFunctionRefusal(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := strings.ToLower(rerr.Error())
	code, _, _ := strings.Cut(msg, " ")
	switch {
	case code == "noperm":
		return strings.Contains(msg, "function")
	case strings.Contains(msg, "unknown command"), strings.Contains(msg, "unknown subcommand"):
		return true
	case code == "err":
		return redisobserve.ReplyCause(rerr.Error()) == "" && (strings.Contains(msg, "function") || strings.Contains(msg, "library"))
	}
	return false
}

// isNoFunction says whether err is Redis's answer to an FCALL of a
// function it does not have.
func isNoFunction(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "Function not found") // go-redis drops the "ERR "
}
