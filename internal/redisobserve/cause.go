package redisobserve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cause names why the upstream could not be used, in words an operator
// acts on. The first log line after a failure names it (with Hint), INFO
// shows it (upstream_last_error_cause), and the failures metric is
// labelled by it. Without it a wrong password, a wrong host and a full
// Redis looked alike: a failed call and the failure mode's answers.
type Cause string

// The causes. A reply error Redis gives is told by its code (NOAUTH,
// MOVED, …); a connection that fails, by the network's error.
const (
	CauseAuth        Cause = "auth"         // NOAUTH, WRONGPASS: no password, or a wrong one
	CauseNoPerm      Cause = "noperm"       // NOPERM: the ACL user may not run a command the store needs
	CauseRefused     Cause = "refused"      // nothing listens at the address
	CauseUnknownHost Cause = "unknown_host" // the host name does not resolve
	CauseTimeout     Cause = "timeout"      // no answer in time
	CauseClosed      Cause = "closed"       // the server closed the connection (TLS against plain, maxclients)
	CauseTLS         Cause = "tls"          // the handshake or the certificate failed
	CauseMoved       Cause = "moved"        // a Cluster node behind a redis:// address
	CauseNotCluster  Cause = "not_cluster"  // a redis+cluster:// address at a Redis without Cluster
	CauseReadOnly    Cause = "readonly"     // a replica: writes refused
	CauseOOM         Cause = "oom"          // maxmemory reached under noeviction: writes refused
	CauseDB          Cause = "db"           // the database number does not exist
	CauseLoading     Cause = "loading"      // Redis is loading its data set
	CauseClusterDown Cause = "clusterdown"  // the Cluster cannot serve (slots uncovered, no quorum)
	CauseOther       Cause = "other"
)

// Hint is the cause in one sentence, with what to check.
func (c Cause) Hint() string {
	switch c {
	case CauseAuth:
		return "Redis refused the credentials: check the user and password in --upstream (redis://user:password@host:port)"
	case CauseNoPerm:
		return "Redis's ACL refuses a command Sluice needs: grant the user EVALSHA, EVAL, FCALL, DEL and PUBLISH on Sluice's keys and channel, and TIME, ZADD, ZREMRANGEBYSCORE, ZCARD, ZREM and PEXPIRE for the fleet's key (docs/running.md)"
	case CauseRefused:
		return "nothing accepts connections at the address: check --upstream's host and port, and that Redis runs"
	case CauseUnknownHost:
		return "the host name in --upstream does not resolve"
	case CauseTimeout:
		return "Redis did not answer in time: check that it runs and that the network lets the pod reach it"
	case CauseClosed:
		return "Redis closed the connection: a TLS port reached without rediss://, or a server at maxclients"
	case CauseTLS:
		return "the TLS handshake failed: check --upstream-tls-ca, the server's name and certificate, and any client certificate"
	case CauseMoved:
		return "the address is a Redis Cluster node: write redis+cluster:// instead of redis://"
	case CauseNotCluster:
		return "the address is not a Redis Cluster: write redis:// (or redis+sentinel://) instead of redis+cluster://"
	case CauseReadOnly:
		return "the address is a read-only replica: point --upstream at the master, or at the sentinels (redis+sentinel://)"
	case CauseOOM:
		return "Redis is full (maxmemory) and refuses writes: raise maxmemory, or give Sluice a Redis of its own"
	case CauseDB:
		return "the database number in --upstream does not exist on this Redis"
	case CauseLoading:
		return "Redis is loading its data set and answers nothing else until done"
	case CauseClusterDown:
		return "the Redis Cluster cannot serve: some slots have no master"
	}
	return "the upstream Redis failed"
}

// Error is a failure of the upstream with its cause named: what Check
// returns.
type Error struct {
	Cause Cause
	Err   error
}

func (e *Error) Error() string { return "upstream: " + string(e.Cause) + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// CauseOf names the cause of err: an *Error's own, else a reply error's
// code, else the network's error. Nil has no cause ("").
func CauseOf(err error) Cause {
	if err == nil {
		return ""
	}
	var ue *Error
	if errors.As(err, &ue) {
		return ue.Cause
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		if c := ReplyCause(rerr.Error()); c != "" {
			return c
		}
	}
	var dns *net.DNSError
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	var rh tls.RecordHeaderError
	var alert tls.AlertError
	switch {
	case errors.As(err, &dns):
		return CauseUnknownHost
	case errors.Is(err, syscall.ECONNREFUSED):
		return CauseRefused
	case errors.As(err, &cv), errors.As(err, &ua), errors.As(err, &hn), errors.As(err, &ci), errors.As(err, &rh), errors.As(err, &alert):
		return CauseTLS
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return CauseClosed
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return CauseTimeout
	}
	// go-redis words some failures without wrapping an error value.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "connection refused"):
		return CauseRefused
	case strings.Contains(msg, "no such host"):
		return CauseUnknownHost
	case strings.Contains(msg, "tls:"), strings.Contains(msg, "x509:"):
		return CauseTLS
	case strings.Contains(msg, "i/o timeout"):
		return CauseTimeout
	}
	if c := ReplyCause(msg); c != "" {
		return c
	}
	return CauseOther
}

// ReplyCause names the cause of a reply error's text msg by its code; ""
// for a code that says nothing of the upstream (a script's own error).
func ReplyCause(msg string) Cause {
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "NOAUTH", "WRONGPASS":
		return CauseAuth
	case "NOPERM":
		return CauseNoPerm
	case "MOVED", "ASK":
		return CauseMoved
	case "READONLY":
		return CauseReadOnly
	case "OOM":
		return CauseOOM
	case "LOADING":
		return CauseLoading
	case "CLUSTERDOWN":
		return CauseClusterDown
	}
	lower := strings.ToLower(msg)
	switch {
	case strings.Contains(lower, "invalid password"), strings.Contains(lower, "without any password configured"),
		strings.Contains(lower, "no password is set"):
		return CauseAuth // Redis before 6, and AUTH to a Redis without a password
	case strings.Contains(lower, "unauthenticated"):
		return CauseAuth // Redis 7 closes on a large request before AUTH
	case strings.Contains(lower, "cluster support disabled"):
		return CauseNotCluster
	case strings.Contains(lower, "db index is out of range"):
		return CauseDB
	}
	return ""
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// diagnose names the cause of a check's failure, err. One that says
// only that time ran out is refined by a dial that failed shortly before
// or since the check started (dialWatch): go-redis retries a refused dial
// until the deadline, and then reports the deadline; and a check's
// deadline (--upstream-timeout) may end before a Sentinel client's dial
// does, whose failure an earlier check saw.
func (o *Observer) diagnose(err error, started time.Time) error {
	cause := CauseOf(err)
	if cause == CauseTimeout || cause == CauseOther {
		for _, d := range []*dialFailure{o.lastDial.Load(), loggedDial.Load()} {
			if d != nil && !d.at.Before(started.Add(-dialMemory)) {
				return &Error{Cause: CauseOf(d.err), Err: d.err}
			}
		}
	}
	if ue, ok := err.(*Error); ok {
		return ue
	}
	return &Error{Cause: cause, Err: err}
}

// dialMemory is how long a dial's failure explains a check that ran out
// of time.
const dialMemory = 10 * time.Second

// dialFailure is a dial that failed with a cause more telling than a
// timeout.
type dialFailure struct {
	err error
	at  time.Time
}

// dialWatch is a go-redis hook that keeps the Observer's last telling
// dial failure (lastDial), for diagnose. On Cluster every node's client
// gets it; behind Sentinel a dial's error is the sentinels' own.
type dialWatch struct{ o *Observer }

func (d dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if cause := CauseOf(err); err != nil && cause != CauseTimeout && cause != CauseOther {
			d.o.lastDial.Store(&dialFailure{err: err, at: time.Now()})
		}
		return c, err
	}
}

func (dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// watchDials adds dialWatch to the client, and on Cluster to each
// node's client as it is made.
func (o *Observer) watchDials() {
	switch c := o.client.(type) {
	case *redis.ClusterClient:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(dialWatch{o}) })
	case *redis.Client:
		c.AddHook(dialWatch{o})
	}
}
