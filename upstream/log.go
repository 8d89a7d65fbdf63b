package upstream

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// LogTo sends go-redis's own log lines (pool and connection troubles) to
// log at warn level, so that they keep the process's format (--log-format
// json) instead of go-redis's own "redis: date file:line" lines. go-redis
// has one logger per process.
func LogTo(log *slog.Logger) { redis.SetLogger(goRedisLog{log}) }

type goRedisLog struct{ log *slog.Logger }

func (l goRedisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)), "source", "go-redis")
}
