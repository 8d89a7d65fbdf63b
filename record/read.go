package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Header is a recording's header line: how the lines after it were
// recorded.
type Header struct {
	Version int   `json:"sluice_recording"`
	Started int64 `json:"started_us"` // µs since the Unix epoch
	// Sample: one key in Sample recorded, with its every decision (one
	// decision in Sample, in version 1).
	Sample  int    `json:"sample"`
	MaxRate int    `json:"max_rate,omitempty"` // decisions a second, past which Sample rises
	Keys    string `json:"keys"`               // "clear" or "hashed"
}

// MaxLine is the longest line a reader accepts: a whole entry with a key
// of engine.MaxKeyLen bytes, each written as an escape, and eight limits
// fit well within it.
const MaxLine = 64 << 10

// line is an entry as a file holds it; pointers tell a field left out.
type line struct {
	Version   *int        `json:"sluice_recording"`
	Sample    int         `json:"sample"`
	T         *int64      `json:"t"`
	Time      string      `json:"time"`
	Door      string      `json:"door"`
	Policy    string      `json:"policy"`
	Rule      string      `json:"rule"`
	Key       *string     `json:"key"`
	KeyHash   string      `json:"key_hash"`
	Cost      *int64      `json:"cost"`
	Peek      bool        `json:"peek"`
	Charge    bool        `json:"charge"`
	Shadow    bool        `json:"shadow"`
	OnFailure string      `json:"on_failure"`
	Limit     *limitLine  `json:"limit"`
	Limits    []limitLine `json:"limits"`
	Allowed   *bool       `json:"allowed"`
	Remaining int64       `json:"remaining"`
	Retry     int64       `json:"retry_after_us"`
	Path      string      `json:"path"`
}

type limitLine struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Rate      int64  `json:"rate"`
	PeriodUS  int64  `json:"period_us"`
	Burst     int64  `json:"burst"`
	Precision int64  `json:"precision"`
}

// Sampling is what part of its decisions a recording holds.
type Sampling struct {
	// Sample: one in Sample recorded, the highest any header said (a
	// sample only ever rises while a recording is made); 1: all of them.
	Sample int `json:"sample"`
	// ByDecision: one decision in Sample, a key's decisions not all
	// recorded (version 1); else one key in Sample, with all of its.
	ByDecision bool `json:"by_decision,omitempty"`
}

// Reader reads a recording line by line.
type Reader struct {
	sc       *bufio.Scanner
	n        int // lines read
	header   Header
	sampling Sampling
}

// NewReader reads r.
func NewReader(r io.Reader) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxLine)
	return &Reader{sc: sc}
}

// Header is the last header line read; its Version is zero when none was.
func (r *Reader) Header() Header { return r.header }

// Sampling is what the header lines read so far said of the sample.
func (r *Reader) Sampling() Sampling {
	return Sampling{Sample: max(r.sampling.Sample, 1), ByDecision: r.sampling.ByDecision}
}

// Next returns the next entry, io.EOF after the last, or an error naming
// the line that is wrong. Blank lines and header lines are skipped.
func (r *Reader) Next() (Entry, error) {
	for r.sc.Scan() {
		r.n++
		b := bytes.TrimSpace(r.sc.Bytes())
		if len(b) == 0 {
			continue
		}
		e, h, err := parseLine(b)
		if err != nil {
			return Entry{}, fmt.Errorf("recording line %d: %w", r.n, err)
		}
		if h != nil {
			r.header = *h
			r.sampling.Sample = max(r.sampling.Sample, h.Sample)
			r.sampling.ByDecision = r.sampling.ByDecision || h.Version == 1 && h.Sample > 1
			continue
		}
		return e, nil
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Entry{}, fmt.Errorf("recording line %d: longer than %d bytes", r.n+1, MaxLine)
		}
		return Entry{}, fmt.Errorf("recording: %w", err)
	}
	return Entry{}, io.EOF
}

// parseLine reads one line: an entry, or a header (h not nil).
func parseLine(b []byte) (e Entry, h *Header, err error) {
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		return e, nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if l.Version != nil {
		if *l.Version < 1 || *l.Version > Version {
			return e, nil, fmt.Errorf("format version %d: this sluice reads versions 1 to %d", *l.Version, Version)
		}
		h = &Header{}
		if err := json.Unmarshal(b, h); err != nil {
			return e, nil, fmt.Errorf("header: %w", err)
		}
		return e, h, nil
	}
	switch {
	case l.T != nil:
		e.Time = *l.T
	case l.Time != "":
		t, err := time.Parse(time.RFC3339Nano, l.Time)
		if err != nil {
			return e, nil, fmt.Errorf(`invalid "time" %q: must be RFC 3339, such as 2026-01-02T15:04:05.123456Z`, l.Time)
		}
		e.Time = t.UnixMicro()
	default:
		return e, nil, errors.New(`no "t" (µs since the epoch) or "time"`)
	}
	if e.Time <= 0 {
		return e, nil, fmt.Errorf(`invalid "t" %d: must be µs since the Unix epoch`, e.Time)
	}
	e.Door, e.Policy, e.Rule, e.KeyHash = l.Door, l.Policy, l.Rule, l.KeyHash
	if l.Key != nil {
		e.Key = *l.Key
	}
	if e.Key == "" && e.KeyHash == "" {
		return e, nil, errors.New(`no "key" or "key_hash"`)
	}
	e.Cost = 1
	if l.Cost != nil {
		e.Cost = *l.Cost
	}
	if e.Cost < 0 {
		return e, nil, fmt.Errorf(`invalid "cost" %d: must not be negative`, e.Cost)
	}
	e.Peek, e.Charge, e.Shadow = l.Peek, l.Charge, l.Shadow
	if l.OnFailure != "" {
		if e.OnFailure, err = engine.ParseFailureMode(l.OnFailure); err != nil {
			return e, nil, err
		}
	}
	if l.Limit != nil {
		if e.Limit, err = l.Limit.limit(); err != nil {
			return e, nil, err
		}
	}
	if len(l.Limits) > engine.MaxLimits {
		return e, nil, fmt.Errorf(`%d "limits": at most %d`, len(l.Limits), engine.MaxLimits)
	}
	for i := range l.Limits {
		nl := engine.NamedLimit{Name: l.Limits[i].Name}
		if err := engine.ValidateLimitName(nl.Name); err != nil {
			return e, nil, err
		}
		if nl.Limit, err = l.Limits[i].limit(); err != nil {
			return e, nil, fmt.Errorf("limit %s: %w", nl.Name, err)
		}
		e.Limits = append(e.Limits, nl)
	}
	if e.Policy == "" && e.Limit.Algorithm == 0 && len(e.Limits) == 0 {
		return e, nil, errors.New(`no "policy" and no "limit": nothing says what decided it`)
	}
	if l.Allowed == nil {
		return e, nil, errors.New(`no "allowed"`)
	}
	e.Allowed, e.Remaining, e.RetryAfter, e.Path = *l.Allowed, l.Remaining, l.Retry, l.Path
	return e, nil, nil
}

func (l *limitLine) limit() (engine.Limit, error) {
	alg, err := engine.ParseAlgorithm(l.Algorithm)
	if err != nil {
		return engine.Limit{}, err
	}
	if l.PeriodUS <= 0 || l.PeriodUS > engine.MaxPeriod.Microseconds() {
		return engine.Limit{}, fmt.Errorf(`invalid "period_us" %d: must be between 1000 and %d`, l.PeriodUS, engine.MaxPeriod.Microseconds())
	}
	lim := engine.Limit{Algorithm: alg, Rate: l.Rate, Period: engine.Micros(l.PeriodUS), Burst: l.Burst, Precision: l.Precision}
	return lim, lim.Validate()
}
