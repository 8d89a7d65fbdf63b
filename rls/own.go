package rls

import (
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/internal/grpcwire"
)

// shouldRateLimitPath is the method's HTTP/2 path.
const shouldRateLimitPath = "/" + "envoy.service.ratelimit.v3.RateLimitService" + "/ShouldRateLimit"

// serveCall is ShouldRateLimit on the own transport, run on the
// connection's reading goroutine: it reads the request, finds its rules,
// submits the call's one store batch and returns; landed answers. A call
// that needs more than one submission (StopWhenOverLimit's two passes, or
// more descriptors than one part) is decided on a goroutine of its own,
// as on grpc-go.
func (s *Server) serveCall(wc *grpcwire.Call) {
	var start time.Time
	if s.stats != nil {
		start = time.Now()
	}
	req, err := s.readRequest(wc.Message())
	if err != nil {
		fail(wc, err)
		if s.stats != nil {
			s.called(start)
		}
		return
	}
	c, matches, err := s.prepare(&req.msg)
	if err != nil {
		s.putRequest(req)
		fail(wc, err)
		if s.stats != nil {
			s.called(start)
		}
		return
	}
	c.req, c.rep, c.matches, c.wc, c.start = req, s.replies.Get().(*reply), matches, wc, start
	switch {
	case s.stop:
		go func() {
			resp, err := s.decideWait(c, &req.msg, matches, c.rep)
			s.finish(c, resp, err)
		}()
	case !s.queue(c, matches, false):
		resp, err := s.answer(c, &req.msg, matches, c.rep) // nothing for the store
		s.finish(c, resp, err)
	case c.used > 1:
		go func() {
			s.fallbacks.note(c.decide(), len(matches))
			resp, err := s.answer(c, &req.msg, matches, c.rep)
			s.finish(c, resp, err)
		}()
	default:
		s.svc.Decide(c.parts[:1], c.landed)
	}
}

// readRequest reads b into a pooled request; a call over the caps is
// refused before anything is made for it (overCaps), and a message
// protobuf cannot read is refused with grpc-go's error.
func (s *Server) readRequest(b []byte) (*request, error) {
	if err := s.overCaps(b); err != nil {
		return nil, err
	}
	req := s.requests.Get().(*request)
	if err := req.read(b); err != nil {
		s.putRequest(req)
		return nil, status.Error(codes.Internal, "grpc: failed to unmarshal the received message: "+err.Error())
	}
	return req, nil
}

// landed answers a fast call once its batch is decided: on the goroutine
// that completed the round trip, so it only encodes and queues.
func (s *Server) landed(c *call) {
	s.fallbacks.note(byFailureModes(c.parts[0]), len(c.matches))
	resp, err := s.answer(c, &c.req.msg, c.matches, c.rep)
	s.finish(c, resp, err)
}

// finish writes the answer to the call and puts the call's scratch back.
func (s *Server) finish(c *call, resp *pb.RateLimitResponse, err error) {
	wc, rep := c.wc, c.rep
	switch {
	case err != nil:
		fail(wc, err)
	default:
		b, ok := appendResponse(rep.buf[:0], resp)
		if !ok {
			var merr error
			if b, merr = (proto.MarshalOptions{Deterministic: true}).MarshalAppend(rep.buf[:0], resp); merr != nil {
				wc.Fail(codes.Internal, "rls: marshal: "+merr.Error())
				break
			}
		}
		rep.buf = b
		if s.explain && wc.Flagged() {
			wc.ReplyWithHeader(s.explanations(c), b)
			break
		}
		wc.Reply(b)
	}
	if s.stats != nil {
		s.called(c.start)
	}
	s.putRequest(c.req)
	rep.release()
	s.putCall(c)
}

func (s *Server) putRequest(r *request) {
	r.reset()
	s.requests.Put(r)
}

// fail ends wc with err's status.
func fail(wc *grpcwire.Call, err error) {
	st := status.Convert(err)
	wc.Fail(st.Code(), st.Message())
}
