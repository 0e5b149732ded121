// Package silent is a listener for tests of nodes that stop answering
// with their connections open (a paused process: its kernel still
// accepts): it accepts every connection and never reads or writes.
package silent

import (
	"net"
	"sync/atomic"
	"testing"
)

// Listen listens on a loopback port until the test ends and returns its
// address and the count of connections it accepted.
func Listen(t testing.TB) (addr string, accepted *atomic.Int64) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	accepted = new(atomic.Int64)
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
			accepted.Add(1)
		}
	}()
	return lis.Addr().String(), accepted
}
