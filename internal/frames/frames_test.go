package frames

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
)

// echo serves ReadStream with the generated handler: each request's reply
// carries its id and, as the value, its first key; a request whose first
// key is "fail" ends the stream with FailedPrecondition.
type echo struct {
	wire.UnimplementedDiStashServer
	peers chan *peer.Peer
}

func (e *echo) ReadStream(st wire.DiStash_ReadStreamServer) error {
	if p, ok := peer.FromContext(st.Context()); ok && e.peers != nil {
		select {
		case e.peers <- p:
		default:
		}
	}
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		k := req.GetRequest().GetKeys()
		if len(k) > 0 && string(k[0]) == "fail" {
			return status.Error(codes.FailedPrecondition, "asked to fail")
		}
		var v []byte
		if len(k) > 0 {
			v = k[0]
		}
		if err := st.Send(&wire.ReadStreamResponse{Id: req.Id, Response: &wire.ReadResponse{Values: []*wire.Value{{Value: v, Present: true}}}}); err != nil {
			return err
		}
	}
}

// serve starts a Server on a loopback listener with the echo service.
func serve(t *testing.T, o ServerOptions) (*Server, string) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := NewServer(o)
	s.Register(&wire.DiStash_ServiceDesc, &echo{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return s, ln.Addr().String()
}

func open(t *testing.T, ctx context.Context, addr, method string) (*ClientStream, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return Open(ctx, c, nil, method, protover.This)
}

func readReq(id uint64, key string) *wire.ReadStreamRequest {
	return &wire.ReadStreamRequest{Id: id, Request: &wire.ReadRequest{Keys: [][]byte{[]byte(key)}}}
}

// TestPipelined sends many requests from several senders before reading
// any reply, and gets each reply, matched by id.
func TestPipelined(t *testing.T) {
	_, addr := serve(t, ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := open(t, ctx, addr, wire.DiStash_ReadStream_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const senders, each = 8, 500
	var wg sync.WaitGroup
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				id := uint64(s*each + i + 1)
				if err := st.Send(readReq(id, strings.Repeat("k", int(id%300)))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	seen := map[uint64]bool{}
	for len(seen) < senders*each {
		var resp wire.ReadStreamResponse
		if err := st.Recv(&resp); err != nil {
			t.Fatalf("after %d replies: %v", len(seen), err)
		}
		if seen[resp.Id] {
			t.Fatalf("reply %d twice", resp.Id)
		}
		seen[resp.Id] = true
		if got := len(resp.GetResponse().GetValues()[0].GetValue()); got != int(resp.Id%300) {
			t.Fatalf("reply %d carries %d bytes, want %d", resp.Id, got, resp.Id%300)
		}
	}
	wg.Wait()
}

// TestStatuses: an unknown method is refused with Unimplemented, and a
// handler's error reaches the client with its code.
func TestStatuses(t *testing.T) {
	_, addr := serve(t, ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := open(t, ctx, addr, "/no.Such/Method"); status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: got %v, want Unimplemented", err)
	}
	st, err := open(t, ctx, addr, wire.DiStash_CommitStream_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	// echo does not implement CommitStream: the generated handler's
	// Unimplemented ends the stream.
	var cresp wire.CommitStreamResponse
	if err := st.Recv(&cresp); status.Code(err) != codes.Unimplemented {
		t.Fatalf("CommitStream of a server without it: got %v, want Unimplemented", err)
	}
	st, err = open(t, ctx, addr, wire.DiStash_ReadStream_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(readReq(1, "fail")); err != nil {
		t.Fatal(err)
	}
	var resp wire.ReadStreamResponse
	if err := st.Recv(&resp); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "asked to fail") {
		t.Fatalf("got %v, want the handler's FailedPrecondition", err)
	}
	if err := st.Send(readReq(2, "x")); err == nil {
		// The stream is closed on the client's side once Recv saw its end.
		t.Fatal("Send succeeded on an ended stream")
	}
}

// TestMalformedClosesOnlyItsConnection: a frame of an unknown type, an
// oversized length, bytes that do not decode as the request or a garbled
// open frame close that connection, are counted, and the server keeps
// serving a well-formed stream opened before and one opened after.
func TestMalformedClosesOnlyItsConnection(t *testing.T) {
	srv, addr := serve(t, ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	good, err := open(t, ctx, addr, wire.DiStash_ReadStream_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	roundTrip := func(st *ClientStream, id uint64) {
		t.Helper()
		if err := st.Send(readReq(id, "v")); err != nil {
			t.Fatal(err)
		}
		var resp wire.ReadStreamResponse
		if err := st.Recv(&resp); err != nil || resp.Id != id {
			t.Fatalf("round trip %d: %v (id %d)", id, err, resp.Id)
		}
	}
	roundTrip(good, 1)
	hello := AppendFrame(nil, TypeOpen, []byte(wire.DiStash_ReadStream_FullMethodName))
	bad := map[string][]byte{
		"unknown type": AppendFrame(append([]byte(nil), hello...), 'Z', []byte("x")),
		"oversized":    binary.AppendUvarint(append([]byte(nil), hello...), MaxFrame+1),
		"not a request": AppendFrame(append([]byte(nil), hello...), TypeMsg,
			[]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}), // field 1, length 4 GiB
		"empty frame":     append(append([]byte(nil), hello...), 0),
		"bad open length": binary.AppendUvarint(nil, 1<<20),
		"open not first":  AppendFrame(nil, TypeMsg, nil),
	}
	want := srv.MalformedConns()
	for name, b := range bad {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		// The server closes the connection (after an accept frame, when
		// the open frame was well formed).
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("%s: the server did not close the connection: %v", name, err)
		}
		c.Close()
		want++
		wait.Until(5*time.Second, func() bool { return srv.MalformedConns() >= want })
		if got := srv.MalformedConns(); got != want {
			t.Fatalf("%s: %d malformed connections counted, want %d", name, got, want)
		}
		roundTrip(good, uint64(want+10))
	}
	after, err := open(t, ctx, addr, wire.DiStash_ReadStream_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	roundTrip(after, 99)
}

// TestNotFrames: a peer that closes the connection at the open frame, or
// answers HTTP/2 bytes, does not speak the protocol.
func TestNotFrames(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if i%2 == 1 {
				c.Write([]byte("\x00\x00\x12\x04\x00\x00\x00\x00\x00")) // an HTTP/2 SETTINGS frame's header
			}
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 2; i++ {
		if _, err := open(t, ctx, ln.Addr().String(), wire.DiStash_ReadStream_FullMethodName); !errors.Is(err, ErrNotFrames) {
			t.Fatalf("attempt %d: got %v, want ErrNotFrames", i, err)
		}
	}
}

// openToDeafPeer opens a read stream, in ctx, to a peer that accepts it
// and then reads nothing, over a synchronous pipe (a write waits for a
// read): the stream's second write blocks.
func openToDeafPeer(t *testing.T, ctx context.Context) *ClientStream {
	t.Helper()
	cli, srvConn := net.Pipe()
	t.Cleanup(func() { srvConn.Close() })
	go func() {
		r := bufio.NewReader(srvConn)
		if _, _, err := ReadFrame(r, nil, 1<<10); err != nil {
			return
		}
		srvConn.Write(AppendFrame(nil, TypeAccept, nil))
		// and then read nothing
	}()
	st, err := Open(ctx, cli, nil, wire.DiStash_ReadStream_FullMethodName, protover.This)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSendEndsWithContext: a server that accepts the stream and then reads
// nothing blocks the sender once the socket buffers fill; cancelling the
// stream's context ends the blocked Send, and later Sends fail at once.
func TestSendEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	st := openToDeafPeer(t, ctx)
	done := make(chan error, 1)
	go func() { done <- st.Send(readReq(1, "blocked")) }()
	select {
	case err := <-done:
		t.Fatalf("Send returned %v although nobody read", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the blocked Send succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Send still blocked after the context ended")
	}
	if err := st.Send(readReq(2, "after")); err == nil {
		t.Fatal("Send succeeded on a broken stream")
	}
}

// TestSendEndsAtWriteTimeout: a stream with a write timeout breaks when
// its peer reads nothing for that long, without a context ending.
func TestSendEndsAtWriteTimeout(t *testing.T) {
	st := openToDeafPeer(t, context.Background())
	st.SetWriteTimeout(200 * time.Millisecond)
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- st.Send(readReq(1, "blocked")) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the blocked Send succeeded")
		}
		t.Logf("Send failed after %v: %v", time.Since(began).Round(time.Millisecond), err)
	case <-time.After(5 * time.Second):
		t.Fatal("Send still blocked 5 s after its write timeout of 200 ms")
	}
	if err := st.Send(readReq(2, "after")); err == nil {
		t.Fatal("Send succeeded on a broken stream")
	}
}

// TestInterceptorsAndPeer: the chain runs in order around the generated
// handler, which sees the peer's address.
func TestInterceptorsAndPeer(t *testing.T) {
	var mu sync.Mutex
	var order []string
	mark := func(name string) grpc.StreamServerInterceptor {
		return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			mu.Lock()
			order = append(order, name+":"+info.FullMethod)
			mu.Unlock()
			return h(srv, ss)
		}
	}
	s := NewServer(ServerOptions{Interceptor: ChainStreamInterceptors(mark("outer"), nil, mark("inner")),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	e := &echo{peers: make(chan *peer.Peer, 1)}
	s.Register(&wire.DiStash_ServiceDesc, e)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := open(t, ctx, ln.Addr().String(), wire.DiStash_ReadStream_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := <-e.peers
	if p.Addr == nil || !strings.HasPrefix(p.Addr.String(), "127.0.0.1:") {
		t.Fatalf("peer %v", p.Addr)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"outer:" + wire.DiStash_ReadStream_FullMethodName, "inner:" + wire.DiStash_ReadStream_FullMethodName}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Fatalf("interceptors ran %v, want %v", order, want)
	}
}

// FuzzReadFrame: arbitrary bytes never panic the decoder; every frame it
// returns is re-encoded to the bytes it came from; it refuses oversized
// lengths and reports a frame cut short as io.ErrUnexpectedEOF.
func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, TypeOpen, []byte(wire.DiStash_ReadStream_FullMethodName)))
	f.Add(AppendFrame(AppendFrame(nil, TypeAccept, nil), TypeMsg, []byte{8, 1}))
	f.Add(AppendFrame(nil, TypeStatus, AppendStatus(nil, 12, "unimplemented")))
	f.Add(binary.AppendUvarint(nil, MaxFrame+1))
	f.Add([]byte{0})
	f.Add([]byte{5, 'M', 1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	const max = 1 << 10
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		buf := make([]byte, 0, 16)
		pos := 0 // where the next frame starts, by a reference decoding
		for {
			typ, body, err := ReadFrame(r, buf, max)
			rest := data[pos:]
			n, k := binary.Uvarint(rest)
			if err != nil {
				switch {
				case err == io.EOF:
					if len(rest) != 0 {
						t.Fatalf("io.EOF with %d bytes left", len(rest))
					}
				case errors.Is(err, ErrTooLarge):
					if k <= 0 || n <= max {
						t.Fatalf("ErrTooLarge for a length of %d (%d)", n, k)
					}
				case errors.Is(err, io.ErrUnexpectedEOF):
					if k > 0 && uint64(len(rest)-k) >= n {
						t.Fatalf("a complete frame of %d bytes reported cut short", n)
					}
				case errors.Is(err, ErrMalformed):
					if k > 0 && n > 0 {
						t.Fatalf("a frame of length %d refused as malformed", n)
					}
				default:
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if k <= 0 || n == 0 || n > max || uint64(len(rest)-k) < n {
				t.Fatalf("decoded a frame the reference refuses (length %d, %d)", n, k)
			}
			if typ != rest[k] || !bytes.Equal(body, rest[k+1:k+int(n)]) {
				t.Fatalf("decoded type %q body %x, want %q %x", typ, body, rest[k], rest[k+1:k+int(n)])
			}
			pos += k + int(n)
			if code, msg, err := ParseStatus(body); err == nil {
				c2, m2, err := ParseStatus(AppendStatus(nil, code, msg))
				if err != nil || c2 != code || m2 != msg {
					t.Fatalf("status %d %q does not round-trip: %d %q %v", code, msg, c2, m2, err)
				}
			}
		}
	})
}

// TestProtocolVersions: the open frame and the accept state each side's
// protocol versions; a side with none in common with its peer refuses it
// with a status naming both ranges, and a client of a release that states
// none (no NUL in its open frame) is protocol 1.
func TestProtocolVersions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	method := wire.DiStash_ReadStream_FullMethodName
	openAs := func(addr string, sp protover.Speaker) (*ClientStream, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return Open(ctx, c, nil, method, sp)
	}
	refused := func(err error, names ...string) {
		t.Helper()
		msg, ok := protover.IsRefusal(err)
		if !ok {
			t.Fatalf("got %v, want a protocol refusal", err)
		}
		for _, n := range names {
			if !strings.Contains(msg, n) {
				t.Errorf("refusal %q does not name %q", msg, n)
			}
		}
	}

	// Overlapping ranges talk: an old server and a new client, and the
	// reverse.
	for _, tc := range []struct{ server, client protover.Speaker }{
		{protover.Speaker{Min: 1, Max: 1}, protover.Speaker{Min: 1, Max: 2}},
		{protover.Speaker{Min: 1, Max: 2}, protover.Speaker{Min: 1, Max: 1}},
	} {
		_, addr := serve(t, ServerOptions{Protocol: tc.server})
		st, err := openAs(addr, tc.client)
		if err != nil {
			t.Fatalf("server %v, client %v: %v", tc.server, tc.client, err)
		}
		st.Close()
	}

	// The server refuses a client with no version in common, naming both.
	_, addr := serve(t, ServerOptions{Protocol: protover.Speaker{Min: 3, Max: 4}})
	_, err := openAs(addr, protover.Speaker{Min: 1, Max: 2})
	refused(err, "client 127.0.0.1:", "versions 1 to 2", "speaks 3 to 4")

	// A client that states nothing is protocol 1: served by a server that
	// speaks 1, refused by one that does not.
	for _, tc := range []struct {
		server protover.Speaker
		ok     bool
	}{{protover.Speaker{Min: 1, Max: 2}, true}, {protover.Speaker{Min: 2, Max: 2}, false}} {
		_, addr := serve(t, ServerOptions{Protocol: tc.server})
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(AppendFrame(nil, TypeOpen, []byte(method)))
		typ, body, err := ReadFrame(bufio.NewReader(c), nil, 1<<10)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if tc.ok && (typ != TypeAccept || string(body) != "1-2") {
			t.Fatalf("unstated client: got %q %q, want an accept stating 1-2", typ, body)
		}
		if !tc.ok && (typ != TypeStatus || !strings.Contains(string(body), "versions 1,") || !strings.Contains(string(body), "speaks 2")) {
			t.Fatalf("unstated client of a server speaking 2: got %q %q, want a refusal naming both", typ, body)
		}
	}

	// fake answers an open frame with reply(open frame body).
	fake := func(reply func(body []byte) []byte) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					_, body, err := ReadFrame(bufio.NewReader(c), nil, 1<<10)
					if err != nil {
						return
					}
					c.Write(reply(body))
					io.Copy(io.Discard, c)
				}()
			}
		}()
		return ln.Addr().String()
	}
	// The client refuses a server whose accept states no common version.
	_, err = openAs(fake(func([]byte) []byte { return AppendFrame(nil, TypeAccept, []byte("5-6")) }), protover.This)
	refused(err, "server 127.0.0.1:", "versions 5 to 6", "speaks 1 to 2")
	// A server of a release before versions were stated looks the whole
	// body up as the method: the client takes it for one without frames.
	old := fake(func(body []byte) []byte {
		return AppendFrame(nil, TypeStatus, AppendStatus(nil, uint32(codes.Unimplemented), "unknown stream method "+string(body)))
	})
	if _, err := openAs(old, protover.This); !errors.Is(err, ErrNotFrames) {
		t.Fatalf("a server that reads no versions: got %v, want ErrNotFrames", err)
	}
}

// TestOpenCarriesAuthorization: the authorization in the open frame (up to
// MaxOpenFrame, past the 4 KiB open frames of before) reaches the stream's
// interceptor as its incoming "authorization" metadata; an open without
// one has none.
func TestOpenCarriesAuthorization(t *testing.T) {
	seen := make(chan []string, 4)
	_, addr := serve(t, ServerOptions{Interceptor: func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		seen <- md.Get("authorization")
		return handler(srv, ss)
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	long := "Bearer " + strings.Repeat("t", 12<<10)
	for _, auth := range []string{"Bearer abc.def.ghi", long, ""} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		st, err := OpenAuthorized(ctx, c, nil, wire.DiStash_ReadStream_FullMethodName, protover.This, auth)
		if err != nil {
			t.Fatalf("open with a %d-byte authorization: %v", len(auth), err)
		}
		got := <-seen
		if auth == "" && len(got) != 0 || auth != "" && (len(got) != 1 || got[0] != auth) {
			t.Errorf("sent %.20q (%d bytes), the interceptor saw %.20q", auth, len(auth), got)
		}
		if err := st.Send(readReq(1, "k")); err != nil {
			t.Fatal(err)
		}
		if err := st.Recv(new(wire.ReadStreamResponse)); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
}
