package flash

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"github.com/distash/distash/internal/fsys"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/kv"
)

// Fuzz targets for the code that reads bytes from disk. Plain `go test`
// replays their seed corpora in testdata/fuzz (written by TestFuzzSeeds);
// to search, one target at a time:
//
//	go test -run '^$' -fuzz '^FuzzDecodeSegment$' -fuzztime 10m -parallel 1 ./internal/engine/flash
//
// (likewise FuzzParseEntry and FuzzRecover). Arbitrary bytes must never
// panic: damage is a *CorruptionError naming the file and an offset in it.

var updateFuzzSeeds = flag.Bool("update-fuzz-seeds", false, "rewrite testdata/fuzz from what the engine writes now")

// reseal returns a copy of data with the checksums of its segment header,
// frame headers, payloads and entries recomputed wherever their lengths lie
// within data. Random bytes almost never match a CRC32C, so without it the
// fuzzer would rarely get past the checksums to the code behind them: a
// frame's entry count, entry lengths and kinds, sequence numbers.
func reseal(data []byte) []byte {
	data = bytes.Clone(data)
	if len(data) < segHeaderSize {
		return data
	}
	binary.LittleEndian.PutUint32(data[28:], crc(data[:28]))
	for off := segHeaderSize; off+frameHeaderSize <= len(data); {
		if binary.LittleEndian.Uint32(data[off:]) != frameMagic {
			break
		}
		start := off + frameHeaderSize
		end := start + int(binary.LittleEndian.Uint32(data[off+8:]))
		if (end-start)%8 != 0 || end > len(data) {
			break
		}
		for p := start; p+entryHeaderSize <= end; {
			n := entrySize(int(binary.LittleEndian.Uint16(data[p+6:])), int(binary.LittleEndian.Uint32(data[p+8:])))
			if n > end-p {
				break
			}
			binary.LittleEndian.PutUint32(data[p:], crc(data[p+4:p+n]))
			p += pad8(n)
		}
		binary.LittleEndian.PutUint32(data[off+12:], crc(data[start:end]))
		binary.LittleEndian.PutUint32(data[off+4:], crc(data[off+8:start]))
		off = end
	}
	return data
}

// unmanaged clears the flag of a valid segment header that says the
// segment is listed in a manifest.
func unmanaged(data []byte) []byte {
	if len(data) < segHeaderSize || binary.LittleEndian.Uint32(data[28:]) != crc(data[:28]) {
		return data
	}
	data = bytes.Clone(data)
	binary.LittleEndian.PutUint32(data[12:], 0)
	binary.LittleEndian.PutUint32(data[28:], crc(data[:28]))
	return data
}

// segmentID is the id data's header names, or 1 when it has no valid header.
func segmentID(data []byte) uint32 {
	if id, err := checkSegHeader("", data); err == nil {
		return id
	}
	return 1
}

// FuzzDecodeSegment decodes arbitrary bytes (resealed or not) as a segment
// file, the last of the log or a sealed one, and checks what recovery
// relies on: a torn tail only in the last segment; the file cut where
// recovery truncates it decodes to the same entries with nothing torn; and
// every entry recovery would index verifies, at its location, as a point
// read checks it.
func FuzzDecodeSegment(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, last, resealed bool) {
		if resealed {
			data = reseal(data)
		}
		id := segmentID(data)
		path := segName(id)
		type rec struct {
			off, size int
			kind      uint8
			key, val  string
			cost      uint32
		}
		decode := func(data []byte) ([]rec, int, error) {
			var recs []rec
			n, err := decodeSegment(path, id, data, last, 1, func(_ int, _ frameHeader, ents []decodedEntry) {
				for _, d := range ents {
					recs = append(recs, rec{d.off, d.size, d.kind, string(d.key), string(d.value), d.cost})
				}
			})
			return recs, n, err
		}
		recs, valid, err := decode(data)
		if err != nil {
			var ce *CorruptionError
			if !errors.As(err, &ce) || ce.File != path || ce.Offset < 0 || ce.Offset > int64(len(data)) {
				t.Fatalf("error %v: want a *CorruptionError naming %s at an offset within its %d bytes", err, path, len(data))
			}
			return
		}
		if valid < segHeaderSize || valid > len(data) || (!last && valid != len(data)) {
			t.Fatalf("valid length %d of %d bytes (last segment: %v)", valid, len(data), last)
		}
		again, n, err := decode(data[:valid])
		if err != nil || n != valid || !reflect.DeepEqual(again, recs) {
			t.Fatalf("after cutting the torn tail at %d: %d valid bytes, %v, same entries: %v", valid, n, err, reflect.DeepEqual(again, recs))
		}
		for _, r := range recs {
			if r.kind != kindSet {
				continue
			}
			ent, err := checkEntry(path, loc{seg: id, off: uint32(r.off), n: uint32(r.size)}, data[r.off:r.off+r.size], false)
			if err != nil || string(ent.key) != r.key || string(ent.value) != r.val || ent.cost != r.cost {
				t.Fatalf("entry at %d does not read back: %v", r.off, err)
			}
		}
	})
}

// FuzzParseEntry decodes arbitrary bytes as an entry, with and without its
// checksum checked: a decoded entry lies within the bytes, and encoding it
// again gives an entry that decodes to the same, checksum included.
func FuzzParseEntry(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, check := range []bool{false, true} {
			ent, bad := parseEntry(b, check)
			if bad != "" {
				continue
			}
			if ent.size > len(b) || ent.size != entrySize(len(ent.key), len(ent.value)) {
				t.Fatalf("entry of %d bytes (key %d, value %d) decoded from %d bytes", ent.size, len(ent.key), len(ent.value), len(b))
			}
			enc := appendEntry(nil, ent.kind, ent.key, ent.value, ent.cost)
			back, bad := parseEntry(enc, true)
			if bad != "" || back.kind != ent.kind || back.cost != ent.cost || back.size != ent.size ||
				!bytes.Equal(back.key, ent.key) || !bytes.Equal(back.value, ent.value) {
				t.Fatalf("re-encoded entry decodes to %+v, %q; want %+v", back, bad, ent)
			}
		}
	})
}

// FuzzRecover opens an engine on one or two arbitrary segment files
// (resealed or not, named by the ids their headers give): Open fails with
// a *CorruptionError, or everything it recovered reads back by Scan and Get
// and is counted by Stats, cleaning and writing work, and a reopen
// recovers the same.
func FuzzRecover(f *testing.F) {
	f.Fuzz(func(t *testing.T, seg1, seg2 []byte, resealed bool) {
		if resealed {
			seg1, seg2 = reseal(seg1), reseal(seg2)
		}
		// Files without a manifest: recovery as of a directory written
		// before manifests (segments not flagged as listed in one).
		seg1, seg2 = unmanaged(seg1), unmanaged(seg2)
		dir := t.TempDir()
		for i, seg := range [][]byte{seg1, seg2} {
			if i == 0 || len(seg) > 0 {
				id := segmentID(seg)
				if i == 1 && id == segmentID(seg1) {
					id++
				}
				if err := os.WriteFile(filepath.Join(dir, segName(id)), seg, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		cfg := Config{NoBackgroundGC: true, SegmentBytes: 64 << 10, WriteBufferBytes: 64 << 10, CacheBytes: 64 << 10}
		e, err := OpenConfig(engine.Options{Dir: dir}, cfg)
		if err != nil {
			var ce *CorruptionError
			if !errors.As(err, &ce) && !errors.Is(err, fsys.ErrDamaged) {
				t.Fatalf("Open: %v; want a *CorruptionError or a *fsys.DamageError", err)
			}
			return
		}
		want := readAll(t, e)
		if err := e.CollectGarbage(); err != nil {
			t.Fatalf("CollectGarbage: %v", err)
		}
		if err := e.Apply(&engine.Batch{Version: e.Version() + 1, Writes: []engine.Write{
			{Key: []byte("fuzz/new"), Value: []byte("value")},
		}}); err != nil {
			t.Fatalf("Apply after recovery: %v", err)
		}
		want["fuzz/new"] = "value"
		if got := readAll(t, e); !reflect.DeepEqual(got, want) {
			t.Fatalf("after cleaning and a write: %d pairs, want %d", len(got), len(want))
		}
		e.Close()
		e, err = OpenConfig(engine.Options{Dir: dir}, cfg)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer e.Close()
		if got := readAll(t, e); !reflect.DeepEqual(got, want) {
			t.Fatalf("after reopen: %d pairs, want %d", len(got), len(want))
		}
	})
}

// readAll returns e's content by Scan, checking it against Get and Stats.
func readAll(t *testing.T, e *Engine) map[string]string {
	t.Helper()
	m := map[string]string{}
	var size int64
	if err := e.Scan(nil, nil, false, func(k, v []byte) bool {
		m[string(k)] = string(v)
		size += int64(len(k) + len(v))
		return true
	}); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	for k, v := range m {
		if got, ok, err := e.Get([]byte(k)); err != nil || !ok || string(got) != v {
			t.Fatalf("Get(%q) = %q, %v, %v; Scan gave %q", k, got, ok, err, v)
		}
	}
	if s := e.Stats(); s.Keys != int64(len(m)) || s.Bytes != size {
		t.Fatalf("Stats = %+v; Scan gave %d keys, %d bytes", s, len(m), size)
	}
	return m
}

// TestFuzzSeeds builds the seed corpora of the fuzz targets from segments
// an engine writes now and fails if testdata/fuzz differs: the on-disk
// format changed, and segments written before must still be readable.
// After an intended change, rewrite them:
//
//	go test -run '^TestFuzzSeeds$' ./internal/engine/flash -update-fuzz-seeds
func TestFuzzSeeds(t *testing.T) {
	// An engine with small segments: sets with costs, clears, a clear
	// range, an empty batch, and rotation to a second segment.
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 2 << 10, NoBackgroundGC: true}
	e, err := OpenConfig(engine.Options{Dir: dir}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := 0
	apply := func(ws ...engine.Write) {
		v++
		if err := e.Apply(&engine.Batch{Version: kv.Version(v), Writes: ws}); err != nil {
			t.Fatal(err)
		}
	}
	set := func(k string, n int, cost uint32) engine.Write {
		return engine.Write{Key: []byte(k), Value: bytes.Repeat([]byte{k[len(k)-1]}, n), Cost: cost}
	}
	apply(set("a", 10, 0), set("b", 20, 7), set("c", 30, 0), engine.Write{Key: []byte{}, Value: []byte{}})
	apply(engine.Write{Key: []byte("a")})
	apply(engine.Write{Key: []byte("b"), End: []byte("c")}, set("d", 40, 1))
	apply()
	for i := 0; e.Metrics().Segments < 2; i++ {
		apply(set(fmt.Sprintf("k%d", i%5), 200, uint32(i)))
	}
	apply(engine.Write{Key: []byte("c")}) // a tombstone for a key of segment 1
	apply(set("e", 50, 0))
	two := segmentFiles(t, dir)
	// Overwrites until segment 1 is garbage, then cleaning: relocation frames.
	for i := 0; e.Metrics().Segments < 5; i++ {
		apply(set(fmt.Sprintf("k%d", i%5), 300, 0))
	}
	if err := e.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	e.Close()
	cleaned := segmentFiles(t, dir)
	if len(cleaned) < 2 || segmentID(cleaned[0]) == 1 {
		t.Fatalf("cleaning left %d segments", len(cleaned))
	}
	relocated := cleaned[len(cleaned)-2:]
	gc := 0
	decodeSegment("", segmentID(relocated[1]), relocated[1], true, 0, func(_ int, h frameHeader, _ []decodedEntry) {
		if h.flags&frameGC != 0 {
			gc++
		}
	})
	seg1, seg2 := two[0], two[1]
	offs := frameOffsets(t, "seg2", seg2)
	if len(two) != 2 || len(offs) < 3 || gc == 0 {
		t.Fatalf("%d segments, %d frames in the second, %d relocation frames in the last: the seeds would not be what they say", len(two), len(offs), gc)
	}
	lastFrame := offs[len(offs)-1]
	corrupt := bytes.Clone(seg2)
	corrupt[offs[1]+frameHeaderSize+20] ^= 0xff
	badMagic := bytes.Clone(seg1)
	copy(badMagic, "NOTFLASH")

	// write checks (or rewrites) one seed file, in Go's corpus format.
	write := func(target, name string, vals ...any) {
		var b strings.Builder
		b.WriteString("go test fuzz v1\n")
		for _, v := range vals {
			switch v := v.(type) {
			case []byte:
				fmt.Fprintf(&b, "[]byte(%q)\n", v)
			case bool:
				fmt.Fprintf(&b, "bool(%v)\n", v)
			}
		}
		path := filepath.Join("testdata", "fuzz", target, name)
		if *updateFuzzSeeds {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		if old, err := os.ReadFile(path); err != nil || string(old) != b.String() {
			t.Errorf("%s differs from what the engine writes now (%v): the segment format changed; "+
				"after an intended change, rerun with -update-fuzz-seeds", path, err)
		}
	}
	// Damage behind valid checksums (the targets reseal these), in a
	// middle frame: a count of one entry too many, an entry of an unknown
	// kind, a sequence number going back.
	countHigh := bytes.Clone(seg2)
	binary.LittleEndian.PutUint32(countHigh[offs[1]+32:], binary.LittleEndian.Uint32(countHigh[offs[1]+32:])+1)
	badKind := bytes.Clone(seg2)
	badKind[offs[1]+frameHeaderSize+4] = 9
	lsnBack := bytes.Clone(seg2)
	binary.LittleEndian.PutUint64(lsnBack[offs[1]+16:], 1)
	for reason, data := range map[string][]byte{"past the end": countHigh, "unknown entry kind": badKind, "out of order": lsnBack} {
		_, err := decodeSegment("seg2", 2, reseal(data), true, 0, func(int, frameHeader, []decodedEntry) {})
		if err == nil || !strings.Contains(err.Error(), reason) {
			t.Fatalf("resealed seed decodes with %v; want %q", err, reason)
		}
	}

	write("FuzzDecodeSegment", "sealed", seg1, false, false)
	write("FuzzDecodeSegment", "last", seg2, true, false)
	write("FuzzDecodeSegment", "relocated", relocated[1], true, false)
	write("FuzzDecodeSegment", "torn-payload", seg2[:lastFrame+frameHeaderSize+9], true, false)
	write("FuzzDecodeSegment", "torn-header", seg2[:lastFrame+13], true, false)
	write("FuzzDecodeSegment", "torn-sealed", seg2[:lastFrame+frameHeaderSize+9], false, false)
	write("FuzzDecodeSegment", "corrupt-middle-frame", corrupt, true, false)
	write("FuzzDecodeSegment", "header-only", encodeSegHeader(1), true, false)
	write("FuzzDecodeSegment", "truncated-header", seg1[:10], true, false)
	write("FuzzDecodeSegment", "bad-magic", badMagic, true, false)
	write("FuzzDecodeSegment", "resealed-count-high", countHigh, true, true)
	write("FuzzDecodeSegment", "resealed-bad-kind", badKind, true, true)
	write("FuzzDecodeSegment", "resealed-lsn-back", lsnBack, true, true)

	write("FuzzRecover", "two-segments", seg1, seg2, false)
	write("FuzzRecover", "one-segment", seg1, []byte{}, false)
	write("FuzzRecover", "relocated", relocated[0], relocated[1], false)
	write("FuzzRecover", "torn-tail", seg1, seg2[:lastFrame+frameHeaderSize+9], false)
	write("FuzzRecover", "corrupt-sealed", corrupt, seg2, false)
	write("FuzzRecover", "resealed-count-high", seg1, countHigh, true)

	first := seg1[segHeaderSize+frameHeaderSize:]
	ent, _ := parseEntry(first, true)
	write("FuzzParseEntry", "set", first[:pad8(ent.size)])
	write("FuzzParseEntry", "delete", appendEntry(nil, kindDelete, []byte("gone"), nil, 0))
	write("FuzzParseEntry", "empty", appendEntry(nil, kindSet, nil, nil, 0))
	write("FuzzParseEntry", "truncated", first[:ent.size-1])
	huge := appendEntry(nil, kindSet, []byte("k"), []byte("v"), 0)
	copy(huge[8:], []byte{0xff, 0xff, 0xff, 0x7f}) // a value length past the data
	write("FuzzParseEntry", "huge-length", huge)
}

// segmentFiles returns the contents of dir's segment files in id order.
func segmentFiles(t *testing.T, dir string) [][]byte {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	sort.Strings(names)
	var out [][]byte
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}
