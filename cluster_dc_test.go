package distash_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/wire"
)

// setNodeDCs republishes the current view with the nodes' data centers.
func (fc *fakeCluster) setNodeDCs(dcs map[string]string) {
	v := proto.Clone(fc.view.Load()).(*wire.ViewResponse)
	for name, dc := range dcs {
		n := fc.nodes[name]
		v.Nodes = append(v.Nodes, &wire.ClusterNode{Id: name, Address: n.addr, Dc: dc, Alive: true})
	}
	fc.view.Store(v)
}

// readFrom reads n keys in one transaction each and counts which node
// served them.
func readFrom(t *testing.T, db *distash.DB, n int) map[string]int {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	served := map[string]int{}
	for i := range n {
		var got string
		err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
			var err error
			got, err = getString(tr, fmt.Sprintf("d/k%d", i))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		served[got]++
	}
	return served
}

// TestClusterReadsPreferOwnDC: with WithDC a client reads a replicated
// shard from the replica in its data center; without a replica there, or
// once the local one fails, from the others.
func TestClusterReadsPreferOwnDC(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	fc, k, a, b := replicatedFake(t)
	fc.setNodeDCs(map[string]string{"k": "dc3", "s": "dc3", "a": "dc1", "b": "dc2"})

	for _, c := range []struct{ dc, want string }{{"dc1", "a"}, {"dc2", "b"}} {
		db, err := distash.Open(ctx, k.addr, distash.WithDC(c.dc))
		if err != nil {
			t.Fatal(err)
		}
		if got := readFrom(t, db, 50); got[c.want] != 50 {
			t.Fatalf("client in %s: reads served by %v, want all by %s", c.dc, got, c.want)
		}
		db.Close()
	}

	// No replica in the client's data center: any replica serves.
	db, err := distash.Open(ctx, k.addr, distash.WithDC("dc3"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := readFrom(t, db, 50); got["a"]+got["b"] != 50 {
		t.Fatalf("client in dc3: reads served by %v", got)
	}

	// The local replica fails: reads go to the other data center's.
	db2, err := distash.Open(ctx, k.addr, distash.WithDC("dc2"))
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	readFrom(t, db2, 1)
	b.srv.Stop() // the view still says b is alive
	before := a.reads.Load()
	if got := readFrom(t, db2, 20); got["a"] != 20 {
		t.Fatalf("local replica down: reads served by %v, want all by a", got)
	}
	if a.reads.Load() <= before {
		t.Fatal("a served no read")
	}
}
