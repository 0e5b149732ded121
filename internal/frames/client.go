package frames

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
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
// called concurrently with each other (Send by many senders; Recv or
// RecvBy by one receiver at a time).
type ClientStream struct {
	c    net.Conn
	fr   *frameReader // used by the receiver only
	w    *writer
	stop func() bool

	mu  sync.Mutex
	err error // why the stream ended, once Recv saw it. Protected by mu.

	// dlMu orders the receivers' read deadlines with the interruptions
	// of RecvBy's context: an interruption meant for a receive that
	// returned must not cut the next one short.
	dlMu    sync.Mutex
	readSeq uint64    // the receive running or last run. Protected by dlMu.
	readDL  time.Time // the connection's read deadline. Protected by dlMu.
	// deadlines: the connection takes read deadlines (CanRecvBy).
	deadlines bool
}

// ErrRecvTimeout is what RecvBy returns when its deadline passed or its
// context ended first: the stream is intact, and the next receive goes on
// where this one stopped, in the middle of a frame if need be.
var ErrRecvTimeout = fmt.Errorf("frames: receive: %w", os.ErrDeadlineExceeded)

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
	s := &ClientStream{c: c, fr: newFrameReader(c), w: newWriter(c, 0)}
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
	typ, body, err := s.fr.next(64 << 10)
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
	// A connection that takes no read deadline (a dialer's own type)
	// cannot end a RecvBy on time.
	s.deadlines = c.SetReadDeadline(time.Time{}) == nil
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
	s.setReadDeadline(time.Time{})
	return s.recv(m)
}

// RecvBy is Recv that waits until deadline at most (zero: no limit), and
// while ctx lasts (nil: no context): then it returns ErrRecvTimeout and the
// stream stays open. So a caller may read its own reply with its own
// deadline, and give up without breaking the stream for the others.
func (s *ClientStream) RecvBy(ctx context.Context, m any, deadline time.Time) error {
	seq := s.setReadDeadline(deadline)
	if ctx != nil && ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { s.interrupt(seq) })
		defer stop()
	}
	return s.recv(m)
}

// CanRecvBy reports whether RecvBy ends at its deadline: whether the
// connection takes read deadlines, as a net.Conn should.
func (s *ClientStream) CanRecvBy() bool { return s.deadlines }

// setReadDeadline starts a receive with the read deadline dl and returns
// its number, for interrupt.
func (s *ClientStream) setReadDeadline(dl time.Time) uint64 {
	s.dlMu.Lock()
	defer s.dlMu.Unlock()
	s.readSeq++
	if !dl.Equal(s.readDL) {
		s.c.SetReadDeadline(dl)
		s.readDL = dl
	}
	return s.readSeq
}

// interrupt ends receive seq's wait, if it is still the one running.
func (s *ClientStream) interrupt(seq uint64) {
	s.dlMu.Lock()
	defer s.dlMu.Unlock()
	if s.readSeq == seq {
		s.readDL = time.Unix(1, 0)
		s.c.SetReadDeadline(s.readDL)
	}
}

func (s *ClientStream) recv(m any) error {
	typ, body, err := s.fr.next(MaxFrame)
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
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		return ErrRecvTimeout
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
