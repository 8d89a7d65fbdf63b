package redisobserve

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// LogTo sends go-redis's own log lines (pool and connection troubles) to
// log at warn level, so that they keep the process's format (--log-format
// json) instead of go-redis's own "redis: date file:line" lines. go-redis
// has one logger per process.
//
// go-redis logs every failed dial: a Sentinel client pointed at a wrong
// address wrote 142 lines in 10 seconds. The failed dials, which the
// Observer reports itself with their cause, are debug lines; each other
// message (by its format, whatever the values) is logged at most once a
// warnEvery, with the count of repeats not logged (warner).
func LogTo(log *slog.Logger) { redis.SetLogger(goRedisLog{newWarner(log, warnEvery, nil)}) }

type goRedisLog struct{ w *warner }

func (l goRedisLog) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	if reported(format) {
		for _, a := range v {
			if err, ok := a.(error); ok {
				noteDial(err)
			}
		}
		l.w.log.DebugContext(ctx, msg, "source", "go-redis")
		return
	}
	l.w.warn(format, msg, "source", "go-redis")
}

// loggedDial is the last telling dial failure go-redis logged: a
// Sentinel client's dials of its sentinels pass no hook of the Observer's
// (dialWatch), and only go-redis's log tells why they fail. go-redis's
// logger, and so this, is the process's.
var loggedDial atomic.Pointer[dialFailure]

func noteDial(err error) {
	if cause := CauseOf(err); cause != CauseTimeout && cause != CauseOther {
		loggedDial.Store(&dialFailure{err: err, at: time.Now()})
	}
}

// reported says whether a go-redis message's format is a failed dial,
// which the Observer reports itself, naming the cause (Check, through
// dialWatch): at warn level it would come first, in go-redis's words.
func reported(format string) bool {
	return strings.Contains(format, "failed to dial") || strings.HasPrefix(format, "sentinel: GetMasterAddrByName")
}
