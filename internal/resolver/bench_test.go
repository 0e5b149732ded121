package resolver

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/distash/distash/internal/kv"
)

const (
	benchKeys      = 1_000_000
	benchBatch     = 64
	benchStep      = 1000 // versions between batches: a batch per millisecond
	benchWarmBatch = 6000 // > DefaultWindow/benchStep: the window is full
)

// benchGen builds commit batches over benchKeys keys "user"+uint64 (12
// bytes). Keys are written into an arena reused from batch to batch (the
// resolver copies what it keeps), so generation costs little.
type benchGen struct {
	rng   *rand.Rand
	arena []byte
	txns  []Txn
	rs    []kv.KeyRange
	kind  string
	// prefix starts every key: keys of one table or client share one in
	// most workloads, and past the entries' inline bytes the tree's
	// comparisons read the keys themselves.
	prefix string
}

func newBenchGen(kind string) *benchGen {
	return &benchGen{
		rng:   rand.New(rand.NewPCG(1, 2)),
		arena: make([]byte, 0, benchBatch*4*2*64),
		txns:  make([]Txn, benchBatch),
		rs:    make([]kv.KeyRange, benchBatch*4),
		kind:  kind,
	}
}

// key appends "user"+be64(i)+0x00 to the arena and returns the key and the
// key after it.
func (g *benchGen) key(i uint64) (k, after []byte) {
	n := len(g.arena)
	g.arena = append(g.arena, g.prefix...)
	g.arena = append(g.arena, "user"...)
	g.arena = binary.BigEndian.AppendUint64(g.arena, i)
	g.arena = append(g.arena, 0)
	m := len(g.arena) - 1
	return g.arena[n:m:m], g.arena[n : m+1 : m+1]
}

func (g *benchGen) point() kv.KeyRange {
	k, e := g.key(g.rng.Uint64N(benchKeys))
	return kv.KeyRange{Begin: k, End: e}
}

// span returns [key i, key i+n) for n in [1, 100].
func (g *benchGen) span() kv.KeyRange {
	i := g.rng.Uint64N(benchKeys)
	n := 1 + g.rng.Uint64N(100)
	b, _ := g.key(i)
	e, _ := g.key(i + n)
	return kv.KeyRange{Begin: b, End: e}
}

func (g *benchGen) batch(v kv.Version) []Txn {
	g.arena = g.arena[:0]
	for i := range g.txns {
		rs := g.rs[i*4 : i*4+4 : i*4+4]
		switch g.kind {
		case "point": // 2 point reads, 2 point writes
			rs[0], rs[1], rs[2], rs[3] = g.point(), g.point(), g.point(), g.point()
		case "range": // 2 range reads of up to 100 keys, 2 point writes
			rs[0], rs[1], rs[2], rs[3] = g.span(), g.span(), g.point(), g.point()
		case "rangewrite": // 2 point reads, 1 point write, 1 range write
			rs[0], rs[1], rs[2], rs[3] = g.point(), g.point(), g.point(), g.span()
		}
		// Read versions 1 to 6 ms old.
		rv := v - benchStep - kv.Version(g.rng.Int64N(5*benchStep))
		g.txns[i] = Txn{ReadVersion: rv, ReadRanges: rs[:2], WriteRanges: rs[2:]}
	}
	return g.txns
}

func benchResolve(b *testing.B, kind string) { benchResolvePrefix(b, kind, "") }

func benchResolvePrefix(b *testing.B, kind, prefix string) {
	r := New(DefaultWindow)
	g := newBenchGen(kind)
	g.prefix = prefix
	v := kv.Version(0)
	for range benchWarmBatch {
		v += benchStep
		r.Resolve(v, g.batch(v))
	}
	before := r.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		v += benchStep
		r.Resolve(v, g.batch(v))
	}
	b.StopTimer()
	s := r.Stats()
	txns := float64(s.Txns - before.Txns)
	b.ReportMetric(txns/b.Elapsed().Seconds(), "txns/s")
	b.ReportMetric(float64(s.Boundaries), "boundaries")
	b.ReportMetric(float64(s.Conflicts-before.Conflicts)/txns, "conflict-rate")
}

// BenchmarkResolvePoint: batches of 64 transactions with 2 point reads and
// 2 point writes each, over 1M keys, with a full 5 s window of history.
func BenchmarkResolvePoint(b *testing.B) { benchResolve(b, "point") }

// BenchmarkResolveRange: as BenchmarkResolvePoint, but the 2 reads are
// ranges of 1 to 100 keys.
func BenchmarkResolveRange(b *testing.B) { benchResolve(b, "range") }

// BenchmarkResolveRangeWrite: 2 point reads, a point write and a range
// write of 1 to 100 keys.
func BenchmarkResolveRangeWrite(b *testing.B) { benchResolve(b, "rangewrite") }

// BenchmarkResolvePointPrefix: BenchmarkResolvePoint with keys that share
// a 20-byte prefix (a pool's prefix and a table's name).
func BenchmarkResolvePointPrefix(b *testing.B) {
	benchResolvePrefix(b, "point", "m/app/users/by-id/x/")
}
