package dcdelay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	waitpkg "github.com/distash/distash/internal/testutil/wait"
)

// echoServer echoes every connection back; arrivals receives the time each
// read of the server returned.
func echoServer(t *testing.T) (addr string, arrivals chan time.Time) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	arrivals = make(chan time.Time, 1024)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						select {
						case arrivals <- time.Now():
						default:
						}
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String(), arrivals
}

func constant(d time.Duration) func(string) time.Duration {
	return func(string) time.Duration { return d }
}

func dial(t *testing.T, dial DialFunc, addr string) net.Conn {
	t.Helper()
	c, err := dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestDelayEachWay: a byte reaches the peer at least d after it was
// written, and its echo comes back at least 2d after.
func TestDelayEachWay(t *testing.T) {
	const d = 40 * time.Millisecond
	addr, arrivals := echoServer(t)
	c := dial(t, Dialer(nil, constant(d)), addr)
	if _, ok := c.(*Conn); !ok {
		t.Fatalf("dialled a %T, want a *Conn", c)
	}
	for range 3 {
		start := time.Now()
		if _, err := c.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
		if w := time.Since(start); w > d/4 {
			t.Fatalf("Write took %v: it should queue and return", w)
		}
		buf := make([]byte, 1)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		rtt := time.Since(start)
		arrived := (<-arrivals).Sub(start)
		if arrived < d || rtt < 2*d {
			t.Fatalf("one way %v, round trip %v; want >= %v and >= %v", arrived, rtt, d, 2*d)
		}
		if rtt > 2*d+500*time.Millisecond {
			t.Fatalf("round trip %v, want about %v", rtt, 2*d)
		}
	}
}

// TestThroughputNotSerialized: 100 concurrent small writes all arrive
// about one round trip later, not one delay after another.
func TestThroughputNotSerialized(t *testing.T) {
	const d = 30 * time.Millisecond
	const writers, size = 100, 16
	addr, _ := echoServer(t)
	c := dial(t, Dialer(nil, constant(d)), addr)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			msg := bytes.Repeat([]byte{byte(i)}, size)
			if _, err := c.Write(msg); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got := make([]byte, writers*size)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < 2*d || took > 10*d {
		t.Fatalf("%d writes echoed in %v; want about %v (>= %v, far below %v)", writers, took, 2*d, 2*d, writers*d)
	}
	// Each write's bytes stay together and every write came back.
	seen := map[byte]bool{}
	for i := 0; i < len(got); i += size {
		if !bytes.Equal(got[i:i+size], bytes.Repeat(got[i:i+1], size)) {
			t.Fatalf("write %d interleaved: %v", i/size, got[i:i+size])
		}
		seen[got[i]] = true
	}
	if len(seen) != writers {
		t.Fatalf("%d distinct writes echoed, want %d", len(seen), writers)
	}
}

// TestBulkInOrder: megabytes written in pieces of random sizes come back
// whole and in order, in about a round trip.
func TestBulkInOrder(t *testing.T) {
	const d = 20 * time.Millisecond
	addr, _ := echoServer(t)
	c := dial(t, Dialer(nil, constant(d)), addr)
	want := make([]byte, 8<<20)
	for i := range want {
		want[i] = byte(rand.N(256))
	}
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		b := want
		for len(b) > 0 {
			n := min(len(b), 1+rand.N(100<<10))
			if _, err := c.Write(b[:n]); err != nil {
				errc <- err
				return
			}
			b = b[n:]
		}
		errc <- nil
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("echoed bytes differ")
	}
	t.Logf("8 MiB echoed in %v", time.Since(start))
}

// TestDeadlines: a read deadline ends a Read waiting for bytes in flight
// with a timeout; the bytes are read afterwards.
func TestDeadlines(t *testing.T) {
	const d = 100 * time.Millisecond
	addr, _ := echoServer(t)
	c := dial(t, Dialer(nil, constant(d)), addr)
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(d / 2))
	buf := make([]byte, 4)
	_, err := c.Read(buf)
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read before the echo arrived: %v, want a timeout", err)
	}
	c.SetReadDeadline(time.Time{})
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v; want ping", buf, err)
	}
	c.SetWriteDeadline(time.Now().Add(-time.Second))
	if _, err := c.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write past its deadline: %v", err)
	}
}

// TestCloseIsPromptAndLeaksNothing: Close ends a blocked Read at once; the
// connection's goroutines end; bytes written just before Close are still
// delivered; the peer's close arrives as EOF, a delay late.
func TestCloseIsPromptAndLeaksNothing(t *testing.T) {
	const d = 50 * time.Millisecond
	addr, arrivals := echoServer(t)
	before := runtime.NumGoroutine()

	var conns []*Conn
	for range 20 {
		c, err := Dialer(nil, constant(d))(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c.(*Conn))
	}
	// A Read blocked waiting for data ends promptly on Close.
	c0 := conns[0]
	readErr := make(chan error, 1)
	go func() {
		_, err := c0.Read(make([]byte, 1))
		readErr <- err
	}()
	time.Sleep(10 * time.Millisecond)
	start := time.Now()
	c0.Close()
	select {
	case err := <-readErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("blocked Read ended with %v, want net.ErrClosed", err)
		}
	case <-time.After(d):
		t.Fatal("Close did not end a blocked Read")
	}
	if took := time.Since(start); took > d/2 {
		t.Fatalf("Close took %v", took)
	}
	// Written just before Close: still sent.
	c1 := conns[1]
	for len(arrivals) > 0 {
		<-arrivals
	}
	c1.Write([]byte("bye"))
	c1.Close()
	select {
	case <-arrivals:
	case <-time.After(5 * d):
		t.Fatal("bytes written before Close never arrived")
	}
	for _, c := range conns[2:] {
		c.Write([]byte("traffic"))
		c.Close()
	}
	for _, c := range conns {
		select {
		case <-c.Done():
		case <-time.After(3 * time.Second):
			t.Fatal("a closed connection's goroutines did not end")
		}
	}
	// Give the echo server's handlers time to see the closes too.
	if !waitpkg.Until(3*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		t.Fatalf("%d goroutines, %d before the connections", runtime.NumGoroutine(), before)
	}
}

// TestPeerCloseIsEOF: the peer's close reaches Read as io.EOF after the
// bytes it sent before.
func TestPeerCloseIsEOF(t *testing.T) {
	const d = 40 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		s.Write([]byte("last words"))
		s.Close()
	}()
	c := dial(t, Dialer(nil, constant(d)), ln.Addr().String())
	start := time.Now()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "last words" {
		t.Fatalf("read %q, %v", got, err)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("EOF after %v, want >= %v", took, d)
	}
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("Read after EOF: %v", err)
	}
}

// TestDialerChoosesByDC: a peer in the same data center is dialled
// without a wrapper; one in another is delayed; one not known yet is
// wrapped and gets its delay once the table learns its data center.
func TestDialerChoosesByDC(t *testing.T) {
	const d = 40 * time.Millisecond
	addrLocal, _ := echoServer(t)
	addrRemote, _ := echoServer(t)
	addrLater, _ := echoServer(t)

	if c := dial(t, Dialer(nil, constant(0)), addrLocal); isWrapped(c) {
		t.Fatal("Dialer wrapped a connection whose delay is 0")
	}

	tab := NewTable("dc1", d)
	tab.Learn(addrLocal, "dc1")
	tab.Learn(addrRemote, "dc2")
	if tab.DelayFor(addrLocal) != 0 || tab.DelayFor(addrRemote) != d || tab.DelayFor(addrLater) != 0 {
		t.Fatalf("DelayFor: local %v, remote %v, unknown %v", tab.DelayFor(addrLocal), tab.DelayFor(addrRemote), tab.DelayFor(addrLater))
	}
	dialer := tab.Dialer(nil)
	local, remote, later := dial(t, dialer, addrLocal), dial(t, dialer, addrRemote), dial(t, dialer, addrLater)
	if isWrapped(local) || !isWrapped(remote) || !isWrapped(later) {
		t.Fatalf("wrapped: local %v, remote %v, unknown %v; want false, true, true", isWrapped(local), isWrapped(remote), isWrapped(later))
	}
	if rtt := roundTrip(t, local); rtt >= d {
		t.Fatalf("same-DC round trip %v, want well below %v", rtt, d)
	}
	if rtt := roundTrip(t, remote); rtt < 2*d {
		t.Fatalf("cross-DC round trip %v, want >= %v", rtt, 2*d)
	}
	if rtt := roundTrip(t, later); rtt >= d {
		t.Fatalf("round trip to a peer of unknown DC %v, want well below %v", rtt, d)
	}
	tab.Learn(addrLater, "dc3")
	if rtt := roundTrip(t, later); rtt < 2*d {
		t.Fatalf("round trip once the peer's DC is known %v, want >= %v", rtt, 2*d)
	}

	// No delay configured: nothing is wrapped.
	if c := dial(t, NewTable("dc1", 0).Dialer(nil), addrRemote); isWrapped(c) {
		t.Fatal("a table without delay wrapped a connection")
	}
}

func isWrapped(c net.Conn) bool {
	_, ok := c.(*Conn)
	return ok
}

func roundTrip(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte("?")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}
