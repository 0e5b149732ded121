package distash

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/tlsconf"
	"github.com/distash/distash/internal/tlsconf/tlstest"
	"github.com/distash/distash/internal/wire"
)

// TestTokenFramesFallBackOnThePreviousRelease: a server of the release
// before tokens rode frames reads the open frame's authorization as part
// of the protocol versions and refuses them; a client with a token takes
// that for a server without frames (it then uses gRPC streams, which carry
// the token), not for an incompatible cluster.
func TestTokenFramesFallBackOnThePreviousRelease(t *testing.T) {
	pki := tlstest.New(t)
	srvTLS, err := tlsconf.Server(tlsconf.Files{Cert: pki.ServerCert, Key: pki.ServerKey, CA: pki.CA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // the previous release's open: method NUL versions
				defer c.Close()
				r := bufio.NewReader(c)
				if b, err := r.ReadByte(); err != nil || b != frames.RouteByte {
					return
				}
				_, body, err := frames.ReadFrame(r, nil, 4<<10)
				if err != nil {
					return
				}
				_, versions, _ := strings.Cut(string(body), "\x00")
				lo, hi := protover.ParseRange(versions)
				if err := protover.This.Check("client", lo, hi); err != nil {
					st := status.Convert(err)
					c.Write(frames.AppendFrame(nil, frames.TypeStatus, frames.AppendStatus(nil, uint32(st.Code()), st.Message())))
					return
				}
				c.Write(frames.AppendFrame(nil, frames.TypeAccept, []byte(protover.This.String())))
			}()
		}
	}()
	cliTLS, err := tlsconf.Client(tlsconf.Files{Cert: pki.ClientCert, Key: pki.ClientKey, CA: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db := &DB{tls: cliTLS}
	// Without a token the previous release accepts the stream.
	cs, err := db.framesDialer(ln.Addr().String()).open(ctx, wire.DiStash_ReadStream_FullMethodName)
	if err != nil {
		t.Fatalf("open without a token: %v", err)
	}
	cs.Close()
	db.token = bearer(func(context.Context) (string, error) { return "a.b.c", nil })
	_, err = db.framesDialer(ln.Addr().String()).open(ctx, wire.DiStash_ReadStream_FullMethodName)
	if !errors.Is(err, frames.ErrNotFrames) {
		t.Fatalf("open with a token: %v, want ErrNotFrames (use gRPC)", err)
	}
	// Without TLS a token is not sent.
	db.tls = nil
	if _, err := db.framesDialer(ln.Addr().String()).open(ctx, wire.DiStash_ReadStream_FullMethodName); !errors.Is(err, errTokenNeedsTLS) {
		t.Fatalf("open with a token over plaintext: %v", err)
	}
}
