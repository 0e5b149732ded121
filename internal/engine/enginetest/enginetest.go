// Package enginetest is the conformance suite every engine.Engine
// implementation must pass, plus shared benchmarks.
//
// Run checks the semantics every engine shares: point and range writes,
// scans in both directions, versions, exact Stats, batch atomicity,
// concurrent readers during Apply (meaningful under -race), a randomized
// differential test against a map model, and restarts: a durable engine
// keeps exactly its data, version and stats across Close and reopen and
// across a simulated crash; a volatile one comes back empty at version 0
// (a restarted volatile stash rejoins empty at the log's end, so an engine
// that kept anything would serve stale data). RunEphemeral checks the
// capacity and eviction behaviour of ephemeral engines, restarts included.
//
// The suite only relies on the engine.Engine interface; an engine's own
// test file supplies open (and reopen, and crash) functions that may adjust
// the options they are given.
package enginetest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/kv"
)

// OpenFunc opens an engine with opts for a test. The suite fills opts.Dir
// with a fresh temporary directory; the function may adjust other options.
// It should fail the test rather than return an error.
type OpenFunc func(t *testing.T, opts engine.Options) engine.Engine

// CrashFunc simulates a crash of e, an engine opened with opts, between two
// Applys: it leaves behind what e's files would hold had its process been
// killed (kill -9) at that moment, and releases e (which the suite does not
// use again) without the orderly shutdown of Close. It returns the options
// to recover with: opts, or opts with another Dir when the crash is
// simulated on a snapshot of the files (an engine that cannot be reopened
// in-process before it is closed). A nil CrashFunc skips the crash tests.
type CrashFunc func(t *testing.T, e engine.Engine, opts engine.Options) engine.Options

// harness owns one engine of a test and closes it at cleanup.
type harness struct {
	t      *testing.T
	opts   engine.Options
	open   OpenFunc
	e      engine.Engine
	closed bool
}

func newHarness(t *testing.T, open OpenFunc, opts engine.Options) *harness {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	h := &harness{t: t, opts: opts, open: open}
	h.e = open(t, opts)
	h.t.Cleanup(func() {
		if !h.closed {
			if err := h.e.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	})
	return h
}

// cycle closes the engine and opens it again with reopen and the same options.
func (h *harness) cycle(reopen OpenFunc) {
	h.t.Helper()
	if err := h.e.Close(); err != nil {
		h.t.Fatalf("Close: %v", err)
	}
	h.closed = true
	h.e = reopen(h.t, h.opts)
	h.closed = false
}

// crash crashes the engine with crash and recovers it with reopen.
func (h *harness) crash(crash CrashFunc, reopen OpenFunc) {
	h.t.Helper()
	h.closed = true // crash releases the engine, even when it fails
	h.opts = crash(h.t, h.e, h.opts)
	h.e = reopen(h.t, h.opts)
	h.closed = false
}

// restarter ends an engine's life and starts the next one.
type restarter struct {
	name    string
	restart func(h *harness)
	// volatile engines come back empty at version 0; others come back
	// exactly as they were.
	volatile bool
}

// restarters returns the ways of restarting an engine that Run and
// RunEphemeral test: Close and reopen (open again for volatile engines,
// whose reopen is nil), and a crash when the engine can simulate one.
func restarters(open, reopen OpenFunc, crash CrashFunc) []restarter {
	volatile := reopen == nil
	if volatile {
		reopen = open
	}
	rs := []restarter{{name: "Reopen", volatile: volatile, restart: func(h *harness) { h.cycle(reopen) }}}
	if volatile {
		rs[0].name = "Restart"
	}
	if crash != nil {
		rs = append(rs, restarter{name: "Crash", volatile: volatile, restart: func(h *harness) { h.crash(crash, reopen) }})
	}
	return rs
}

// restart restarts the engine with r and checks it against m, which it
// empties for a volatile engine; v is the version of the last Apply.
func (h *harness) restart(r restarter, m model, v kv.Version) {
	h.t.Helper()
	r.restart(h)
	if r.volatile {
		for k := range m {
			delete(m, k)
		}
		v = 0
	}
	if got := h.e.Version(); got != v {
		h.t.Fatalf("Version after %s = %d; want %d", r.name, got, v)
	}
	checkModel(h.t, h.e, m)
	checkGets(h.t, h.e, m)
}

// Set returns a Write setting key to value.
func Set(key, value string) engine.Write {
	return engine.Write{Key: []byte(key), Value: []byte(value)}
}

// Clear returns a Write clearing key.
func Clear(key string) engine.Write { return engine.Write{Key: []byte(key)} }

// ClearRange returns a Write clearing [begin, end).
func ClearRange(begin, end string) engine.Write {
	return engine.Write{Key: []byte(begin), End: []byte(end)}
}

func apply(t testing.TB, e engine.Engine, v kv.Version, ws ...engine.Write) {
	t.Helper()
	if err := e.Apply(&engine.Batch{Version: v, Writes: ws}); err != nil {
		t.Fatalf("Apply(version %d): %v", v, err)
	}
}

func checkGet(t testing.TB, e engine.Engine, key string, want string, wantOK bool) {
	t.Helper()
	v, ok, err := e.Get([]byte(key))
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if ok != wantOK || (ok && string(v) != want) {
		t.Fatalf("Get(%q) = %q (%d bytes), %v; want %q (%d bytes), %v",
			trunc1([]byte(key)), trunc1(v), len(v), ok, trunc1([]byte(want)), len(want), wantOK)
	}
}

func scan(t testing.TB, e engine.Engine, begin, end []byte, reverse bool, limit int) []kv.KeyValue {
	t.Helper()
	var out []kv.KeyValue
	err := e.Scan(begin, end, reverse, func(k, v []byte) bool {
		out = append(out, kv.KeyValue{Key: bytes.Clone(k), Value: bytes.Clone(v)})
		return limit <= 0 || len(out) < limit
	})
	if err != nil {
		t.Fatalf("Scan(%q, %q, reverse=%v): %v", begin, end, reverse, err)
	}
	return out
}

func keysOf(kvs []kv.KeyValue) []string {
	out := make([]string, len(kvs))
	for i, p := range kvs {
		out[i] = string(p.Key)
	}
	return out
}

func checkScan(t testing.TB, e engine.Engine, begin, end string, endNil, reverse bool, limit int, want ...string) {
	t.Helper()
	var endB []byte
	if !endNil {
		endB = []byte(end)
	}
	got := keysOf(scan(t, e, []byte(begin), endB, reverse, limit))
	if fmt.Sprint(got) != fmt.Sprint(want) || len(got) != len(want) {
		t.Fatalf("Scan(%q, %q (nil=%v), reverse=%v, limit %d) keys = %q; want %q",
			begin, end, endNil, reverse, limit, got, want)
	}
}

func checkStats(t testing.TB, e engine.Engine, keys, bytes int64) {
	t.Helper()
	s := e.Stats()
	if s.Keys != keys || s.Bytes != bytes {
		t.Fatalf("Stats = %d keys, %d bytes; want %d keys, %d bytes", s.Keys, s.Bytes, keys, bytes)
	}
}

// model is the reference the differential tests compare engines with.
type model map[string]string

func (m model) apply(ws []engine.Write) {
	for _, w := range ws {
		switch {
		case w.IsClearRange():
			for k := range m {
				if k >= string(w.Key) && k < string(w.End) {
					delete(m, k)
				}
			}
		case w.IsClear():
			delete(m, string(w.Key))
		default:
			m[string(w.Key)] = string(w.Value)
		}
	}
}

func (m model) sorted() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (m model) stats() (keys, bytes int64) {
	for k, v := range m {
		keys++
		bytes += int64(len(k) + len(v))
	}
	return keys, bytes
}

// checkModel compares the engine's full content and Stats with m.
func checkModel(t testing.TB, e engine.Engine, m model) {
	t.Helper()
	keys := m.sorted()
	fwd := scan(t, e, nil, nil, false, 0)
	if len(fwd) != len(keys) {
		t.Fatalf("forward scan has %d pairs, model %d (engine keys %q, model %q)",
			len(fwd), len(keys), trunc(keysOf(fwd)), trunc(keys))
	}
	for i, p := range fwd {
		if string(p.Key) != keys[i] || string(p.Value) != m[keys[i]] {
			t.Fatalf("forward scan pair %d = %q=%q; model %q=%q", i, p.Key, trunc1(p.Value), keys[i], trunc1([]byte(m[keys[i]])))
		}
	}
	rev := scan(t, e, nil, nil, true, 0)
	if len(rev) != len(keys) {
		t.Fatalf("reverse scan has %d pairs, model %d", len(rev), len(keys))
	}
	for i, p := range rev {
		k := keys[len(keys)-1-i]
		if string(p.Key) != k || string(p.Value) != m[k] {
			t.Fatalf("reverse scan pair %d = %q; model %q", i, p.Key, k)
		}
	}
	nk, nb := m.stats()
	checkStats(t, e, nk, nb)
}

// checkGets reads every key of m with Get: engines may serve point reads
// and scans from different places (the flash engine: index and write
// buffer, or tree and file).
func checkGets(t testing.TB, e engine.Engine, m model) {
	t.Helper()
	for k, v := range m {
		checkGet(t, e, k, v, true)
	}
}

func trunc(s []string) []string {
	if len(s) > 20 {
		return append(s[:20:20], "...")
	}
	return s
}

func trunc1(b []byte) []byte {
	if len(b) > 40 {
		return append(b[:40:40], "..."...)
	}
	return b
}

// Run runs the conformance suite. reopen is nil for volatile engines, which
// keep nothing across Close (the suite restarts them with open and expects
// them empty); otherwise it must open the data an engine opened with the
// same options left behind. crash, if not nil, simulates a crash (see
// CrashFunc).
func Run(t *testing.T, open, reopen OpenFunc, crash CrashFunc) {
	t.Run("Empty", func(t *testing.T) { testEmpty(t, open) })
	t.Run("GetSetClear", func(t *testing.T) { testGetSetClear(t, open) })
	t.Run("OddKeysAndValues", func(t *testing.T) { testOddKeys(t, open) })
	t.Run("ClearRange", func(t *testing.T) { testClearRange(t, open) })
	t.Run("BatchOrder", func(t *testing.T) { testBatchOrder(t, open) })
	t.Run("Scan", func(t *testing.T) { testScan(t, open) })
	t.Run("ScanCallsGet", func(t *testing.T) { testScanCallsGet(t, open) })
	t.Run("Version", func(t *testing.T) { testVersion(t, open) })
	t.Run("Stats", func(t *testing.T) { testStats(t, open) })
	t.Run("NoAliasing", func(t *testing.T) { testNoAliasing(t, open) })
	t.Run("LargePairs", func(t *testing.T) { testLargePairs(t, open) })
	t.Run("Atomicity", func(t *testing.T) { testAtomicity(t, open) })
	t.Run("ConcurrentReaders", func(t *testing.T) { testConcurrentReaders(t, open) })
	t.Run("Randomized", func(t *testing.T) { testRandomized(t, open, nil) })
	for _, r := range restarters(open, reopen, crash) {
		if !r.volatile {
			name := "Durability" // after a reopen; "DurabilityCrash" after a crash
			if r.name != "Reopen" {
				name += r.name
			}
			t.Run(name, func(t *testing.T) { testDurability(t, open, r) })
		}
		t.Run("Randomized"+r.name, func(t *testing.T) { testRandomized(t, open, &r) })
	}
}

func testEmpty(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, engine.Options{})
	if v := h.e.Version(); v != 0 {
		t.Fatalf("Version of a new engine = %d; want 0", v)
	}
	checkStats(t, h.e, 0, 0)
	checkGet(t, h.e, "a", "", false)
	checkGet(t, h.e, "", "", false)
	checkScan(t, h.e, "", "", true, false, 0)
	checkScan(t, h.e, "", "", true, true, 0)
}

func testGetSetClear(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, engine.Options{})
	e := h.e
	apply(t, e, 1, Set("a", "1"), Set("b", "2"))
	checkGet(t, e, "a", "1", true)
	checkGet(t, e, "b", "2", true)
	checkGet(t, e, "c", "", false)
	checkGet(t, e, "a\x00", "", false) // not a prefix match
	apply(t, e, 2, Set("a", "one"))    // overwrite
	checkGet(t, e, "a", "one", true)
	apply(t, e, 3, Clear("a"))
	checkGet(t, e, "a", "", false)
	checkGet(t, e, "b", "2", true)
	apply(t, e, 4, Clear("a"), Clear("never")) // clearing absent keys is a no-op
	checkGet(t, e, "a", "", false)
	checkStats(t, e, 1, 2)
	apply(t, e, 5, Set("a", "again"))
	checkGet(t, e, "a", "again", true)
	checkStats(t, e, 2, 2+6)
}

func testOddKeys(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, engine.Options{})
	e := h.e
	// Empty value: present with a zero-length value.
	apply(t, e, 1, engine.Write{Key: []byte("empty"), Value: []byte{}})
	checkGet(t, e, "empty", "", true)
	// Empty key.
	apply(t, e, 2, engine.Write{Key: []byte{}, Value: []byte("root")})
	checkGet(t, e, "", "root", true)
	// Binary keys, system keys, keys a metadata prefix could collide with.
	odd := []string{"\x00", "\x00\x00", "\xff", "\xff\xff", "\xff\xff\xff\xff", "d", "m", "\x00m", "\xffm"}
	var ws []engine.Write
	for i, k := range odd {
		ws = append(ws, Set(k, fmt.Sprintf("v%d", i)))
	}
	apply(t, e, 3, ws...)
	for i, k := range odd {
		checkGet(t, e, k, fmt.Sprintf("v%d", i), true)
	}
	m := model{"empty": "", "": "root"}
	m.apply(ws)
	checkModel(t, e, m)
	checkScan(t, e, "\xff", "", true, false, 0, "\xff", "\xffm", "\xff\xff", "\xff\xff\xff\xff")
	checkScan(t, e, "", "\x00\x01", false, false, 0, "", "\x00", "\x00\x00")
	checkScan(t, e, "", "\x00\x01", false, true, 0, "\x00\x00", "\x00", "")
	apply(t, e, 4, Clear(""), Clear("empty"))
	checkGet(t, e, "", "", false)
	checkGet(t, e, "empty", "", false)
	apply(t, e, 5, ClearRange("\xff", "\xff\xff\xff\xff\xff"))
	checkScan(t, e, "\xfe", "", true, false, 0)
	delete(m, "")
	delete(m, "empty")
	m.apply([]engine.Write{ClearRange("\xff", "\xff\xff\xff\xff\xff")})
	checkModel(t, e, m)
}

func testClearRange(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, engine.Options{})
	e := h.e
	m := model{}
	var ws []engine.Write
	for c := 'a'; c <= 'z'; c++ {
		ws = append(ws, Set(string(c), string(c)+"!"), Set(string(c)+"x", "y"))
	}
	apply(t, e, 1, ws...)
	m.apply(ws)
	checkModel(t, e, m)
	steps := [][]engine.Write{
		{ClearRange("c", "f")},                  // c, cx, d, dx, e, ex
		{ClearRange("gx", "h")},                 // gx only
		{ClearRange("k", "k")},                  // empty range
		{ClearRange("q", "p")},                  // end before begin: no-op
		{ClearRange("mm", "mn")},                // nothing inside
		{ClearRange("y", "yx\x00")},             // y and yx
		{ClearRange("c", "f")},                  // already empty
		{ClearRange("", "b")},                   // from the first key
		{ClearRange("w", "\xff\xff")},           // to past the last key
		{Set("d", "back"), ClearRange("a", "")}, // empty end is not "no end"
	}
	for i, st := range steps {
		apply(t, e, kv.Version(i+2), st...)
		m.apply(st)
		checkModel(t, e, m)
	}
	checkGet(t, e, "c", "", false)
	checkGet(t, e, "cx", "", false)
	checkGet(t, e, "f", "f!", true)
	checkGet(t, e, "g", "g!", true)
	checkGet(t, e, "gx", "", false)
	checkGet(t, e, "d", "back", true)
}

func testBatchOrder(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, engine.Options{})
	e := h.e
	m := model{"k1": "old", "k2": "old", "k3": "old"}
	apply(t, e, 1, Set("k1", "old"), Set("k2", "old"), Set("k3", "old"))
	batches := [][]engine.Write{
		{Set("a", "1"), Set("a", "2"), Clear("a"), Set("a", "3")},
		{Set("b", "1"), Clear("b")},
		{Set("k15", "x"), ClearRange("k", "l"), Set("k2", "new")},
		{ClearRange("a", "c"), Set("a", "4"), Set("a", "5"), Set("b", "6")},
		{Set("z", "1"), Set("z", "22"), Set("z", "333")},
	}
	for i, b := range batches {
		apply(t, e, kv.Version(i+2), b...)
		m.apply(b)
		checkModel(t, e, m)
	}
	checkGet(t, e, "a", "5", true)
	checkGet(t, e, "k1", "", false)
	checkGet(t, e, "k15", "", false)
	checkGet(t, e, "k2", "new", true)
	checkGet(t, e, "z", "333", true)
}

func testScan(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, engine.Options{})
	e := h.e
	apply(t, e, 1, Set("a", "A"), Set("b", "B"), Set("ba", "BA"), Set("c", "C"), Set("d", "D"), Set("\xff", "FF"))
	checkScan(t, e, "", "", true, false, 0, "a", "b", "ba", "c", "d", "\xff")
	checkScan(t, e, "", "", true, true, 0, "\xff", "d", "c", "ba", "b", "a")
	checkScan(t, e, "b", "d", false, false, 0, "b", "ba", "c") // begin inclusive, end exclusive
	checkScan(t, e, "b", "d", false, true, 0, "c", "ba", "b")
	checkScan(t, e, "b\x00", "c\x00", false, false, 0, "ba", "c") // bounds between keys
	checkScan(t, e, "b\x00", "c\x00", false, true, 0, "c", "ba")
	checkScan(t, e, "c", "", true, false, 0, "c", "d", "\xff") // nil end
	checkScan(t, e, "c", "", true, true, 0, "\xff", "d", "c")
	checkScan(t, e, "", "", false, false, 0) // [ "", "" ) is empty
	checkScan(t, e, "c", "c", false, false, 0)
	checkScan(t, e, "c", "c", false, true, 0)
	checkScan(t, e, "d", "b", false, false, 0) // end before begin
	checkScan(t, e, "d", "b", false, true, 0)
	checkScan(t, e, "e", "", true, false, 0, "\xff")
	checkScan(t, e, "\xff\x00", "", true, false, 0)
	checkScan(t, e, "\xff\x00", "", true, true, 0)
	// Early stop.
	checkScan(t, e, "", "", true, false, 2, "a", "b")
	checkScan(t, e, "", "", true, true, 2, "\xff", "d")
	checkScan(t, e, "b", "z", false, false, 1, "b")
	checkScan(t, e, "b", "z", false, true, 1, "d")
	// nil begin means from the first key.
	got := keysOf(scan(t, e, nil, []byte("b"), false, 0))
	if fmt.Sprint(got) != "[a]" {
		t.Fatalf("Scan(nil, b) = %q; want [a]", got)
	}
	// Values are passed along with keys.
	for _, p := range scan(t, e, nil, nil, false, 0) {
		want := map[string]string{"a": "A", "b": "B", "ba": "BA", "c": "C", "d": "D", "\xff": "FF"}[string(p.Key)]
		if string(p.Value) != want {
			t.Fatalf("Scan value of %q = %q; want %q", p.Key, p.Value, want)
		}
	}
	// A larger scan, crossing whatever internal chunking an engine uses.
	var ws []engine.Write
	for i := 0; i < 1000; i++ {
		ws = append(ws, Set(fmt.Sprintf("n%04d", i), fmt.Sprint(i)))
	}
	apply(t, e, 2, ws...)
	checkScan(t, e, "n0998", "", true, false, 0, "n0998", "n0999", "\xff")
	fwd := keysOf(scan(t, e, []byte("n"), []byte("o"), false, 0))
	rev := keysOf(scan(t, e, []byte("n"), []byte("o"), true, 0))
	if len(fwd) != 1000 || len(rev) != 1000 {
		t.Fatalf("scan of 1000 keys returned %d forward, %d reverse", len(fwd), len(rev))
	}
	for i := range fwd {
		if fwd[i] != fmt.Sprintf("n%04d", i) || rev[999-i] != fwd[i] {
			t.Fatalf("scan of 1000 keys out of order at %d: %q / %q", i, fwd[i], rev[999-i])
		}
	}
}

func testScanCallsGet(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, engine.Options{})
	e := h.e
	var ws []engine.Write
	for i := 0; i < 300; i++ {
		ws = append(ws, Set(fmt.Sprintf("k%03d", i), fmt.Sprint(i)))
	}
	apply(t, e, 1, ws...)
	for _, reverse := range []bool{false, true} {
		n := 0
		err := e.Scan(nil, nil, reverse, func(k, v []byte) bool {
			got, ok, err := e.Get(k)
			if err != nil || !ok || !bytes.Equal(got, v) {
				t.Fatalf("Get(%q) inside Scan = %q, %v, %v; want %q", k, got, ok, err, v)
			}
			n++
			return true
		})
		if err != nil || n != 300 {
			t.Fatalf("Scan calling Get: %d pairs, %v", n, err)
		}
	}
}

func testVersion(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, engine.Options{})
	e := h.e
	for _, v := range []kv.Version{1, 2, 1000, 1001, 1 << 40, 1<<62 + 12345} {
		apply(t, e, v, Set("k", fmt.Sprint(v)))
		if got := e.Version(); got != v {
			t.Fatalf("Version after Apply(%d) = %d", v, got)
		}
	}
	// An empty batch still records its version.
	apply(t, e, 1<<62+20000)
	if got := e.Version(); got != 1<<62+20000 {
		t.Fatalf("Version after an empty batch = %d; want %d", got, kv.Version(1<<62+20000))
	}
	checkGet(t, e, "k", fmt.Sprint(kv.Version(1<<62+12345)), true)
}

func testStats(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, engine.Options{})
	e := h.e
	checkStats(t, e, 0, 0)
	apply(t, e, 1, Set("aa", "123"))
	checkStats(t, e, 1, 5)
	apply(t, e, 2, Set("aa", "1234567")) // grow
	checkStats(t, e, 1, 9)
	apply(t, e, 3, Set("aa", "")) // shrink to empty
	checkStats(t, e, 1, 2)
	apply(t, e, 4, Set("b", "x"), Set("c", "yy"), Set("b", "xxx"))
	checkStats(t, e, 3, 2+4+3)
	apply(t, e, 5, Clear("b"), Clear("b"), Clear("zz"))
	checkStats(t, e, 2, 2+3)
	apply(t, e, 6, Set("d", "1"), Set("e", "22"), Set("f", "333"), ClearRange("c", "f"))
	checkStats(t, e, 2, 2+4)
	apply(t, e, 7, ClearRange("", "\xff"), Set("q", "r"))
	checkStats(t, e, 1, 2)
	apply(t, e, 8, ClearRange("a", "z"))
	checkStats(t, e, 0, 0)
	if ev := e.Stats().Evictions; ev != 0 {
		t.Fatalf("Evictions = %d without a capacity", ev)
	}
}

func testNoAliasing(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, engine.Options{})
	e := h.e
	key := []byte("key")
	val := []byte("value")
	end := []byte("zzz")
	apply(t, e, 1, engine.Write{Key: key, Value: val})
	// The caller may reuse a batch's buffers once Apply returns.
	copy(key, "KEY")
	copy(val, "VALUE")
	checkGet(t, e, "key", "value", true)
	checkGet(t, e, "KEY", "", false)
	// The caller owns what Get returns.
	v, _, _ := e.Get([]byte("key"))
	copy(v, "XXXXX")
	checkGet(t, e, "key", "value", true)
	k2 := []byte("a")
	apply(t, e, 2, engine.Write{Key: k2, End: end})
	copy(end, "\x00\x00\x00")
	checkGet(t, e, "key", "", false)
}

func testLargePairs(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, engine.Options{})
	e := h.e
	rng := rand.New(rand.NewSource(1))
	m := model{}
	for i := 0; i < 8; i++ {
		k := make([]byte, kv.MaxKeyBytes)
		rng.Read(k)
		v := make([]byte, kv.MaxValueBytes)
		rng.Read(v)
		w := engine.Write{Key: k, Value: v}
		apply(t, e, kv.Version(i+1), w)
		m.apply([]engine.Write{w})
	}
	checkModel(t, e, m)
	for k, v := range m {
		checkGet(t, e, k, v, true)
	}
}

// testAtomicity applies batches that rewrite or clear a whole group of
// keys while readers scan: every scan must see one batch entirely.
func testAtomicity(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, engine.Options{})
	e := h.e
	const group = 50
	batches := 100
	if testing.Short() {
		batches = 40
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(reverse bool) {
			defer wg.Done()
			last := -1
			for !done.Load() {
				var vals []string
				err := e.Scan([]byte("g/"), []byte("g0"), reverse, func(k, v []byte) bool {
					vals = append(vals, string(v))
					return true
				})
				if err != nil {
					errc <- err
					return
				}
				if len(vals) != 0 && len(vals) != group {
					errc <- fmt.Errorf("scan saw %d of a %d-key batch", len(vals), group)
					return
				}
				for _, v := range vals {
					if v != vals[0] {
						errc <- fmt.Errorf("scan saw values of two batches: %q and %q", vals[0], v)
						return
					}
				}
				if len(vals) > 0 {
					var n int
					fmt.Sscan(vals[0], &n)
					if n < last {
						errc <- fmt.Errorf("scan went back from batch %d to %d", last, n)
						return
					}
					last = n
				}
			}
		}(r == 1)
	}
	for i := 1; i <= batches; i++ {
		ws := []engine.Write{ClearRange("g/", "g0")}
		if i%4 != 0 {
			for j := 0; j < group; j++ {
				ws = append(ws, Set(fmt.Sprintf("g/%02d", j), fmt.Sprint(i)))
			}
		}
		apply(t, e, kv.Version(i), ws...)
	}
	done.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// testConcurrentReaders runs Get, Scan, Stats and Version against a writer;
// its value is under the race detector.
func testConcurrentReaders(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, engine.Options{})
	e := h.e
	batches := 150
	if testing.Short() {
		batches = 50
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(r)))
			lastVersion := kv.Version(0)
			for !done.Load() {
				k := fmt.Sprintf("c%03d", rng.Intn(100))
				v, ok, err := e.Get([]byte(k))
				if err != nil {
					errc <- err
					return
				}
				if ok && !bytes.HasPrefix(v, []byte(k+"=")) {
					errc <- fmt.Errorf("Get(%q) = %q", k, v)
					return
				}
				err = e.Scan([]byte(k), nil, r%2 == 1, func(key, val []byte) bool {
					if !bytes.HasPrefix(val, append(bytes.Clone(key), '=')) {
						errc <- fmt.Errorf("Scan pair %q=%q", key, val)
					}
					return rng.Intn(20) != 0
				})
				if err != nil {
					errc <- err
					return
				}
				if s := e.Stats(); s.Keys < 0 || s.Bytes < 0 {
					errc <- fmt.Errorf("Stats = %+v", s)
					return
				}
				ver := e.Version()
				if ver < lastVersion {
					errc <- fmt.Errorf("Version went back from %d to %d", lastVersion, ver)
					return
				}
				lastVersion = ver
			}
		}(r)
	}
	rng := rand.New(rand.NewSource(99))
	for i := 1; i <= batches; i++ {
		var ws []engine.Write
		for j := 0; j < 1+rng.Intn(10); j++ {
			k := fmt.Sprintf("c%03d", rng.Intn(100))
			switch rng.Intn(10) {
			case 0:
				ws = append(ws, Clear(k))
			case 1:
				ws = append(ws, ClearRange(k, fmt.Sprintf("c%03d", rng.Intn(100))))
			default:
				ws = append(ws, Set(k, fmt.Sprintf("%s=%d", k, i)))
			}
		}
		apply(t, e, kv.Version(i), ws...)
	}
	done.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// BigValueBytes is the size of the large values of the restart tests: the
// values of issue 8, after which a reopened flash engine served reads of
// its write buffer from the wrong place (once an active segment holds more
// than one 64 KiB buffer chunk).
const BigValueBytes = 99 << 10

// BigValue returns value gen of key i, BigValueBytes of bytes that all
// depend on i and gen, so that bytes read from the wrong place or the wrong
// version never pass for the right ones.
func BigValue(i, gen int) string {
	return string(randomBytes(rand.New(rand.NewSource(int64(i)<<20|int64(gen))), BigValueBytes))
}

// randomBytes returns n random bytes drawn from rng a word at a time:
// rand.Rand.Read draws them one by one, which under the race detector made
// the generation of large values cost more than writing them.
func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n+7)
	for j := 0; j < n; j += 8 {
		binary.LittleEndian.PutUint64(b[j:], rng.Uint64())
	}
	return b[:n:n]
}

// randomBatch returns a batch of random writes over a small key space so
// that overwrites, clears of present keys and overlapping ranges are common.
// With big, about one set in 40 has a value of around BigValueBytes.
func randomBatch(rng *rand.Rand, keySpace int, big bool) []engine.Write {
	key := func() string {
		k := fmt.Sprintf("%03d", rng.Intn(keySpace))
		switch rng.Intn(20) {
		case 0:
			return "\xff" + k
		case 1:
			return k + "\x00"
		}
		return k
	}
	n := 1 + rng.Intn(8)
	ws := make([]engine.Write, 0, n)
	for i := 0; i < n; i++ {
		switch r := rng.Intn(100); {
		case r < 65:
			v := make([]byte, rng.Intn(64))
			for j := range v {
				v[j] = byte('a' + rng.Intn(26))
			}
			switch {
			case big && rng.Intn(40) == 0:
				v = randomBytes(rng, BigValueBytes-8<<10+rng.Intn(16<<10))
			case rng.Intn(30) == 0:
				v = randomBytes(rng, 4000+rng.Intn(4000))
			}
			ws = append(ws, engine.Write{Key: []byte(key()), Value: v, Cost: uint32(rng.Intn(100))})
		case r < 85:
			ws = append(ws, Clear(key()))
		default:
			a, b := key(), key()
			if rng.Intn(4) != 0 && a > b {
				a, b = b, a
			}
			ws = append(ws, ClearRange(a, b))
		}
	}
	return ws
}

// testRandomized compares the engine with a map model after each random
// batch; with a restarter it also restarts the engine now and then (and
// after the last batch), and writes large values too.
func testRandomized(t *testing.T, open OpenFunc, r *restarter) {
	h := newHarness(t, open, engine.Options{})
	steps := 300
	if r != nil {
		steps = 150
	}
	if testing.Short() {
		steps /= 3
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	m := model{}
	for i := 1; i <= steps; i++ {
		ws := randomBatch(rng, 200, r != nil)
		apply(t, h.e, kv.Version(i), ws...)
		m.apply(ws)
		if r != nil && (rng.Intn(25) == 0 || i == steps) {
			h.restart(*r, m, kv.Version(i))
		}
		checkModel(t, h.e, m)
		for j := 0; j < 5; j++ {
			k := fmt.Sprintf("%03d", rng.Intn(200))
			v, ok := m[k]
			checkGet(t, h.e, k, v, ok)
		}
		// A random bounded scan in a random direction.
		a, b := fmt.Sprintf("%03d", rng.Intn(200)), fmt.Sprintf("%03d", rng.Intn(200))
		reverse := rng.Intn(2) == 0
		var want []string
		for _, k := range m.sorted() {
			if k >= a && k < b {
				want = append(want, k)
			}
		}
		if reverse {
			for l, r := 0, len(want)-1; l < r; l, r = l+1, r-1 {
				want[l], want[r] = want[r], want[l]
			}
		}
		got := keysOf(scan(t, h.e, []byte(a), []byte(b), reverse, 0))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d: Scan(%q, %q, reverse=%v) = %q; want %q", i, a, b, reverse, got, want)
		}
	}
}

// testDurability checks that a durable engine restarted with r (a reopen
// or a crash) holds exactly what it held, including after writes that
// follow an earlier restart.
func testDurability(t *testing.T, open OpenFunc, r restarter) {
	h := newHarness(t, open, engine.Options{})
	m := model{}
	// A new engine restarted empty.
	h.restart(r, m, 0)
	step := func(v kv.Version, ws ...engine.Write) {
		t.Helper()
		apply(t, h.e, v, ws...)
		m.apply(ws)
	}
	step(10, Set("a", "1"), Set("b", "2"), Set("c", "3"), Set("\xff", "sys"), engine.Write{Key: []byte{}, Value: []byte{}})
	step(11, Set("b", "22"), Clear("c"))
	h.restart(r, m, 11)
	checkGet(t, h.e, "", "", true)
	var ws []engine.Write
	for i := 0; i < 500; i++ {
		ws = append(ws, Set(fmt.Sprintf("r%03d", i), fmt.Sprint(i)))
	}
	step(12, ws...)
	step(13, ClearRange("r100", "r400"), Set("r200", "back"))
	step(14) // an empty batch moves the version
	h.restart(r, m, 14)
	// Writes after a restart keep the counters exact.
	step(15, Set("r200", "again"), Clear("a"), ClearRange("r000", "r050"))
	checkModel(t, h.e, m)
	h.restart(r, m, 15)
	h.restart(r, m, 15) // restart without writes in between

	// Issue 8: large values, one batch each, restart, more of them and
	// overwrites of both, all read back before and after the next restart.
	// (The flash engine went wrong once its active segment held more than
	// one 64 KiB write buffer chunk at a reopen: a few values suffice.)
	v := kv.Version(15)
	bigs := func(from, to, gen int) {
		t.Helper()
		for i := from; i < to; i++ {
			v++
			step(v, Set(fmt.Sprintf("big%02d", i), BigValue(i, gen)))
		}
	}
	bigs(0, 8, 1)
	h.restart(r, m, v)
	bigs(8, 16, 1)
	bigs(2, 4, 2)
	bigs(10, 12, 2)
	checkModel(t, h.e, m)
	checkGets(t, h.e, m)
	h.restart(r, m, v)
	bigs(4, 10, 3)
	h.restart(r, m, v)
}

// RunClosed checks that a closed engine answers Get, Apply and Scan with
// errClosed and that a second Close returns nil. e must be open.
func RunClosed(t *testing.T, e engine.Engine, errClosed error) {
	t.Helper()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Get([]byte("k")); err != errClosed {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := e.Apply(&engine.Batch{}); err != errClosed {
		t.Fatalf("Apply after Close: %v", err)
	}
	if err := e.Scan(nil, nil, false, func(k, v []byte) bool { return true }); err != errClosed {
		t.Fatalf("Scan after Close: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
