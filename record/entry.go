package record

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"hash/maphash"
	"strconv"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/engine"
)

// Version is the format's version, written in every header line. Version
// 2 samples keys, not decisions (Header.Sample); its lines are version
// 1's.
const Version = 2

// Entry is one recorded decision: what it was asked, what decided it and
// what it answered. See the package doc for the fields' names in a file.
type Entry struct {
	Time int64  // µs since the Unix epoch
	Door string // resp, http, grpc; empty when unknown
	// Policy names the policy the request was decided by; empty for an
	// inline limit.
	Policy string
	Rule   string // an inline request's rule name (Request.Label)
	// Key is the client's key, without the policy's prefix; on a read, it
	// is empty when the file holds only its hash.
	Key     string
	KeyHash string // on a read: the key's hash, when the file holds no key
	Cost    int64
	Peek    bool
	Charge  bool
	Shadow  bool
	// OnFailure is the request's own failure mode; FailDefault when it
	// named none.
	OnFailure engine.FailureMode
	// Limit is what the request was decided by, unless Limits is set (a
	// multi-limit policy's, shared and read only). Both empty: not
	// recorded (a user's own file, by policy).
	Limit  engine.Limit
	Limits []engine.NamedLimit
	// Allowed is the limits' own decision, before shadow mode.
	Allowed    bool
	Remaining  int64
	RetryAfter int64  // µs
	Path       string // what decided (engine.Path's name, the store's for PathStore)
}

// ID is the key as a replay tells keys apart: the key, or its hash.
func (e *Entry) ID() string {
	if e.Key != "" {
		return e.Key
	}
	return e.KeyHash
}

// hasher hashes keys: HMAC-SHA-256 under a salt, the first 16 bytes in
// hex. Not safe for concurrent use: the writer's goroutine has one.
//
// A recording pays for its hashes more than for anything else, so the
// hashes of recent short keys are kept in a small table: a hot key, the
// usual case for a rate limiter, is hashed once in a while, not once a
// decision. When keys rarely repeat, the table costs more than it
// spares, and is left alone for a while (probe).
type hasher struct {
	mac    hash.Hash
	sum    [sha256.Size]byte
	seed   maphash.Seed
	recent []recentHash // len hashTable
	// The table's last probes, and how many found their key; skip is how
	// many keys more are hashed without it.
	probes, hits, skip int
}

// recentHash is a key's hash kept in the hasher's table: one cache
// line, the key inline (up to maxRecentKey bytes; longer ones are hashed
// each time).
type recentHash struct {
	n   uint8 // the key's length plus one; zero: empty
	key [maxRecentKey]byte
	hex [2 * hashLen]byte
}

const (
	hashLen      = 16 // bytes of the HMAC kept
	maxRecentKey = 31
	// hashTable is how many recent keys' hashes are kept, direct mapped,
	// the latest key of a slot winning it: 16 KiB, that stays in the
	// CPU's nearest caches. A larger table holds more hot keys but, when
	// keys rarely repeat, costs a cache miss a line.
	hashTable = 256
	// When fewer than minHits of probeRun probes find their key, the next
	// skipRun keys are hashed without the table: a miss costs a tenth of
	// an HMAC, so the table pays when a tenth of the keys or more hit.
	probeRun, minHits, skipRun = 256, 26, 4096
)

func newHasher(salt []byte) *hasher {
	return &hasher{mac: hmac.New(sha256.New, salt), seed: maphash.MakeSeed(), recent: make([]recentHash, hashTable)}
}

// append appends key's hash to dst.
func (h *hasher) append(dst, key []byte) []byte {
	if len(key) > maxRecentKey || h.skip > 0 {
		h.skip = max(h.skip-1, 0)
		return hex.AppendEncode(dst, h.hmac(key))
	}
	r := &h.recent[maphash.Bytes(h.seed, key)%hashTable]
	if int(r.n) == len(key)+1 && string(r.key[:len(key)]) == string(key) {
		h.hits++
	} else {
		hex.Encode(r.hex[:], h.hmac(key))
		r.n = uint8(len(key) + 1)
		copy(r.key[:], key)
	}
	if h.probes++; h.probes == probeRun {
		if h.hits < minHits {
			h.skip = skipRun
		}
		h.probes, h.hits = 0, 0
	}
	return append(dst, r.hex[:]...)
}

// hmac is key's HMAC under the salt, its first hashLen bytes, valid until
// the next call.
func (h *hasher) hmac(key []byte) []byte {
	h.mac.Reset()
	h.mac.Write(key)
	return h.mac.Sum(h.sum[:0])[:hashLen]
}

// KeyHash is key's hash under salt as a recording holds it, so that an
// operator who knows the salt (--record-key-salt) finds a key's lines.
func KeyHash(salt []byte, key string) string {
	m := hmac.New(sha256.New, salt)
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil)[:hashLen])
}

// encoder writes entries as lines, with what repeats from line to line
// kept: the keys' hashes and the limits' JSON. Not safe for concurrent
// use: the writer's goroutine has one.
type encoder struct {
	hash *hasher // nil: keys in the clear
	// The last limit written and its JSON, and the last policy's limits
	// (held, so that their array, shared and read only, is not reused for
	// others while the JSON is kept) and theirs.
	limit      engine.Limit
	limitJSON  []byte
	limits     []engine.NamedLimit
	limitsJSON []byte
}

// append appends e as one line. key is e's key (the writer's copy).
func (c *encoder) append(dst []byte, e *Entry, key []byte) []byte {
	dst = append(dst, `{"t":`...)
	dst = strconv.AppendInt(dst, e.Time, 10)
	if e.Door != "" {
		dst = appendField(dst, "door", e.Door)
	}
	if e.Policy != "" {
		dst = appendField(dst, "policy", e.Policy)
	}
	if e.Rule != "" {
		dst = appendField(dst, "rule", e.Rule)
	}
	if c.hash != nil {
		dst = append(dst, `,"key_hash":"`...)
		dst = append(c.hash.append(dst, key), '"')
	} else {
		dst = append(dst, `,"key":`...)
		dst = appendString(dst, key)
	}
	dst = append(dst, `,"cost":`...)
	dst = strconv.AppendInt(dst, e.Cost, 10)
	dst = appendFlag(dst, "peek", e.Peek)
	dst = appendFlag(dst, "charge", e.Charge)
	dst = appendFlag(dst, "shadow", e.Shadow)
	if e.OnFailure != engine.FailDefault {
		dst = appendField(dst, "on_failure", e.OnFailure.String())
	}
	if len(e.Limits) > 0 {
		if len(e.Limits) != len(c.limits) || &e.Limits[0] != &c.limits[0] {
			c.limits, c.limitsJSON = e.Limits, appendLimits(c.limitsJSON[:0], e.Limits)
		}
		dst = append(dst, c.limitsJSON...)
	} else if e.Limit.Algorithm != 0 {
		if e.Limit != c.limit || c.limitJSON == nil {
			c.limit = e.Limit
			c.limitJSON = appendLimit(append(c.limitJSON[:0], `,"limit":`...), "", &e.Limit)
		}
		dst = append(dst, c.limitJSON...)
	}
	dst = append(dst, `,"allowed":`...)
	dst = strconv.AppendBool(dst, e.Allowed)
	dst = append(dst, `,"remaining":`...)
	dst = strconv.AppendInt(dst, e.Remaining, 10)
	if e.RetryAfter > 0 {
		dst = append(dst, `,"retry_after_us":`...)
		dst = strconv.AppendInt(dst, e.RetryAfter, 10)
	}
	if e.Path != "" {
		dst = appendField(dst, "path", e.Path)
	}
	return append(dst, "}\n"...)
}

func appendLimits(dst []byte, ls []engine.NamedLimit) []byte {
	dst = append(dst, `,"limits":[`...)
	for i := range ls {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendLimit(dst, ls[i].Name, &ls[i].Limit)
	}
	return append(dst, ']')
}

func appendLimit(dst []byte, name string, l *engine.Limit) []byte {
	dst = append(dst, '{')
	if name != "" {
		dst = append(appendString(append(dst, `"name":`...), []byte(name)), ',')
	}
	dst = append(dst, `"algorithm":"`...)
	dst = append(dst, l.Algorithm.String()...)
	dst = append(dst, `","rate":`...)
	dst = strconv.AppendInt(dst, l.Rate, 10)
	dst = append(dst, `,"period_us":`...)
	dst = strconv.AppendInt(dst, l.Period.Microseconds(), 10)
	if l.Burst != 0 {
		dst = append(dst, `,"burst":`...)
		dst = strconv.AppendInt(dst, l.Burst, 10)
	}
	if l.Precision != 0 {
		dst = append(dst, `,"precision":`...)
		dst = strconv.AppendInt(dst, l.Precision, 10)
	}
	return append(dst, '}')
}

func appendField(dst []byte, name, value string) []byte {
	dst = append(dst, `,"`...)
	dst = append(dst, name...)
	dst = append(dst, `":`...)
	return appendString(dst, []byte(value))
}

func appendFlag(dst []byte, name string, v bool) []byte {
	if !v {
		return dst
	}
	dst = append(dst, `,"`...)
	dst = append(dst, name...)
	return append(dst, `":true`...)
}

// plain are the bytes a JSON string holds as they are: printable ASCII
// but the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendString appends s as a JSON string. A key is bytes, not always
// UTF-8: an invalid byte is written as U+FFFD, as encoding/json does, so
// such keys may meet in a recording; hashed keys never do (the hash is of
// the bytes).
func appendString(dst []byte, s []byte) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		// The bytes written as they are, at once: most strings are all
		// of them.
		j := i
		for j < len(s) && plain[s[j]] {
			j++
		}
		dst = append(dst, s[i:j]...)
		if i = j; i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return append(dst, '"')
}
