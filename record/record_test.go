package record

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/sluice-rl/sluice/engine"
)

var (
	token = engine.Limit{Algorithm: engine.TokenBucket, Rate: 10, Period: time.Second, Burst: 20}
	multi = []engine.NamedLimit{
		{Name: "second", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 5, Period: time.Second}},
		{Name: "day", Limit: engine.Limit{Algorithm: engine.SlidingWindow, Rate: 1000, Period: 24 * time.Hour, Precision: 24}},
	}
)

func readAll(t *testing.T, path string) ([]Entry, Header) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := NewReader(f)
	var es []Entry
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			return es, r.Header()
		}
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
}

// someEntries are entries of every kind: each door, a policy's and a
// rule's, one limit and several, a key to escape, a key too long for the
// hasher's table, flags and failure modes.
func someEntries() []Entry {
	return []Entry{
		{Time: 1_700_000_000_000_001, Door: "resp", Policy: "api", Key: "user:1", Cost: 1, Limit: token, Allowed: true, Remaining: 19, Path: "memory"},
		{Time: 1_700_000_000_000_002, Door: "grpc", Rule: "per_ip", Key: "10.0.0.1", Cost: 3, Shadow: true, OnFailure: engine.FailOpen,
			Limit: engine.Limit{Algorithm: engine.GCRA, Rate: 5, Period: time.Minute, Burst: 2}, Remaining: 0, RetryAfter: 12_000_000, Path: "redis"},
		{Time: 1_700_000_000_000_003, Door: "http", Policy: "plan", Key: "tenant \"q\"\n\x00é\xff", Cost: 0, Peek: true, Limits: multi, Allowed: true, Remaining: 4, Path: "deny_cache"},
		{Time: 1_700_000_000_000_004, Policy: "llm", Key: "k", Cost: 700, Charge: true, Limit: token, Remaining: -680, Path: "fail_closed"},
		{Time: 1_700_000_000_000_005, Policy: "plan", Key: "a-key-longer-than-thirty-one-bytes-for-sure", Cost: 1, Limits: multi, Path: "memory"},
	}
}

// Entries read back as they were recorded, whatever their fields.
func TestRoundTrip(t *testing.T) {
	entries := someEntries()
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	w, err := New(Config{Path: path, ClearKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range entries {
		if !w.Sample(entries[i].Key) {
			t.Fatal("Sample 1 skipped a decision")
		}
		w.Record(&entries[i])
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, h := readAll(t, path)
	if h.Version != Version || h.Keys != "clear" || h.Sample != 1 {
		t.Errorf("header %+v", h)
	}
	if len(got) != len(entries) {
		t.Fatalf("read %d entries, want %d", len(got), len(entries))
	}
	entries[2].Key = "tenant \"q\"\n\x00é\uFFFD" // an invalid byte reads back as U+FFFD
	for i := range entries {
		want, g := entries[i], got[i]
		if g.Time != want.Time || g.Door != want.Door || g.Policy != want.Policy || g.Rule != want.Rule || g.Key != want.Key ||
			g.Cost != want.Cost || g.Peek != want.Peek || g.Charge != want.Charge || g.Shadow != want.Shadow || g.OnFailure != want.OnFailure ||
			g.Limit != want.Limit || !engine.SameLimits(g.Limits, want.Limits) || len(g.Limits) != len(want.Limits) ||
			g.Allowed != want.Allowed || g.Remaining != want.Remaining || g.RetryAfter != want.RetryAfter || g.Path != want.Path {
			t.Errorf("entry %d:\n got %+v\nwant %+v", i, g, want)
		}
	}
	if st := w.Stats(); st.Recorded != uint64(len(entries)) || st.Dropped != 0 || st.Bytes == 0 {
		t.Errorf("stats %+v", st)
	}
}

// By default a key is written only as its salted hash: one key, one hash;
// two keys, two hashes; and the hash is KeyHash's.
func TestKeysHashed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	salt := []byte("pepper")
	w, err := New(Config{Path: path, Salt: salt})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"secret-a", "secret-b", "secret-a"} {
		w.Record(&Entry{Time: 1, Policy: "api", Key: k, Cost: 1, Allowed: true})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if strings.Contains(string(raw), "secret") {
		t.Fatalf("a key in the clear:\n%s", raw)
	}
	got, h := readAll(t, path)
	if h.Keys != "hashed" {
		t.Errorf("header keys %q", h.Keys)
	}
	if got[0].Key != "" || got[0].KeyHash != KeyHash(salt, "secret-a") || got[0].KeyHash != got[2].KeyHash || got[0].KeyHash == got[1].KeyHash {
		t.Errorf("hashes %q %q %q", got[0].KeyHash, got[1].KeyHash, got[2].KeyHash)
	}
	if KeyHash([]byte("other"), "secret-a") == got[0].KeyHash {
		t.Error("the salt does not change the hash")
	}
}

// The writer's hasher is HMAC-SHA-256 as crypto/hmac computes it
// (KeyHash), whatever the salt's length (a block's, longer, hashed
// first): for a key found in its table of recent hashes, a key hashed
// again after another took its slot, a key too long for the table, and
// while keys that rarely repeat have it left alone.
func TestHasherIsHMAC(t *testing.T) {
	hot := []string{"a", "user:7", strings.Repeat("k", 31), strings.Repeat("k", 32), strings.Repeat("x", 300), "\xff\x00bin"}
	var keys []string // hot keys among others: the table found useful
	for i := range 3 * hashTable {
		keys = append(keys, "tenant:"+strconv.Itoa(i), hot[i%len(hot)])
	}
	for i := range 2 * skipRun { // none repeats: the table left alone
		keys = append(keys, "once:"+strconv.Itoa(i))
	}
	keys = append(keys, keys[:6*hashTable]...) // and found useful again
	for _, salt := range [][]byte{{}, []byte("pepper"), bytes.Repeat([]byte{7}, 64), bytes.Repeat([]byte{9}, 65), bytes.Repeat([]byte("salt"), 40)} {
		h := newHasher(salt)
		var hits, skipped int
		for _, k := range keys {
			before := h.hits
			if got, want := string(h.append(nil, []byte(k))), KeyHash(salt, k); got != want {
				t.Fatalf("salt %d bytes, key %q: hash %s, want %s", len(salt), k, got, want)
			}
			if h.hits > before {
				hits++
			}
			if h.skip > 0 {
				skipped++
			}
		}
		if hits < hashTable/4 || skipped < skipRun {
			t.Errorf("salt %d bytes: %d keys found in the table, %d hashed without it: the test missed a case", len(salt), hits, skipped)
		}
	}
}

// An encoder keeps what repeats from line to line (limits' JSON, keys'
// hashes): lines written by one encoder, one after another, are those
// that a new encoder writes for each.
func TestEncoderRepeats(t *testing.T) {
	other := []engine.NamedLimit{{Name: "minute", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 50, Period: time.Minute}}}
	gcra := engine.Limit{Algorithm: engine.GCRA, Rate: 100, Period: time.Minute, Burst: 3}
	es := []Entry{
		{Time: 1, Key: "a", Limit: token, Allowed: true},
		{Time: 2, Key: "a", Limit: token, Allowed: true},
		{Time: 3, Key: "b", Limit: gcra},
		{Time: 4, Key: "a", Limit: token, Allowed: true},
		{Time: 5, Policy: "p", Key: "a", Limits: multi},
		{Time: 6, Policy: "p", Key: "b", Limits: multi},
		{Time: 7, Policy: "q", Key: "b", Limits: other},
		{Time: 8, Policy: "q", Key: "b", Limits: multi[:1]},
		{Time: 9, Policy: "p", Key: "a", Limits: multi},
		{Time: 10, Policy: "r", Key: "a"},
		{Time: 11, Key: "c", Limit: gcra},
	}
	for _, salt := range [][]byte{nil, []byte("pepper")} {
		kept := encoder{}
		if salt != nil {
			kept.hash = newHasher(salt)
		}
		for i := range es {
			fresh := encoder{}
			if salt != nil {
				fresh.hash = newHasher(salt)
			}
			got := string(kept.append(nil, &es[i], []byte(es[i].Key)))
			if want := string(fresh.append(nil, &es[i], []byte(es[i].Key))); got != want {
				t.Errorf("entry %d: line\n%s, want\n%s", i, got, want)
			}
		}
	}
}

// The lines are byte for byte what version 1 has always written, keys
// clear or hashed (under a known salt), limits repeated or not: a change
// to the writer for speed changes no file.
func TestLinesUnchanged(t *testing.T) {
	entries := someEntries()
	for _, tc := range []struct {
		name  string
		clear bool
		want  []string
	}{
		{"clear", true, []string{
			`{"t":1700000000000001,"door":"resp","policy":"api","key":"user:1","cost":1,"limit":{"algorithm":"token_bucket","rate":10,"period_us":1000000,"burst":20},"allowed":true,"remaining":19,"path":"memory"}`,
			`{"t":1700000000000002,"door":"grpc","rule":"per_ip","key":"10.0.0.1","cost":3,"shadow":true,"on_failure":"allow","limit":{"algorithm":"gcra","rate":5,"period_us":60000000,"burst":2},"allowed":false,"remaining":0,"retry_after_us":12000000,"path":"redis"}`,
			`{"t":1700000000000003,"door":"http","policy":"plan","key":"tenant \"q\"\u000a\u0000é\ufffd","cost":0,"peek":true,"limits":[{"name":"second","algorithm":"fixed_window","rate":5,"period_us":1000000},{"name":"day","algorithm":"sliding_window","rate":1000,"period_us":86400000000,"precision":24}],"allowed":true,"remaining":4,"path":"deny_cache"}`,
			`{"t":1700000000000004,"policy":"llm","key":"k","cost":700,"charge":true,"limit":{"algorithm":"token_bucket","rate":10,"period_us":1000000,"burst":20},"allowed":false,"remaining":-680,"path":"fail_closed"}`,
			`{"t":1700000000000005,"policy":"plan","key":"a-key-longer-than-thirty-one-bytes-for-sure","cost":1,"limits":[{"name":"second","algorithm":"fixed_window","rate":5,"period_us":1000000},{"name":"day","algorithm":"sliding_window","rate":1000,"period_us":86400000000,"precision":24}],"allowed":false,"remaining":0,"path":"memory"}`,
		}},
		{"hashed", false, []string{
			`{"t":1700000000000001,"door":"resp","policy":"api","key_hash":"92f9e146fce71e559d9adc3b61db797f","cost":1,"limit":{"algorithm":"token_bucket","rate":10,"period_us":1000000,"burst":20},"allowed":true,"remaining":19,"path":"memory"}`,
			`{"t":1700000000000002,"door":"grpc","rule":"per_ip","key_hash":"2a2ffd3ffe3a0de24e16b0a87f5e1a4a","cost":3,"shadow":true,"on_failure":"allow","limit":{"algorithm":"gcra","rate":5,"period_us":60000000,"burst":2},"allowed":false,"remaining":0,"retry_after_us":12000000,"path":"redis"}`,
			`{"t":1700000000000003,"door":"http","policy":"plan","key_hash":"87123c8ceeb8d67e1527ebf71a4cce8b","cost":0,"peek":true,"limits":[{"name":"second","algorithm":"fixed_window","rate":5,"period_us":1000000},{"name":"day","algorithm":"sliding_window","rate":1000,"period_us":86400000000,"precision":24}],"allowed":true,"remaining":4,"path":"deny_cache"}`,
			`{"t":1700000000000004,"policy":"llm","key_hash":"83ef0d5e11295bc9856db519b01b2f08","cost":700,"charge":true,"limit":{"algorithm":"token_bucket","rate":10,"period_us":1000000,"burst":20},"allowed":false,"remaining":-680,"path":"fail_closed"}`,
			`{"t":1700000000000005,"policy":"plan","key_hash":"480f1aca139d1f35a71d0425428acb20","cost":1,"limits":[{"name":"second","algorithm":"fixed_window","rate":5,"period_us":1000000},{"name":"day","algorithm":"sliding_window","rate":1000,"period_us":86400000000,"precision":24}],"allowed":false,"remaining":0,"path":"memory"}`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rec.jsonl")
			w, err := New(Config{Path: path, ClearKeys: tc.clear, Salt: []byte("pepper")})
			if err != nil {
				t.Fatal(err)
			}
			for i := range entries {
				w.Record(&entries[i])
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")[1:] // the header's time varies
			if len(got) != len(tc.want) {
				t.Fatalf("%d lines, want %d:\n%s", len(got), len(tc.want), raw)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("line %d:\n%s\nwant\n%s", i+1, got[i], tc.want[i])
				}
			}
		})
	}
}

// A string is written as JSON holds it: printable ASCII as it is but the
// quote and the backslash, control bytes as \u00XX, UTF-8 as it is, an
// invalid byte as U+FFFD; the bytes around each escape are kept, in
// order.
func TestAppendString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"user:7", `"user:7"`},
		{`a"b\c`, `"a\"b\\c"`},
		{"\x00x\x1f\n\t\x7f", `"\u0000x\u001f\u000a\u0009` + "\x7f" + `"`},
		{"pré-été", `"pré-été"`},
		{"ok\xffok\xe9", `"ok\ufffdok\ufffd"`},
		{"<&>", `"<&>"`},
	} {
		if got := string(appendString([]byte("x"), []byte(tc.in))); got != "x"+tc.want {
			t.Errorf("%q: %s, want %s", tc.in, got, "x"+tc.want)
		}
	}
}

// One key in Sample is recorded, each with every decision; a salt picks
// the same keys in every Writer, and another salt others.
func TestSampleKeys(t *testing.T) {
	sampled := func(salt string) map[string]bool {
		w, err := New(Config{Path: filepath.Join(t.TempDir(), "rec"), Sample: 4, Salt: []byte(salt)})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		in := map[string]bool{}
		for i := range 10_000 {
			k := "user:" + strconv.Itoa(i)
			in[k] = w.Sample(k)
			for range 3 {
				if w.Sample(k) != in[k] {
					t.Fatalf("key %s sampled on one decision and not another", k)
				}
			}
		}
		return in
	}
	a, b, c := sampled("s3cret"), sampled("s3cret"), sampled("other")
	n, same := 0, 0
	for k := range a {
		if a[k] {
			n++
		}
		if a[k] != b[k] {
			t.Fatalf("key %s: sampled by one Writer and not another under the same salt", k)
		}
		if a[k] == c[k] {
			same++
		}
	}
	if n < 2_300 || n > 2_700 {
		t.Errorf("sampled %d of 10,000 keys at one in 4", n)
	}
	if same > 9_000 { // independent choices agree on 62.5% of keys
		t.Errorf("another salt chose the same keys: %d of 10,000 alike", same)
	}
}

// Past MaxRate the sample rises, a header line says so, and every key
// recorded keeps the decisions it had: all of a key still sampled, and a
// first part of the others'.
func TestMaxRate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	var rose atomic.Int64
	w, err := New(Config{Path: path, ClearKeys: true, MaxRate: 50_000, OnSample: func(sample int, _ float64) { rose.Store(int64(sample)) }})
	if err != nil {
		t.Fatal(err)
	}
	lim := engine.Limit{Algorithm: engine.GCRA, Rate: 10, Period: time.Second, Burst: 10}
	offered := map[string]int{} // decisions on each key sampled
	left := map[string]bool{}   // keys the sample no longer holds
	deadline := time.Now().Add(10 * time.Second)
	after := 0 // ticks since the sample rose
	for tick := int64(0); after < 100 && time.Now().Before(deadline); tick++ {
		if rose.Load() > 0 {
			after++
		}
		// 1,000 keys a millisecond at most: up to 1,000,000 a second
		// against 50,000.
		for i := range 1_000 {
			e := Entry{Time: 1_700_000_000_000_000 + tick, Key: "k" + strconv.Itoa(i), Cost: 1, Limit: lim, Allowed: true}
			if !w.Sample(e.Key) {
				left[e.Key] = true
				continue
			}
			if left[e.Key] {
				t.Fatalf("key %s sampled again after it left the sample", e.Key)
			}
			offered[e.Key]++
			w.Record(&e)
		}
		time.Sleep(time.Millisecond)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	final := w.Stats().Sample
	if final < 2 || int64(final) != rose.Load() {
		t.Fatalf("sample %d (told %d), want it raised", final, rose.Load())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := NewReader(f)
	got := map[string]int{}
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[e.Key]++
	}
	if s := r.Sampling(); s.Sample != final || s.ByDecision {
		t.Errorf("sampling read %+v, want one key in %d", s, final)
	}
	if h := r.Header(); h.Sample != final || h.MaxRate != 50_000 {
		t.Errorf("last header %+v", h)
	}
	if w.Stats().Dropped > 0 {
		t.Skipf("%d dropped: the machine is too busy to tell", w.Stats().Dropped)
	}
	kept := 0
	for k, n := range offered {
		if got[k] != n {
			t.Errorf("key %s: %d of its %d decisions read back", k, got[k], n)
		}
		if (xxhash.Sum64String(k)^w.sampleSeed)%uint64(final) == 0 {
			kept++
		}
	}
	if kept == 0 || kept > 2*1_000/final+10 {
		t.Errorf("%d keys in the final sample of one in %d", kept, final)
	}
}

// Past MaxSize the file rotates, Keep files are kept, none is larger than
// MaxSize, and every file starts with a header.
func TestRotate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rec.jsonl")
	// 200 entries fit the default slots: none is dropped.
	w, err := New(Config{Path: path, MaxSize: 1000, Keep: 2, ClearKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		w.Record(&Entry{Time: int64(i + 1), Policy: "api", Key: "k", Cost: 1, Limit: token, Allowed: true})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob(path + "*")
	if len(names) != 3 {
		t.Fatalf("files %v, want rec.jsonl and two rotated", names)
	}
	if w.Stats().Rotations < 3 {
		t.Errorf("rotations %d", w.Stats().Rotations)
	}
	var last int64
	for _, name := range []string{path + ".2", path + ".1", path} {
		fi, _ := os.Stat(name)
		if fi.Size() > 1000 {
			t.Errorf("%s: %d bytes, over 1000", name, fi.Size())
		}
		es, h := readAll(t, name)
		if h.Version != Version || len(es) == 0 {
			t.Errorf("%s: header %+v, %d entries", name, h, len(es))
		}
		for _, e := range es {
			if e.Time <= last {
				t.Errorf("%s: entry at %d after %d: rotated files out of order", name, e.Time, last)
			}
			last = e.Time
		}
	}
	if last != 200 {
		t.Errorf("newest entry %d, want 200", last)
	}
}

// With every slot waiting for the file, Record drops and counts rather
// than wait.
func TestDropWhenFull(t *testing.T) {
	w, err := New(Config{Path: filepath.Join(t.TempDir(), "rec"), Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Take the one page, as a writer stuck on a slow disk would hold it.
	held := <-w.free
	w.Record(&Entry{Time: 1, Policy: "p", Key: "k", Allowed: true})
	w.Record(&Entry{Time: 2, Policy: "p", Key: "k", Allowed: true})
	if st := w.Stats(); st.Dropped != 2 || st.Recorded != 0 {
		t.Errorf("stats %+v, want 2 dropped", st)
	}
	w.free <- held
	w.Record(&Entry{Time: 3, Policy: "p", Key: "k", Allowed: true})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Recorded != 1 {
		t.Errorf("stats %+v, want 1 recorded once a slot is free", st)
	}
}

// A bad line is an error that names the line and what is wrong.
func TestReadErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"version", `{"sluice_recording":3}`, "line 1: format version 3: this sluice reads versions 1 to 2"},
		{"not json", "{\"sluice_recording\":1}\nnope", "line 2: not a JSON object"},
		{"no time", `{"policy":"p","key":"k","allowed":true}`, `no "t"`},
		{"bad time", `{"time":"yesterday","policy":"p","key":"k","allowed":true}`, `invalid "time"`},
		{"no key", `{"t":1,"policy":"p","allowed":true}`, `no "key" or "key_hash"`},
		{"no rule", `{"t":1,"key":"k","allowed":true}`, `no "policy" and no "limit"`},
		{"no decision", `{"t":1,"policy":"p","key":"k"}`, `no "allowed"`},
		{"negative cost", `{"t":1,"policy":"p","key":"k","cost":-1,"allowed":true}`, `invalid "cost" -1`},
		{"bad limit", `{"t":1,"key":"k","limit":{"algorithm":"token_bucket","rate":0,"period_us":1000000,"burst":1},"allowed":true}`, "invalid rate 0"},
		{"bad algorithm", `{"t":1,"key":"k","limit":{"algorithm":"magic","rate":1,"period_us":1000000},"allowed":true}`, `invalid algorithm "magic"`},
		{"bad name", `{"t":1,"key":"k","limits":[{"name":"a:b","algorithm":"gcra","rate":1,"period_us":1000000}],"allowed":true}`, "invalid limit name"},
		{"bad mode", `{"t":1,"policy":"p","key":"k","on_failure":"maybe","allowed":true}`, "invalid on_failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewReader(strings.NewReader(tc.in)).Next()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// A user's own line needs only the required fields: cost defaults to 1,
// and time may be written as RFC 3339.
func TestReadMinimal(t *testing.T) {
	e, err := NewReader(strings.NewReader(`{"time":"2026-01-02T03:04:05.000006Z","policy":"api","key":"alice","allowed":false,"extra":[1]}`)).Next()
	if err != nil {
		t.Fatal(err)
	}
	if e.Time != time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC).UnixMicro() || e.Cost != 1 || e.Policy != "api" || e.ID() != "alice" || e.Allowed {
		t.Errorf("entry %+v", e)
	}
}

// A quiet writer's entries reach the file within a moment, without
// Close: the first after the file was brought up to date wakes the
// writer's goroutine, each time.
func TestCurrentWithoutClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	w, err := New(Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 3 {
		w.Record(&Entry{Time: int64(i + 1), Policy: "p", Key: "k", Cost: 1, Allowed: true})
		deadline := time.Now().Add(10 * time.Second)
		for {
			if es, _ := readAll(t, path); len(es) == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("entry %d not in the file 10 s after it was recorded", i+1)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// With half its pages full before its linger ends (its timer late, its
// CPU busy elsewhere), the writer's goroutine is woken at once rather than
// let the pages run out.
func TestHurry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	w, err := New(Config{Path: path, Slots: 4 * pageLen, linger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	n := 3 * pageLen // two pages full: half of the queue's room
	for i := range n {
		w.Record(&Entry{Time: int64(i + 1), Policy: "p", Key: "k", Cost: 1, Allowed: true})
	}
	deadline := time.Now().Add(10 * time.Second)
	for w.Stats().Recorded < uint64(2*pageLen) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v 10 s after two pages were full, the linger an hour", w.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if st := w.Stats(); st.Dropped != 0 {
		t.Errorf("stats %+v, want none dropped", st)
	}
}

// Close does not wait out the writer's linger: what was recorded reaches
// the file at once.
func TestCloseCutsLinger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	w, err := New(Config{Path: path, linger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w.Record(&Entry{Time: 1, Policy: "p", Key: "k", Cost: 1, Allowed: true})
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waiting 10 s on, the linger an hour")
	}
	if es, _ := readAll(t, path); len(es) != 1 {
		t.Errorf("%d entries in the file, want 1", len(es))
	}
}

// The file keeps the order entries were recorded in, across the pages
// they were handed over in, whatever the writer's goroutine was doing.
func TestOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	w, err := New(Config{Path: path, Slots: 1024})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20_000 {
		w.Record(&Entry{Time: int64(i + 1), Policy: "p", Key: "k", Cost: 1, Allowed: true})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	es, _ := readAll(t, path)
	if st := w.Stats(); uint64(len(es)) != st.Recorded || st.Recorded+st.Dropped != 20_000 {
		t.Fatalf("%d read, stats %+v", len(es), st)
	}
	for i := 1; i < len(es); i++ {
		if es[i].Time <= es[i-1].Time {
			t.Fatalf("entry %d recorded after entry %d is before it in the file", es[i-1].Time, es[i].Time)
		}
	}
}

// BenchmarkRecord is what a decision pays to be recorded, from every
// CPU at once: the lock, and the copy into a page (or, with no page free,
// the drop and its count), a channel operation a page. The loop records
// far faster than the writer's goroutine writes: dropped/op says which
// share of the ops were drops.
func BenchmarkRecord(b *testing.B) {
	w, err := New(Config{Path: filepath.Join(b.TempDir(), "rec.jsonl"), MaxSize: 16 << 20})
	if err != nil {
		b.Fatal(err)
	}
	e := Entry{Time: 1_800_000_000_000_000, Door: "resp", Policy: "api", Key: "tenant:42", Cost: 1, Limit: token, Allowed: true, Remaining: 7, Path: "memory"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		e := e
		for pb.Next() {
			if w.Sample(e.Key) {
				w.Record(&e)
			}
		}
	})
	st := w.Stats()
	w.Close()
	b.ReportMetric(float64(st.Dropped)/float64(b.N), "dropped/op")
}

// BenchmarkRecordCPU is the whole CPU a recorded entry costs the process:
// Record on the caller's side, and the writer's goroutine's line, hash
// and write syscalls, read from getrusage (user+sys) around the loop and
// reported per entry as cpu-ns/entry. Entries are recorded in rounds of
// at most the writer's slots, each round waited out (asleep, costing no
// CPU) before the next, so that none is dropped: every one reaches the
// file. Keys vary: each once (the worst case), or skewed. It needs a quiet
// machine to mean much; ns/op is the wall clock, the rounds' waits
// included.
func BenchmarkRecordCPU(b *testing.B) {
	// A skewed load: keys drawn from 100,000 by Zipf's law (s = 1.1), as
	// a rate limiter's keys usually are, a few hot ones most of the time.
	zipf := make([]int, 1<<16)
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 100_000-1)
	for i := range zipf {
		zipf[i] = int(z.Uint64())
	}
	for _, bc := range []struct {
		name  string
		clear bool
		key   func(i int) int
	}{
		{"hashed, each key once", false, func(i int) int { return i }}, // no hash is kept
		{"hashed, Zipf keys from 100000", false, func(i int) int { return zipf[i%len(zipf)] }},
		{"clear, each key once", true, func(i int) int { return i }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const slots = 1 << 16
			w, err := New(Config{Path: filepath.Join(b.TempDir(), "rec.jsonl"), MaxSize: 1 << 40, Slots: slots, ClearKeys: bc.clear})
			if err != nil {
				b.Fatal(err)
			}
			gcra := engine.Limit{Algorithm: engine.GCRA, Rate: 1000, Period: time.Second, Burst: 1000}
			e := Entry{Time: 1_800_000_000_000_000, Door: "resp", Cost: 1, Limit: gcra, Allowed: true, Remaining: 999, Path: "memory"}
			key := []byte("k:000000000000")
			b.ReportAllocs()
			b.ResetTimer()
			before := cpuTime(b)
			for done := 0; done < b.N; {
				round := min(b.N-done, slots)
				for i := range round {
					n := bc.key(done + i)
					for j := len(key) - 1; j >= 2; j-- {
						key[j] = '0' + byte(n%10)
						n /= 10
					}
					e.Key = unsafe.String(&key[0], len(key)) // Record copies it
					e.Time++
					if w.Sample(e.Key) {
						w.Record(&e)
					}
				}
				done += round
				for w.Stats().Recorded+w.Stats().Dropped < uint64(done) {
					time.Sleep(100 * time.Microsecond)
				}
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			cpu := cpuTime(b) - before
			b.StopTimer()
			st := w.Stats()
			if st.Dropped != 0 || st.Recorded != uint64(b.N) {
				b.Fatalf("recorded %d, dropped %d of %d", st.Recorded, st.Dropped, b.N)
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/entry")
			b.ReportMetric(float64(st.Bytes)/float64(b.N), "B/entry")
		})
	}
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
