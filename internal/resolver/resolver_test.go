package resolver

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/distash/distash/internal/kv"
)

func pt(k string) kv.KeyRange { return kv.PointRange([]byte(k)) }

func rg(b, e string) kv.KeyRange { return kv.KeyRange{Begin: []byte(b), End: []byte(e)} }

func reads(rv kv.Version, rs ...kv.KeyRange) Txn { return Txn{ReadVersion: rv, ReadRanges: rs} }

func writes(rv kv.Version, ws ...kv.KeyRange) Txn { return Txn{ReadVersion: rv, WriteRanges: ws} }

func rw(rv kv.Version, r, w []kv.KeyRange) Txn {
	return Txn{ReadVersion: rv, ReadRanges: r, WriteRanges: w}
}

func expect(t *testing.T, got []Outcome, want ...Outcome) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}

func mustPanic(t *testing.T, name string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s: no panic", name)
		}
	}()
	f()
}

func TestOutcomeString(t *testing.T) {
	for o, s := range map[Outcome]string{Committed: "committed", Conflict: "conflict", TooOld: "too_old", 0: "outcome(0)", 9: "outcome(9)"} {
		if o.String() != s {
			t.Errorf("%d: %q, want %q", uint8(o), o.String(), s)
		}
	}
}

func TestConstructorPanics(t *testing.T) {
	mustPanic(t, "zero window", func() { New(0) })
	mustPanic(t, "negative window", func() { New(-1) })
	mustPanic(t, "negative start", func() { NewAt(10, -1) })
}

func TestOutOfOrderVersionPanics(t *testing.T) {
	r := New(100)
	mustPanic(t, "version 0 on a new resolver", func() { r.Resolve(0, nil) })
	r.Resolve(10, nil)
	mustPanic(t, "same version", func() { r.Resolve(10, nil) })
	mustPanic(t, "older version", func() { r.Resolve(9, nil) })
	r.Resolve(11, nil) // still usable after the refused batches
	if s := r.Stats(); s.Batches != 2 || s.Version != 11 {
		t.Fatalf("stats %+v", s)
	}
	ra := NewAt(100, 1000)
	mustPanic(t, "version at start", func() { ra.Resolve(1000, nil) })
	ra.Resolve(1001, nil)
}

func TestPointConflicts(t *testing.T) {
	r := New(1000)
	expect(t, r.Resolve(10, []Txn{writes(5, pt("k"))}), Committed)
	expect(t, r.Resolve(20, []Txn{
		reads(9, pt("k")),     // k written at 10 > 9
		reads(10, pt("k")),    // read after the write
		reads(9, pt("k\x00")), // the next key
		reads(9, pt("j")),
		reads(9, pt("")),
	}), Conflict, Committed, Committed, Committed, Committed)
	// A range read holding k conflicts; ranges ending at k or starting
	// after it do not.
	expect(t, r.Resolve(30, []Txn{
		reads(9, rg("a", "z")),
		reads(9, rg("a", "k")),
		reads(9, rg("k\x00", "z")),
		reads(9, rg("k", "k\x00\x00")),
		reads(9, kv.KeyRange{Begin: []byte("b")}), // nil End: to the end
		reads(9, kv.KeyRange{Begin: []byte("l")}),
	}), Conflict, Committed, Committed, Conflict, Conflict, Committed)
}

func TestRangeWrites(t *testing.T) {
	r := New(1000)
	expect(t, r.Resolve(10, []Txn{writes(0, rg("b", "d"))}), Committed)
	expect(t, r.Resolve(20, []Txn{writes(0, pt("c"))}), Committed)
	expect(t, r.Resolve(30, []Txn{
		reads(15, pt("b")),     // written at 10 only
		reads(15, pt("c")),     // overwritten at 20
		reads(15, pt("c\x00")), // back to 10 after c
		reads(9, pt("c\x00")),
		reads(9, pt("d")), // d is outside [b, d)
		reads(15, rg("a", "cc")),
		reads(20, rg("", "")),   // empty read range
		reads(15, rg("z", "a")), // inverted: empty
	}), Committed, Conflict, Committed, Conflict, Committed, Conflict, Committed, Committed)
	// A wide write overwrites everything inside it.
	expect(t, r.Resolve(40, []Txn{writes(0, rg("a", "e"))}), Committed)
	expect(t, r.Resolve(50, []Txn{reads(35, rg("a", "e")), reads(40, rg("", "z"))}), Conflict, Committed)
	// An unbounded write.
	expect(t, r.Resolve(60, []Txn{writes(0, kv.KeyRange{Begin: []byte("x")})}), Committed)
	expect(t, r.Resolve(70, []Txn{reads(55, pt("\xff\xff")), reads(55, pt("w"))}), Conflict, Committed)
}

func TestIntraBatch(t *testing.T) {
	r := New(1000)
	expect(t, r.Resolve(10, []Txn{writes(0, pt("x"))}), Committed)
	expect(t, r.Resolve(100, []Txn{
		rw(50, []kv.KeyRange{pt("a")}, []kv.KeyRange{pt("k")}), // commits, writes k at 100
		reads(99, pt("k")), // conflicts with the txn above
		rw(5, []kv.KeyRange{pt("x")}, []kv.KeyRange{pt("m")}), // conflicts (x at 10): m not written
		reads(99, pt("m")),                       // so m is clean
		rw(99, []kv.KeyRange{rg("l", "n")}, nil), // read-only, m clean, k outside
		rw(99, []kv.KeyRange{rg("j", "l")}, nil), // holds k
		writes(0, pt("z")),                       // blind write
		reads(99, pt("z")),
	}), Committed, Conflict, Conflict, Committed, Committed, Conflict, Committed, Conflict)
	// A txn reading and writing the same key does not conflict with itself.
	expect(t, r.Resolve(200, []Txn{
		rw(150, []kv.KeyRange{pt("q")}, []kv.KeyRange{pt("q")}),
		rw(150, []kv.KeyRange{pt("q")}, []kv.KeyRange{pt("q")}),
	}), Committed, Conflict)
}

func TestTooOld(t *testing.T) {
	r := New(100)
	expect(t, r.Resolve(50, []Txn{reads(0, pt("a")), writes(0, pt("k"))}), Committed, Committed)
	if o := r.OldestVersion(); o != 0 {
		t.Fatalf("oldest %d", o)
	}
	expect(t, r.Resolve(150, []Txn{
		reads(49, pt("a")),  // < 150-100
		reads(50, pt("k")),  // == oldest: admissible, k at 50 is not > 50
		reads(49, nil...),   // no reads: blind (empty) txn commits
		writes(-5, pt("b")), // blind write with an ancient read version
		rw(10, []kv.KeyRange{pt("q")}, []kv.KeyRange{pt("c")}), // too old: c not written
		reads(50, pt("c")),
		reads(50, pt("b")), // b written in this batch
	}), TooOld, Committed, Committed, Committed, TooOld, Committed, Conflict)
	if o := r.OldestVersion(); o != 50 {
		t.Fatalf("oldest %d", o)
	}
	s := r.Stats()
	if s.TooOld != 2 || s.Conflicts != 1 || s.Committed != 6 || s.Txns != 9 || s.Batches != 2 {
		t.Fatalf("stats %+v", s)
	}
	// A resolver recruited at version 1000 has not seen earlier writes.
	ra := NewAt(1_000_000, 1000)
	expect(t, ra.Resolve(1001, []Txn{reads(999, pt("a")), reads(1000, pt("a"))}), TooOld, Committed)
	if o := ra.OldestVersion(); o != 1000 {
		t.Fatalf("oldest %d", o)
	}
}

func TestReadVersionNotBeforeBatch(t *testing.T) {
	// A read version at or after the batch version (a broken client) sees
	// every earlier batch and conflicts only with writes of its own batch.
	r := New(100)
	expect(t, r.Resolve(10, []Txn{writes(0, pt("k"))}), Committed)
	expect(t, r.Resolve(20, []Txn{
		reads(25, pt("k")),
		writes(0, pt("j")),
		reads(20, pt("j")),
		reads(1<<62, pt("j")),
	}), Committed, Committed, Conflict, Conflict)
}

func TestKeysAreCopied(t *testing.T) {
	r := New(1000)
	b := []byte("key")
	e := kv.KeyAfter(b)
	rb, re := []byte("a"), []byte("b")
	expect(t, r.Resolve(10, []Txn{writes(0, kv.KeyRange{Begin: b, End: e}, kv.KeyRange{Begin: rb, End: re})}), Committed)
	copy(b, "zzz")
	copy(e, "zzzz")
	rb[0], re[0] = 'y', 'z'
	expect(t, r.Resolve(20, []Txn{reads(5, pt("key")), reads(5, pt("zzz")), reads(5, pt("ab")), reads(5, pt("yy"))}),
		Conflict, Committed, Conflict, Committed)
}

func TestPruneToZero(t *testing.T) {
	r := New(100)
	for i := 1; i <= 50; i++ {
		r.Resolve(kv.Version(i), []Txn{writes(0, pt(fmt.Sprintf("k%03d", i)), rg(fmt.Sprintf("r%03d", i), fmt.Sprintf("r%03dz", i)))})
	}
	if b := r.Stats().Boundaries; b != 1+50*4 {
		t.Fatalf("boundaries %d, want %d", b, 1+50*4)
	}
	// Advance far past the window: every write is forgotten.
	r.Resolve(1000, nil)
	r.compact()
	s := r.Stats()
	if s.Boundaries != 1 || s.Pruned != 200 {
		t.Fatalf("after pruning: %+v", s)
	}
	expect(t, r.Resolve(1001, []Txn{reads(950, rg("", "\xff"))}), Committed)
}

// TestIdleBatchesForgetABurst: one batch writes 20,000 keys, then only
// empty batches come, 20 per window (as the commit proxy's idle batches
// do). Within three windows (a pass that started before the writes were
// older than the window, then a full pass) the resolver holds the empty key
// alone; with a budget of sweepBase per idle batch it still held most of
// the burst.
func TestIdleBatchesForgetABurst(t *testing.T) {
	const window = 1000
	r := New(window)
	var ws []kv.KeyRange
	for i := range 10_000 {
		ws = append(ws, pt(fmt.Sprintf("k%05d", i)))
	}
	r.Resolve(1, []Txn{writes(0, ws...)})
	if b := r.Stats().Boundaries; b != 1+2*len(ws) {
		t.Fatalf("%d boundaries after the burst; want %d", b, 1+2*len(ws))
	}
	for v := kv.Version(1 + window/20); v <= 1+3*window; v += window / 20 {
		r.Resolve(v, nil)
	}
	if s := r.Stats(); s.Boundaries != 1 {
		t.Fatalf("%d boundaries three windows after the burst; want 1 (%+v)", s.Boundaries, s)
	}
	if cap(r.scratch) > maxScratch || cap(r.upd) > maxScratch {
		t.Fatalf("the sweep keeps scratch arrays of %d and %d entries", cap(r.scratch), cap(r.upd))
	}
}

// ---- differential test against a brute-force model ----

type modelWrite struct {
	v kv.Version
	r kv.KeyRange
}

// model is the obviously-correct resolver: the list of committed write
// ranges, checked by brute force.
type model struct {
	window, last, oldest kv.Version
	hist                 []modelWrite
}

func emptyRange(r kv.KeyRange) bool { return r.End != nil && bytes.Compare(r.Begin, r.End) >= 0 }

func intersects(a, b kv.KeyRange) bool {
	if emptyRange(a) || emptyRange(b) {
		return false
	}
	return (b.End == nil || bytes.Compare(a.Begin, b.End) < 0) && (a.End == nil || bytes.Compare(b.Begin, a.End) < 0)
}

func containsKey(r kv.KeyRange, k []byte) bool {
	return bytes.Compare(k, r.Begin) >= 0 && (r.End == nil || bytes.Compare(k, r.End) < 0)
}

func (m *model) resolve(v kv.Version, txns []Txn) []Outcome {
	if v <= m.last {
		panic("model: version order")
	}
	m.last = v
	m.oldest = max(m.oldest, v-m.window)
	var batch []kv.KeyRange // writes committed earlier in this batch
	out := make([]Outcome, len(txns))
	for i, t := range txns {
		if len(t.ReadRanges) > 0 && t.ReadVersion < m.oldest {
			out[i] = TooOld
			continue
		}
		conflict := false
		for _, rr := range t.ReadRanges {
			for _, w := range m.hist {
				if w.v > t.ReadVersion && intersects(rr, w.r) {
					conflict = true
				}
			}
			for _, w := range batch {
				if intersects(rr, w) {
					conflict = true
				}
			}
		}
		if conflict {
			out[i] = Conflict
			continue
		}
		out[i] = Committed
		for _, w := range t.WriteRanges {
			batch = append(batch, kv.KeyRange{Begin: bytes.Clone(w.Begin), End: bytes.Clone(w.End)})
		}
	}
	for _, w := range batch {
		m.hist = append(m.hist, modelWrite{v, w})
	}
	// Writes at versions <= oldest can never conflict with an admissible
	// read version: dropping them only speeds the model up.
	m.hist = slices.DeleteFunc(m.hist, func(w modelWrite) bool { return w.v <= m.oldest })
	return out
}

// norm maps the versions that no admissible read version can see to 0.
func (m *model) norm(v kv.Version) kv.Version {
	if v <= m.oldest {
		return 0
	}
	return v
}

// value is the version of key k: the last write holding it.
func (m *model) value(k []byte) kv.Version {
	var v kv.Version
	for _, w := range m.hist {
		if containsKey(w.r, k) {
			v = max(v, w.v)
		}
	}
	return m.norm(v)
}

// canonical returns the minimal step function of the model's history: its
// boundaries and their versions.
func (m *model) canonical() []entry {
	cand := [][]byte{{}}
	for _, w := range m.hist {
		if emptyRange(w.r) {
			continue
		}
		cand = append(cand, w.r.Begin)
		if w.r.End != nil {
			cand = append(cand, w.r.End)
		}
	}
	slices.SortFunc(cand, bytes.Compare)
	cand = slices.CompactFunc(cand, bytes.Equal)
	// Between two consecutive candidates the version is constant.
	vals := make([]kv.Version, len(cand))
	for _, w := range m.hist {
		i, _ := slices.BinarySearchFunc(cand, w.r.Begin, bytes.Compare)
		for ; i < len(cand) && containsKey(w.r, cand[i]); i++ {
			vals[i] = max(vals[i], w.v)
		}
	}
	var out []entry
	for i, c := range cand {
		v := m.norm(vals[i])
		if i == 0 || v != out[len(out)-1].v {
			out = append(out, entry{key: c, v: v})
		}
	}
	return out
}

type genConfig struct {
	alphabet string
	maxLen   int
	window   kv.Version
	maxStep  int
	narrow   bool   // mostly points and prefix ranges, few wide ranges
	prefix   string // prepended to most keys
}

type gen struct {
	rng *rand.Rand
	cfg genConfig
}

func (g *gen) key() []byte {
	n := g.rng.IntN(g.cfg.maxLen + 1)
	if g.cfg.narrow && g.rng.IntN(4) > 0 {
		n = g.cfg.maxLen
	}
	k := make([]byte, n)
	for i := range k {
		k[i] = g.cfg.alphabet[g.rng.IntN(len(g.cfg.alphabet))]
	}
	if g.cfg.prefix != "" && g.rng.IntN(10) > 0 {
		k = append([]byte(g.cfg.prefix), k...)
	}
	if g.rng.IntN(8) == 0 {
		k = append(k, 0) // exercise k+0x00 boundaries
	}
	return k
}

// keyRange returns a random range: mostly points (more so for writes), some
// narrow prefix ranges, some arbitrary ranges between two keys, a few ranges
// to the end of the key space and a few empty or inverted ones.
func (g *gen) keyRange(write bool) kv.KeyRange {
	p := g.rng.IntN(100)
	switch {
	case g.cfg.narrow: // 80% points, 15% prefixes, 1% each of the others
		p = []int{0, 55, 70, 73, 76}[min(4, max(0, p-95))]
		if p == 0 && g.rng.IntN(100) < 16 {
			p = 55
		}
	case write:
		p = p * p / 100 // skew towards points
	}
	switch {
	case p < 55:
		return kv.PointRange(g.key())
	case p < 70:
		k := append(g.key(), g.cfg.alphabet[g.rng.IntN(len(g.cfg.alphabet))])
		return kv.KeyRange{Begin: k, End: kv.PrefixEnd(k)}
	case p < 73:
		return kv.KeyRange{Begin: g.key()} // to the end of the key space
	case p < 76:
		a, b := g.key(), g.key() // possibly inverted or empty
		return kv.KeyRange{Begin: a, End: b}
	default:
		a, b := g.key(), g.key()
		if bytes.Compare(a, b) > 0 {
			a, b = b, a
		}
		if bytes.Equal(a, b) {
			b = append(b, g.cfg.alphabet[0])
		}
		return kv.KeyRange{Begin: a, End: b}
	}
}

func (g *gen) ranges(max int, write bool) []kv.KeyRange {
	n := g.rng.IntN(max + 1)
	if n == 0 {
		return nil
	}
	rs := make([]kv.KeyRange, n)
	for i := range rs {
		rs[i] = g.keyRange(write)
	}
	return rs
}

func (g *gen) batch(v kv.Version) []Txn {
	txns := make([]Txn, g.rng.IntN(9))
	for i := range txns {
		var rv kv.Version
		switch p := g.rng.IntN(100); {
		case p < 70: // recent, inside the window
			rv = v - 1 - kv.Version(g.rng.Int64N(int64(g.cfg.window)/2))
		case p < 85: // around the edge of the window
			rv = v - g.cfg.window - 5 + kv.Version(g.rng.Int64N(10))
		case p < 95: // anywhere, often too old
			rv = v - kv.Version(g.rng.Int64N(int64(3*g.cfg.window)))
		case p < 98:
			rv = 0
		default: // at or after the batch version
			rv = v + kv.Version(g.rng.Int64N(3))
		}
		txns[i] = Txn{ReadVersion: rv, ReadRanges: g.ranges(3, false), WriteRanges: g.ranges(3, true)}
	}
	return txns
}

// checkState compares the resolver's step function with the model's at
// every boundary and at the given probe keys, and checks the invariants.
func checkState(t *testing.T, r *Resolver, m *model, probes [][]byte) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.oldest != m.oldest || r.last != m.last {
		t.Fatalf("oldest/last %d/%d, model %d/%d", r.oldest, r.last, m.oldest, m.last)
	}
	first, ok := r.tree.Min()
	if !ok || len(first.key) != 0 {
		t.Fatalf("no boundary at the empty key")
	}
	var keys [][]byte
	r.tree.Ascend(func(e entry) bool {
		if e.v < 0 || e.v > r.last {
			t.Fatalf("boundary %q has version %d (last %d)", e.key, e.v, r.last)
		}
		keys = append(keys, e.key)
		return true
	})
	canon := m.canonical()
	for i, k := range append(keys, probes...) {
		j, found := slices.BinarySearchFunc(canon, k, func(e entry, k []byte) int { return bytes.Compare(e.key, k) })
		if !found {
			j-- // the floor: canon[0] is the empty key
		}
		want := canon[j].v
		if i%16 == 0 { // cross-check the canonical form by brute force
			if bf := m.value(k); bf != want {
				t.Fatalf("model: key %q: canonical %d, brute force %d", k, want, bf)
			}
		}
		if got := m.norm(r.floor(k).v); got != want {
			t.Fatalf("key %q: version %d, model %d", k, got, want)
		}
	}
}

func allKeys(alphabet string, maxLen int) [][]byte {
	out := [][]byte{{}}
	prev := [][]byte{{}}
	for l := 1; l <= maxLen; l++ {
		var next [][]byte
		for _, p := range prev {
			for i := range len(alphabet) {
				next = append(next, append(bytes.Clone(p), alphabet[i]))
			}
		}
		out = append(out, next...)
		prev = next
	}
	for _, k := range slices.Clone(out) {
		out = append(out, kv.KeyAfter(k))
	}
	return out
}

func TestDifferential(t *testing.T) {
	configs := []struct {
		name string
		cfg  genConfig
	}{
		// A small alphabet: ranges overlap a lot, conflicts are frequent.
		{"small", genConfig{alphabet: "abc", maxLen: 3, window: 200, maxStep: 40}},
		// A larger key space: deeper trees, longer-lived boundaries.
		{"large", genConfig{alphabet: "abcdefgh", maxLen: 4, window: 400, maxStep: 30, narrow: true}},
		// Keys straddling the 16-byte inline prefix of the tree entries.
		{"long", genConfig{alphabet: "a\x00\xff", maxLen: 4, window: 200, maxStep: 40, prefix: "0123456789abcd"}},
	}
	prunings := []struct {
		name                 string
		base, factor, passes int
	}{
		{"default", sweepBase, sweepFactor, sweepPasses},
		{"slow", 1, 0, 0},       // the cursor crawls: many partial passes
		{"tiny", 3, 1, 0},       // stops mid-tree every batch
		{"full", 1 << 30, 0, 0}, // a full pass every batch
		{"off", 0, 0, 0},        // never prunes
	}
	batches := 2000
	if testing.Short() {
		batches = 500
	}
	for _, c := range configs {
		cfg := c.cfg
		probes := allKeys(cfg.alphabet, cfg.maxLen)
		if cfg.prefix != "" {
			for _, k := range slices.Clone(probes) {
				probes = append(probes, append([]byte(cfg.prefix), k...))
			}
		}
		for _, p := range prunings {
			for seed := range uint64(3) {
				t.Run(fmt.Sprintf("%s/%s/seed%d", c.name, p.name, seed), func(t *testing.T) {
					t.Parallel()
					g := &gen{rng: rand.New(rand.NewPCG(seed, 0xd15)), cfg: cfg}
					r := New(cfg.window)
					r.sweepBase, r.sweepFactor, r.sweepPasses = p.base, p.factor, p.passes
					m := &model{window: cfg.window}
					v := kv.Version(0)
					var counts [4]int
					maxHeld := 0
					for b := range batches {
						v += 1 + kv.Version(g.rng.IntN(cfg.maxStep))
						txns := g.batch(v)
						got := r.Resolve(v, txns)
						want := m.resolve(v, txns)
						if !slices.Equal(got, want) {
							t.Fatalf("batch %d at %d: %v, model %v\ntxns %+v", b, v, got, want, txns)
						}
						for _, o := range got {
							counts[o]++
						}
						maxHeld = max(maxHeld, r.tree.Len())
						if b%50 == 0 {
							checkState(t, r, m, probes)
						}
					}
					checkState(t, r, m, probes)
					// Each outcome must actually occur.
					if counts[Committed] == 0 || counts[Conflict] == 0 || counts[TooOld] == 0 {
						t.Fatalf("outcomes %v: the workload misses a case", counts)
					}
					// After a full pass the step function is the canonical one.
					r.compact()
					want := m.canonical()
					var got []entry
					r.tree.Ascend(func(e entry) bool { got = append(got, e); return true })
					if !slices.EqualFunc(got, want, func(a, b entry) bool { return bytes.Equal(a.key, b.key) && a.v == b.v }) {
						t.Fatalf("after compaction %d boundaries, canonical %d\n got %v\nwant %v", len(got), len(want), got, want)
					}
					s := r.Stats()
					t.Logf("outcomes committed=%d conflict=%d too_old=%d; max boundaries %d; stats after compaction %+v", counts[Committed], counts[Conflict], counts[TooOld], maxHeld, s)
				})
			}
		}
	}
}

// TestPruneBounded writes many distinct keys: the boundaries held must stay
// within a small factor of the canonical step function of the window, while
// a resolver that never prunes grows without bound.
func TestPruneBounded(t *testing.T) {
	const window = 1000
	rng := rand.New(rand.NewPCG(7, 7))
	key := func() []byte {
		k := make([]byte, 8)
		for i := range k {
			k[i] = byte(rng.IntN(256))
		}
		return k
	}
	r := New(window)
	off := New(window)
	off.sweepBase, off.sweepFactor, off.sweepPasses = 0, 0, 0
	m := &model{window: window}
	batches := 2000
	if testing.Short() {
		batches = 1000
	}
	maxRatio := 0.0
	for b := 1; b <= batches; b++ {
		v := kv.Version(b * 10) // 100 batches per window
		txns := make([]Txn, 10)
		for i := range txns {
			var ws []kv.KeyRange
			for range 2 {
				k := key()
				if rng.IntN(4) == 0 {
					e := bytes.Clone(k)
					e[7] = 0xff
					ws = append(ws, kv.KeyRange{Begin: k, End: e})
				} else {
					ws = append(ws, kv.PointRange(k))
				}
			}
			txns[i] = Txn{ReadVersion: v - 5, ReadRanges: []kv.KeyRange{kv.PointRange(key())}, WriteRanges: ws}
		}
		got := r.Resolve(v, txns)
		off.Resolve(v, txns)
		if want := m.resolve(v, txns); !slices.Equal(got, want) {
			t.Fatalf("batch %d: %v, model %v", b, got, want)
		}
		if b%200 == 0 {
			canon := len(m.canonical())
			held := r.Stats().Boundaries
			ratio := float64(held) / float64(canon)
			maxRatio = max(maxRatio, ratio)
			// 100 batches * 10 txns * 2 writes * 2 boundaries per window.
			if canon > 4001 || ratio > 2 {
				t.Fatalf("batch %d: %d boundaries held, canonical %d (ratio %.2f)", b, held, canon, ratio)
			}
		}
	}
	s, so := r.Stats(), off.Stats()
	if so.Boundaries < 4*s.Boundaries {
		t.Fatalf("pruning saves little: %d boundaries vs %d without pruning", s.Boundaries, so.Boundaries)
	}
	t.Logf("held %d boundaries (max ratio to canonical %.2f), without pruning %d; %+v", s.Boundaries, maxRatio, so.Boundaries, s)
}

func TestConcurrentStats(t *testing.T) {
	r := New(100)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				_ = r.Stats()
				_ = r.OldestVersion()
			}
		}
	}()
	for i := 1; i <= 1000; i++ {
		r.Resolve(kv.Version(i), []Txn{rw(kv.Version(i-1), []kv.KeyRange{pt(fmt.Sprint(i % 7))}, []kv.KeyRange{pt(fmt.Sprint(i % 5))})})
	}
	close(stop)
	wg.Wait()
	if s := r.Stats(); s.Txns != 1000 || s.Batches != 1000 {
		t.Fatalf("stats %+v", s)
	}
}

// TestLessEntry checks the prefix-accelerated order against bytes.Compare,
// on keys around the 16-byte inline prefix, with zero bytes and shared
// prefixes.
func TestLessEntry(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	key := func() []byte {
		k := make([]byte, rng.IntN(24))
		for i := range k {
			k[i] = []byte{0, 1, 0x7f, 0x80, 0xff}[rng.IntN(5)]
		}
		return k
	}
	for range 200_000 {
		a, b := key(), key()
		if rng.IntN(3) == 0 { // share a long prefix
			n := rng.IntN(len(a) + 1)
			b = append(a[:n:n], b...)
		}
		if got, want := lessEntry(mk(a, 0), mk(b, 0)), bytes.Compare(a, b) < 0; got != want {
			t.Fatalf("less(%x, %x) = %v, want %v", a, b, got, want)
		}
	}
}
