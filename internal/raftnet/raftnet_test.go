package raftnet

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/tlsconf"
	"github.com/distash/distash/internal/tlsconf/tlstest"
)

// node is one mux serving gRPC (the health service) and two raft stream
// layers.
type node struct {
	mux          *Mux
	coord, log   raft.StreamLayer
	grpc         *grpc.Server
	addr         string
	grpcCreds    credentials.TransportCredentials
	clientConfig *tls.Config
}

func newNode(t *testing.T, srv, cli *tls.Config) *node {
	return newNodeTLS(t, [2]*tls.Config{srv, cli})
}

func newNodeTLS(t *testing.T, cfgs [2]*tls.Config) *node {
	srv, cli := cfgs[0], cfgs[1]
	t.Helper()
	m, err := Listen("127.0.0.1:0", srv, cli)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{mux: m, addr: m.Addr().String(), grpcCreds: insecure.NewCredentials(), clientConfig: cli}
	if cli != nil {
		n.grpcCreds = credentials.NewTLS(cli)
	}
	n.coord = m.StreamLayer(KindCoord, n.addr)
	n.log = m.StreamLayer(KindLog, n.addr)
	n.grpc = grpc.NewServer() // insecure: the mux terminates TLS
	healthpb.RegisterHealthServer(n.grpc, health.NewServer())
	go n.grpc.Serve(m.GRPCListener())
	t.Cleanup(func() {
		n.grpc.Stop()
		m.Close()
	})
	return n
}

// checkGRPC calls the health service of n with creds.
func checkGRPC(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err == nil && resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health status %v", resp.Status)
	}
	return err
}

// checkStream dials to's layer of the same kind from layer from, and checks
// bytes both ways, and that the kind byte was consumed.
func checkStream(t *testing.T, from, to raft.StreamLayer, toAddr string) {
	t.Helper()
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := to.Accept()
		ch <- accepted{c, err}
	}()
	c, err := from.Dial(raft.ServerAddress(toAddr), 3*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	var a accepted
	select {
	case a = <-ch:
	case <-time.After(3 * time.Second):
		t.Fatal("no connection accepted")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.c.Close()
	buf := make([]byte, 4)
	if _, err := io.ReadFull(a.c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("accepted side read %q, %v", buf, err)
	}
	a.c.Write([]byte("pong"))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("dialling side read %q, %v", buf, err)
	}
}

func pkiConfigs(t *testing.T, pki *tlstest.PKI, other bool) [2]*tls.Config {
	t.Helper()
	// A node serves and dials with its one certificate, which allows both.
	srvFiles := tlsconf.Files{Cert: pki.NodeCert, Key: pki.NodeKey, CA: pki.CA}
	cliFiles := srvFiles
	if other {
		srvFiles = tlsconf.Files{Cert: pki.OtherServerCert, Key: pki.OtherServerKey, CA: pki.OtherCA}
		cliFiles = tlsconf.Files{Cert: pki.OtherClientCert, Key: pki.OtherClientKey, CA: pki.OtherCA}
	}
	srv, err := tlsconf.Server(srvFiles, nil)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := tlsconf.Client(cliFiles)
	if err != nil {
		t.Fatal(err)
	}
	return [2]*tls.Config{srv, cli}
}

// sharing checks gRPC and both raft kinds between two nodes.
func sharing(t *testing.T, a, b *node) {
	t.Helper()
	if err := checkGRPC(t, a.addr, b.grpcCreds); err != nil {
		t.Fatalf("gRPC: %v", err)
	}
	checkStream(t, a.coord, b.coord, b.addr)
	checkStream(t, b.log, a.log, a.addr)
	checkStream(t, a.log, b.log, b.addr)
	// A real raft transport over a layer: an AppendEntries round trip.
	ta := raft.NewNetworkTransport(a.mux.StreamLayer('T', a.addr), 1, 3*time.Second, io.Discard)
	defer ta.Close()
	tb := raft.NewNetworkTransport(b.mux.StreamLayer('T', b.addr), 1, 3*time.Second, io.Discard)
	defer tb.Close()
	go func() {
		for rpc := range tb.Consumer() {
			rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
		}
	}()
	var resp raft.AppendEntriesResponse
	if err := ta.AppendEntries("b", raft.ServerAddress(b.addr), &raft.AppendEntriesRequest{Term: 7}, &resp); err != nil || !resp.Success {
		t.Fatalf("raft AppendEntries: %+v %v", resp, err)
	}
	if string(ta.LocalAddr()) != a.addr {
		t.Fatalf("local address %s, want %s", ta.LocalAddr(), a.addr)
	}
}

func TestSharedPortPlain(t *testing.T) {
	a, b := newNode(t, nil, nil), newNode(t, nil, nil)
	sharing(t, a, b)
	if a.mux.RejectedConns()+b.mux.RejectedConns()+a.mux.UnknownConns()+b.mux.UnknownConns() != 0 {
		t.Fatal("connections refused")
	}
}

func TestSharedPortMutualTLS(t *testing.T) {
	pki := tlstest.New(t)
	a, b := newNodeTLS(t, pkiConfigs(t, pki, false)), newNodeTLS(t, pkiConfigs(t, pki, false))
	sharing(t, a, b)
	if n := a.mux.RejectedConns() + b.mux.RejectedConns(); n != 0 {
		t.Fatalf("%d handshakes refused", n)
	}
	// A plaintext gRPC client is refused.
	if err := checkGRPC(t, a.addr, insecure.NewCredentials()); err == nil {
		t.Fatal("a plaintext gRPC client got through")
	}
}

// TestForeignCARefused: a peer whose certificates another CA signed
// reaches neither raft nor gRPC, both ways.
func TestForeignCARefused(t *testing.T) {
	pki := tlstest.New(t)
	good := newNodeTLS(t, pkiConfigs(t, pki, false))
	rogue := newNodeTLS(t, pkiConfigs(t, pki, true))

	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := good.coord.Accept(); err == nil {
			accepted <- c
		}
	}()
	if c, err := rogue.coord.Dial(raft.ServerAddress(good.addr), 2*time.Second); err == nil {
		// TLS 1.3: the client learns of its refusal on its first read.
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("the rogue's raft connection works")
		}
		c.Close()
	}
	if err := checkGRPC(t, good.addr, rogue.grpcCreds); err == nil {
		t.Fatal("the rogue's gRPC call got through")
	}
	waitFor(t, "refused handshakes", func() bool { return good.mux.RejectedConns() >= 2 })
	// The other way round: the good node does not trust the rogue server.
	if _, err := good.coord.Dial(raft.ServerAddress(rogue.addr), 2*time.Second); err == nil {
		t.Fatal("dialled a server of another CA")
	}
	select {
	case <-accepted:
		t.Fatal("a rogue connection reached the raft layer")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestRaftIsForNodesOnly: a client's certificate (clientAuth only, as
// docs/security.md tells users to issue) reaches gRPC but not the raft
// stream layers of either group; no certificate reaches nothing.
func TestRaftIsForNodesOnly(t *testing.T) {
	pki := tlstest.New(t)
	good := newNodeTLS(t, pkiConfigs(t, pki, false))
	var refusedLog []string
	var mu sync.Mutex
	good.mux.OnRefused(func(remote net.Addr, err error) {
		mu.Lock()
		refusedLog = append(refusedLog, err.Error())
		mu.Unlock()
	})
	reached := make(chan byte, 4)
	for kind, l := range map[byte]raft.StreamLayer{KindCoord: good.coord, KindLog: good.log} {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				reached <- kind
				c.Close()
			}
		}()
	}
	clientCert, err := tlsconf.Client(tlsconf.Files{Cert: pki.ClientCert, Key: pki.ClientKey, CA: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	noCert := &tls.Config{RootCAs: clientCert.RootCAs, MinVersion: tls.VersionTLS12}
	// The client certificate is good for gRPC.
	if err := checkGRPC(t, good.addr, credentials.NewTLS(clientCert)); err != nil {
		t.Fatalf("a client certificate's gRPC call: %v", err)
	}
	for _, kind := range []byte{KindCoord, KindLog} {
		for name, cfg := range map[string]*tls.Config{"client certificate": clientCert, "no certificate": noCert} {
			cfg = cfg.Clone()
			cfg.NextProtos = []string{ALPN}
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", good.addr, cfg)
			if err != nil {
				continue // refused in the handshake: fine
			}
			// Speak raft as a peer would: the kind, then anything.
			c.Write([]byte{kind})
			c.Write([]byte("AppendEntries at a higher term"))
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err = c.Read(make([]byte, 1))
			c.Close()
			if err == nil {
				t.Errorf("%s: the %c raft connection got an answer", name, kind)
			}
		}
	}
	waitFor(t, "two refused raft connections", func() bool { return good.mux.RefusedPeers() >= 2 })
	waitFor(t, "two failed handshakes", func() bool { return good.mux.RejectedConns() >= 2 })
	select {
	case k := <-reached:
		t.Fatalf("a connection without a node certificate reached the %c raft layer", k)
	case <-time.After(100 * time.Millisecond):
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refusedLog) < 2 || !strings.Contains(refusedLog[0], "not a node's") {
		t.Errorf("refusals reported: %q", refusedLog)
	}
	// Nodes still reach each other's raft.
	other := newNodeTLS(t, pkiConfigs(t, pki, false))
	checkStream(t, good.log, other.log, other.addr)
}

// TestHostilePeers: garbage, silence and unknown kinds are closed and
// counted, without holding up the others.
func TestHostilePeers(t *testing.T) {
	pki := tlstest.New(t)
	for _, tc := range []struct {
		name     string
		srv, cli *tls.Config
	}{{"plain", nil, nil}, {"tls", nil, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "tls" {
				cfgs := pkiConfigs(t, pki, false)
				tc.srv, tc.cli = cfgs[0], cfgs[1]
			}
			a, b := newNode(t, tc.srv, tc.cli), newNode(t, tc.srv, tc.cli)
			a.mux.SetHandshakeTimeout(300 * time.Millisecond)
			// Silent peers: they hold only their own goroutines.
			var silent []net.Conn
			for range 5 {
				c, err := net.Dial("tcp", a.addr)
				if err != nil {
					t.Fatal(err)
				}
				silent = append(silent, c)
			}
			// Garbage, and a kind no layer serves.
			for _, junk := range [][]byte{[]byte("\x16\x03\x01garbage that is no hello"), []byte("Zzzz"), {0}, []byte("GET / HTTP/1.1\r\n\r\n")} {
				c, err := net.Dial("tcp", a.addr)
				if err != nil {
					t.Fatal(err)
				}
				c.Write(junk)
				defer c.Close()
			}
			if tc.cli != nil {
				// A TLS peer that sends an unknown kind.
				c, err := tls.Dial("tcp", a.addr, tc.cli)
				if err != nil {
					t.Fatal(err)
				}
				c.Write([]byte{'Z'})
				defer c.Close()
			}
			start := time.Now()
			sharing(t, a, b)
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("serving took %v behind hostile peers", d)
			}
			waitFor(t, "hostile connections closed", func() bool {
				want := int64(9) // 5 silent, 4 junk
				if tc.cli != nil {
					want++ // the unknown kind over TLS
				}
				return a.mux.RejectedConns()+a.mux.UnknownConns() >= want
			})
			for _, c := range silent {
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if _, err := c.Read(make([]byte, 1)); err == nil {
					t.Fatal("a silent peer's connection is still open")
				}
				c.Close()
			}
			t.Logf("rejected %d, unknown %d", a.mux.RejectedConns(), a.mux.UnknownConns())
			sharing(t, a, b)
		})
	}
}

func TestCloseAndReuse(t *testing.T) {
	a, b := newNode(t, nil, nil), newNode(t, nil, nil)
	// Closing a layer frees its kind; dials to it are closed meanwhile.
	b.log.Close()
	if _, err := b.log.Accept(); err != ErrClosed {
		t.Fatalf("accept on a closed layer: %v", err)
	}
	unknown := b.mux.UnknownConns()
	c, err := a.log.Dial(raft.ServerAddress(b.addr), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection to a closed layer is open")
	}
	c.Close()
	waitFor(t, "the connection counted", func() bool { return b.mux.UnknownConns() > unknown })
	b.log = b.mux.StreamLayer(KindLog, b.addr)
	checkStream(t, a.log, b.log, b.addr)

	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("a second layer of one kind")
			}
		}()
		b.mux.StreamLayer(KindLog, b.addr)
	}()

	// Closing the mux ends every Accept.
	errs := make(chan error, 2)
	go func() { _, err := b.coord.Accept(); errs <- err }()
	go func() { _, err := b.mux.GRPCListener().Accept(); errs <- err }()
	b.mux.Close()
	for range 2 {
		select {
		case err := <-errs:
			if err != ErrClosed {
				t.Fatalf("accept after close: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("accept still blocked after Close")
		}
	}
	if _, err := a.coord.Dial(raft.ServerAddress(b.addr), time.Second); err == nil {
		// The port may linger in the kernel; a connection must not work.
		t.Log("dial after close succeeded at TCP level")
	}
	if _, err := Listen("127.0.0.1:0", &tls.Config{}, nil); err == nil {
		t.Fatal("half a TLS configuration accepted")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.Within(t, 5*time.Second, what, cond)
}

// TestSetDialer: stream layers dial through the mux's custom dial
// function, in plaintext and with TLS over what it returns.
func TestSetDialer(t *testing.T) {
	pki := tlstest.New(t)
	for _, tc := range []struct {
		name string
		cfgs [2]*tls.Config
	}{{"plain", [2]*tls.Config{}}, {"tls", pkiConfigs(t, pki, false)}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newNodeTLS(t, tc.cfgs), newNodeTLS(t, tc.cfgs)
			var dialled []string
			dial := func(ctx context.Context, addr string) (net.Conn, error) {
				dialled = append(dialled, addr)
				var d net.Dialer
				return d.DialContext(ctx, "tcp", addr)
			}
			a.mux.SetDialer(dial)
			b.mux.SetDialer(dial)
			checkStream(t, a.coord, b.coord, b.addr)
			checkStream(t, b.log, a.log, a.addr)
			if len(dialled) != 2 || dialled[0] != b.addr || dialled[1] != a.addr {
				t.Fatalf("the dialer was asked for %v, want [%s %s]", dialled, b.addr, a.addr)
			}
			if n := a.mux.RejectedConns() + b.mux.RejectedConns() + a.mux.UnknownConns() + b.mux.UnknownConns(); n != 0 {
				t.Fatalf("%d connections refused", n)
			}
		})
	}
}

// TestFramesForClients: a frames connection (first byte KindFrames) with a
// client's certificate reaches FramesListener, that byte consumed, on a
// node's mux and on ServeClients' (an embedded cluster's); without a
// certificate the handshake fails and OnRejected hears of it; and before
// FramesListener is called, frames connections are closed at once, so a
// client falls back to gRPC.
func TestFramesForClients(t *testing.T) {
	pki := tlstest.New(t)
	clientCert, err := tlsconf.Client(tlsconf.Files{Cert: pki.ClientCert, Key: pki.ClientKey, CA: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	dial := func(addr string, cfg *tls.Config) (net.Conn, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return nil, err
		}
		_, err = c.Write([]byte{KindFrames, 'h', 'i'})
		return c, err
	}
	node := newNodeTLS(t, pkiConfigs(t, pki, false))
	srvCfg, err := tlsconf.Server(tlsconf.Files{Cert: pki.ServerCert, Key: pki.ServerKey, CA: pki.CA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	embedded := ServeClients(ln, srvCfg)
	defer embedded.Close()
	rejected := make(chan error, 1)
	embedded.OnRejected(func(_ net.Addr, err error) { rejected <- err })

	for name, m := range map[string]*Mux{"node": node.mux, "embedded": embedded} {
		addr := m.Addr().String()
		// Nobody serves frames yet: closed at once.
		unknown := m.UnknownConns()
		c, err := dial(addr, clientCert)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
			t.Fatalf("%s: a frames connection nobody serves was not closed: %v", name, err)
		}
		c.Close()
		waitFor(t, "an unknown connection", func() bool { return m.UnknownConns() > unknown })

		fl := m.FramesListener()
		got := make(chan string, 1)
		go func() {
			c, err := fl.Accept()
			if err != nil {
				got <- err.Error()
				return
			}
			defer c.Close()
			b := make([]byte, 2)
			_, err = io.ReadFull(c, b)
			if _, ok := TLSState(c); !ok {
				got <- "not TLS"
				return
			}
			got <- string(b)
		}()
		c, err = dial(addr, clientCert)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer c.Close()
		select {
		case s := <-got:
			if s != "hi" {
				t.Fatalf("%s: the frames listener read %q, want the bytes after the kind", name, s)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the client's frames connection never reached the listener", name)
		}
	}
	noCert := &tls.Config{RootCAs: clientCert.RootCAs, MinVersion: tls.VersionTLS12}
	if c, err := dial(embedded.Addr().String(), noCert); err == nil {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a connection without a certificate got an answer")
		}
		c.Close()
	}
	select {
	case err := <-rejected:
		t.Logf("rejected: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("OnRejected did not hear of the failed handshake")
	}
}

// TestDialInProcess: on a mux serving mutual TLS, a connection made in
// process reaches gRPC without a certificate, and its handlers see the
// InProcess AuthInfo; it reaches frames with that AuthInfo too, and never
// a raft stream layer.
func TestDialInProcess(t *testing.T) {
	pki := tlstest.New(t)
	n := newNodeTLS(t, pkiConfigs(t, pki, false))
	cc, err := grpc.NewClient("passthrough:///in-process", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return n.mux.DialInProcess(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("gRPC in process over a TLS mux: %v", err)
	}
	// What the gRPC server's handlers see of such a connection (the mux
	// hands it over behind its first byte, peeked).
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, ai, err := GRPCCredentials().ServerHandshake(&peeked{Conn: &inProcessConn{Conn: a}}); err != nil {
		t.Fatal(err)
	} else if _, ok := ai.(InProcess); !ok {
		t.Fatalf("an in-process connection's AuthInfo is %T, want InProcess", ai)
	}

	// Frames: the connection reaches the listener, knowing its AuthInfo.
	fl := n.mux.FramesListener()
	got := make(chan net.Conn, 1)
	go func() {
		if c, err := fl.Accept(); err == nil {
			got <- c
		}
	}()
	fc, err := n.mux.DialInProcess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	go fc.Write([]byte{KindFrames})
	select {
	case c := <-got:
		if ac, ok := c.(interface{ AuthInfo() credentials.AuthInfo }); !ok || ac.AuthInfo().AuthType() != "in-process" {
			t.Fatalf("the frames listener got %T, want a connection with the in-process AuthInfo", c)
		}
		c.Close()
	case <-ctx.Done():
		t.Fatal("an in-process frames connection never reached the listener")
	}

	// Raft: closed, counted as unknown.
	unknown := n.mux.UnknownConns()
	rc, err := n.mux.DialInProcess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	go rc.Write([]byte{KindLog})
	if _, err := rc.Read(make([]byte, 1)); err == nil {
		t.Fatal("an in-process connection reached a raft stream layer")
	}
	waitFor(t, "an unknown connection", func() bool { return n.mux.UnknownConns() > unknown })
}
