package frames

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// frameReader reads frames from a connection into a buffer of its own and
// keeps what it read when a read fails: a read that ends at its deadline,
// even in the middle of a frame, leaves the stream intact for the next
// read, which bufio and io.ReadFull cannot promise. This is what lets a
// client's caller read its own reply with its own deadline
// (ClientStream.RecvBy).
type frameReader struct {
	c    net.Conn
	buf  []byte // buf[r:w] is read and not yet returned
	r, w int
}

// frameReaderSize is the buffer a frameReader starts with; it returns to
// it after a frame larger than maxKeptBuffer.
const (
	frameReaderSize = 32 << 10
	maxKeptBuffer   = 1 << 20
)

func newFrameReader(c net.Conn) *frameReader {
	return &frameReader{c: c, buf: make([]byte, frameReaderSize)}
}

// next returns the next frame's type and body, which stays valid until the
// following call. As ReadFrame: a length over max is ErrTooLarge, a zero
// length ErrMalformed, a connection that ends in a frame
// io.ErrUnexpectedEOF and one that ends between frames io.EOF. Any other
// error is the connection's, the frame read so far kept: a timeout may be
// followed by another call.
func (f *frameReader) next(max int) (typ byte, body []byte, err error) {
	if f.r == f.w && len(f.buf) > maxKeptBuffer {
		f.buf, f.r, f.w = make([]byte, frameReaderSize), 0, 0 // after a large frame
	}
	for {
		n, hdr := binary.Uvarint(f.buf[f.r:f.w])
		switch {
		case hdr < 0 || (hdr == 0 && f.w-f.r >= binary.MaxVarintLen64):
			return 0, nil, fmt.Errorf("%w: bad length", ErrMalformed)
		case hdr > 0 && n == 0:
			return 0, nil, fmt.Errorf("%w: empty frame", ErrMalformed)
		case hdr > 0 && n > uint64(max):
			return 0, nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, n, max)
		}
		need := binary.MaxVarintLen64 // the length's bytes, at most
		if hdr > 0 {
			need = hdr + int(n)
			if f.w-f.r >= need {
				typ, body = f.buf[f.r+hdr], f.buf[f.r+hdr+1:f.r+need]
				f.r += need
				return typ, body, nil
			}
		}
		f.room(need)
		k, err := f.c.Read(f.buf[f.w:])
		f.w += k
		if err != nil && k == 0 {
			if errors.Is(err, io.EOF) {
				if f.r == f.w {
					return 0, nil, io.EOF
				}
				return 0, nil, io.ErrUnexpectedEOF
			}
			return 0, nil, err
		}
	}
}

// room makes buf hold at least need bytes from r, with room to read
// more: the unread bytes move to its start, or to a larger buffer.
func (f *frameReader) room(need int) {
	if f.r == f.w {
		f.r, f.w = 0, 0
	}
	if len(f.buf)-f.r >= need && f.w < len(f.buf) {
		return
	}
	if len(f.buf) < need {
		nb := make([]byte, max(need, 2*len(f.buf)))
		f.w = copy(nb, f.buf[f.r:f.w])
		f.buf, f.r = nb, 0
		return
	}
	f.w = copy(f.buf, f.buf[f.r:f.w])
	f.r = 0
}
