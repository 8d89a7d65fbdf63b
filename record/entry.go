package record

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/engine"
)

// Version is the format's version, written in every header line.
const Version = 1

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
type hasher struct {
	mac hash.Hash
	sum [sha256.Size]byte
}

func newHasher(salt []byte) *hasher { return &hasher{mac: hmac.New(sha256.New, salt)} }

// append appends key's hash to dst.
func (h *hasher) append(dst, key []byte) []byte {
	h.mac.Reset()
	h.mac.Write(key)
	sum := h.mac.Sum(h.sum[:0])
	return hex.AppendEncode(dst, sum[:16])
}

// KeyHash is key's hash under salt as a recording holds it, so that an
// operator who knows the salt (--record-key-salt) finds a key's lines.
func KeyHash(salt []byte, key string) string {
	return string(newHasher(salt).append(nil, []byte(key)))
}

// appendEntry appends e as one line. key is e's key (the writer's copy);
// h, when not nil, hashes it.
func appendEntry(dst []byte, e *Entry, key []byte, h *hasher) []byte {
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
	if h != nil {
		dst = append(dst, `,"key_hash":"`...)
		dst = append(h.append(dst, key), '"')
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
		dst = append(dst, `,"limits":[`...)
		for i := range e.Limits {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendLimit(dst, e.Limits[i].Name, &e.Limits[i].Limit)
		}
		dst = append(dst, ']')
	} else if e.Limit.Algorithm != 0 {
		dst = append(dst, `,"limit":`...)
		dst = appendLimit(dst, "", &e.Limit)
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

// appendString appends s as a JSON string. A key is bytes, not always
// UTF-8: an invalid byte is written as U+FFFD, as encoding/json does, so
// such keys may meet in a recording; hashed keys never do (the hash is of
// the bytes).
func appendString(dst []byte, s []byte) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
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
