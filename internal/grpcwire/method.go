package grpcwire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// serverStream is a registered method's grpc.ServerStream over a Call:
// what generated handlers, health and reflection among them, serve with.
type serverStream struct{ st *Call }

var _ grpc.ServerStream = serverStream{}

// runMethod serves a registered method on its own goroutine, as grpc-go
// would, and ends the call with the handler's status.
func (c *conn) runMethod(st *Call) {
	ss := serverStream{st}
	m := st.m
	var err error
	if m.unary != nil {
		var reply any
		reply, err = m.unary.Handler(m.impl, st.ctx, ss.RecvMsg, nil)
		if err == nil {
			err = ss.SendMsg(reply)
		}
	} else {
		err = m.stream.Handler(m.impl, ss)
	}
	code, msg := codes.OK, ""
	if err != nil {
		s, ok := status.FromError(err)
		switch {
		case ok:
			code, msg = s.Code(), s.Message()
		case errors.Is(err, context.DeadlineExceeded):
			code, msg = codes.DeadlineExceeded, err.Error()
		case errors.Is(err, context.Canceled):
			code, msg = codes.Canceled, err.Error()
		default:
			code, msg = codes.Unknown, err.Error()
		}
	}
	c.mu.Lock()
	c.finishLocked(st, code, msg)
	c.releaseLocked(st)
	c.mu.Unlock()
}

func (ss serverStream) Context() context.Context { return ss.st.ctx }

func (ss serverStream) SetHeader(md metadata.MD) error {
	c := ss.st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if ss.st.headers {
		return status.Error(codes.Internal, "grpcwire: headers already sent")
	}
	ss.st.headerMD = metadata.Join(ss.st.headerMD, md)
	return nil
}

func (ss serverStream) SendHeader(md metadata.MD) error {
	if err := ss.SetHeader(md); err != nil {
		return err
	}
	c := ss.st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if ss.st.ended || c.dead {
		return status.Error(codes.Canceled, "grpcwire: the call has ended")
	}
	c.writeHeadersLocked(ss.st)
	c.notifyLocked()
	return nil
}

func (ss serverStream) SetTrailer(md metadata.MD) {
	c := ss.st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	ss.st.trailerMD = metadata.Join(ss.st.trailerMD, md)
}

// SendMsg writes m and returns once it has left (or the call ended), so
// that a handler sending much waits for the client's window.
func (ss serverStream) SendMsg(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "grpcwire: cannot marshal %T", m)
	}
	b, err := proto.Marshal(pm)
	if err != nil {
		return status.Errorf(codes.Internal, "grpcwire: marshal: %v", err)
	}
	st, c := ss.st, ss.st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.ended || c.dead {
		return status.Error(codes.Canceled, "grpcwire: the call has ended")
	}
	c.writeMsgLocked(st, b)
	for st.off < len(st.out) && !st.ended && !c.dead {
		c.cond.Wait()
	}
	if st.off < len(st.out) {
		return status.Error(codes.Canceled, "grpcwire: the call ended while sending")
	}
	return nil
}

// RecvMsg reads the next message into m; io.EOF once the client has
// half-closed.
func (ss serverStream) RecvMsg(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "grpcwire: cannot unmarshal into %T", m)
	}
	st, c := ss.st, ss.st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		b := st.body
		if len(b) >= 5 {
			n := int(binary.BigEndian.Uint32(b[1:5]))
			if len(b)-5 >= n {
				if b[0] != 0 {
					return status.Error(codes.Internal, "grpc: compressed flag set with identity or empty encoding")
				}
				err := proto.Unmarshal(b[5:5+n], pm)
				st.body = b[:copy(b, b[5+n:])]
				c.held -= 5 + n
				if err != nil {
					return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
				}
				return nil
			}
		}
		switch {
		case st.ended || c.dead:
			if err := st.ctx.Err(); err != nil {
				return status.FromContextError(err).Err()
			}
			return status.Error(codes.Canceled, "grpcwire: the call has ended")
		case st.remoteDone:
			if len(b) > 0 {
				return status.Error(codes.Internal, fmt.Sprintf("grpc: the stream ended inside a message (%d bytes)", len(b)))
			}
			return io.EOF
		}
		c.cond.Wait()
	}
}
