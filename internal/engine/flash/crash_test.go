package flash

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/distash/distash/internal/fsys"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/testutil/subprocess"
)

const (
	crashWriters = 4
	crashKeys    = 40
)

// crashBatch is batch n (n >= 1) of writer w: it records n and rewrites and
// clears keys of the writer's own key space, so the whole content of the
// space is a function of the last batch applied.
func crashBatch(w, n int) []engine.Write {
	p := fmt.Sprintf("w%d/", w)
	ws := []engine.Write{
		{Key: []byte(p + "last"), Value: []byte(strconv.Itoa(n))},
		{Key: []byte(fmt.Sprintf("%sk%02d", p, n%crashKeys)), Value: []byte(fmt.Sprintf("%d:%s", n, strings.Repeat("x", n%300)))},
		{Key: []byte(fmt.Sprintf("%sk%02d", p, (n+crashKeys/2)%crashKeys))},
	}
	if n%17 == 0 {
		ws = append(ws, engine.Write{Key: []byte(p + "k05"), End: []byte(p + "k12")})
	}
	return ws
}

// crashModel is writer w's space after batches 1..n.
func crashModel(w, n int) map[string]string {
	m := map[string]string{}
	for i := 1; i <= n; i++ {
		for _, wr := range crashBatch(w, i) {
			switch {
			case wr.IsClearRange():
				for k := range m {
					if k >= string(wr.Key) && k < string(wr.End) {
						delete(m, k)
					}
				}
			case wr.IsClear():
				delete(m, string(wr.Key))
			default:
				m[string(wr.Key)] = string(wr.Value)
			}
		}
	}
	return m
}

func crashConfig() Config {
	return Config{SegmentBytes: 32 << 10, WriteBufferBytes: 64 << 10, CacheBytes: 16 << 10}
}

// TestCrashChild is the process TestCrashKill kills: it applies batches
// from several goroutines and prints a line for each acknowledged one.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("FLASH_CRASH_DIR")
	if dir == "" {
		t.Skip("run by TestCrashKill")
	}
	e, err := OpenConfig(engine.Options{Dir: dir}, crashConfig())
	if err != nil {
		fmt.Println("open error:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	version := int64(e.Version())
	var wg sync.WaitGroup
	for w := 0; w < crashWriters; w++ {
		next := 1
		if v, ok, _ := e.Get([]byte(fmt.Sprintf("w%d/last", w))); ok {
			next, _ = strconv.Atoi(string(v))
			next++
		}
		wg.Add(1)
		go func(w, n int) {
			defer wg.Done()
			for ; ; n++ {
				mu.Lock()
				version++
				v := version
				mu.Unlock()
				if err := e.Apply(&engine.Batch{Version: kv.Version(v), Writes: crashBatch(w, n)}); err != nil {
					fmt.Println("apply error:", err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Printf("ack %d %d\n", w, n)
				mu.Unlock()
			}
		}(w, next)
	}
	wg.Wait()
}

// TestCrashKill kills a writing process with SIGKILL several times and
// checks after each restart that every acknowledged batch is there and
// that each writer's space is exactly the result of a prefix of its batches.
func TestCrashKill(t *testing.T) {
	if os.Getenv("FLASH_CRASH_DIR") != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	acked := make([]int, crashWriters)
	rounds := 4
	if testing.Short() {
		rounds = 2
	}
	for round := 0; round < rounds; round++ {
		p := subprocess.Start(t, subprocess.Command("TestCrashChild", "FLASH_CRASH_DIR="+dir))
		// The kill comes a random 150-450 ms after the child's first
		// acknowledgement, not after its start: on a loaded machine a
		// child built with -race can take longer than that to open the
		// engine, and would be killed having written nothing.
		deadline := time.Now().Add(time.Minute)
		seen := 0
		record := func(l string) {
			var w, n int
			if _, err := fmt.Sscanf(l, "ack %d %d", &w, &n); err == nil {
				if n > acked[w] {
					acked[w] = n
				}
				if seen == 0 {
					deadline = time.Now().Add(time.Duration(150+rng.Intn(300)) * time.Millisecond)
				}
				seen++
				return
			}
			if strings.Contains(l, "error") {
				t.Fatalf("child: %s", l)
			}
		}
		for {
			l, err := p.Next(time.Until(deadline))
			if err != nil { // the kill is due, or the child exited
				break
			}
			record(l)
		}
		// Acknowledgements written before the child died count too.
		for _, l := range p.Kill() {
			record(l)
		}
		if seen == 0 {
			t.Fatalf("round %d: the child acknowledged nothing", round)
		}

		e, err := OpenConfig(engine.Options{Dir: dir}, crashConfig())
		if err != nil {
			t.Fatalf("round %d: reopen after kill: %v", round, err)
		}
		for w := 0; w < crashWriters; w++ {
			v, ok, err := e.Get([]byte(fmt.Sprintf("w%d/last", w)))
			if err != nil || !ok {
				t.Fatalf("round %d: writer %d: last = %q, %v, %v", round, w, v, ok, err)
			}
			n, _ := strconv.Atoi(string(v))
			if n < acked[w] {
				t.Fatalf("round %d: writer %d acknowledged batch %d but only %d survived", round, w, acked[w], n)
			}
			want := crashModel(w, n)
			got := map[string]string{}
			p := fmt.Sprintf("w%d/", w)
			if err := e.Scan([]byte(p), []byte(fmt.Sprintf("w%d0", w)), false, func(k, v []byte) bool {
				got[string(k)] = string(v)
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(want)) {
				t.Fatalf("round %d: writer %d space is not batches 1..%d:\n got %v\nwant %v", round, w, n, sorted(got), sorted(want))
			}
			for k, v := range want {
				if g, ok, err := e.Get([]byte(k)); err != nil || !ok || string(g) != v {
					t.Fatalf("round %d: Get(%q) = %q, %v, %v; want %q", round, k, g, ok, err, v)
				}
			}
			acked[w] = n
		}
		t.Logf("round %d: %d acks, writers at %v, %+v", round, seen, acked, e.Metrics())
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func sorted(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// lastSegment returns the path of the highest segment in dir and the
// offsets of its frames.
func lastSegment(t *testing.T, dir string) (string, []int) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	sort.Strings(names)
	path := names[len(names)-1]
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, frameOffsets(t, path, data)
}

// frameOffsets returns the offsets of the frames of data, the content of
// the valid segment file path.
func frameOffsets(t *testing.T, path string, data []byte) []int {
	t.Helper()
	id, err := checkSegHeader(path, data)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int
	if _, err := decodeSegment(path, id, data, false, 0, func(off int, _ frameHeader, _ []decodedEntry) {
		offs = append(offs, off)
	}); err != nil {
		t.Fatal(err)
	}
	return offs
}

// writeBatches applies n single-key batches (versions 1..n) and closes.
func writeBatches(t *testing.T, dir string, n int) {
	t.Helper()
	e, err := OpenConfig(engine.Options{Dir: dir}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if err := e.Apply(&engine.Batch{Version: kv.Version(i), Writes: []engine.Write{
			{Key: []byte(fmt.Sprintf("k%03d", i)), Value: []byte(strings.Repeat("v", 50+i))},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

func checkPrefix(t *testing.T, dir string, n int) *Engine {
	t.Helper()
	e, err := OpenConfig(engine.Options{Dir: dir}, Config{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if v := e.Version(); v != kv.Version(n) {
		t.Fatalf("Version = %d; want %d", v, n)
	}
	if s := e.Stats(); s.Keys != int64(n) {
		t.Fatalf("Stats = %+v; want %d keys", s, n)
	}
	for i := 1; i <= n+1; i++ {
		v, ok, err := e.Get([]byte(fmt.Sprintf("k%03d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if ok != (i <= n) || (ok && string(v) != strings.Repeat("v", 50+i)) {
			t.Fatalf("Get(k%03d) = %d bytes, %v; want present=%v", i, len(v), ok, i <= n)
		}
	}
	return e
}

// TestTornTail damages the last frame the ways a power cut can and checks
// that recovery drops exactly that frame, and that the engine then keeps
// working.
func TestTornTail(t *testing.T) {
	damages := map[string]func(path string, data []byte, last int) []byte{
		"truncated-payload": func(_ string, data []byte, last int) []byte { return data[:last+frameHeaderSize+9] },
		"truncated-header":  func(_ string, data []byte, last int) []byte { return data[:last+13] },
		"zeroed": func(_ string, data []byte, last int) []byte {
			for i := last + frameHeaderSize; i < len(data); i++ {
				data[i] = 0
			}
			return data
		},
		"garbage-header": func(_ string, data []byte, last int) []byte {
			copy(data[last:], "this is not a frame header at all!!")
			return data
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeBatches(t, dir, 20)
			path, offs := lastSegment(t, dir)
			data, _ := os.ReadFile(path)
			data = damage(path, data, offs[len(offs)-1])
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			e := checkPrefix(t, dir, 19)
			if e.Metrics().TornTailBytes == 0 {
				t.Fatal("no torn tail reported")
			}
			// Writes continue after the dropped tail and survive a reopen.
			if err := e.Apply(&engine.Batch{Version: 20, Writes: []engine.Write{{Key: []byte("k020"), Value: []byte(strings.Repeat("v", 70))}}}); err != nil {
				t.Fatal(err)
			}
			e.Close()
			checkPrefix(t, dir, 20).Close()
		})
	}
}

func wantCorruption(t *testing.T, err error, file string, off int64) {
	t.Helper()
	var ce *CorruptionError
	if !errors.As(err, &ce) {
		t.Fatalf("error = %v; want a *CorruptionError", err)
	}
	if filepath.Base(ce.File) != filepath.Base(file) || (off >= 0 && ce.Offset != off) {
		t.Fatalf("error names %s at %d; want %s at %d (%v)", ce.File, ce.Offset, file, off, err)
	}
	if !strings.Contains(err.Error(), filepath.Base(file)) || !strings.Contains(err.Error(), fmt.Sprint(ce.Offset)) {
		t.Fatalf("message %q does not name the file and offset", err)
	}
}

// wantDamage checks that err is a *fsys.DamageError naming file.
func wantDamage(t *testing.T, err error, file string) {
	t.Helper()
	var de *fsys.DamageError
	if !errors.As(err, &de) || !errors.Is(err, fsys.ErrDamaged) {
		t.Fatalf("error = %v; want a *fsys.DamageError", err)
	}
	if file != "" && (filepath.Base(de.Path) != filepath.Base(file) || !strings.Contains(err.Error(), filepath.Base(file))) {
		t.Fatalf("error %q names %s; want %s", err, de.Path, file)
	}
}

// TestBadInput checks that damage other than a torn tail stops Open with
// an error naming the file and the offset.
func TestBadInput(t *testing.T) {
	t.Run("wrong-magic", func(t *testing.T) {
		dir := t.TempDir()
		writeBatches(t, dir, 5)
		path, _ := lastSegment(t, dir)
		data, _ := os.ReadFile(path)
		copy(data, "NOTFLASH")
		os.WriteFile(path, data, 0o644)
		_, err := OpenConfig(engine.Options{Dir: dir}, Config{})
		wantCorruption(t, err, path, 0)
	})
	t.Run("truncated-segment-header", func(t *testing.T) {
		dir := t.TempDir()
		writeBatches(t, dir, 5)
		path, _ := lastSegment(t, dir)
		os.Truncate(path, 10)
		_, err := OpenConfig(engine.Options{Dir: dir}, Config{})
		wantCorruption(t, err, path, 10)
	})
	t.Run("empty-segment-file", func(t *testing.T) {
		dir := t.TempDir()
		writeBatches(t, dir, 5)
		path := filepath.Join(dir, segName(7))
		os.WriteFile(path, nil, 0o644)
		_, err := OpenConfig(engine.Options{Dir: dir}, Config{})
		wantDamage(t, err, path)
	})
	t.Run("corrupt-middle-frame", func(t *testing.T) {
		dir := t.TempDir()
		writeBatches(t, dir, 10)
		path, offs := lastSegment(t, dir)
		data, _ := os.ReadFile(path)
		data[offs[4]+frameHeaderSize+20] ^= 0xff // an entry's bytes: the frame checksum fails
		os.WriteFile(path, data, 0o644)
		_, err := OpenConfig(engine.Options{Dir: dir}, Config{})
		wantCorruption(t, err, path, int64(offs[4]))
	})
	t.Run("corrupt-middle-header", func(t *testing.T) {
		dir := t.TempDir()
		writeBatches(t, dir, 10)
		path, offs := lastSegment(t, dir)
		data, _ := os.ReadFile(path)
		data[offs[3]+9] ^= 0x40 // the payload length: the header checksum fails
		os.WriteFile(path, data, 0o644)
		_, err := OpenConfig(engine.Options{Dir: dir}, Config{})
		wantCorruption(t, err, path, int64(offs[3]))
	})
	t.Run("truncated-sealed-segment", func(t *testing.T) {
		dir := t.TempDir()
		e, err := OpenConfig(engine.Options{Dir: dir}, Config{SegmentBytes: 4 << 10})
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 100; i++ {
			e.Apply(&engine.Batch{Version: kv.Version(i), Writes: []engine.Write{{Key: []byte(fmt.Sprint(i)), Value: make([]byte, 200)}}})
		}
		e.Close()
		names, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
		sort.Strings(names)
		if len(names) < 3 {
			t.Fatalf("%d segments", len(names))
		}
		st, _ := os.Stat(names[0])
		os.Truncate(names[0], st.Size()-100)
		_, err = OpenConfig(engine.Options{Dir: dir}, Config{SegmentBytes: 4 << 10})
		wantDamage(t, err, names[0])
	})
	t.Run("corrupt-entry-read", func(t *testing.T) {
		// Damage under a running engine: the point read verifies the entry
		// and reports it rather than returning a wrong value.
		dir := t.TempDir()
		cfg := Config{WriteBufferBytes: -1, CacheBytes: -1}
		e, err := OpenConfig(engine.Options{Dir: dir}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		for i := 1; i <= 5; i++ {
			e.Apply(&engine.Batch{Version: kv.Version(i), Writes: []engine.Write{{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("value-value")}}})
		}
		path, offs := lastSegment(t, dir)
		f, _ := os.OpenFile(path, os.O_RDWR, 0)
		entry := int64(offs[2] + frameHeaderSize)
		f.WriteAt([]byte("VALUE"), entry+entryHeaderSize+2)
		f.Close()
		v, ok, err := e.Get([]byte("k3"))
		if err == nil {
			t.Fatalf("Get of a damaged entry = %q, %v, nil", v, ok)
		}
		wantCorruption(t, err, path, entry)
		if v, ok, err := e.Get([]byte("k4")); err != nil || !ok || string(v) != "value-value" {
			t.Fatalf("Get(k4) = %q, %v, %v", v, ok, err)
		}
		if err := e.Scan(nil, nil, false, func(k, v []byte) bool { return true }); err == nil {
			t.Fatal("Scan over a damaged entry succeeded")
		}
	})
	t.Run("corrupt-buffer-entry", func(t *testing.T) {
		// The write buffer's copy of an entry is verified like the file's:
		// a damaged copy, or chunks at the wrong positions (issue 8), is an
		// error naming the segment and the offset, never a wrong value.
		dir := t.TempDir()
		e, err := OpenConfig(engine.Options{Dir: dir}, Config{CacheBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		for i := 1; i <= 5; i++ {
			e.Apply(&engine.Batch{Version: kv.Version(i), Writes: []engine.Write{{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("value-value")}}})
		}
		path, offs := lastSegment(t, dir)
		entry := int64(offs[2] + frameHeaderSize)
		e.mu.Lock()
		e.active.wb[0][entry+entryHeaderSize+2] ^= 0xff
		e.mu.Unlock()
		v, ok, err := e.Get([]byte("k3"))
		if err == nil {
			t.Fatalf("Get of a damaged buffer entry = %q, %v, nil", v, ok)
		}
		wantCorruption(t, err, path, entry)
		if !strings.Contains(err.Error(), "write buffer") {
			t.Fatalf("error %q does not say the write buffer's copy is bad", err)
		}
		if v, ok, err := e.Get([]byte("k4")); err != nil || !ok || string(v) != "value-value" {
			t.Fatalf("Get(k4) = %q, %v, %v", v, ok, err)
		}
		if err := e.Scan(nil, nil, false, func(k, v []byte) bool { return true }); err == nil {
			t.Fatal("Scan over a damaged buffer entry succeeded")
		}

		// Two chunks swapped: the entries crossing them (k6 and k7; k8
		// starts past them) read wrong bytes.
		for i := 6; i <= 8; i++ {
			e.Apply(&engine.Batch{Version: kv.Version(i), Writes: []engine.Write{{Key: []byte(fmt.Sprintf("k%d", i)), Value: bytes.Repeat([]byte{byte('0' + i)}, 100<<10)}}})
		}
		e.mu.Lock()
		e.active.wb[1], e.active.wb[2] = e.active.wb[2], e.active.wb[1]
		e.mu.Unlock()
		for i := 6; i <= 7; i++ {
			v, ok, err := e.Get([]byte(fmt.Sprintf("k%d", i)))
			if err == nil {
				t.Fatalf("Get(k%d) from misplaced buffer chunks = %d bytes, %v, nil", i, len(v), ok)
			}
			wantCorruption(t, err, path, -1)
		}
		if v, ok, err := e.Get([]byte("k8")); err != nil || !ok || len(v) != 100<<10 {
			t.Fatalf("Get(k8) = %d bytes, %v, %v", len(v), ok, err)
		}
	})
	t.Run("foreign-file-name", func(t *testing.T) {
		dir := t.TempDir()
		writeBatches(t, dir, 2)
		os.WriteFile(filepath.Join(dir, "12.seg"), []byte("x"), 0o644)
		if _, err := OpenConfig(engine.Options{Dir: dir}, Config{}); err == nil || !strings.Contains(err.Error(), "12.seg") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestDamageAtRestAgainstTheManifest damages sealed segments of a closed
// engine in the ways a frame checksum cannot see, and checks that Open
// fails with a *fsys.DamageError naming the file (issue 18: a stash whose
// segment file went missing came back healthy with fewer keys).
func TestDamageAtRestAgainstTheManifest(t *testing.T) {
	cfg := Config{SegmentBytes: 4 << 10, NoBackgroundGC: true}
	fill := func(t *testing.T) (string, []string) {
		dir := t.TempDir()
		e, err := OpenConfig(engine.Options{Dir: dir}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 60; i++ {
			if err := e.Apply(&engine.Batch{Version: kv.Version(i), Writes: []engine.Write{{Key: []byte(fmt.Sprint(i)), Value: make([]byte, 200)}}}); err != nil {
				t.Fatal(err)
			}
		}
		e.Close()
		names, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
		sort.Strings(names)
		if len(names) < 4 {
			t.Fatalf("%d segments", len(names))
		}
		return dir, names
	}
	open := func(dir string) error {
		e, err := OpenConfig(engine.Options{Dir: dir}, cfg)
		if err == nil {
			e.Close()
		}
		return err
	}
	t.Run("healthy", func(t *testing.T) {
		dir, _ := fill(t)
		if err := open(dir); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing-sealed-segment", func(t *testing.T) {
		dir, names := fill(t)
		os.Remove(names[1])
		wantDamage(t, open(dir), names[1])
	})
	t.Run("missing-active-segment", func(t *testing.T) {
		dir, names := fill(t)
		os.Remove(names[len(names)-1])
		wantDamage(t, open(dir), names[len(names)-1])
	})
	t.Run("truncated-at-a-frame-boundary", func(t *testing.T) {
		dir, names := fill(t)
		data, _ := os.ReadFile(names[1])
		_, offs := framesOf(t, names[1], data)
		os.Truncate(names[1], int64(offs[len(offs)-1]))
		wantDamage(t, open(dir), names[1])
	})
	t.Run("flipped-byte-in-padding", func(t *testing.T) {
		dir, names := fill(t)
		data, _ := os.ReadFile(names[2])
		data[len(data)-1] ^= 0x01 // the last entry's padding: no frame checksum covers it
		os.WriteFile(names[2], data, 0o644)
		wantDamage(t, open(dir), names[2])
	})
	t.Run("renamed-over-another", func(t *testing.T) {
		dir, names := fill(t)
		os.Rename(names[2], names[1])
		wantDamage(t, open(dir), "")
	})
	t.Run("missing-manifest", func(t *testing.T) {
		dir, _ := fill(t)
		os.Remove(filepath.Join(dir, manifestName))
		wantDamage(t, open(dir), manifestName)
	})
}

// framesOf returns the offsets of the frames of a segment file.
func framesOf(t *testing.T, path string, data []byte) (uint32, []int) {
	t.Helper()
	var offs []int
	_, err := decodeSegment(path, segmentIDOf(t, path), data, false, 0, func(off int, _ frameHeader, _ []decodedEntry) {
		offs = append(offs, off)
	})
	if err != nil {
		t.Fatal(err)
	}
	return 0, offs
}

func segmentIDOf(t *testing.T, path string) uint32 {
	var id uint32
	if _, err := fmt.Sscanf(filepath.Base(path), "%d.seg", &id); err != nil {
		t.Fatal(err)
	}
	return id
}
