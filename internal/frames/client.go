package frames

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/protover"
)

// ErrNotFrames: the peer closed the connection or answered something else
// than an accept or a status frame to the open frame: it does not speak
// this protocol (a server of an older version, or a plain gRPC server).
var ErrNotFrames = errors.New("frames: the peer does not speak the frames protocol")

// ClientStream is the client's side of one stream: Send and Recv may be
// called concurrently with each other (Send by many senders; Recv by one
// receiver).
type ClientStream struct {
	c    net.Conn
	r    *bufio.Reader
	rbuf []byte // used by Recv only
	w    *writer
	stop func() bool

	mu  sync.Mutex
	err error // why the stream ended, once Recv saw it. Protected by mu.
}

// Open opens a stream of method (a full name, "/pkg.Service/Method") on c,
// a connection the caller dialed (and, for TLS, handshook), written the
// routing prefix to if the listener needs one. It waits for the server's
// accept while ctx lasts; a refusal is the server's status error (e.g.
// Unimplemented). The stream then lives until ctx ends or Close: both
// close c, which ends a Send blocked on a peer that reads nothing.
//
// The open frame states the protocol versions sp speaks and the accept the
// server's: a server with none in common is refused (protover.IsRefusal),
// naming both, and one of a release that reads no versions in the open
// frame (it answers Unimplemented naming the method with them) is
// ErrNotFrames, so the client uses gRPC with it.
func Open(ctx context.Context, c net.Conn, prefix []byte, method string, sp protover.Speaker) (*ClientStream, error) {
	return OpenAuthorized(ctx, c, prefix, method, sp, "")
}

// OpenAuthorized is Open with authorization ("Bearer <token>"; "" for
// none) in the open frame, which the server's interceptors see as the
// stream's "authorization" metadata. A server of a release before it
// refuses such an open frame as an incompatible protocol
// (protover.IsRefusal): the caller may then use gRPC.
func OpenAuthorized(ctx context.Context, c net.Conn, prefix []byte, method string, sp protover.Speaker, authorization string) (*ClientStream, error) {
	s := &ClientStream{c: c, r: bufio.NewReaderSize(c, 32<<10), w: newWriter(c, 0)}
	s.stop = context.AfterFunc(ctx, func() { c.Close() })
	if dl, ok := ctx.Deadline(); ok {
		c.SetReadDeadline(dl)
	}
	open := method + "\x00" + sp.String()
	if authorization != "" {
		open += "\x00" + authorization
	}
	hello := append(append([]byte(nil), prefix...), AppendFrame(nil, TypeOpen, []byte(open))...)
	if err := s.w.sendBytes(hello); err != nil {
		return nil, s.openErr(ctx, err)
	}
	typ, body, err := ReadFrame(s.r, nil, 64<<10)
	if err != nil {
		// A peer that does not speak frames closes the connection (a
		// reset, as it had unread bytes) or answers its own protocol.
		if ctx.Err() == nil && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) ||
			errors.Is(err, ErrMalformed) || errors.Is(err, ErrTooLarge)) {
			err = fmt.Errorf("%w (%v)", ErrNotFrames, err)
		}
		return nil, s.openErr(ctx, err)
	}
	switch typ {
	case TypeAccept:
		lo, hi := protover.ParseRange(string(body))
		if err := sp.Check("server "+c.RemoteAddr().String(), lo, hi); err != nil {
			s.Close()
			return nil, err
		}
	case TypeStatus:
		code, msg, perr := ParseStatus(body)
		s.Close()
		if perr != nil {
			return nil, ErrNotFrames
		}
		if codes.Code(code) == codes.Unimplemented && strings.Contains(msg, "\x00") {
			return nil, fmt.Errorf("%w (a release that states no protocol versions in frames)", ErrNotFrames)
		}
		return nil, status.Error(codes.Code(code), msg)
	default:
		s.Close()
		return nil, ErrNotFrames
	}
	c.SetReadDeadline(time.Time{})
	return s, nil
}

func (s *ClientStream) openErr(ctx context.Context, err error) error {
	s.Close()
	if cerr := ctx.Err(); cerr != nil {
		return status.FromContextError(cerr).Err()
	}
	if errors.Is(err, ErrNotFrames) {
		return err
	}
	return status.Error(codes.Unavailable, "frames: open: "+err.Error())
}

// SetWriteTimeout bounds each of the stream's writes from now on: a peer
// that reads nothing for d breaks the stream (Send fails, and so do the
// sends queued behind the write). Call it before the first Send.
func (s *ClientStream) SetWriteTimeout(d time.Duration) {
	s.w.mu.Lock()
	s.w.timeout = d
	s.w.mu.Unlock()
}

// Send sends m (a protocol buffer message). It returns once m is queued
// behind a flush running, or written; an error means the stream broke.
func (s *ClientStream) Send(m any) error {
	if err := s.w.send(TypeMsg, m); err != nil {
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Error(codes.Unavailable, "frames: "+err.Error())
	}
	return nil
}

// Recv reads the next message into m. The stream's end is io.EOF when the
// server ended it cleanly, its status error otherwise, and Unavailable
// when the connection broke.
func (s *ClientStream) Recv(m any) error {
	if s.rbuf == nil {
		s.rbuf = make([]byte, 0, 64<<10)
	}
	typ, body, err := ReadFrame(s.r, s.rbuf, MaxFrame)
	if err == nil {
		switch typ {
		case TypeMsg:
			if err = unmarshal(body, m); err == nil {
				return nil
			}
			err = status.Error(codes.Internal, "frames: bad message: "+err.Error())
		case TypeStatus:
			code, msg, perr := ParseStatus(body)
			switch {
			case perr != nil:
				err = status.Error(codes.Internal, perr.Error())
			case code == 0:
				err = io.EOF
			default:
				err = status.Error(codes.Code(code), msg)
			}
		default:
			err = status.Error(codes.Internal, fmt.Sprintf("frames: unexpected frame type %q", typ))
		}
	} else {
		err = status.Error(codes.Unavailable, "frames: "+err.Error())
	}
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.Close()
	return err
}

// Close ends the stream (the server sees the connection end).
func (s *ClientStream) Close() error {
	s.stop()
	s.w.fail(net.ErrClosed)
	return s.c.Close()
}
