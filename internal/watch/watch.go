// Package watch reloads a configuration read from a file or a directory
// when what it holds changes: the one shape of the policies' and the rate
// limit service's watchers. Every is the one shape of the watchers that
// look at something every interval instead (the upstream's health,
// eviction policy and replication), and OneLine the one way a watcher's
// error keeps to its INFO line.
//
// A change is a change of content, told by a digest, never by size and
// modification time: a Kubernetes ConfigMap update swaps a ..data symlink,
// and a replacement file can have the same size and time (touch -r, then
// mv). The file system's notifications (fsnotify) say when to look; a
// poll covers the file systems that send none (NFS, some FUSE mounts), and
// takes over when notifications cannot be had at all. A content that does
// not load is logged once and the configuration in use is kept: a typo
// must not take limits away.
package watch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Sum is a digest of what a watched path holds.
type Sum = [sha256.Size]byte

// Config configures a Watcher. Zero values are the documented defaults.
type Config struct {
	// Path is the file or directory watched.
	Path string
	// Apply reads Path and puts what it holds in use; on an error it
	// keeps what is in use. It is called from Run's goroutine or from
	// Reload's caller, never twice at once.
	Apply func() error
	// Applied is the digest (digest) of the content in use when the
	// Watcher starts, so that Run reloads only a change. Zero: unknown,
	// and Run applies the content once when it starts.
	Applied Sum
	// What names the configuration in log lines, such as "policies".
	What string
	// Poll, if positive, also compares the content this often, for file
	// systems that send no notifications. Zero: notifications only.
	Poll time.Duration
	// Fallback is how often Run polls instead when notifications cannot be
	// had at all (and Poll is zero). Zero means 2s.
	Fallback time.Duration
	// Debounce is how long Run waits after the last notification before
	// it reads, so that a file written in several steps is read once,
	// whole. Zero means 100ms.
	Debounce time.Duration
	// Logger is told of every content that does not load. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Watcher applies its path's content whenever that content changes.
type Watcher struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex // serialises Apply
	applied Sum        // guarded by mu: the content in use
	refused Sum        // guarded by mu: the content last refused, logged once
	status  Status     // guarded by mu
}

// Status is what a Watcher has put in use and what it has refused: what
// an operator needs to see that the file on disk is not what runs, which
// otherwise only a log line at the time of the reload would say.
type Status struct {
	// Loaded is when the content in use was applied (its start-up load,
	// when the Watcher was given Applied); zero until one is.
	Loaded time.Time
	// Failures counts the applies that returned an error since start.
	Failures uint64
	// Failing is true while the path holds content that failed to apply:
	// the configuration in use is an older one. A later success, or the
	// path holding the content in use again, clears it.
	Failing bool
	// LastFailure and LastError are the last failed apply's time and
	// error; zero and "" before the first.
	LastFailure time.Time
	LastError   string
}

// New is a Watcher of cfg.Path; Run starts watching.
func New(cfg Config) (*Watcher, error) {
	if cfg.Path == "" || cfg.Apply == nil {
		return nil, errors.New("watch: a path and an Apply function are needed")
	}
	cfg.Path = filepath.Clean(cfg.Path)
	if cfg.Debounce <= 0 {
		cfg.Debounce = 100 * time.Millisecond
	}
	if cfg.Fallback <= 0 {
		cfg.Fallback = 2 * time.Second
	}
	w := &Watcher{cfg: cfg, log: cfg.Logger, applied: cfg.Applied}
	if cfg.Applied != (Sum{}) {
		w.status.Loaded = time.Now()
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	return w, nil
}

// Reload applies the content now, changed or not (SIGHUP), and returns
// Apply's error.
func (w *Watcher) Reload() error { return w.check(true) }

// check applies the content if forced or if it differs from the one in
// use and from the one last refused.
func (w *Watcher) check(forced bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	sum := digest(w.cfg.Path)
	if !forced && sum == w.applied {
		// Put back as it was (a bad edit reverted): what runs is on disk.
		w.refused, w.status.Failing = Sum{}, false
		return nil
	}
	if !forced && sum == w.refused {
		return nil
	}
	if err := w.cfg.Apply(); err != nil {
		if forced || sum != w.refused {
			w.log.Error(w.cfg.What+" not reloaded: keeping the one in use", "path", w.cfg.Path, "err", err)
		}
		w.refused = sum
		w.status.Failures++
		w.status.Failing = true
		w.status.LastFailure, w.status.LastError = time.Now(), err.Error()
		return err
	}
	w.applied, w.refused = sum, Sum{}
	w.status.Loaded, w.status.Failing = time.Now(), false
	return nil
}

// Status is the Watcher's record of its loads and failures.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

// Digest is the digest of the content in use, in hex; "" until one is
// applied (or given as Config.Applied).
func (w *Watcher) Digest() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.applied == (Sum{}) {
		return ""
	}
	return fmt.Sprintf("%x", w.applied[:8])
}

// Info is INFO's fields for the watched configuration, each name starting
// with prefix (StatusInfo's).
func (w *Watcher) Info(prefix string) [][2]string { return StatusInfo(prefix, w.Status(), w.Digest()) }

// StatusInfo is INFO's fields for a configuration's load record, each
// name starting with prefix: the digest and time of the content in use,
// and whether the source holds a content that failed to load, with the
// last failure's time and error. A configuration from elsewhere than a
// file (xDS) shows its record the same way.
func StatusInfo(prefix string, st Status, digest string) [][2]string {
	failing := "0"
	if st.Failing {
		failing = "1"
	}
	unix := func(t time.Time) string {
		if t.IsZero() {
			return "0"
		}
		return strconv.FormatInt(t.Unix(), 10)
	}
	return [][2]string{{prefix + "digest", digest},
		{prefix + "loaded_at", unix(st.Loaded)}, {prefix + "reload_failing", failing},
		{prefix + "reload_failures", strconv.FormatUint(st.Failures, 10)},
		{prefix + "last_failure_at", unix(st.LastFailure)}, {prefix + "last_error", OneLine(st.LastError)}}
}

// OneLine keeps an error's text on INFO's one line per field.
func OneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

// Every calls look every interval until ctx ends, first once an interval
// has passed; it returns once ctx has ended. A look that takes longer
// than the interval delays the next (time.Ticker drops the ticks missed).
func Every(ctx context.Context, every time.Duration, look func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		look()
	}
}

// digest is a digest of what path holds, through symlinks: a file's
// content (its SHA-256), or a directory's files' names and contents, those
// whose name starts with a dot left out (a ConfigMap's ..data, which the
// other names lead through). A path that cannot be read has a digest of
// its error, so that the same failure is told once.
func digest(path string) Sum {
	fi, err := os.Stat(path)
	if err != nil {
		return sha256.Sum256([]byte("error: " + err.Error()))
	}
	if !fi.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return sha256.Sum256([]byte("error: " + err.Error()))
		}
		return sha256.Sum256(data)
	}
	ents, err := os.ReadDir(path) // in name order
	if err != nil {
		return sha256.Sum256([]byte("error: " + err.Error()))
	}
	h := sha256.New()
	for _, e := range ents {
		name := filepath.Join(path, e.Name())
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if fi, err := os.Stat(name); err == nil && fi.IsDir() {
			continue // a subdirectory is not read by the loaders
		}
		data, err := os.ReadFile(name)
		if err != nil {
			data = []byte("error: " + err.Error())
		}
		fmt.Fprintf(h, "%s\x00%d\x00", e.Name(), len(data))
		h.Write(data)
	}
	var sum Sum
	h.Sum(sum[:0])
	return sum
}

// Run watches until ctx ends, then returns nil. For a file it watches the
// file's directory, which sees the file edited, replaced by a rename, or
// swapped behind a ConfigMap's ..data link. For a directory it watches
// the directory and its parent, which sees the directory itself replaced
// by a symlink swap. Once the watches are in place it compares the
// content, so a change made before Run is not missed.
func (w *Watcher) Run(ctx context.Context) error {
	path := w.cfg.Path
	poll := w.cfg.Poll
	fi, err := os.Stat(path)
	isDir := err == nil && fi.IsDir()
	watched := path // a directory watched for its entries
	if !isDir {
		watched = filepath.Dir(path)
	}
	var (
		events <-chan fsnotify.Event
		errs   <-chan error
	)
	fw, err := fsnotify.NewWatcher()
	if err == nil {
		defer fw.Close()
		err = fw.Add(watched)
	}
	if err != nil {
		w.log.Warn(w.cfg.What+": cannot watch for changes; polling instead", "path", path, "err", err)
		if poll <= 0 {
			poll = w.cfg.Fallback
		}
	} else {
		if isDir {
			// Best effort: without it only the directory's own symlink
			// swap goes unseen, until a poll.
			_ = fw.Add(filepath.Dir(path))
		}
		events, errs = fw.Events, fw.Errors
	}
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTicker(poll)
		defer t.Stop()
		tick = t.C
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()

	_ = w.check(false)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			switch {
			case isDir && ev.Name == path:
				// The directory itself was replaced: watch what it is now.
				_ = fw.Remove(path)
				if err := fw.Add(path); err != nil {
					w.log.Warn(w.cfg.What+": cannot watch the directory", "path", path, "err", err)
				}
			case filepath.Dir(ev.Name) != watched:
				continue // a sibling of the watched directory
			}
			debounce.Reset(w.cfg.Debounce)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// Typically an overflowed event queue: read anew.
			w.log.Warn(w.cfg.What+": watch error", "path", path, "err", err)
			debounce.Reset(w.cfg.Debounce)
		case <-debounce.C:
			_ = w.check(false)
		case <-tick:
			_ = w.check(false)
		}
	}
}
