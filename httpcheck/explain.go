package httpcheck

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"

	"github.com/sluice-rl/sluice/service"
)

// HeaderExplain asks for the decision's explanation; its value must be
// the server's token (Config.Token), so that only a caller who holds the
// token can ask, whoever authorized the check: a gateway that forwards
// its client's headers (ext_authz) forwards this one too, and a client
// does not know the token. Without a token the header is ignored.
//
// HeaderExplanation carries the answer: the service's Explanation as one
// line of JSON, the document RL.EXPLAIN and the gRPC door give.
const (
	HeaderExplain     = "X-Sluice-Explain"
	HeaderExplanation = "X-Sluice-Explanation"
)

// explainAsked reports whether r asks for the explanation with the token.
func (s *Server) explainAsked(r *http.Request) bool {
	v := r.Header[HeaderExplain]
	return s.token != nil && len(v) == 1 && subtle.ConstantTimeCompare([]byte(v[0]), s.token) == 1
}

// explain sets the explanation header for check i of b. The JSON escapes
// every control byte, so the value holds no line break whatever the key;
// a key's other bytes are sent as they are, which HTTP allows in a value.
func explain(h http.Header, b *service.Batch, i int) {
	e, err := b.Explain(i)
	if err != nil {
		return // the check answers with the error itself
	}
	// An Explanation holds strings, numbers and booleans only, which
	// always encode.
	doc, _ := json.Marshal(&e)
	h[HeaderExplanation] = []string{string(doc)}
}
