package app

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-rl/sluice/internal/accept"
)

// maxJSONRequest bounds a /json body: a rate limit request is a domain and
// a few descriptors, far below it.
const maxJSONRequest = 1 << 20

// listenRLSHTTP serves envoyproxy/ratelimit's HTTP port, which platforms
// that deploy the peer probe (/healthcheck) and some clients call (/json),
// unless --rls-http-listen is off. It answers through the gRPC door's own
// ShouldRateLimit, so both ports decide alike.
func (s *Sidecar) listenRLSHTTP() (err error) {
	if s.cfg.RLSHTTPListen == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", s.healthcheck)
	mux.HandleFunc("POST /json", s.rlsJSON)
	s.rlsHTTP = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if s.rlsHTLn, err = net.Listen("tcp", s.cfg.RLSHTTPListen); err != nil {
		return fmt.Errorf("rls http listener: %w", err)
	}
	s.rlsHTLn = accept.Retrying(s.rlsHTLn, s.log, "rls http")
	s.closers = append(s.closers, func() { s.rlsHTLn.Close() })
	s.log.Info("serving envoyproxy/ratelimit's HTTP port", "addr", s.rlsHTLn.Addr().String(), "paths", "/healthcheck /json")
	return nil
}

// healthcheck answers as the peer's: 200 OK while the sidecar can decide,
// 500 otherwise, so that a readiness probe written for the peer holds.
func (s *Sidecar) healthcheck(w http.ResponseWriter, _ *http.Request) {
	if err := s.ready(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "OK")
}

// rlsJSON is the peer's /json: a RateLimitRequest in protobuf's JSON
// mapping, answered with the RateLimitResponse in the same mapping, 429
// when it is over the limit, as the peer's HTTP/1 bridge does.
func (s *Sidecar) rlsJSON(w http.ResponseWriter, r *http.Request) {
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
	resp, err := s.grpc.ShouldRateLimit(r.Context(), &req)
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
