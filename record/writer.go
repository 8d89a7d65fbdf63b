package record

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Config configures a Writer. Zero values mean the documented defaults.
type Config struct {
	// Path is the file written; rotated files are Path.1, Path.2, …
	// (the lower, the newer). Required.
	Path string
	// Sample records the decisions of one key in Sample, every one of
	// each: a limit decides by what the key asked before, so a replay
	// needs all of a key's decisions or none of them. Zero means 1:
	// every key.
	Sample int
	// MaxRate bounds the decisions recorded a second, beyond a second's
	// worth at once: past it, the sample rises to one key in as many
	// more (a power of two) as bring the rate under it, and stays there
	// while the Writer runs, so that every key recorded keeps its whole
	// history. Zero: no bound.
	MaxRate int
	// OnSample is told, from the writer's goroutine, that MaxRate raised
	// the sample to sample, at rate decisions a second. Nil: nobody is.
	OnSample func(sample int, rate float64)
	// MaxSize bounds one file, in bytes: the line that would pass it
	// starts a new file. Zero means 64 MiB.
	MaxSize int64
	// Keep is how many rotated files are kept beside Path; the oldest
	// is removed. Zero keeps none: Path starts again empty.
	Keep int
	// ClearKeys writes keys as they are. By default each is hashed
	// (KeyHash), so that a recording tells keys apart without holding
	// them.
	ClearKeys bool
	// Salt is the keys' hash salt. Nil means a random one, so that a
	// recording's hashes cannot be matched against guessed keys, nor
	// against another process's recording. It also chooses the keys
	// sampled, so that sidecars sharing it record the same keys.
	Salt []byte
	// Slots is how many entries may wait for the file at once, in pages
	// of 256; past it Record drops and counts. Zero means 8192.
	Slots int
	// Now is the clock of the header lines. Nil means time.Now.
	Now func() time.Time

	linger time.Duration // zero means the const linger; tests set it
}

// Stats are a Writer's counts, for INFO and metrics.
type Stats struct {
	Path      string
	Sample    int // one key in Sample recorded, as it stands
	MaxRate   int
	Recorded  uint64 // entries written to the file
	Dropped   uint64 // entries dropped: every slot taken
	Failed    uint64 // entries lost to a failed write
	Bytes     uint64 // bytes written, across every file
	Rotations uint64
	LastError string // the last write or rotation error; empty if none
}

// Writer writes entries to a file off the decision path. Sample and Record
// are safe for concurrent use and never wait for the file; Close is
// called once.
//
// Entries go into pages: Record appends to the page being filled under a
// short lock (a copy, no allocation once warm), and queues the page for
// the writer's goroutine when it is full. The goroutine sleeps on a
// timer, not on the queue, so that the decisions never pay to wake it: the
// first entry after it last took the page being filled wakes it (a
// channel send, buffered, that meets a waiting goroutine only when it
// is idle); it then waits linger, writes every page queued and the one
// being filled, brings the file up to date, and starts again. Every entry
// reaches the file within about linger; under load the file is written
// once a linger (or once its buffer fills), and the goroutine woken by
// nothing but its timer. With no page free, entries are dropped and
// counted.
type Writer struct {
	cfg Config
	// sample is one key in how many is recorded: Config.Sample, raised
	// by pace. sampleSeed picks which keys.
	sample     atomic.Uint64
	sampleSeed uint64

	mu  sync.Mutex
	cur *page // the page being filled; nil when none is; guarded by mu
	// pending: an entry was recorded since the goroutine last took the
	// page being filled, and woke it; guarded by mu.
	pending bool

	free chan *page    // empty pages
	full chan *page    // pages to write, then nil to stop; one more room than pages
	wake chan struct{} // the first entry since the goroutine took the page being filled; Close
	// hurry cuts the linger short: half the pages are full, or Close.
	hurry chan struct{}
	done  chan struct{}
	stop  sync.Once

	closed                             atomic.Bool
	recorded, dropped, failed, written atomic.Uint64
	rotations                          atomic.Uint64
	lastErr                            atomic.Pointer[string]

	// The writer's goroutine's alone.
	f    *os.File
	bw   *bufio.Writer
	size int64
	line []byte
	enc  encoder
	pacer
}

// pacer is pace's state, the writer's goroutine's alone: a bucket of a
// second's decisions, refilled at MaxRate a second, and the decisions
// offered since it was last full.
type pacer struct {
	tokens  float64
	at      time.Time // tokens' time
	offered uint64    // decisions offered (recorded, dropped, failed) as of at
	since   time.Time // when tokens were last full
	burst   uint64    // decisions offered since then
}

// pageLen is how many entries a page holds: enough that a channel
// operation per page is nothing beside the entries' copies.
const pageLen = 256

// linger is how long the writer's goroutine, woken by an entry, collects
// more before it writes them: short beside a person reading the file,
// long beside a decision, and shorter than the slots last at full load
// (8192 entries are 16 ms at 500,000 decisions a second; with every page
// full before the linger ends, entries are dropped).
const linger = 3 * time.Millisecond

// bufSize is the file's write buffer: a write syscall per 256 KiB of
// lines at most.
const bufSize = 256 << 10

// page is entries waiting for the file, their keys copied into one
// buffer (ends[i] is where entry i's key ends in it).
type page struct {
	es   []Entry
	ends []int
	keys []byte
}

func (p *page) key(i int) []byte {
	start := 0
	if i > 0 {
		start = p.ends[i-1]
	}
	return p.keys[start:p.ends[i]]
}

func (p *page) reset() {
	clear(p.es) // the policies' limits, not ours to keep alive
	p.es, p.ends, p.keys = p.es[:0], p.ends[:0], p.keys[:0]
}

// New opens cfg.Path for appending (a header line first) and starts the
// writer's goroutine.
func New(cfg Config) (*Writer, error) {
	switch {
	case cfg.Path == "":
		return nil, errors.New("record: Config.Path is required")
	case cfg.Sample < 0:
		return nil, fmt.Errorf("record: invalid sample %d: must be 1 or more", cfg.Sample)
	case cfg.MaxSize < 0:
		return nil, fmt.Errorf("record: invalid max size %d: must be positive", cfg.MaxSize)
	case cfg.Keep < 0:
		return nil, fmt.Errorf("record: invalid keep %d: must not be negative", cfg.Keep)
	case cfg.MaxRate < 0:
		return nil, fmt.Errorf("record: invalid max rate %d: must not be negative", cfg.MaxRate)
	case cfg.Slots < 0:
		return nil, fmt.Errorf("record: invalid slots %d: must not be negative", cfg.Slots)
	}
	cfg.Sample = max(cfg.Sample, 1)
	if cfg.MaxSize == 0 {
		cfg.MaxSize = 64 << 20
	}
	if cfg.Slots == 0 {
		cfg.Slots = 8192
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.linger == 0 {
		cfg.linger = linger
	}
	pages := max(cfg.Slots/pageLen, 1)
	w := &Writer{cfg: cfg, free: make(chan *page, pages), full: make(chan *page, pages+1),
		wake: make(chan struct{}, 1), hurry: make(chan struct{}, 1), done: make(chan struct{})}
	salt := cfg.Salt
	if salt == nil {
		salt = make([]byte, 32)
		rand.Read(salt)
	}
	if !cfg.ClearKeys {
		w.enc.hash = newHasher(salt)
	}
	// Not the keys' hash (that costs a decision a tenth of a microsecond),
	// a fast one seeded by the salt, itself hashed so that the seed tells
	// nothing of it.
	seed := sha256.Sum256(append([]byte("sluice record sample\x00"), salt...))
	w.sampleSeed = binary.LittleEndian.Uint64(seed[:])
	w.sample.Store(uint64(cfg.Sample))
	now := time.Now()
	w.pacer = pacer{tokens: float64(cfg.MaxRate), at: now, since: now}
	if err := w.open(); err != nil {
		return nil, err
	}
	per := min(cfg.Slots, pageLen)
	for range pages {
		w.free <- &page{es: make([]Entry, 0, per), ends: make([]int, 0, per)}
	}
	go w.run()
	return w, nil
}

// Sample reports whether a decision on key (the client's, without the
// policy's prefix) is to be recorded: every one of one key in the sample.
// The caller builds an Entry only when it is.
func (w *Writer) Sample(key string) bool {
	n := w.sample.Load()
	// A multiple of n is a multiple of every n before it (pace raises n
	// by powers of two): a key in the sample was in it from the start.
	return n == 1 || (xxhash.Sum64String(key)^w.sampleSeed)%n == 0
}

// Record queues e for the file and returns at once: e and its key are
// copied, and may be reused when it returns. When no page is free (the
// file is slower than the decisions), e is dropped and counted.
func (w *Writer) Record(e *Entry) {
	if w.closed.Load() {
		return
	}
	w.mu.Lock()
	p := w.cur
	if p == nil {
		select {
		case p = <-w.free:
			w.cur = p
		default:
			w.mu.Unlock()
			w.dropped.Add(1)
			return
		}
	}
	p.es = append(p.es, *e)
	p.keys = append(p.keys, e.Key...)
	p.ends = append(p.ends, len(p.keys))
	p.es[len(p.es)-1].Key = ""
	wake := !w.pending
	w.pending = true
	if len(p.es) == cap(p.es) {
		// Handed over under the lock, so that every page older than the
		// one being filled is in full before it: the file keeps the
		// order entries were recorded in.
		w.cur = nil
		w.full <- p // never waits: full has room for every page
		if len(w.full) >= max(cap(w.full)/2, 1) {
			// The goroutine's timer is late (its CPU is busy elsewhere):
			// wake it before the pages run out, rather than drop.
			select {
			case w.hurry <- struct{}{}:
			default:
			}
		}
	}
	w.mu.Unlock()
	if wake {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// next is the oldest page waiting: a full one, else the one being
// filled (nil when none is); stop is Close's nil, met among the full.
func (w *Writer) next() (p *page, stop bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case p = <-w.full:
		return p, p == nil
	default:
	}
	p, w.cur = w.cur, nil
	w.pending = false // an entry from now on wakes the goroutine again
	return p, false
}

// Close writes what is queued, closes the file and returns its error.
// Entries recorded after it are dropped silently.
func (w *Writer) Close() error {
	w.stop.Do(func() {
		w.closed.Store(true)
		w.full <- nil
		// Wake the goroutine, idle or lingering.
		for _, c := range []chan struct{}{w.wake, w.hurry} {
			select {
			case c <- struct{}{}:
			default: // the goroutine is awake, or will be
			}
		}
	})
	<-w.done
	if p := w.lastErr.Load(); p != nil {
		return errors.New(*p)
	}
	return nil
}

// Stats reads the counts.
func (w *Writer) Stats() Stats {
	st := Stats{Path: w.cfg.Path, Sample: int(w.sample.Load()), MaxRate: w.cfg.MaxRate, Recorded: w.recorded.Load(), Dropped: w.dropped.Load(),
		Failed: w.failed.Load(), Bytes: w.written.Load(), Rotations: w.rotations.Load()}
	if p := w.lastErr.Load(); p != nil {
		st.LastError = *p
	}
	return st
}

// run writes what was recorded once a linger, while entries come, until
// the nil that Close queues.
func (w *Writer) run() {
	defer close(w.done)
	defer w.finish()
	t := time.NewTimer(w.cfg.linger)
	t.Stop()
	for {
		<-w.wake
		t.Reset(w.cfg.linger)
		select {
		case <-t.C:
		case <-w.hurry:
			t.Stop()
		}
		for {
			p, stop := w.next()
			if stop {
				return
			}
			if p == nil {
				break
			}
			w.put(p)
		}
		w.pace(time.Now())
		w.flush()
	}
}

// pace raises the sample when the decisions offered since the bucket was
// last full come faster than MaxRate and have emptied it: to one key in
// as many more as bring that rate under MaxRate, the next power of two.
// A header line says so in the file, from about where the new sample
// applies (decisions already sampled are still written).
func (w *Writer) pace(now time.Time) {
	if w.cfg.MaxRate == 0 {
		return
	}
	offered := w.recorded.Load() + w.dropped.Load() + w.failed.Load()
	n := offered - w.offered
	rate := float64(w.cfg.MaxRate)
	w.tokens += now.Sub(w.at).Seconds() * rate
	w.offered, w.at = offered, now
	if w.tokens >= rate {
		w.tokens, w.since, w.burst = rate, now, 0
	}
	w.tokens -= float64(n)
	w.burst += n
	if w.tokens >= 0 {
		return
	}
	seen := float64(w.burst) / max(now.Sub(w.since).Seconds(), 1e-3)
	// What the new sample keeps of the burst is allowed again from now.
	w.tokens, w.since, w.burst = 0, now, 0
	sample, f := w.sample.Load(), uint64(2)
	if sample >= maxSample {
		return // as few keys as it records
	}
	for seen/float64(f) > rate && sample*f < maxSample {
		f *= 2
	}
	sample = min(sample*f, maxSample)
	w.sample.Store(sample)
	if w.f != nil {
		w.header() // a failure shows in the next entry's write
	}
	if w.cfg.OnSample != nil {
		w.cfg.OnSample(int(sample), seen)
	}
}

// maxSample is the highest sample pace raises to: a key in a million.
const maxSample = 1 << 20

// put writes p and frees it.
func (w *Writer) put(p *page) {
	w.write(p)
	p.reset()
	w.free <- p
}

// finish writes the page being filled when Close came, and closes the
// file.
func (w *Writer) finish() {
	w.mu.Lock()
	p := w.cur
	w.cur = nil
	w.mu.Unlock()
	if p != nil {
		w.write(p)
	}
	w.flush()
	if w.f != nil {
		if err := w.f.Close(); err != nil {
			w.fail(fmt.Errorf("record: close %s: %w", w.cfg.Path, err))
		}
	}
}

// write writes p's entries, counting them once a page: the counts are
// read by others, and an atomic add per entry cost as much as a part of
// the line.
func (w *Writer) write(p *page) {
	var c counts
	for i := range p.es {
		w.writeEntry(&p.es[i], p.key(i), &c)
	}
	w.recorded.Add(c.recorded)
	w.failed.Add(c.failed)
	w.written.Add(c.written)
}

// counts are a page's, for write.
type counts struct{ recorded, failed, written uint64 }

func (w *Writer) writeEntry(e *Entry, key []byte, c *counts) {
	w.line = w.enc.append(w.line[:0], e, key)
	if w.size+int64(len(w.line)) > w.cfg.MaxSize && w.size > 0 {
		if err := w.rotate(); err != nil {
			w.fail(err)
		}
	}
	if w.f == nil {
		// The last rotation could not open a new file: try again, once
		// per entry, until it can.
		if err := w.open(); err != nil {
			c.failed++
			w.fail(err)
			return
		}
	}
	n, err := w.bw.Write(w.line)
	w.size += int64(n)
	c.written += uint64(n)
	if err != nil {
		c.failed++
		w.fail(fmt.Errorf("record: write %s: %w", w.cfg.Path, err))
		return
	}
	c.recorded++
}

func (w *Writer) flush() {
	if w.bw == nil {
		return
	}
	if err := w.bw.Flush(); err != nil {
		w.fail(fmt.Errorf("record: write %s: %w", w.cfg.Path, err))
		w.bw.Reset(w.f) // what it held is lost; later writes may succeed
	}
}

func (w *Writer) fail(err error) {
	s := err.Error()
	w.lastErr.Store(&s)
}

// open opens Path for appending and writes a header.
func (w *Writer) open() error {
	// 0600: a recording holds what clients asked, keys in the clear if so
	// configured.
	f, err := os.OpenFile(w.cfg.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("record: %w", err)
	}
	w.f, w.size = f, fi.Size()
	if w.bw == nil {
		w.bw = bufio.NewWriterSize(f, bufSize)
	} else {
		w.bw.Reset(f)
	}
	return w.header()
}

// header writes a header line: how the lines after it were recorded.
func (w *Writer) header() error {
	keys := "hashed"
	if w.cfg.ClearKeys {
		keys = "clear"
	}
	h, _ := json.Marshal(Header{Version: Version, Started: w.cfg.Now().UnixMicro(), Sample: int(w.sample.Load()), MaxRate: w.cfg.MaxRate, Keys: keys})
	h = append(h, '\n')
	n, err := w.bw.Write(h)
	w.size += int64(n)
	w.written.Add(uint64(n))
	return err
}

// rotate closes Path and moves it to Path.1, each Path.k to Path.k+1, the
// one past Keep removed, then opens Path anew.
func (w *Writer) rotate() error {
	w.flush()
	err := w.f.Close()
	w.f = nil
	if err != nil {
		return fmt.Errorf("record: close %s: %w", w.cfg.Path, err)
	}
	name := func(k int) string { return w.cfg.Path + "." + strconv.Itoa(k) }
	if w.cfg.Keep == 0 {
		err = os.Remove(w.cfg.Path)
	} else {
		_ = os.Remove(name(w.cfg.Keep))
		for k := w.cfg.Keep - 1; k >= 1; k-- {
			if err := os.Rename(name(k), name(k+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("record: rotate: %w", err)
			}
		}
		err = os.Rename(w.cfg.Path, name(1))
	}
	if err != nil {
		return fmt.Errorf("record: rotate: %w", err)
	}
	w.rotations.Add(1)
	return w.open()
}
