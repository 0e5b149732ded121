// Package frames is the data path's transport: a framed, pipelined protocol
// for the bidirectional streams of the DiStash service (ReadStream,
// CommitStream) over one net.Conn per stream, leaner than gRPC's HTTP/2
// transport (no HTTP/2 framing, flow control or per-message hand-off to a
// writer goroutine).
//
// Every frame is [uvarint length][type byte][body], the length counting the
// type byte and the body. A stream goes:
//
//	client: 'O' method name ("/distash.v1.DiStash/ReadStream"), NUL, the
//	        protocol versions it speaks ("1-2"), and optionally NUL and an
//	        authorization value ("Bearer <token>", as gRPC's metadata)
//	server: 'A' (accepted) or 'S' status (refused, e.g. Unimplemented)
//	client: 'M' request ...        server: 'M' reply ...
//	server: 'S' status when the handler returns (code 0: it ended cleanly)
//
// A status body is [uvarint gRPC code][message], so the client sees the
// same status codes as over gRPC. The server runs the generated gRPC stream
// handlers of a grpc.ServiceDesc, through the same stream interceptors as
// the gRPC server, so services and fault-injecting interceptors work
// unchanged.
//
// Writes batch: a sender appends its frame to the connection's buffer under
// a mutex and, if no flush is running, flushes everything queued with one
// write; otherwise it returns and the running flush carries its frame.
// Frames over MaxFrame, or malformed, close the connection.
//
// An authorization in the open frame reaches the handler as the stream's
// incoming gRPC metadata "authorization", so the server's interceptors
// check a bearer token on frames as they do on gRPC.
package frames

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/distash/distash/internal/wire"
)

// RouteByte is the byte a client sends before its open frame on an
// address shared with gRPC and raft (internal/raftnet routes it here).
const RouteByte byte = 'F'

// MaxFrame bounds a frame's length, as the gRPC servers' MaxRecvMsgSize.
const MaxFrame = 64 << 20

// MaxOpenFrame bounds the open frame: the method, the versions and an
// authorization (a bearer token). A client whose open frame is longer is
// closed, which it takes for a server without frames (it uses gRPC).
const MaxOpenFrame = 16 << 10

// Frame types.
const (
	TypeOpen   byte = 'O' // client → server: the method's full name
	TypeAccept byte = 'A' // server → client: the stream is open
	TypeMsg    byte = 'M' // a message, either way
	TypeStatus byte = 'S' // server → client: the stream ended; [uvarint code][message]
)

var (
	// ErrTooLarge: a frame announced a length over the maximum.
	ErrTooLarge = errors.New("frames: frame too large")
	// ErrMalformed: a frame that cannot be what the protocol sends.
	ErrMalformed = errors.New("frames: malformed frame")
)

// ReadFrame reads one frame from r: its type and its body, which is in buf
// if it fits there (the caller reuses buf), else in a new slice. A length
// over max is ErrTooLarge, a zero length ErrMalformed, and a frame cut
// short io.ErrUnexpectedEOF; io.EOF only before the first byte.
func ReadFrame(r *bufio.Reader, buf []byte, max int) (typ byte, body []byte, err error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		if err == io.EOF {
			return 0, nil, io.EOF
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, io.ErrUnexpectedEOF
		}
		var ne net.Error
		if errors.As(err, &ne) || errors.Is(err, net.ErrClosed) {
			return 0, nil, err // the connection's error, not the frame's
		}
		return 0, nil, fmt.Errorf("%w: bad length: %v", ErrMalformed, err)
	}
	if n == 0 {
		return 0, nil, fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	if n > uint64(max) {
		return 0, nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, n, max)
	}
	typ, err = r.ReadByte()
	if err != nil {
		return 0, nil, unexpected(err)
	}
	size := int(n - 1)
	if size <= cap(buf) {
		body = buf[:size]
	} else {
		body = make([]byte, size)
	}
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, unexpected(err)
	}
	return typ, body, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendFrame appends a frame of type typ with body to b.
func AppendFrame(b []byte, typ byte, body []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(body)+1))
	b = append(b, typ)
	return append(b, body...)
}

// vtMarshaler is the generated marshalling of vtprotobuf, used when the
// message has it: no reflection.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
}

// appendMsg appends a frame of type typ holding m's encoding to b.
func appendMsg(b []byte, typ byte, m any) ([]byte, error) {
	if vm, ok := m.(vtMarshaler); ok {
		size := vm.SizeVT()
		b = binary.AppendUvarint(b, uint64(size+1))
		b = append(b, typ)
		start := len(b)
		b = append(b, make([]byte, size)...)
		if _, err := vm.MarshalToSizedBufferVT(b[start:]); err != nil {
			return nil, err
		}
		return b, nil
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("frames: %T is not a protocol buffer message", m)
	}
	size := proto.Size(pm)
	b = binary.AppendUvarint(b, uint64(size+1))
	b = append(b, typ)
	start := len(b)
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, pm)
	if err == nil && len(b)-start != size {
		err = fmt.Errorf("frames: %T marshalled to %d bytes, sized %d", m, len(b)-start, size)
	}
	return b, err
}

// unmarshal decodes b into m as the gRPC codec does (wire.Unmarshal: the
// generated decoder only where it agrees with proto.Unmarshal), so both
// transports accept and refuse the same input. The decoded message does not
// alias b.
func unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("frames: %T is not a protocol buffer message", m)
	}
	return wire.Unmarshal(b, pm)
}

// AppendStatus appends a status body: code and message.
func AppendStatus(b []byte, code uint32, msg string) []byte {
	b = binary.AppendUvarint(b, uint64(code))
	return append(b, msg...)
}

// ParseStatus decodes a status body.
func ParseStatus(body []byte) (code uint32, msg string, err error) {
	c, n := binary.Uvarint(body)
	if n <= 0 || c > 1<<16 {
		return 0, "", fmt.Errorf("%w: bad status code", ErrMalformed)
	}
	return uint32(c), string(body[n:]), nil
}

type concurrentKey struct{}

// SendsConcurrently reports whether ctx is the context of a frames server
// stream, whose SendMsg may be called by several goroutines at once (a
// gRPC stream's may not): a handler need not serialise its sends, which
// would also keep them from batching.
func SendsConcurrently(ctx context.Context) bool {
	return ctx.Value(concurrentKey{}) != nil
}

// maxQueued bounds the bytes queued behind a running flush: a sender
// waits beyond it, so a peer that reads slowly slows its senders instead
// of growing the buffer without bound.
const maxQueued = 4 << 20

// writer batches the frames of one connection (see the package doc).
type writer struct {
	c       net.Conn
	timeout time.Duration // each write's deadline; 0: none

	mu       sync.Mutex
	drained  sync.Cond // a flush wrote a batch (or failed)
	buf      []byte    // queued frames. Protected by mu.
	spare    []byte    // the previous batch's buffer, for reuse. Protected by mu.
	flushing bool      // a sender is writing. Protected by mu.
	err      error     // the write that failed: every later send fails. Protected by mu.
}

func newWriter(c net.Conn, timeout time.Duration) *writer {
	w := &writer{c: c, timeout: timeout}
	w.drained.L = &w.mu
	return w
}

// send queues a frame of type typ holding m and makes sure it is written:
// by this caller, or by the flush running. An error means the connection
// failed (it is then closed) or m does not marshal.
func (w *writer) send(typ byte, m any) error {
	w.mu.Lock()
	for w.err == nil && w.flushing && len(w.buf) >= maxQueued {
		w.drained.Wait()
	}
	if w.err != nil {
		w.mu.Unlock()
		return w.err
	}
	n := len(w.buf)
	b, err := appendMsg(w.buf, typ, m)
	if err != nil {
		w.buf = w.buf[:n]
		w.mu.Unlock()
		return err
	}
	w.buf = b
	return w.flushLocked()
}

// sendRaw is send for a frame whose body is already encoded.
func (w *writer) sendRaw(typ byte, body []byte) error {
	return w.sendBytes(AppendFrame(nil, typ, body))
}

// sendBytes is send for bytes already framed.
func (w *writer) sendBytes(b []byte) error {
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return w.err
	}
	w.buf = append(w.buf, b...)
	return w.flushLocked()
}

// flushLocked writes what is queued unless a flush is running; called with
// mu held, it releases it.
func (w *writer) flushLocked() error {
	if w.flushing {
		w.mu.Unlock()
		return nil
	}
	w.flushing = true
	// Let the goroutines ready to run go first: under load they are
	// senders about to queue their frames, which this write then carries
	// (one syscall for many frames); idle, this returns at once.
	w.mu.Unlock()
	runtime.Gosched()
	w.mu.Lock()
	for len(w.buf) > 0 && w.err == nil {
		// The spare buffer becomes the queue: it must never be both (a
		// huge batch below is not kept as the spare, and the spare handed
		// out here would otherwise come back as the queue while senders
		// append to it during the next write, overwriting frames in flight).
		b := w.buf
		w.buf, w.spare = w.spare[:0], nil
		w.mu.Unlock()
		if w.timeout > 0 {
			w.c.SetWriteDeadline(time.Now().Add(w.timeout))
		}
		_, err := w.c.Write(b)
		w.mu.Lock()
		if cap(b) <= 1<<20 { // a huge batch's buffer is not kept
			w.spare = b[:0]
		}
		if err != nil {
			w.err = err
		}
		w.drained.Broadcast()
	}
	w.flushing = false
	err := w.err
	w.mu.Unlock()
	if err != nil {
		// Frames queued behind the failed write are lost: the peer sees
		// the connection end, and fails what was in flight.
		w.c.Close()
	}
	return err
}

// fail makes every later send fail with err and wakes senders waiting for
// room.
func (w *writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.drained.Broadcast()
	w.mu.Unlock()
}
