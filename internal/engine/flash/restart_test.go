package flash

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/enginetest"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/testutil/subprocess"
)

// The restart tests reproduce issue 8 at the engine level: a durable engine
// reopened on an active segment that already holds more than one write
// buffer chunk (here ~2 MB of 99 KB values) served reads of the entries
// written after the reopen from the wrong buffer chunks.

func bigValue(i, gen int) []byte { return []byte(enginetest.BigValue(i, gen)) }

func bigKey(i int) string { return fmt.Sprintf("big%03d", i) }

// bigModel tracks the generation of each key written by applyBig.
type bigModel struct {
	gen     map[int]int
	version int
}

// applyBig writes keys [from, to) as one batch each, in generation gen, to
// e and the model (to the model only when e is nil: the writes of a child).
func (m *bigModel) applyBig(t testing.TB, e *Engine, from, to, gen int) {
	t.Helper()
	for i := from; i < to; i++ {
		m.version++
		m.gen[i] = gen
		if e == nil {
			continue
		}
		if err := e.Apply(&engine.Batch{Version: kv.Version(m.version), Writes: []engine.Write{
			{Key: []byte(bigKey(i)), Value: bigValue(i, gen)},
		}}); err != nil {
			t.Fatalf("Apply(%s): %v", bigKey(i), err)
		}
	}
}

// check reads every key back with Get and with a Scan, and the version.
func (m *bigModel) check(t testing.TB, e *Engine, when string) {
	t.Helper()
	if err := m.verify(e); err != nil {
		t.Fatalf("%s: %v (metrics %+v)", when, err, e.Metrics())
	}
}

func (m *bigModel) verify(e *Engine) error {
	if v := e.Version(); v != kv.Version(m.version) {
		return fmt.Errorf("Version = %d; want %d", v, m.version)
	}
	for i, gen := range m.gen {
		v, ok, err := e.Get([]byte(bigKey(i)))
		if err != nil || !ok || !bytes.Equal(v, bigValue(i, gen)) {
			return fmt.Errorf("Get(%s) = %d bytes, %v, %v; want generation %d", bigKey(i), len(v), ok, err, gen)
		}
	}
	n := 0
	err := e.Scan(nil, nil, false, func(k, v []byte) bool {
		i, _ := strconv.Atoi(strings.TrimPrefix(string(k), "big"))
		gen, ok := m.gen[i]
		if !ok || string(k) != bigKey(i) || !bytes.Equal(v, bigValue(i, gen)) {
			n = -1 << 30
			return false
		}
		n++
		return true
	})
	if err != nil || n != len(m.gen) {
		return fmt.Errorf("Scan: %d of %d pairs right, %v", n, len(m.gen), err)
	}
	return nil
}

func openDefault(t testing.TB, dir string) *Engine {
	t.Helper()
	e, err := OpenConfig(engine.Options{Dir: dir}, Config{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return e
}

// afterRestart is what the tests here do on a reopened engine: 10 more
// values of 99 KB (the writes whose buffer chunks issue 8 put at the wrong
// positions) and overwrites of values written before the restart and after.
func (m *bigModel) afterRestart(t testing.TB, e *Engine, gen int) {
	t.Helper()
	n := len(m.gen)
	m.applyBig(t, e, n, n+10, gen)
	m.applyBig(t, e, 5, 8, gen+1)
	m.applyBig(t, e, n+5, n+8, gen+1)
}

// TestRestartLargeValues: 20 values of 99 KB, Close, reopen, 10 more and
// overwrites, everything read back, reopen again, read again.
func TestRestartLargeValues(t *testing.T) {
	dir := t.TempDir()
	m := &bigModel{gen: map[int]int{}}
	e := openDefault(t, dir)
	m.applyBig(t, e, 0, 20, 1)
	e.Close()

	e = openDefault(t, dir)
	m.check(t, e, "after the first reopen")
	m.afterRestart(t, e, 1)
	m.check(t, e, "after writing past the reopen")
	e.Close()

	e = openDefault(t, dir)
	defer e.Close()
	m.check(t, e, "after the second reopen")
}

// childWrites is what TestRestartChild writes: the first 20 values, or
// afterRestart.
func (m *bigModel) childWrites(t testing.TB, e *Engine, gen int) {
	t.Helper()
	if len(m.gen) == 0 {
		m.applyBig(t, e, 0, 20, gen)
	} else {
		m.afterRestart(t, e, gen)
	}
}

// TestRestartChild is the process TestRestartKill kills: it opens the
// engine in FLASH_RESTART_DIR, checks it against the model in
// FLASH_RESTART_ARGS ("gen version g0 g1 ...": key i is in generation gi),
// runs childWrites in generation gen, checks everything, prints "done" and
// waits to be killed.
func TestRestartChild(t *testing.T) {
	dir := os.Getenv("FLASH_RESTART_DIR")
	if dir == "" {
		t.Skip("run by TestRestartKill")
	}
	args := strings.Fields(os.Getenv("FLASH_RESTART_ARGS"))
	gen, _ := strconv.Atoi(args[0])
	m := &bigModel{gen: map[int]int{}}
	m.version, _ = strconv.Atoi(args[1])
	for i, g := range args[2:] {
		m.gen[i], _ = strconv.Atoi(g)
	}
	e, err := OpenConfig(engine.Options{Dir: dir}, Config{})
	if err == nil {
		err = m.verify(e)
	}
	if err == nil {
		m.childWrites(t, e, gen)
		err = m.verify(e)
	}
	if err != nil {
		fmt.Println("child error:", err)
		os.Exit(2)
	}
	fmt.Println("done")
	select {} // killed here
}

// runRestartChild runs TestRestartChild on dir, which holds m, kills it
// with SIGKILL once it is done and applies its writes to m.
func runRestartChild(t *testing.T, dir string, m *bigModel, gen int) {
	t.Helper()
	args := []string{strconv.Itoa(gen), strconv.Itoa(m.version)}
	for i := 0; i < len(m.gen); i++ {
		args = append(args, strconv.Itoa(m.gen[i]))
	}
	p := subprocess.Start(t, subprocess.Command("TestRestartChild", "FLASH_RESTART_DIR="+dir, "FLASH_RESTART_ARGS="+strings.Join(args, " ")))
	for {
		l, err := p.Next(time.Minute)
		if err != nil {
			p.Kill()
			t.Fatalf("child did not finish: %v", err)
		}
		switch {
		case l == "done":
			p.Kill()
			m.childWrites(t, nil, gen)
			return
		case strings.Contains(l, "error"):
			t.Fatalf("child: %s", l)
		}
	}
}

// TestRestartKill is TestRestartLargeValues with kill -9 instead of Close:
// a child writes 20 values of 99 KB and is killed; the test recovers,
// writes more and overwrites, reads everything and closes; a second child
// recovers, does the same and is killed; the test recovers and reads all.
func TestRestartKill(t *testing.T) {
	if os.Getenv("FLASH_RESTART_DIR") != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	m := &bigModel{gen: map[int]int{}}
	runRestartChild(t, dir, m, 1)
	e := openDefault(t, dir)
	m.check(t, e, "after the first kill")
	m.afterRestart(t, e, 1)
	m.check(t, e, "after writing past the recovery")
	e.Close()

	runRestartChild(t, dir, m, 3)
	e = openDefault(t, dir)
	defer e.Close()
	m.check(t, e, "after the second kill")
}
