package grpcwire

import "google.golang.org/grpc/metadata"

// Flagged reports whether the call's request carried the header that
// Config.FlagHeader names: a unary handler's one view of the request
// metadata, which the fast path otherwise does not keep (a lookup of a
// name the scan already compared costs nothing per call).
func (st *Call) Flagged() bool { return st.flagged }

// ReplyWithHeader is Reply with md sent in the response headers, as
// grpc-go's grpc.SetHeader does; reserved names (grpc-*, :*, content-type)
// are dropped as there.
func (st *Call) ReplyWithHeader(md metadata.MD, msg []byte) {
	st.c.mu.Lock()
	if !st.headers {
		st.headerMD = md
	}
	st.c.mu.Unlock()
	st.Reply(msg)
}
