// Command sluice runs the Sluice rate limiter: a RESP server on localhost
// that any Redis client can ask for rate-limit decisions, keeping its state
// in a central Redis (--upstream) or, without one, in memory.
//
// This is the composition root and nothing more: flags and SLUICE_*
// variables become a settings.Config, signals become a draining shutdown and
// policy reloads. package app builds the sidecar. The subcommands
// `sluice inject`, `sluice webhook` and `sluice simulate` are packages
// inject, webhook and simulate.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/inject"
	"github.com/sluice-rl/sluice/internal/settings"
	"github.com/sluice-rl/sluice/internal/version"
	"github.com/sluice-rl/sluice/simulate"
	"github.com/sluice-rl/sluice/webhook"
)

func main() {
	args := os.Args[1:]
	if filepath.Base(os.Args[0]) == peerName {
		tuneGC(os.Getenv)
		os.Exit(runPeer(context.Background(), args, environ(), os.Getenv, os.Stdout, os.Stderr))
	}
	if len(args) > 0 {
		switch args[0] {
		case "envoy-ratelimit":
			tuneGC(os.Getenv)
			os.Exit(runPeer(context.Background(), args[1:], environ(), os.Getenv, os.Stdout, os.Stderr))
		case "inject":
			os.Exit(inject.Main(args[1:], os.Stdin, os.Stdout, os.Stderr))
		case "webhook":
			os.Exit(webhook.Main(context.Background(), args[1:], os.Stdout, os.Stderr))
		case "simulate":
			os.Exit(simulate.Main(args[1:], os.Stdin, os.Stdout, os.Stderr))
		case "help":
			os.Exit(help(args[1:], os.Stdout, os.Stderr))
		}
	}
	tuneGC(os.Getenv)
	os.Exit(run(context.Background(), args, os.Getenv, os.Stdout, os.Stderr))
}

// defaultGCPercent is the collector's target unless GOGC says otherwise.
// Sluice's live heap is small (a few MB in front of Redis, tens of MB with
// a full in-memory store) while every decision allocates a little, so
// Go's default of 100 collects often for little: at 400, the sidecar
// spent about a tenth less CPU per decision (redis-benchmark -P 16
// through Redis, three runs side by side with each setting), for a heap
// that may grow to five times the live one. GOMEMLIMIT caps it where
// memory is tight.
const defaultGCPercent = 400

func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// memoryRatio is the share of the container's memory limit (its cgroup's
// memory.max) that Go's memory limit is set to: the collector works
// harder as the heap nears it, well before the kernel's OOM killer would
// act, and the rest is left for what Go does not count (stacks, buffers).
// GOMEMLIMIT, if set, wins.
const memoryRatio = 0.85

// The memory the settings bound, for Go's memory limit when GOMEMLIMIT is
// not set: the in-memory store's keys (measured: 304 bytes a key for the
// fixed-size algorithms, 432 for a sliding log at precision 10, with
// 128-byte keys), the deny cache's entries, and what Sluice needs besides
// (code, stacks, the loops' buffers).
const (
	bytesPerKey     = 432
	bytesPerRefusal = 350
	// bytesPerReservation is a reservation's record (RL.RESERVE) with a
	// 128-byte key, its share of the map included: 354 bytes measured.
	bytesPerReservation = 360
	baseMemory          = 32 << 20
	inputSlackFactor    = 8 // the limit leaves an eighth of the input budget for garbage
	// httpConnBytes is what an HTTP check connection holds at most while
	// its headers are read (32 KiB of them, at about two and a half times
	// their length, with Go's garbage: 110 KiB measured, docs/operating.md).
	// The check's buffers are net/http's, outside the input budget, so
	// its connection cap enters the memory limit instead.
	httpConnBytes = 112 << 10
)

// limitMemory sets Go's memory limit unless GOMEMLIMIT does: to a share
// of the container's limit, and never above what the settings bound (the
// input budget and an eighth more, the store, the deny cache, the HTTP
// check's connections, the reservations' records, a base).
// Without it, GOGC 400 lets the heap reach five times the live input:
// 200 clients holding the budget's worth of large arguments made the
// process's resident memory reach 1.5 GB at the default 256 MiB budget.
func limitMemory(log *slog.Logger, cfg settings.Config, getenv func(string) string) {
	if getenv("GOMEMLIMIT") != "" {
		return
	}
	limit, err := memlimit.Set(memlimit.WithRatio(memoryRatio), memlimit.WithProvider(memlimit.FromCgroup))
	if err != nil || limit <= 0 {
		limit = math.MaxInt64
	}
	input := int64(cfg.MaxInputMemory)
	bound := input + input/inputSlackFactor + int64(cfg.MaxKeys)*bytesPerKey + int64(cfg.DenyCacheSize)*bytesPerRefusal + baseMemory +
		int64(cfg.MaxReservations)*bytesPerReservation
	if cfg.HTTPListen != "" {
		bound += int64(cfg.HTTPMaxConns) * httpConnBytes
	}
	from := "container"
	if bound < limit {
		limit, from = bound, "settings"
		debug.SetMemoryLimit(limit)
	}
	if limit < math.MaxInt64 {
		log.Info("go memory limit", "bytes", limit, "from", from)
	}
}

// run is the whole program, with its process-wide inputs passed in; its
// result is the exit status: 2 for a bad setting, 1 for a failure.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, getenv, stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errVersion):
		fmt.Fprintln(stdout, "sluice", version.String())
		return 0
	case err != nil:
		// One line: a refused value's error names the setting and the
		// fix; an unknown flag gets the way to the list.
		hint := ""
		if strings.HasPrefix(err.Error(), "flag provided but not defined") {
			hint = "; sluice --help lists the flags"
		}
		fmt.Fprintf(stderr, "sluice: %v%s\n", err, hint)
		return 2
	}
	return serve(ctx, cfg, getenv, stderr, nil)
}

// serve runs the sidecar cfg describes until ctx ends or a signal stops
// it; notes, when given, logs what the settings said before anything
// starts.
func serve(ctx context.Context, cfg settings.Config, getenv func(string) string, stderr io.Writer, notes func(*slog.Logger)) int {
	log := cfg.NewLogger(stderr)
	if notes != nil {
		notes(log)
	}
	// Catch SIGTERM before anything listens: a signal that arrives once a
	// client can connect must drain, not kill.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	sc, err := app.New(ctx, cfg, log, getenv)
	if err != nil {
		log.Error("sluice did not start", "err", err)
		return 1
	}
	// After app.New, whose first line names the store: nothing large is
	// allocated before Run.
	limitMemory(log, cfg, getenv)
	go func() {
		for range hup {
			sc.ReloadPolicies()
		}
	}()
	if err := sc.Run(ctx); err != nil {
		log.Error("sluice stopped", "err", err)
		return 1
	}
	return 0
}

// errVersion is --version: print the version and stop.
var errVersion = errors.New("version asked for")

// parseFlags reads the settings: the command line, then for each flag not
// given there its SLUICE_* variable, then the defaults.
func parseFlags(args []string, getenv func(string) string, usageOut io.Writer) (settings.Config, error) {
	cfg := settings.Default()
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed once, by run
	cfg.Register(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {} // a mistake gets one line, from run; --help the whole usage
	if err := settings.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(usageOut, fs)
		}
		return cfg, err
	}
	if *showVersion {
		return cfg, errVersion
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q: sluice takes only flags, or a command (envoy-ratelimit, inject, simulate, webhook, help)", fs.Arg(0))
	}
	return cfg, cfg.Finish(fs, getenv)
}

// help is `sluice help [command]`: the usage of sluice, or of a command.
func help(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return run(context.Background(), []string{"--help"}, func(string) string { return "" }, stdout, stderr)
	}
	switch args[0] {
	case "inject":
		return inject.Main([]string{"--help"}, nil, stdout, stderr)
	case "webhook":
		return webhook.Main(context.Background(), []string{"--help"}, stdout, stderr)
	case "envoy-ratelimit":
		return runPeer(context.Background(), []string{"--help"}, nil, nil, stdout, stderr)
	case "simulate":
		return simulate.Main([]string{"--help"}, nil, stdout, stderr)
	}
	fmt.Fprintf(stderr, "sluice help: no command %q: the commands are envoy-ratelimit, inject, simulate and webhook\n", args[0])
	return 2
}

const usageHead = `Usage: sluice [flags]
       sluice <command> [flags]

Sluice is a rate limiter that speaks the Redis protocol. Point any Redis
client (or redis-cli) at --listen and send RL.* or CL.THROTTLE commands.
Every flag can also be set by the environment variable shown in brackets;
a flag given on the command line wins. A setting that can be switched off
is switched off by the word off.

Commands:
  envoy-ratelimit
              serve as envoyproxy/ratelimit does, configured by its
              environment variables (as does this binary named ratelimit)
  inject      add the Sluice sidecar to the pods in Kubernetes YAML files
  webhook     serve a Kubernetes admission webhook that adds the sidecar
  simulate    replay a --record recording against a proposed policies file
  help        this text; sluice help <command> (or sluice <command> --help)
              for a command's flags

Flags:
`

const usageTail = `
Upstream address forms (--upstream):
  redis://[user:pass@]host:6379[/db]          one Redis server
  rediss://...                                the same over TLS
  redis+sentinel://host1:26379,host2:26379/mymaster
                                              Sentinel: the sentinels, then the master name
  redis+cluster://host1:7000,host2:7001       Redis Cluster: seed nodes
  (rediss+sentinel:// and rediss+cluster:// use TLS; query parameters are
  go-redis's: ?dial_timeout=1s&read_timeout=500ms&pool_size=20 ...)
`

// usage prints the flags as docs/running.md writes them (--name), each with
// its variable and default.
func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, usageHead)
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  --%s %s\n    \t%s", f.Name, arg, strings.ReplaceAll(text, "\n", "\n    \t"))
		if f.Name != "version" {
			fmt.Fprintf(w, " [%s]", settings.EnvName(f.Name))
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
	fmt.Fprint(w, usageTail)
}
