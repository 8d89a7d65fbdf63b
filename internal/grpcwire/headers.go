package grpcwire

import (
	"encoding/base64"
	"math"
	"strings"
	"time"

	"golang.org/x/net/http2/hpack"
)

// headerScan is what a request's header block says that this transport
// reads, gathered by the hpack decoder's emit function (bound once per
// connection, so decoding allocates nothing of its own). The strings are
// hpack's: those from its tables are shared, not copied.
type headerScan struct {
	s           *Server
	method      string
	path        string
	contentType string
	encoding    string
	timeout     time.Duration // with timeoutSet: the call's grpc-timeout (0: already over)
	timeoutSet  bool
	timeoutBad  bool
	flagged     bool   // the server's FlagHeader was seen
	bad         string // why the block is malformed; "" when it is not
	regular     bool   // a regular field was seen: pseudo-fields may not follow
	pseudo      uint8  // the pseudo-fields seen (pseudoMethod…), each at most once
}

// The request's pseudo-fields, as bits of headerScan.pseudo.
const (
	pseudoMethod = 1 << iota
	pseudoScheme
	pseudoPath
	pseudoAuthority
)

func (h *headerScan) reset(s *Server) { *h = headerScan{s: s} }

func (h *headerScan) emit(f hpack.HeaderField) {
	if h.bad != "" {
		return
	}
	if strings.HasPrefix(f.Name, ":") {
		if h.regular {
			h.bad = "pseudo-header after a regular one"
			return
		}
		var bit uint8
		switch f.Name {
		case ":method":
			bit, h.method = pseudoMethod, f.Value
		case ":path":
			bit, h.path = pseudoPath, f.Value
		case ":scheme":
			bit = pseudoScheme
		case ":authority":
			bit = pseudoAuthority
		default:
			h.bad = "unknown pseudo-header " + f.Name
			return
		}
		// Each once (RFC 9113, 8.3).
		if h.pseudo&bit != 0 {
			h.bad = "duplicated pseudo-header " + f.Name
		}
		h.pseudo |= bit
		return
	}
	h.regular = true
	if !lowercase(f.Name) {
		// Field names are lowercase in HTTP/2 (RFC 9113, 8.2.1).
		h.bad = "uppercase in header name"
		return
	}
	switch f.Name {
	case "content-type":
		h.contentType = f.Value
	case "grpc-encoding":
		h.encoding = f.Value
	case "grpc-timeout":
		d, ok := parseTimeout(f.Value)
		h.timeoutBad = !ok
		h.timeout, h.timeoutSet = d, ok && d >= 0
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		// Connection-specific fields are malformed in HTTP/2 (RFC 9113,
		// 8.2.2).
		h.bad = "connection-specific header " + f.Name
	case "te":
		if f.Value != "trailers" {
			h.bad = "te other than trailers"
		}
	default:
		h.flagged = h.flagged || (h.s.flagHeader != "" && f.Name == h.s.flagHeader)
	}
}

// requestBad is why a request's header block, read whole, is malformed
// (RFC 9113, 8.3.1): "" when it is not.
func (h *headerScan) requestBad() string {
	switch {
	case h.bad != "":
		return h.bad
	case h.pseudo&pseudoMethod == 0:
		return "no :method"
	case h.pseudo&pseudoScheme == 0:
		return "no :scheme"
	case h.path == "":
		return "no :path"
	}
	return ""
}

// lowercase reports whether a field name has no uppercase letter.
func lowercase(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// parseTimeout reads grpc-timeout: at most 8 digits and a unit (H, M, S,
// m, u, n). A zero timeout is a deadline already over; a negative one
// (8 digits of hours overflow a Duration) is none.
func parseTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	var n int64
	for _, ch := range v[:len(v)-1] {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int64(ch-'0')
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if n > math.MaxInt64/int64(unit) {
		return -1, true
	}
	return time.Duration(n) * unit, true
}

// isReservedHeader: the fields a handler's metadata may not set, as
// grpc-go reserves them.
func isReservedHeader(k string) bool {
	switch k {
	case "content-type", "user-agent", "grpc-message-type", "grpc-encoding", "grpc-message",
		"grpc-status", "grpc-timeout", "grpc-status-details-bin", "te":
		return true
	}
	return false
}

func encodeBinHeader(v string) string { return base64.RawStdEncoding.EncodeToString([]byte(v)) }

// encodeGRPCMessage percent-encodes grpc-message as gRPC's HTTP/2
// protocol says: bytes outside printable ASCII, and '%'.
func encodeGRPCMessage(msg string) string {
	clean := true
	for i := 0; i < len(msg); i++ {
		if ch := msg[i]; ch < ' ' || ch > '~' || ch == '%' {
			clean = false
			break
		}
	}
	if clean {
		return msg
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		if ch := msg[i]; ch < ' ' || ch > '~' || ch == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[ch>>4])
			b.WriteByte(hex[ch&15])
		} else {
			b.WriteByte(ch)
		}
	}
	return b.String()
}
