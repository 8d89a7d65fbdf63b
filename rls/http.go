package rls

import (
	"io"
	"net/http"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONRequest bounds a /json body: a rate limit request is a domain and
// a few descriptors, far below it.
const maxJSONRequest = 1 << 20

// HTTPHandler is envoyproxy/ratelimit's HTTP port, which platforms that
// deploy the peer probe (/healthcheck) and some clients call (/json). It
// answers through the server's own ShouldRateLimit, whichever transport
// serves gRPC, so that both ports decide alike.
func (s *Server) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", s.healthcheck)
	mux.HandleFunc("POST /json", s.serveJSON)
	return mux
}

// healthcheck answers as the peer's: 200 OK while the sidecar can decide
// (Config.Ready), 500 otherwise, so that a readiness probe written for
// the peer holds.
func (s *Server) healthcheck(w http.ResponseWriter, _ *http.Request) {
	if err := s.ready(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "OK")
}

// serveJSON is the peer's /json: a RateLimitRequest in protobuf's JSON
// mapping, answered with the RateLimitResponse in the same mapping, 429
// when it is over the limit, as the peer's HTTP/1 bridge does.
func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONRequest))
	if err != nil {
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req pb.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		http.Error(w, "not a RateLimitRequest in JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch resp.GetOverallCode() {
	case pb.RateLimitResponse_OVER_LIMIT:
		w.WriteHeader(http.StatusTooManyRequests)
	case pb.RateLimitResponse_OK:
	default:
		w.WriteHeader(http.StatusInternalServerError)
	}
	_, _ = w.Write(out)
}
