package protover

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// serve runs a health server speaking sp and returns its address.
func serve(t *testing.T, sp Speaker) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(sp.ServerOptions()...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

// call makes one unary and one streaming call speaking sp (nil: a client
// that states nothing, as releases before versions did).
func call(t *testing.T, addr string, sp *Speaker) (unary, stream error) {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if sp != nil {
		opts = append(opts, sp.DialOptions()...)
	}
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hc := healthpb.NewHealthClient(c)
	ctx := context.Background()
	_, unary = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	ws, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return unary, err
	}
	_, stream = ws.Recv()
	return unary, stream
}

func TestOverlappingVersionsTalk(t *testing.T) {
	for _, tc := range []struct {
		name           string
		server, client Speaker
	}{
		{"same binary", This, This},
		{"new client, old server", Speaker{1, 1}, Speaker{1, 2}},
		{"old client, new server", Speaker{1, 2}, Speaker{1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := serve(t, tc.server)
			c := tc.client
			if u, s := call(t, addr, &c); u != nil || s != nil {
				t.Fatalf("refused: unary %v, stream %v", u, s)
			}
		})
	}
	t.Run("unstated client is protocol 1", func(t *testing.T) {
		if u, s := call(t, serve(t, Speaker{1, 2}), nil); u != nil || s != nil {
			t.Fatalf("refused: unary %v, stream %v", u, s)
		}
		if u, _ := call(t, serve(t, Speaker{2, 2}), nil); u == nil {
			t.Fatal("a server speaking only 2 served a client stating nothing")
		}
	})
}

func TestDisjointVersionsRefusedNamingBoth(t *testing.T) {
	// The server refuses the client.
	addr := serve(t, Speaker{3, 4})
	c := Speaker{1, 2}
	u, s := call(t, addr, &c)
	for _, err := range []error{u, s} {
		msg, ok := IsRefusal(err)
		if !ok {
			t.Fatalf("got %v, want a protocol refusal", err)
		}
		for _, want := range []string{"client", "versions 1 to 2", "speaks 3 to 4"} {
			if !strings.Contains(msg, want) {
				t.Errorf("refusal %q does not name %q", msg, want)
			}
		}
	}
	// A server of an older release refuses (it states 1), and one that
	// states nothing (as releases before versions did) serves anything: the
	// client refuses it from its response header.
	addr = serve(t, Speaker{1, 1})
	c = Speaker{2, 3}
	g := grpc.NewServer() // states nothing: protocol 1
	healthpb.RegisterHealthServer(g, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	defer g.Stop()
	for _, a := range []string{addr, ln.Addr().String()} {
		u, s := call(t, a, &c)
		for _, err := range []error{u, s} {
			msg, ok := IsRefusal(err)
			if !ok {
				t.Fatalf("server %s: got %v, want a protocol refusal", a, err)
			}
			if !strings.Contains(msg, "2 to 3") || !strings.Contains(msg, "speaks protocol versions") {
				t.Errorf("refusal %q does not name both sides", msg)
			}
		}
	}
}

func TestSetForTestChangesThisProcess(t *testing.T) {
	restore := SetForTest(Speaker{5, 5})
	if got := This.norm(); got != (Speaker{5, 5}) {
		t.Fatalf("This = %+v under SetForTest", got)
	}
	restore()
	if got := This.norm(); got == (Speaker{5, 5}) {
		t.Fatal("restore did not restore")
	}
}
