package frames

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
)

// chunkConn is a net.Conn whose reads return data in chunks of the sizes
// given (cycled), with a read deadline's timeout before every chunk when
// timeouts is set.
type chunkConn struct {
	net.Conn
	data     []byte
	sizes    []byte
	i        int
	timeouts bool
	timedOut bool
}

func (c *chunkConn) Read(b []byte) (int, error) {
	if c.timeouts && !c.timedOut {
		c.timedOut = true
		return 0, os.ErrDeadlineExceeded
	}
	c.timedOut = false
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = int(c.sizes[c.i%len(c.sizes)]) + 1
		c.i++
	}
	n = copy(b, c.data[:min(n, len(c.data))])
	c.data = c.data[n:]
	return n, nil
}

// FuzzFrameReader: a frameReader fed in arbitrary chunks, with a timeout
// before each, returns the frames and the final error ReadFrame returns
// for the same bytes: a timeout never loses or reorders a byte.
func FuzzFrameReader(f *testing.F) {
	f.Add(AppendFrame(AppendFrame(nil, TypeAccept, nil), TypeMsg, []byte{8, 1}), []byte{0, 3}, true)
	f.Add(AppendFrame(nil, TypeMsg, bytes.Repeat([]byte{7}, 3000)), []byte{200, 17}, false)
	f.Add([]byte{0}, []byte{}, true)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, []byte{4}, true)
	f.Add([]byte{5, 'M', 1}, []byte{1}, true)
	const max = 1 << 12
	f.Fuzz(func(t *testing.T, data, sizes []byte, timeouts bool) {
		type frame struct {
			typ  byte
			body []byte
		}
		var want []frame
		var wantErr error
		r := bufio.NewReader(bytes.NewReader(data))
		for {
			typ, body, err := ReadFrame(r, nil, max)
			if err != nil {
				wantErr = err
				break
			}
			want = append(want, frame{typ, body})
		}
		fr := newFrameReader(&chunkConn{data: data, sizes: sizes, timeouts: timeouts})
		fr.buf = make([]byte, 16) // small, to make it move and grow
		for i := 0; ; {
			typ, body, err := fr.next(max)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if err != nil {
				if i != len(want) {
					t.Fatalf("error %v after %d frames, want %d frames", err, i, len(want))
				}
				for _, class := range []error{io.EOF, io.ErrUnexpectedEOF, ErrMalformed, ErrTooLarge} {
					if errors.Is(err, class) != errors.Is(wantErr, class) {
						t.Fatalf("error %v, ReadFrame's %v", err, wantErr)
					}
				}
				return
			}
			if i >= len(want) || typ != want[i].typ || !bytes.Equal(body, want[i].body) {
				t.Fatalf("frame %d: %q %x, want %v", i, typ, body, want)
			}
			i++
		}
	})
}

// TestRecvByResumesAfterItsDeadline: a RecvBy that ends at its deadline or
// with its context, even in the middle of a frame, leaves the stream
// intact for the next receive; an interruption meant for a receive that
// ended does not cut the next one short.
func TestRecvByResumesAfterItsDeadline(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	ready := make(chan struct{})
	go func() {
		// The accept, then half of a reply.
		server.Read(make([]byte, 1024)) // the open frame
		server.Write(AppendFrame(nil, TypeAccept, []byte(protover.This.String())))
		close(ready)
	}()
	ctx := context.Background()
	s, err := Open(ctx, client, nil, wire.DiStash_ReadStream_FullMethodName, protover.This)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	<-ready
	reply, err := appendMsg(nil, TypeMsg, &wire.ReadStreamResponse{Id: 7, Response: &wire.ReadResponse{Values: []*wire.Value{{Value: []byte("v"), Present: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	go server.Write(reply[:len(reply)/2])

	var m wire.ReadStreamResponse
	if err := s.RecvBy(ctx, &m, time.Now().Add(30*time.Millisecond)); !errors.Is(err, ErrRecvTimeout) {
		t.Fatalf("RecvBy past its deadline: %v, want ErrRecvTimeout", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.RecvBy(cctx, &m, time.Time{}); !errors.Is(err, ErrRecvTimeout) {
		t.Fatalf("RecvBy whose context ended: %v, want ErrRecvTimeout", err)
	}
	// The last receive's interruption, arriving late, must not end this
	// one: it is for another receive.
	stale := s.readSeq
	done := make(chan error, 1)
	go func() { done <- s.RecvBy(ctx, &m, time.Now().Add(10*time.Second)) }()
	wait.Within(t, 5*time.Second, "the next receive", func() bool {
		s.dlMu.Lock()
		defer s.dlMu.Unlock()
		return s.readSeq != stale
	})
	s.interrupt(stale)
	go server.Write(reply[len(reply)/2:])
	if err := <-done; err != nil {
		t.Fatalf("the receive after the timeouts: %v", err)
	}
	if m.Id != 7 || string(m.GetResponse().GetValues()[0].GetValue()) != "v" {
		t.Fatalf("got %v", &m)
	}
}
